// ChatTemplate on arbitrary conversations: roles (known and not), contents, reasoning, tool calls
// with arbitrary JSON arguments, tools and every option, rendered by both families; and template
// recognition on arbitrary text. Rendering either throws minimind::Error (unknown role, no
// messages, a template that is not MiniMind's) or gives a prompt in which every user turn
// appears verbatim.
#include "fuzz_support.hpp"

#include <minimind/chat_template.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

using namespace minimind;

namespace {

nlohmann::ordered_json json_or_string(const std::string& text) {
  auto json = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  return json.is_discarded() ? nlohmann::ordered_json(text) : json;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const bool recognise = in.ConsumeBool();
  if (recognise) {
    const std::string text = in.ConsumeRemainingBytesAsString();
    (void)fuzz::refused([&] { ChatTemplate{text}; });
    return 0;
  }
  static const char* const roles[] = {"system", "user", "assistant", "tool", "User", ""};
  std::vector<ChatMessage> messages(in.ConsumeIntegralInRange<size_t>(0, 8));
  for (auto& message : messages) {
    message.role = roles[in.ConsumeIntegralInRange<size_t>(0, 5)];
    message.content = in.ConsumeRandomLengthString(64);
    if (in.ConsumeBool()) message.reasoning_content = in.ConsumeRandomLengthString(32);
    for (size_t calls = in.ConsumeIntegralInRange<size_t>(0, 2); calls > 0; --calls) {
      ToolCall call;
      call.name = in.ConsumeRandomLengthString(16);
      call.arguments = json_or_string(in.ConsumeRandomLengthString(48));
      message.tool_calls.push_back(std::move(call));
    }
  }
  ChatOptions options;
  options.add_generation_prompt = in.ConsumeBool();
  if (in.ConsumeBool()) options.enable_thinking = in.ConsumeBool();
  if (in.ConsumeBool()) options.open_thinking = in.ConsumeBool();
  for (size_t tools = in.ConsumeIntegralInRange<size_t>(0, 2); tools > 0; --tools) {
    options.tools.push_back(json_or_string(in.ConsumeRandomLengthString(64)));
  }

  for (const ChatTemplate& chat : {ChatTemplate::minimind2(), ChatTemplate::minimind3()}) {
    std::string prompt;
    if (fuzz::refused([&] { prompt = chat.render(messages, options); })) continue;
    for (const auto& message : messages) {
      if (message.role == "user") {
        fuzz::require(prompt.find("<|im_start|>user\n" + message.content + "<|im_end|>\n") != std::string::npos,
                      "a user turn is missing from the rendered prompt");
      }
    }
  }
  return 0;
}
