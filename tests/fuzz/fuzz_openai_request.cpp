// minimind-server's request parsing (examples/openai_protocol.hpp) on arbitrary bodies, as the
// server runs it: the first byte picks the endpoint ('p': /v1/completions, else chat), the rest is
// the body. Every input ends in a request to run or an ApiError that is a 400 with a message (the
// server's reply); any other exception is a finding. A parsed request must be runnable: its prompt
// fits the context with room for at least one new token, its ids are in the vocabulary, and its
// sampling, stop strings, constraint and LoRA adapters are what the server can honour.
#include "fuzz_support.hpp"

#include "../../examples/openai_protocol.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

using namespace minimind;

namespace {

const std::filesystem::path demo = std::filesystem::path(MINIMIND_SOURCE_DIR) / "examples" / "models" / "demo";
const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_pretrained(demo);
  return t;
}
const ChatTemplate& chat_template() {
  static const ChatTemplate t(tokenizer().chat_template());
  return t;
}
// Small, so that max_tokens and long prompts meet its limit.
constexpr Index kContext = 96;
// The server's adapters the `lora` field may name.
constexpr size_t kAdapters = 2;

// `body`: the request when it parsed. A param names a field of it (itself, or the head of its path;
// an empty key or one holding a dot is a field too), or a field that is required or defaulted.
void check_error(const openai::ApiError& e, const std::optional<openai::Json>& body) {
  fuzz::require(e.status == 400, "a request error with status " + std::to_string(e.status) + ": " + e.what());
  fuzz::require(*e.what() != '\0', "a request error without a message");
  if (e.param) {
    fuzz::require(body.has_value(), "a param named for a body that did not parse");
    const std::string head = e.param->substr(0, e.param->find_first_of(".["));
    fuzz::require(body->contains(*e.param) || body->contains(head) || head == "messages" || head == "prompt" || head == "max_tokens",
                  "a request error names the param \"" + *e.param + "\", which is not in the request");
  }
  const auto reply = openai::Json::parse(openai::dump(openai::error_json(e)));
  fuzz::require(reply["error"]["message"].is_string(), "an error reply without error.message");
}

void check_job(const openai::Job& job, const openai::ChatRequest* chat) {
  const auto prompt = static_cast<int64_t>(job.prompt.size());
  fuzz::require(prompt > 0 && prompt < kContext, "a parsed prompt of " + std::to_string(prompt) + " tokens");
  for (int32_t id : job.prompt) fuzz::require(id >= 0 && id < tokenizer().vocab_size(), "a prompt id outside the vocabulary");
  fuzz::require(job.config.max_new_tokens >= 1 && prompt + job.config.max_new_tokens <= kContext,
                "max_new_tokens " + std::to_string(job.config.max_new_tokens) + " does not fit the context");
  fuzz::require(!fuzz::refused([&] { job.config.validate(); }), "a parsed request's generation config is invalid");
  fuzz::require(job.stop.size() <= 4, "more than 4 stop strings");
  for (const auto& s : job.stop) fuzz::require(!s.empty(), "an empty stop string");
  fuzz::require(!job.include_usage || job.stream, "include_usage without stream");
  if (!chat) return;
  fuzz::require(!chat->messages.empty(), "a chat without messages");
  fuzz::require(!chat->reply.tool_calls || !chat->options.tools.empty(), "tool calls read from a reply that was offered no tools");
  const bool forced = chat->tool_choice == openai::ToolChoice::required || chat->tool_choice == openai::ToolChoice::named;
  if (forced) fuzz::require(chat->grammar && chat->prefill.find("<tool_call>") != std::string::npos, "a forced call without its grammar and prefill");
  fuzz::require(chat->suffix.empty() || chat->grammar, "a closing suffix without a constraint");
  if (chat->grammar) fuzz::require(!job.config.ignore_eos, "a constrained reply that ignores eos");
}

// A request's adapters: loaded ones, each once, at a scale the server allows.
void check_lora(const std::optional<std::vector<openai::LoraScale>>& lora) {
  if (!lora) return;
  for (size_t i = 0; i < lora->size(); ++i) {
    const auto& s = (*lora)[i];
    fuzz::require(s.id < kAdapters, "a lora id " + std::to_string(s.id) + " that is not loaded");
    fuzz::require(std::abs(s.scale) <= openai::kMaxLoraScale, "a lora scale outside the allowed range");
    for (size_t j = 0; j < i; ++j) fuzz::require((*lora)[j].id != s.id, "a lora id listed twice");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] != 'p';
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  GenerationConfig defaults;
  defaults.max_new_tokens = 32;
  std::optional<openai::Json> parsed;
  try {
    // The order of examples/server.cpp's handle().
    const openai::Json& body = parsed.emplace(openai::parse_body(text));
    openai::check_fields(body, chat ? openai::Endpoint::chat : openai::Endpoint::completion);
    std::vector<int32_t> prompt;
    std::optional<openai::ChatRequest> request;
    if (chat) {
      request = openai::parse_chat_request(body, chat_template(), tokenizer());
      std::string rendered;
      if (fuzz::refused([&] { rendered = chat_template().render(request->messages, request->options); })) return 0;  // a 400 naming messages
      prompt = tokenizer().encode(rendered + request->prefill);
    } else {
      prompt = openai::parse_prompt(body, tokenizer());
    }
    const auto job = openai::parse_job(body, std::move(prompt), defaults, kContext, tokenizer().vocab_size());
    if (request) openai::check_constrained_job(*request, job, body);
    check_job(job, request ? &*request : nullptr);
    check_lora(openai::parse_lora_field(body, kAdapters));
  } catch (const openai::ApiError& e) {
    check_error(e, parsed);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("an exception other than a request error (the server would answer 500): ") + e.what());
  }
  return 0;
}
