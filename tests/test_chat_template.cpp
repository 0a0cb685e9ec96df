// ChatTemplate against renderings of the real MiniMind templates (tools/render_chat_templates.mjs
// wrote tests/data/chat_template/*.json with jinja2, the engine transformers uses). The golden
// files hold only a fingerprint of each template, so a fresh clone checks the renderers through
// the family factories, and a checkout beside ../shared also checks that the real template text
// is recognised as that family.
#include "minimind/chat_template.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using minimind::ChatMessage;
using minimind::ChatOptions;
using minimind::ChatTemplate;
using minimind::ChatTemplateFamily;
using minimind::ToolCall;
using Json = nlohmann::ordered_json;

Json load_golden(const std::string& family) {
  const auto path = minimind::testing::data_dir() / "chat_template" / (family + ".json");
  const std::string text = minimind::testing::read_file(path);
  REQUIRE_MESSAGE(!text.empty(), "missing golden file " << path.string());
  return Json::parse(text);
}

// OpenAI-style message dicts as the template reads them: null content renders as "", and a tool
// call's fields may sit inside "function" (used when that is a non-empty object, like Jinja's
// truthiness test) or directly on the call.
ChatMessage message_from_json(const Json& j) {
  ChatMessage message;
  message.role = j.at("role").get<std::string>();
  if (j.contains("content") && j["content"].is_string()) message.content = j["content"].get<std::string>();
  if (j.contains("reasoning_content") && j["reasoning_content"].is_string()) {
    message.reasoning_content = j["reasoning_content"].get<std::string>();
  }
  if (j.contains("tool_calls")) {
    for (const Json& call : j["tool_calls"]) {
      const bool wrapped = call.contains("function") && call["function"].is_object() && !call["function"].empty();
      const Json& fields = wrapped ? call["function"] : call;
      message.tool_calls.push_back(ToolCall{fields.at("name").get<std::string>(), fields.at("arguments")});
    }
  }
  return message;
}

ChatOptions options_from_json(const Json& j) {
  ChatOptions options;
  options.add_generation_prompt = j.value("add_generation_prompt", false);
  if (j.contains("enable_thinking")) options.enable_thinking = j["enable_thinking"].get<bool>();
  if (j.contains("open_thinking")) options.open_thinking = j["open_thinking"].get<bool>();
  if (j.contains("tools")) options.tools = j["tools"].get<std::vector<Json>>();
  return options;
}

// Every golden case, byte for byte; returns how many were compared.
std::size_t check_renderings(const ChatTemplate& chat_template, const Json& golden) {
  std::size_t count = 0;
  for (const Json& entry : golden.at("renderings")) {
    CAPTURE(entry.at("name").get<std::string>());
    std::vector<ChatMessage> messages;
    for (const Json& m : entry.at("messages")) messages.push_back(message_from_json(m));
    CHECK(chat_template.render(messages, options_from_json(entry.at("options"))) ==
          entry.at("rendered").get<std::string>());
    ++count;
  }
  return count;
}

// The real template text from ../shared, or nullopt (with the skip message) when it is absent.
std::optional<std::string> shared_template(const std::string& family) {
  const auto dir = minimind::testing::shared_dir("minimind");
  if (!dir) return std::nullopt;
  const auto config = Json::parse(minimind::testing::read_file(*dir / family / "tokenizer_config.json"));
  return config.at("chat_template").get<std::string>();
}

std::string error_of(auto&& action) {
  try {
    action();
  } catch (const minimind::Error& e) {
    return e.what();
  }
  return "(no minimind::Error thrown)";
}

}  // namespace

TEST_CASE("golden renderings through the family factories (no ../shared needed)") {
  const Json minimind2 = load_golden("minimind2");
  const Json minimind3 = load_golden("minimind-3");
  CHECK(minimind2.at("template").at("family") == "minimind2");
  CHECK(minimind3.at("template").at("family") == "minimind-3");
  // The golden list exercises both thinking switches, tools and think splitting; a truncated file
  // would pass vacuously, so pin its size.
  CHECK(check_renderings(ChatTemplate::minimind2(), minimind2) == 45);
  CHECK(check_renderings(ChatTemplate::minimind3(), minimind3) == 45);
  CHECK(ChatTemplate::minimind2().name() == "minimind2");
  CHECK(ChatTemplate::minimind3().family() == ChatTemplateFamily::minimind3);
}

