// examples/openai_protocol.hpp without a server: chat requests read into template options and
// reply rules, and replies (hand-made model outputs, since the demo model writes no tool calls)
// turned into OpenAI messages and the stream's deltas.
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
  CHECK(openai::usage_json(shut_down) == Json::parse(R"({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})"));

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
