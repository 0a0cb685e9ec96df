// examples/openai_protocol.hpp without a server: chat requests read into template options and
// reply rules, a request's LoRA adapters chosen, and replies (hand-made model outputs, since the
// demo model writes no tool calls) turned into OpenAI messages and the stream's deltas.
#include "../examples/openai_protocol.hpp"

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <functional>
#include <string>
#include <vector>

namespace {

using openai::Json;

Json request_with(const std::string& extra_fields) {
  return openai::parse_body(R"({"messages": [{"role": "user", "content": "北京天气？"}])" + extra_fields + "}");
}

const std::string kTools =
    R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
                   {"type": "function", "function": {"name": "get_time"}}])";

const minimind::Tokenizer& demo_tokenizer() {
  static const auto tokenizer = minimind::Tokenizer::from_pretrained(minimind::testing::source_dir() / "examples" / "models" / "demo");
  return tokenizer;
}

std::string param_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const openai::ApiError& e) {
    CHECK(e.status == 400);
    return e.param.value_or("(no param)");
  }
  return "(accepted)";
}

// The deltas of `text` fed in pieces of `step` bytes, then finish().
std::vector<Json> stream_deltas(openai::ChatReplyWriter& writer, const std::string& text, size_t step) {
  std::vector<Json> deltas;
  for (size_t at = 0; at < text.size(); at += step) {
    for (auto& d : writer.push(std::string_view(text).substr(at, step))) deltas.push_back(std::move(d));
  }
  for (auto& d : writer.finish()) deltas.push_back(std::move(d));
  return deltas;
}

// A stream's deltas accumulated the way OpenAI's clients do: tool call pieces by index, their
// fields concatenated.
Json accumulate(const std::vector<Json>& deltas) {
  Json message = {{"role", "assistant"}, {"content", ""}};
  std::string reasoning;
  Json calls = Json::array();
  for (const Json& d : deltas) {
    REQUIRE(d.size() == 1);  // one kind of piece per delta
    if (d.contains("reasoning_content")) {
      CHECK(message["content"] == "");  // reasoning comes before content
      CHECK(calls.empty());
      reasoning += d["reasoning_content"].get<std::string>();
    } else if (d.contains("content")) {
      message["content"] = message["content"].get<std::string>() + d["content"].get<std::string>();
    } else {
      REQUIRE(d["tool_calls"].size() == 1);
      const Json& piece = d["tool_calls"][0];
      const size_t index = piece["index"];
      if (index == calls.size()) {
        // The first piece of a call names it: id, type, function.name.
        CHECK(piece["id"].is_string());
        CHECK(piece["type"] == "function");
        CHECK(piece["function"]["name"].is_string());
        calls.push_back({{"id", piece["id"]}, {"type", "function"}, {"function", {{"name", piece["function"]["name"]}, {"arguments", ""}}}});
      }
      REQUIRE(index + 1 == calls.size());
      Json& arguments = calls[index]["function"]["arguments"];
      arguments = arguments.get<std::string>() + piece["function"].value("arguments", "");
    }
  }
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!calls.empty()) {
    if (message["content"] == "") message["content"] = nullptr;
    message["tool_calls"] = calls;
  }
  return message;
}

}  // namespace