TEST_CASE("the real templates in ../shared are recognised and render the golden strings") {
  for (const std::string family : {"minimind2", "minimind-3"}) {
    CAPTURE(family);
    const auto text = shared_template(family);
    if (!text) return;
    const Json golden = load_golden(family);
    // The golden file was rendered from this exact text.
    CHECK(text->size() == golden.at("template").at("bytes").get<std::size_t>());
    CHECK(minimind::detail::fnv1a64_hex(*text) == golden.at("template").at("fnv1a64").get<std::string>());

    const ChatTemplate chat_template(*text);
    CHECK(chat_template.name() == family);
    CHECK(check_renderings(chat_template, golden) == 45);

    // Jinja drops one trailing newline, so that copy is the same template; a second one is output.
    CHECK(ChatTemplate(*text + "\n").name() == family);
    CHECK_THROWS_AS(ChatTemplate(*text + "\n\n"), minimind::Error);
  }
}

TEST_CASE("a template that is not byte-for-byte a known one is refused") {
  CHECK(error_of([] { ChatTemplate(""); }).find("not one this library renders") != std::string::npos);
  // A plausible ChatML template in the style of many checkpoints: still refused, with a hint.
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const std::string message = error_of([&] { ChatTemplate{chatml}; });
  CHECK(message.find("not one this library renders") != std::string::npos);
  CHECK(message.find("ChatML") != std::string::npos);
  CHECK(message.find(std::to_string(chatml.size()) + " bytes") != std::string::npos);

  // An edit that keeps MiniMind2's distinguishing text (its default system prompt) is refused too.
  if (const auto text = shared_template("minimind2")) {
    std::string edited = *text;
    const std::size_t at = edited.find("You are a helpful assistant");
    REQUIRE(at != std::string::npos);
    edited.insert(at + 27, ".");
    CHECK_THROWS_AS(ChatTemplate{edited}, minimind::Error);
  }
}

TEST_CASE("invalid conversations throw") {
  for (const ChatTemplate& chat_template : {ChatTemplate::minimind2(), ChatTemplate::minimind3()}) {
    CAPTURE(chat_template.name());
    // The template would silently drop an unknown role; a typo must not vanish from the prompt.
    const std::string unknown = error_of([&] { chat_template.render({{"user", "hi"}, {"User", "again"}}); });
    CHECK(unknown.find("chat message 1") != std::string::npos);
    CHECK(unknown.find("\"User\"") != std::string::npos);
    CHECK_THROWS_AS(chat_template.render({{"developer", "x"}}), minimind::Error);
    CHECK(error_of([&] { chat_template.render({}); }).find("no messages") != std::string::npos);
  }
}

