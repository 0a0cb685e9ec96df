// ChatReplyParser on hand-made replies, whole and cut into pieces at every byte: the cut-off
// cases (a think block never closed, a call cut off by max_tokens), malformed calls, and the
// round trip through ChatTemplate (a parsed reply put back into the history renders as the text
// the model wrote).
#include "minimind/chat_reply.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

namespace {

using minimind::ChatMessage;
using minimind::ChatOptions;
using minimind::ChatReply;
using minimind::ChatReplyDelta;
using minimind::ChatReplyOptions;
using minimind::ChatReplyParser;
using minimind::ChatTemplate;
using minimind::parse_chat_reply;
using Kind = ChatReplyDelta::Kind;

ChatReplyOptions with_tools(std::vector<std::string> names = {}) {
  ChatReplyOptions options;
  options.tool_calls = true;
  options.tool_names = std::move(names);
  return options;
}

ChatReplyOptions thinking(ChatReplyOptions options = {}) {
  options.starts_in_thinking = true;
  return options;
}

std::string call_block(const std::string& json) { return "<tool_call>\n" + json + "\n</tool_call>"; }

// The reply rebuilt from deltas, checking their order: all reasoning before any content or call,
// call indices counting up from 0, no empty text delta, no two text deltas of one kind in a row
// within one push.
ChatReply from_deltas(const std::vector<std::vector<ChatReplyDelta>>& pushes) {
  ChatReply reply;
  bool past_reasoning = false;
  for (const auto& deltas : pushes) {
    for (size_t i = 0; i < deltas.size(); ++i) {
      const ChatReplyDelta& d = deltas[i];
      if (i > 0 && d.kind != Kind::tool_call) CHECK(deltas[i - 1].kind != d.kind);
      switch (d.kind) {
        case Kind::reasoning:
          CHECK_FALSE(past_reasoning);
          CHECK(!d.text.empty());
          reply.reasoning += d.text;
          break;
        case Kind::content:
          past_reasoning = true;
          CHECK(!d.text.empty());
          reply.content += d.text;
          break;
        case Kind::tool_call:
          past_reasoning = true;
          CHECK(d.index == reply.tool_calls.size());
          reply.tool_calls.push_back(d.call);
          break;
      }
    }
  }
  return reply;
}

void check_same(const ChatReply& a, const ChatReply& b) {
  CHECK(a.reasoning == b.reasoning);
  CHECK(a.content == b.content);
  REQUIRE(a.tool_calls.size() == b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    CHECK(a.tool_calls[i].name == b.tool_calls[i].name);
    CHECK(a.tool_calls[i].arguments == b.tool_calls[i].arguments);
  }
}

// Parses `text` whole, then cut in two at every byte, then in random pieces; every way gives the
// same reply, and the deltas add up to it.
ChatReply parse_every_way(const std::string& text, const ChatReplyOptions& options) {
  const ChatReply whole = parse_chat_reply(text, options);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    CAPTURE(cut);
    ChatReplyParser parser(options);
    std::vector<std::vector<ChatReplyDelta>> pushes;
    pushes.push_back(parser.push(std::string_view(text).substr(0, cut)));
    pushes.push_back(parser.push(std::string_view(text).substr(cut)));
    pushes.push_back(parser.finish());
    check_same(from_deltas(pushes), whole);
    check_same(parser.reply(), whole);
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    ChatReplyParser parser(options);
    std::vector<std::vector<ChatReplyDelta>> pushes;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(text.size() - at, static_cast<size_t>(rng() % 5));
      pushes.push_back(parser.push(std::string_view(text).substr(at, n)));
      at += n;
    }
    pushes.push_back(parser.finish());
    check_same(from_deltas(pushes), whole);
  }
  return whole;
}

std::string arguments_of(const minimind::ToolCall& call) {
  REQUIRE(call.arguments.is_string());
  return call.arguments.get<std::string>();
}

}  // namespace

TEST_CASE("text without tags is content, byte for byte") {
  for (const std::string text : {"", "今天天气很好。", "  leading spaces\n\ntrailing newlines\n\n", "a <b> c", "<thinking> is not a tag", "\n\n"}) {
    CAPTURE(text);
    const ChatReply reply = parse_every_way(text, with_tools());
    CHECK(reply.content == text);
    CHECK(reply.reasoning.empty());
    CHECK(reply.tool_calls.empty());
    CHECK_FALSE(reply.thinking_closed);
  }
}