TEST_CASE("a chat request's tools, tool_choice and thinking switches become template options and reply rules") {
  const auto minimind3 = minimind::ChatTemplate::minimind3();
  openai::ChatRequest r = openai::parse_chat_request(request_with(kTools), minimind3, demo_tokenizer());
  REQUIRE(r.options.tools.size() == 2);
  CHECK(r.options.tools[0].dump() ==
        R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})");
  CHECK(r.reply.tool_calls);
  CHECK(r.reply.tool_names == std::vector<std::string>{"get_weather", "get_time"});
  CHECK_FALSE(r.reply.starts_in_thinking);
  CHECK(r.parallel_tool_calls);

  r = openai::parse_chat_request(request_with(kTools + R"(, "tool_choice": "none", "parallel_tool_calls": false)"), minimind3, demo_tokenizer());
  CHECK(r.options.tools.empty());
  CHECK_FALSE(r.reply.tool_calls);
  CHECK_FALSE(r.parallel_tool_calls);

  // Upstream's three ways to open thinking; enable_thinking also reaches the template as itself.
  for (const std::string on : {R"(, "open_thinking": true)", R"(, "chat_template_kwargs": {"open_thinking": true})",
                               R"(, "chat_template_kwargs": {"enable_thinking": true})"}) {
    CAPTURE(on);
    r = openai::parse_chat_request(request_with(on), minimind3, demo_tokenizer());
    CHECK(r.options.open_thinking == true);
    CHECK(r.reply.starts_in_thinking);
    CHECK_FALSE(openai::parse_chat_request(request_with(on), minimind::ChatTemplate::minimind2(), demo_tokenizer()).reply.starts_in_thinking);
  }
  r = openai::parse_chat_request(request_with(R"(, "chat_template_kwargs": {"enable_thinking": false})"), minimind::ChatTemplate::minimind2(), demo_tokenizer());
  CHECK(r.options.enable_thinking == false);
  CHECK_FALSE(r.options.open_thinking.has_value());

  // Refusals name the field.
  CHECK(param_of([&] { openai::parse_chat_request(request_with(R"(, "tool_choice": "required")"), minimind3, demo_tokenizer()); }) == "tool_choice");
  CHECK(param_of([&] { openai::check_fields(request_with(R"(, "service_tier": "auto")"), openai::Endpoint::chat); }) == "service_tier");
  CHECK(param_of([&] { openai::check_fields(request_with(R"(, "echo": false)"), openai::Endpoint::chat); }) == "echo");
  CHECK(param_of([&] { openai::check_fields(openai::parse_body(R"({"prompt": "x", "echo": false})"), openai::Endpoint::completion); }) == "(accepted)");
  CHECK(param_of([&] { openai::check_fields(request_with(R"(, "presence_penalty": 0.0, "logprobs": false)"), openai::Endpoint::chat); }) ==
        "(accepted)");
}

TEST_CASE("replies: reasoning_content, content and tool_calls, whole and as the stream's deltas") {
  minimind::ChatReplyOptions options;
  options.starts_in_thinking = true;
  options.tool_calls = true;
  options.tool_names = {"get_weather", "get_time"};
  const std::string text = "要查北京和上海。\n</think>\n\n我查一下。\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"北京\"}}\n</tool_call>\n"
                           "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>";
  const Json expected = Json::parse(R"({"role": "assistant", "content": "我查一下。", "reasoning_content": "要查北京和上海。", "tool_calls": [
      {"id": "call_x_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"北京\"}"}},
      {"id": "call_x_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]})");
  for (size_t step : {1u, 3u, 7u, 1000u}) {
    CAPTURE(step);
    openai::ChatReplyWriter writer(options, "call_x_");
    const auto deltas = stream_deltas(writer, text, step);
    CHECK(writer.message() == expected);
    CHECK(accumulate(deltas) == expected);
    CHECK(writer.finish_reason("stop") == "tool_calls");
    CHECK(writer.finish_reason("length") == "length");
  }
  // A call's two deltas: the head with empty arguments, then the arguments.
  openai::ChatReplyWriter writer(options, "call_y_");
  writer.push("</think>");
  const auto deltas = writer.push("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  REQUIRE(deltas.size() == 2);
  CHECK(deltas[0] == Json::parse(R"({"tool_calls": [{"index": 0, "id": "call_y_0", "type": "function", "function": {"name": "get_time", "arguments": ""}}]})"));
  CHECK(deltas[1] == Json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})"));

  // No calls: content is a string (possibly empty), no tool_calls key, finish_reason unchanged;
  // an empty reasoning is left out.
  openai::ChatReplyWriter plain(minimind::ChatReplyOptions{}, "call_z_");
  plain.push("你好");
  plain.finish();
  CHECK(plain.message() == Json::parse(R"({"role": "assistant", "content": "你好"})"));
  CHECK(plain.finish_reason("stop") == "stop");
  options.tool_calls = false;
  openai::ChatReplyWriter cut(options, "call_z_");
  cut.push("想到一半");
  cut.finish();
  CHECK(cut.message() == Json::parse(R"({"role": "assistant", "content": "", "reasoning_content": "想到一半"})"));
}