TEST_CASE("behaviour spelled out: thinking switches and think splitting") {
  const std::vector<ChatMessage> question{{"user", "q"}};
  ChatOptions prompt;
  prompt.add_generation_prompt = true;
  CHECK(ChatTemplate::minimind2().render(question, prompt) ==
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(ChatTemplate::minimind3().render(question, prompt) ==
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  ChatOptions think = prompt;
  think.open_thinking = true;
  CHECK(ChatTemplate::minimind3().render(question, think).ends_with("<|im_start|>assistant\n<think>\n"));
  // Only an explicit false adds MiniMind2's closed think block; open_thinking means nothing to it.
  CHECK(ChatTemplate::minimind2().render(question, think) == ChatTemplate::minimind2().render(question, prompt));
  ChatOptions no_think = prompt;
  no_think.enable_thinking = false;
  CHECK(ChatTemplate::minimind2().render(question, no_think).ends_with("assistant\n<think>\n\n</think>\n\n"));

  // Only newlines are stripped around reasoning and answer (Python str.strip('\n')), not spaces.
  ChatMessage answer{"assistant", "\n<think>\n\n r \n</think>\n\n a\n"};
  CHECK(ChatTemplate::minimind3().render({answer}) ==
        "<|im_start|>assistant\n<think>\n r \n</think>\n\n a\n<|im_end|>\n");
  answer.reasoning_content = "given";
  CHECK(ChatTemplate::minimind3().render({answer}) ==
        "<|im_start|>assistant\n<think>\ngiven\n</think>\n\n<think>\n\n r \n</think>\n\n a\n<|im_end|>\n");
}

TEST_CASE("tojson is Python's json.dumps") {
  using minimind::detail::tojson;
  // Values JSON text from JavaScript cannot carry into the golden files (1.0 arrives as 1).
  CHECK(tojson(Json(1.0)) == "1.0");
  CHECK(tojson(Json(-0.0)) == "-0.0");
  CHECK(tojson(Json(1e15)) == "1000000000000000.0");
  CHECK(tojson(Json(1e16)) == "1e+16");
  CHECK(tojson(Json(123456789012345678.0)) == "1.2345678901234568e+17");
  CHECK(tojson(Json(1.5e300)) == "1.5e+300");
  CHECK(tojson(Json(0.0001)) == "0.0001");
  CHECK(tojson(Json(1e-05)) == "1e-05");
  CHECK(tojson(Json(1e-7)) == "1e-07");
  CHECK(tojson(Json(12345.678)) == "12345.678");
  CHECK(tojson(Json(0.1)) == "0.1");
  CHECK(tojson(Json(std::nan(""))) == "NaN");
  CHECK(tojson(Json(-2)) == "-2");
  CHECK(tojson(Json(18446744073709551615ULL)) == "18446744073709551615");
  // Insertion order, Python's separators, raw UTF-8 and DEL, escaped control characters.
  const Json object = Json::parse(R"({"z": [1, {"b": null, "a": true}], "a": "é\u007f\u0001\"\\/\n"})");
  CHECK(tojson(object) == "{\"z\": [1, {\"b\": null, \"a\": true}], \"a\": \"é\x7f\\u0001\\\"\\\\/\\n\"}");
  CHECK(tojson(Json::object()) == "{}");
  CHECK(tojson(Json::array()) == "[]");
}

TEST_CASE("the printf route to the shortest digits gives std::to_chars's text") {
  using minimind::detail::shortest_scientific_printf;
  // Where the nearest 16-digit decimal does not read back but the one on the other side does:
  // 2^-1017, whose lower neighbour is half as far as the upper (17 digits would be 7.1202363472230444e-307).
  CHECK(shortest_scientific_printf(std::ldexp(1.0, -1017)) == "7.120236347223045e-307");
  CHECK(shortest_scientific_printf(5e-324) == "5e-324");
  CHECK(shortest_scientific_printf(-0.0) == "-0e+00");
  CHECK(shortest_scientific_printf(1.7976931348623157e308) == "1.7976931348623157e+308");
  CHECK(shortest_scientific_printf(9.5) == "9.5e+00");
  CHECK(shortest_scientific_printf(0.3) == "3e-01");
#if defined(__cpp_lib_to_chars)
  // Every power of two and its neighbours (the asymmetric cases), then random bit patterns.
  const auto same = [](double value) {
    char buffer[64];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific).ptr;
    const std::string expected(buffer, end);
    const std::string got = shortest_scientific_printf(value);
    if (got != expected) FAIL_CHECK(got << " != " << expected);
    return got == expected;
  };
  int mismatches = 0;
  for (int e = -1074; e < 1024; ++e) {
    const double power = std::ldexp(1.0, e);
    mismatches += !same(power) + !same(std::nextafter(power, 0.0)) + !same(-std::nextafter(power, HUGE_VAL));
  }
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;  // splitmix64
  for (int i = 0; i < 100000; ++i) {
    std::uint64_t bits = (state += 0x9e3779b97f4a7c15ULL);
    bits = (bits ^ (bits >> 30)) * 0xbf58476d1ce4e5b9ULL;
    bits = (bits ^ (bits >> 27)) * 0x94d049bb133111ebULL;
    bits ^= bits >> 31;
    double value;
    std::memcpy(&value, &bits, sizeof value);
    if (std::isfinite(value)) mismatches += !same(value);
  }
  CHECK(mismatches == 0);
#endif
}