TEST_CASE("reasoning: opened by the prompt or by the reply, newlines stripped as the template does") {
  // minimind-3 with open_thinking: the prompt ended in "<think>\n".
  ChatReply reply = parse_every_way("先想一想。\n再想。\n</think>\n\n答案是 4。", thinking());
  CHECK(reply.reasoning == "先想一想。\n再想。");
  CHECK(reply.content == "答案是 4。");
  CHECK(reply.thinking_closed);

  // The reply opens its own think block, after whitespace only.
  reply = parse_every_way(" \n<think>\n\nr\n\n</think>\n\n\nc\n", {});
  CHECK(reply.reasoning == "r");
  CHECK(reply.content == "c\n");
  CHECK(reply.thinking_closed);

  // Spaces are not stripped, only newlines (Python str.strip('\n')).
  CHECK(parse_every_way("<think> r </think> c", {}).reasoning == " r ");
  CHECK(parse_every_way("<think> r </think> c", {}).content == " c");

  // A "<think>" after other text is content; so is "</think>" with no block open.
  reply = parse_every_way("a<think>b</think>c", {});
  CHECK(reply.content == "a<think>b</think>c");
  CHECK(reply.reasoning.empty());
  CHECK(parse_every_way("x</think>y", {}).content == "x</think>y");

  // Tags inside reasoning are reasoning.
  reply = parse_every_way("<tool_call>{\"name\": \"f\"}</tool_call>\n</think>\nok", thinking(with_tools()));
  CHECK(reply.reasoning == "<tool_call>{\"name\": \"f\"}</tool_call>");
  CHECK(reply.content == "ok");
  CHECK(reply.tool_calls.empty());
}

TEST_CASE("a think block cut off by max_tokens is all reasoning") {
  ChatReply reply = parse_every_way("还在想\n", thinking());
  CHECK(reply.reasoning == "还在想");
  CHECK(reply.content.empty());
  CHECK_FALSE(reply.thinking_closed);
  // Cut inside the closing tag: the partial tag is reasoning text.
  reply = parse_every_way("<think>\n还在想</thi", {});
  CHECK(reply.reasoning == "还在想</thi");
  CHECK(reply.content.empty());
  CHECK(parse_every_way("<thi", {}).content == "<thi");  // never became a tag: content
  CHECK(parse_every_way("", thinking()).reasoning.empty());
}

TEST_CASE("tool calls: name and arguments, separators dropped, arguments re-serialised as tojson") {
  const std::string text = "我来查一下。\n" + call_block(R"({"name": "get_weather", "arguments": {"city":"北京","days":2, "x": [1.5, null, true]}})") +
                           "\n" + call_block(R"({"arguments": {}, "name": "get_time"})") + "\n";
  const ChatReply reply = parse_every_way(text, with_tools({"get_weather", "get_time"}));
  CHECK(reply.content == "我来查一下。");
  REQUIRE(reply.tool_calls.size() == 2);
  CHECK(reply.tool_calls[0].name == "get_weather");
  CHECK(arguments_of(reply.tool_calls[0]) == R"({"city": "北京", "days": 2, "x": [1.5, null, true]})");
  CHECK(reply.tool_calls[1].name == "get_time");
  CHECK(arguments_of(reply.tool_calls[1]) == "{}");

  // A call with no arguments key gets {}; text after a call is content.
  const ChatReply bare = parse_every_way(call_block(R"({"name": "get_time"})") + "\n\n然后呢", with_tools());
  REQUIRE(bare.tool_calls.size() == 1);
  CHECK(arguments_of(bare.tool_calls[0]) == "{}");
  CHECK(bare.content == "然后呢");

  // After reasoning.
  const ChatReply after = parse_every_way("要查天气\n</think>\n\n" + call_block(R"({"name": "f", "arguments": {"a": "b"}})"), thinking(with_tools()));
  CHECK(after.reasoning == "要查天气");
  CHECK(after.content.empty());
  REQUIRE(after.tool_calls.size() == 1);
  CHECK(arguments_of(after.tool_calls[0]) == R"({"a": "b"})");
}