TEST_CASE("forced tool calls and JSON response formats: the prompt's prefill, the grammar and the closing text") {
  const auto& tokenizer = demo_tokenizer();
  const auto minimind3 = minimind::ChatTemplate::minimind3();
  const std::string named = R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})";
  openai::ChatRequest r = openai::parse_chat_request(request_with(kTools + named), minimind3, tokenizer);
  CHECK(r.prefill == "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  CHECK(r.suffix == "}\n</tool_call>");
  REQUIRE(r.grammar);
  CHECK(r.grammar->shortest_document() == "{}");
  // A reply the grammar allows, with prefill and suffix, is one call.
  openai::ChatReplyWriter writer(r.reply, "call_");
  writer.push(r.prefill + R"({"city": "北京"})" + r.suffix);
  writer.finish();
  CHECK(writer.message()["tool_calls"][0]["function"]["arguments"] == R"({"city": "北京"})");

  // required with two tools: the grammar chooses the name too.
  r = openai::parse_chat_request(request_with(kTools + R"(, "tool_choice": "required")"), minimind3, tokenizer);
  CHECK(r.prefill == "<tool_call>\n");
  CHECK(r.suffix == "\n</tool_call>");
  REQUIRE(r.grammar);
  // An open think block is closed, empty, before the document.
  r = openai::parse_chat_request(request_with(kTools + named + R"(, "open_thinking": true)"), minimind3, tokenizer);
  CHECK(r.prefill.starts_with("\n</think>\n\n<tool_call>\n"));

  r = openai::parse_chat_request(request_with(R"(, "response_format": {"type": "json_object"})"), minimind3, tokenizer);
  REQUIRE(r.grammar);
  CHECK(r.prefill.empty());
  CHECK(r.suffix.empty());
  r = openai::parse_chat_request(
      request_with(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}}})"),
      minimind3, tokenizer);
  REQUIRE(r.grammar);
  CHECK(r.grammar->shortest_document().find("\"a\"") != std::string::npos);

  // Refusals name the field.
  auto refused = [&](const std::string& fields) { return param_of([&] { openai::parse_chat_request(request_with(fields), minimind3, tokenizer); }); };
  CHECK(refused(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}})") ==
        "response_format.json_schema.schema");
  CHECK(refused(R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}})") == "response_format.json_schema.name");
  CHECK(refused(kTools + R"(, "response_format": {"type": "json_object"})") == "response_format");
  CHECK(refused(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}], "tool_choice": "required")") ==
        "tools[0].function.parameters");
  CHECK(refused(R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": true}}])") == "tools[0].function.strict");
  CHECK(refused(R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": true}}], "tool_choice": "required")") == "(accepted)");
}

