// ChatReplyParser on arbitrary replies, options and cuts: it never throws, the reply parsed whole
// equals the reply fed in pieces (cut where the fuzzer says), and the deltas add up to it.
#include "fuzz_support.hpp"

#include <minimind/chat_reply.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

using namespace minimind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  ChatReplyOptions options;
  options.starts_in_thinking = in.ConsumeBool();
  options.tool_calls = in.ConsumeBool();
  if (in.ConsumeBool()) options.tool_names = {"f", "get_weather"};
  std::vector<size_t> cuts(in.ConsumeIntegralInRange<size_t>(0, 6));
  for (auto& cut : cuts) cut = in.ConsumeIntegralInRange<size_t>(0, 4096);
  const std::string text = in.ConsumeRemainingBytesAsString();

  const ChatReply whole = parse_chat_reply(text, options);
  ChatReplyParser parser(options);
  ChatReply summed;
  auto add = [&](const std::vector<ChatReplyDelta>& deltas) {
    for (const auto& d : deltas) {
      if (d.kind == ChatReplyDelta::Kind::reasoning) summed.reasoning += d.text;
      else if (d.kind == ChatReplyDelta::Kind::content) summed.content += d.text;
      else summed.tool_calls.push_back(d.call);
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    const size_t n = std::min(cut, text.size() - at);
    add(parser.push(std::string_view(text).substr(at, n)));
    at += n;
  }
  add(parser.push(std::string_view(text).substr(at)));
  add(parser.finish());
  const ChatReply& streamed = parser.reply();
  for (const ChatReply* reply : {&streamed, static_cast<const ChatReply*>(&summed)}) {
    fuzz::require(reply->reasoning == whole.reasoning, "reasoning differs when fed in pieces");
    fuzz::require(reply->content == whole.content, "content differs when fed in pieces");
    fuzz::require(reply->tool_calls.size() == whole.tool_calls.size(), "tool call count differs when fed in pieces");
    for (size_t i = 0; i < whole.tool_calls.size(); ++i) {
      fuzz::require(reply->tool_calls[i].name == whole.tool_calls[i].name && reply->tool_calls[i].arguments == whole.tool_calls[i].arguments,
                    "a tool call differs when fed in pieces");
    }
  }
  // Nothing is invented: the parts together are no longer than the reply, calls aside.
  if (whole.tool_calls.empty()) fuzz::require(whole.reasoning.size() + whole.content.size() <= text.size(), "the parts outgrow the reply");
  return 0;
}