TEST_CASE("a malformed or cut-off call stays content, verbatim") {
  for (const std::string json : {
           R"({"name": "f", "arguments": {"a": 1)",            // cut JSON
           R"({"name": "f", "arguments": "{\"a\": 1}"})",      // arguments not an object
           R"({"name": "f", "arguments": {}, "id": "x"})",     // another key
           R"({"arguments": {}})",                             // no name
           R"({"name": "", "arguments": {}})",                 // empty name
           R"({"name": "unknown", "arguments": {}})",          // not an offered tool
           R"(["f", {}])",                                     // not an object
           R"({"name": "f"} trailing)"}) {
    CAPTURE(json);
    const std::string text = "前\n" + call_block(json) + "\n后";
    const ChatReply reply = parse_every_way(text, with_tools({"f"}));
    CHECK(reply.content == text);
    CHECK(reply.tool_calls.empty());
  }
  // A good call beside a bad one: the good one is a call, the bad one content.
  const std::string good = call_block(R"({"name": "f", "arguments": {"a": 1}})"), bad = call_block(R"({"name": "f", "argu)");
  ChatReply mixed = parse_every_way(good + "\n" + bad, with_tools({"f"}));
  CHECK(mixed.tool_calls.size() == 1);
  CHECK(mixed.content == bad);

  // Cut off by max_tokens inside the block, or inside the opening tag.
  for (const std::string cut : {"好的\n<tool_call>\n{\"name\": \"f\", \"argum", "好的\n<tool_call>", "好的\n<tool_ca"}) {
    CAPTURE(cut);
    const ChatReply reply = parse_every_way(cut, with_tools({"f"}));
    CHECK(reply.content == cut);
    CHECK(reply.tool_calls.empty());
  }
  // Calls not enabled (no tools offered, or tool_choice none): a block is content.
  const std::string block = "x\n" + good;
  CHECK(parse_every_way(block, {}).content == block);
  CHECK(parse_every_way(block, {}).tool_calls.empty());
}

TEST_CASE("reply_starts_in_thinking: only minimind-3's prompt with open_thinking") {
  ChatOptions options;
  options.add_generation_prompt = true;
  CHECK_FALSE(minimind::reply_starts_in_thinking(ChatTemplate::minimind3(), options));
  options.open_thinking = true;
  CHECK(minimind::reply_starts_in_thinking(ChatTemplate::minimind3(), options));
  CHECK(ChatTemplate::minimind3().render({{"user", "q"}}, options).ends_with("<think>\n"));
  CHECK_FALSE(minimind::reply_starts_in_thinking(ChatTemplate::minimind2(), options));
  options.add_generation_prompt = false;
  CHECK_FALSE(minimind::reply_starts_in_thinking(ChatTemplate::minimind3(), options));
}

TEST_CASE("a parsed reply put back into the history renders as the text the model wrote") {
  const std::vector<nlohmann::ordered_json> tools = {
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  struct Case {
    ChatTemplate chat_template;
    bool open_thinking;
    std::string reply;  // what the model wrote after the generation prompt, up to <|im_end|>
  };
  const std::string call = call_block(R"({"name": "get_weather", "arguments": {"city": "北京", "days": 2}})");
  const std::vector<Case> cases = {
      {ChatTemplate::minimind3(), true, "想一下天气。\n</think>\n\n我查一下。\n" + call},
      {ChatTemplate::minimind3(), true, "想\n</think>\n\n" + call + "\n" + call},
      {ChatTemplate::minimind3(), true, "想\n</think>\n\n北京晴。"},
      {ChatTemplate::minimind3(), false, "我查一下。\n" + call},
      {ChatTemplate::minimind3(), false, "北京晴。"},
      {ChatTemplate::minimind2(), false, "我查一下。\n" + call},
      {ChatTemplate::minimind2(), false, call + "\n" + call},
  };
  for (const Case& c : cases) {
    CAPTURE(c.chat_template.name());
    CAPTURE(c.reply);
    ChatOptions options;
    options.tools = tools;
    options.add_generation_prompt = true;
    if (c.open_thinking) options.open_thinking = true;
    std::vector<ChatMessage> history = {{"user", "北京天气？"}};
    const std::string prompt = c.chat_template.render(history, options);

    ChatReplyOptions parse_options = with_tools({"get_weather"});
    parse_options.starts_in_thinking = minimind::reply_starts_in_thinking(c.chat_template, options);
    const ChatReply reply = parse_every_way(c.reply, parse_options);
    CHECK(!reply.tool_calls.empty() == (c.reply.find("<tool_call>") != std::string::npos));
    ChatMessage assistant("assistant", reply.content);
    if (c.open_thinking) assistant.reasoning_content = reply.reasoning;
    assistant.tool_calls = reply.tool_calls;
    history.push_back(assistant);
    options.add_generation_prompt = false;
    CHECK(c.chat_template.render(history, options) == prompt + c.reply + "<|im_end|>\n");
  }
}