TEST_CASE("how a generation ended becomes finish_reason and usage; replies and chunks around their one choice") {
  auto ended = [](auto&& set) {
    minimind::TextOutcome text;
    text.engine.prompt_tokens = 7;
    text.completion_tokens = 3;
    set(text);
    return openai::outcome_of(text);
  };
  CHECK(ended([](auto& t) { t.complete = t.eos = true; }).finish_reason == "stop");
  CHECK(ended([](auto& t) { t.complete = true; }).finish_reason == "length");  // max_tokens or a full context
  CHECK(ended([](auto& t) { t.stop_string = true; }).finish_reason == "stop");
  CHECK(ended([](auto& t) { t.enough = true; }).finish_reason == "stop");
  const openai::Outcome gone = ended([](auto& t) { t.gone = true; });
  CHECK(gone.finish_reason.empty());
  CHECK(gone.disconnected);
  const openai::Outcome shut_down = ended([](auto& t) { t.shut_down = true; });
  CHECK(shut_down.finish_reason.empty());
  CHECK(shut_down.cancelled);
  CHECK(openai::usage_json(shut_down) ==
        Json::parse(R"({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}})"));
  // The prompt positions the engine found cached, as OpenAI reports them.
  const openai::Outcome cached = ended([](auto& t) { t.engine.cached_tokens = 6; t.complete = true; });
  CHECK(openai::usage_json(cached)["prompt_tokens_details"] == Json::parse(R"({"cached_tokens": 6})"));

  CHECK(openai::reply_json(openai::Endpoint::chat, false, "chatcmpl-1", 5, "demo", {{"message", {{"role", "assistant"}}}}, "stop") ==
        Json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "demo",
                        "choices": [{"index": 0, "message": {"role": "assistant"}, "logprobs": null, "finish_reason": "stop"}]})"));
  const Json chunk = openai::reply_json(openai::Endpoint::chat, true, "chatcmpl-1", 5, "demo", {{"delta", {{"content", "x"}}}}, nullptr);
  CHECK(chunk["object"] == "chat.completion.chunk");
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  CHECK(openai::reply_json(openai::Endpoint::completion, true, "cmpl-1", 5, "demo", {{"text", "x"}}, nullptr)["object"] == "text_completion");
  CHECK(openai::sse_event(Json{{"a", 1}}) == "data: {\"a\":1}\n\n");
  CHECK(openai::call_id_prefix("chatcmpl-00ab") == "call_00ab_");

  const openai::ApiError busy = openai::busy_error(minimind::QueueFull(4, 16, 16));
  CHECK(busy.status == 503);
  CHECK(std::string(busy.what()) == "the server is busy: all 4 slots are in use and 16 requests are waiting (--queue 16); retry later");
  CHECK(busy.code == "server_overloaded");
  CHECK(openai::shutting_down_error().code == "shutting_down");
}

TEST_CASE("a body nested deeper than 64 levels is a 400 before it is parsed, wherever the nesting is (found by fuzz_openai_request)") {
  // Copying or dumping such a value recursed once per level and overflowed the handler's stack:
  // 400 000 brackets under presence_penalty (dumped into its error), or a tool's or
  // response_format's schema nested 90 000 levels (copied into the request).
  auto nested = [](size_t levels, const std::string& open, const std::string& inner, const std::string& close) {
    std::string text;
    for (size_t i = 0; i < levels; ++i) text += open;
    text += inner;
    for (size_t i = 0; i < levels; ++i) text += close;
    return text;
  };
  const std::string messages = R"({"messages": [{"role": "user", "content": "x"}], )";
  for (const std::string& body :
       {messages + R"("presence_penalty": )" + nested(400000, "[", "", "]") + "}",
        messages + R"("tools": [{"type": "function", "function": {"name": "f", "parameters": )" + nested(90000, R"({"items": )", "{}", "}") + "}}]}",
        messages + R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )" +
            nested(40000, R"({"type": "array", "items": )", "{}", "}") + "}}}"}) {
    try {
      openai::parse_body(body);
      FAIL("a body nested " << body.size() << " bytes deep was parsed");
    } catch (const openai::ApiError& e) {
      CHECK(e.status == 400);
      CHECK(std::string(e.what()).find("deeper than 64 levels (at byte ") != std::string::npos);
    }
  }
  // The body's own object is level 1: 63 levels inside it are taken, 64 are not.
  CHECK(openai::parse_body(R"({"stop": )" + nested(63, "[", "", "]") + "}").is_object());
  CHECK_THROWS_AS(openai::parse_body(R"({"stop": )" + nested(64, "[", "", "]") + "}"), openai::ApiError);
  // Brackets inside strings, escaped quotes included, are text.
  CHECK(openai::parse_body(R"({"prompt": "\")" + nested(100, "[{", "", "}]") + R"(\\"})")["prompt"].get<std::string>().size() == 402);
}

