// minimind-chat: a multi-turn conversation on stdin/stdout. Each turn re-renders the whole
// conversation with the checkpoint's chat template, keeps the KV cache for the part that did not
// change, and drops the oldest turns when the conversation outgrows the context. With --tools the
// model may answer with tool calls; "/tool RESULT" gives it the tool's result as a tool message.
#include "cli.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace {

// How many leading ids two sequences share.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

int run(int argc, char** argv) {
  cli::Args args("minimind-chat",
                 "chat with a MiniMind checkpoint; /tool RESULT answers a tool call, /reset starts over, /exit or Ctrl-D quits");
  cli::sampling_flags(cli::lora_flags(cli::model_flag(args)))
      .value("--system", "system message")
      .toggle("--think", "on minimind-3: leave the think block open for reasoning")
      .toggle("--hide-thinking", "print only the answer, not the reasoning in <think>...</think>")
      .value("--tools", "FILE: a JSON array of OpenAI function tools the model may call")
      .value("--ctx", "context length in tokens (default: max_position_embeddings, at most " +
                          std::to_string(minimind::MiniMindForCausalLM<float>::kDefaultContext) + ")");
  if (!args.parse(argc, argv)) return 0;

  const auto checkpoint = cli::load_pretrained(args);
  const auto& model = checkpoint.model;
  const auto& tokenizer = checkpoint.require_tokenizer();
  const minimind::ChatTemplate chat_template(tokenizer.chat_template());
  minimind::GenerationConfig config = cli::apply_sampling_flags(args, checkpoint.generation);
  const int64_t max_context = model.config().max_position_embeddings;
  const int64_t context = args.int_or("--ctx", std::min<int64_t>(max_context, model.kDefaultContext));
  if (context < 2 || context > max_context) throw cli::UsageError("--ctx must be in [2, " + std::to_string(max_context) + "]");

  minimind::ChatOptions options;
  options.add_generation_prompt = true;
  if (args.has("--think")) options.open_thinking = true;
  minimind::ChatReplyOptions reply_options;
  reply_options.starts_in_thinking = minimind::reply_starts_in_thinking(chat_template, options);
  if (auto file = args.get("--tools")) {
    const auto tools = minimind::io::read_json_file<nlohmann::ordered_json>(*file);
    if (!tools.is_array()) throw cli::UsageError("--tools " + *file + ": expected a JSON array of tools");
    options.tools.assign(tools.begin(), tools.end());
    reply_options.tool_calls = true;
    for (const auto& tool : tools) {  // a call must name one of them
      const bool named = tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
                         tool["function"].contains("name") && tool["function"]["name"].is_string();
      if (!named) throw cli::UsageError("--tools " + *file + ": every tool needs a function.name");
      reply_options.tool_names.push_back(tool["function"]["name"].get<std::string>());
    }
  }
  std::vector<minimind::ChatMessage> history;
  if (auto system = args.get("--system")) history.emplace_back("system", *system);
  const size_t kept = history.size();  // the system message is never dropped

  auto session = model.new_session(context);
  std::vector<int32_t> cached;  // the ids the session holds, in order
  const bool interactive = isatty(STDIN_FILENO), interactive_output = isatty(STDOUT_FILENO);
  std::string line;
  while (true) {
    if (interactive) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      history.resize(kept);
      session.reset();
      cached.clear();
      if (interactive) std::printf("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    if (line.starts_with("/tool ")) {
      history.emplace_back("tool", line.substr(6));
    } else {
      history.emplace_back("user", line);
    }

    // Room for the reply: at least a quarter of the context, or max_new_tokens if smaller.
    const int64_t reply_room = std::max<int64_t>(1, std::min<int64_t>(config.max_new_tokens, context / 4));
    std::vector<int32_t> prompt = tokenizer.encode(chat_template.render(history, options));
    while (static_cast<int64_t>(prompt.size()) + reply_room > context && history.size() > kept + 1) {
      // Drop the oldest user turn with the replies that followed it.
      auto first = history.begin() + static_cast<std::ptrdiff_t>(kept);
      auto next_user = std::find_if(first + 1, history.end(), [](const auto& m) { return m.role == "user"; });
      history.erase(first, next_user);
      prompt = tokenizer.encode(chat_template.render(history, options));
    }
    if (static_cast<int64_t>(prompt.size()) + reply_room > context) {
      history.pop_back();
      std::fprintf(stderr, "minimind-chat: error: that message is too long for the context of %lld tokens\n",
                   static_cast<long long>(context));
      continue;
    }

    // Reuse the cached prefix; at least the last prompt id is fed so there are logits to sample.
    const size_t reuse = std::min(common_prefix(cached, prompt), prompt.size() - 1);
    session.truncate(static_cast<minimind::Index>(reuse));
    cached.resize(reuse);
    const std::vector<int32_t> fresh(prompt.begin() + static_cast<std::ptrdiff_t>(reuse), prompt.end());
    auto turn = config;
    turn.max_new_tokens = std::min<int64_t>(config.max_new_tokens, context - static_cast<int64_t>(prompt.size()));
    std::string reply;
    cli::ReplyPrinter printer(reply_options, !args.has("--hide-thinking"), interactive_output);
    const auto result = minimind::generate_text(model, tokenizer, session, fresh, turn, [&](std::string_view text) {
      reply += text;
      printer.push(text);
      return true;
    });
    printer.finish();
    std::printf("\n");
    std::fflush(stdout);
    cached = prompt;
    cached.insert(cached.end(), result.ids.begin(), result.ids.end() - (result.ids.empty() ? 0 : 1));
    history.emplace_back("assistant", reply);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-chat", [&] { return run(argc, argv); });
}