namespace {
// A rank-1 adapter on layer 0's q_proj of a 4-wide model; only its path and identity matter here.
std::shared_ptr<const minimind::LoraAdapter> tiny_adapter(const std::string& path) {
  minimind::MatrixRM<float> A = minimind::MatrixRM<float>::Ones(1, 4), B = minimind::MatrixRM<float>::Ones(4, 1);
  return std::make_shared<const minimind::LoraAdapter>(minimind::LoraAdapter::from_pairs(path, {{"model.layers.0.self_attn.q_proj", A, B}}));
}
}  // namespace

TEST_CASE("lora: a request's [{id, scale}] list chooses among the loaded adapters; bad entries are a 400 naming the entry's field") {
  auto lora_of = [](const std::string& fields, size_t loaded) { return openai::parse_lora_field(request_with(fields), loaded); };
  CHECK(!lora_of("", 2));
  CHECK(!lora_of(R"(, "lora": null)", 2));
  CHECK(lora_of(R"(, "lora": [])", 0)->empty());
  const auto two = lora_of(R"(, "lora": [{"id": 1, "scale": 0.5}, {"id": 0, "scale": -2}])", 2);
  REQUIRE(two->size() == 2);
  CHECK(((*two)[0].id == 1 && (*two)[0].scale == 0.5 && (*two)[1].id == 0 && (*two)[1].scale == -2));
  // The field is one both generating endpoints read.
  CHECK(param_of([&] { openai::check_fields(request_with(R"(, "lora": [])"), openai::Endpoint::chat); }) == "(accepted)");
  CHECK(param_of([&] { openai::check_fields(openai::parse_body(R"({"prompt": "x", "lora": []})"), openai::Endpoint::completion); }) == "(accepted)");

  auto refused = [&](const std::string& lora, size_t loaded) { return param_of([&] { lora_of(R"(, "lora": )" + lora, loaded); }); };
  CHECK(refused(R"({"id": 0, "scale": 1})", 2) == "lora");
  CHECK(refused(R"([0])", 2) == "lora[0]");
  CHECK(refused(R"([{"scale": 1}])", 2) == "lora[0].id");
  CHECK(refused(R"([{"id": 0, "scale": 1}, {"id": 2, "scale": 1}])", 2) == "lora[1].id");
  CHECK(refused(R"([{"id": -1, "scale": 1}])", 2) == "lora[0].id");
  CHECK(refused(R"([{"id": 0.5, "scale": 1}])", 2) == "lora[0].id");
  CHECK(refused(R"([{"id": "0", "scale": 1}])", 2) == "lora[0].id");
  CHECK(refused(R"([{"id": 0, "scale": 1}])", 0) == "lora[0].id");
  CHECK(refused(R"([{"id": 1, "scale": 1}, {"id": 1, "scale": 0}])", 2) == "lora[1].id");
  CHECK(refused(R"([{"id": 0}])", 2) == "lora[0].scale");
  CHECK(refused(R"([{"id": 0, "scale": "1"}])", 2) == "lora[0].scale");
  CHECK(refused(R"([{"id": 0, "scale": true}])", 2) == "lora[0].scale");
  CHECK(refused(R"([{"id": 0, "scale": 100.5}])", 2) == "lora[0].scale");
  CHECK(refused(R"([{"id": 0, "scale": -1e300}])", 2) == "lora[0].scale");
  CHECK(refused(R"([{"id": 0, "scale": 1, "name": "medical"}])", 2) == "lora[0].name");
  CHECK(refused(R"([{"id": 0, "scale": 100}, {"id": 1, "scale": -100}])", 2) == "(accepted)");
  try {
    lora_of(R"(, "lora": [{"id": 3, "scale": 1}])", 2);
    FAIL("an unknown id was taken");
  } catch (const openai::ApiError& e) {
    CHECK(std::string(e.what()) == "lora[0].id 3 is not a loaded adapter: the ids are 0 to 1 (GET /lora-adapters lists them)");
  }
  // POST /lora-adapters' body is the list itself; its errors name the entry from the body's top.
  CHECK(param_of([] { openai::parse_lora_scales(openai::parse_json(R"([{"id": 0, "scale": 1}, {"id": 5, "scale": 1}])"), "", 2); }) == "[1].id");
  CHECK(param_of([] { openai::parse_lora_scales(openai::parse_json(R"({"id": 0})"), "", 2); }) == "(no param)");
}

TEST_CASE("lora: the adapters a request runs with are its own list, else the global scales POST /lora-adapters sets; scale 0 is none") {
  const auto first = tiny_adapter("medical.pth"), second = tiny_adapter("peft-dir");
  openai::LoraAdapters adapters({{first, 1.0f}, {second, 0.25f}});
  CHECK(adapters.size() == 2);
  CHECK(adapters.list() == openai::Json::parse(R"([{"id": 0, "path": "medical.pth", "scale": 1.0}, {"id": 1, "path": "peft-dir", "scale": 0.25}])"));

  auto check_uses = [](const std::vector<minimind::LoraUse>& uses, const std::vector<std::pair<const minimind::LoraAdapter*, float>>& expected) {
    REQUIRE(uses.size() == expected.size());
    for (size_t i = 0; i < uses.size(); ++i) {
      CHECK(uses[i].adapter.get() == expected[i].first);
      CHECK(uses[i].scale == expected[i].second);
    }
  };
  // No lora field: every adapter at its global scale.
  check_uses(adapters.for_request(std::nullopt), {{first.get(), 1.0f}, {second.get(), 0.25f}});
  // A list: the listed adapters at its scales, the others not at all; an empty list is the base model.
  check_uses(adapters.for_request(std::vector<openai::LoraScale>{{1, 2.0}}), {{second.get(), 2.0f}});
  check_uses(adapters.for_request(std::vector<openai::LoraScale>{{1, 0.5}, {0, 0.0}}), {{second.get(), 0.5f}});
  check_uses(adapters.for_request(std::vector<openai::LoraScale>{}), {});

  // POST /lora-adapters: the listed get their scales, the others 0; requests without a field follow.
  adapters.set_scales({{1, 0.75}});
  CHECK(adapters.list() == openai::Json::parse(R"([{"id": 0, "path": "medical.pth", "scale": 0.0}, {"id": 1, "path": "peft-dir", "scale": 0.75}])"));
  check_uses(adapters.for_request(std::nullopt), {{second.get(), 0.75f}});
  check_uses(adapters.for_request(std::vector<openai::LoraScale>{{0, 1.0}}), {{first.get(), 1.0f}});
  adapters.set_scales({});
  check_uses(adapters.for_request(std::nullopt), {});
}

TEST_CASE("cache_prompt: true by default, false opts a request out of the prompt cache, anything else is a 400 naming it") {
  const minimind::GenerationConfig defaults;
  auto job_of = [&](const std::string& body) { return openai::parse_job(openai::parse_body(body), {5, 6, 7}, defaults, 64, 1024); };
  CHECK(job_of(R"({"prompt": "x"})").cache_prompt);
  CHECK(job_of(R"({"prompt": "x", "cache_prompt": true})").cache_prompt);
  CHECK(!job_of(R"({"prompt": "x", "cache_prompt": false})").cache_prompt);
  CHECK(job_of(R"({"prompt": "x", "cache_prompt": null})").cache_prompt);
  for (const char* bad : {R"("no")", "0", "[]"}) {
    CAPTURE(bad);
    CHECK(param_of([&] { job_of(std::string(R"({"prompt": "x", "cache_prompt": )") + bad + "}"); }) == "cache_prompt");
  }
  CHECK(param_of([&] { openai::check_fields(openai::parse_body(R"({"prompt": "x", "cache_prompt": false})"), openai::Endpoint::completion); }) ==
        "(accepted)");
  CHECK(param_of([&] { openai::check_fields(request_with(R"(, "cache_prompt": false)"), openai::Endpoint::chat); }) == "(accepted)");
}
