// minimind-generate: continue a prompt (or answer it as a chat turn), streaming the text.
#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace {

int run(int argc, char** argv) {
  cli::Args args("minimind-generate", "generate text from a prompt with a MiniMind checkpoint");
  cli::sampling_flags(cli::lora_flags(cli::model_flag(args)))
      .value("--prompt", "prompt text")
      .value("--ids", "prompt as comma-separated token ids")
      .toggle("--chat", "wrap the prompt as a user turn in the checkpoint's chat template")
      .value("--system", "system message for --chat")
      .toggle("--think", "with --chat on minimind-3: leave the think block open for reasoning")
      .toggle("--hide-thinking", "with --chat: print only the answer, not the reasoning in <think>...</think>")
      .value("--ctx", "context length in tokens (default: prompt + max new tokens, within max_position_embeddings)")
      .toggle("--ignore-eos", "keep generating past end-of-sequence ids")
      .value("--json-schema", "FILE: the reply is a JSON document valid against this JSON Schema (a subset: see the docs)")
      .toggle("--json", "the reply is a JSON object (any)")
      .toggle("--print-ids", "print the generated ids comma-separated on one line instead of text");
  if (!args.parse(argc, argv)) return 0;
  if (args.has("--ids") == args.has("--prompt")) throw cli::UsageError("give exactly one of --prompt TEXT or --ids 1,2,3");
  if (args.has("--chat") && !args.has("--prompt")) throw cli::UsageError("--chat needs --prompt");
  if ((args.has("--system") || args.has("--think") || args.has("--hide-thinking")) && !args.has("--chat")) {
    throw cli::UsageError("--system, --think and --hide-thinking need --chat");
  }
  if (args.has("--json") && args.has("--json-schema")) throw cli::UsageError("give at most one of --json and --json-schema FILE");
  const bool json_reply = args.has("--json") || args.has("--json-schema");
  if (json_reply && args.has("--ignore-eos")) throw cli::UsageError("--json and --json-schema end the reply with an eos id; drop --ignore-eos");

  const auto checkpoint = cli::load_pretrained(args);
  const auto& model = checkpoint.model;
  minimind::GenerationConfig config = cli::apply_sampling_flags(args, checkpoint.generation);
  config.ignore_eos = args.has("--ignore-eos");
  if (json_reply) {
    const auto& tokenizer = checkpoint.require_tokenizer();
    if (auto file = args.get("--json-schema")) {
      const minimind::io::Json schema = minimind::io::read_json_file(*file);
      try {
        config.json_grammar = minimind::JsonGrammar::from_schema(schema, tokenizer);
      } catch (const minimind::Error& e) {
        throw minimind::Error(*file + ": " + e.what());
      }
    } else {
      config.json_grammar = minimind::JsonGrammar::any_object(tokenizer);
    }
  }

  std::vector<int32_t> prompt;
  minimind::ChatReplyOptions reply_options;  // with --chat, how the reply splits into reasoning and answer
  if (auto ids = args.get("--ids")) {
    prompt = cli::parse_ids(*ids, "--ids");
  } else {
    const auto& tokenizer = checkpoint.require_tokenizer();
    std::string text = *args.get("--prompt");
    if (args.has("--chat")) {
      const minimind::ChatTemplate chat_template(tokenizer.chat_template());
      std::vector<minimind::ChatMessage> messages;
      if (auto system = args.get("--system")) messages.emplace_back("system", *system);
      messages.emplace_back("user", text);
      minimind::ChatOptions options;
      options.add_generation_prompt = true;
      if (args.has("--think")) options.open_thinking = true;
      text = chat_template.render(messages, options);
      reply_options.starts_in_thinking = minimind::reply_starts_in_thinking(chat_template, options);
    }
    prompt = tokenizer.encode(text);
  }
  if (prompt.empty()) throw cli::UsageError("the prompt encodes to no tokens");
  const int64_t max_context = model.config().max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) >= max_context) {
    throw cli::UsageError("the prompt has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                          std::to_string(max_context));
  }
  const int64_t context = args.int_or("--ctx", std::min<int64_t>(max_context, static_cast<int64_t>(prompt.size()) + std::max<int64_t>(config.max_new_tokens, 1)));
  if (context < 1 || context > max_context) throw cli::UsageError("--ctx must be in [1, " + std::to_string(max_context) + "]");
  auto session = model.new_session(context);
  if (config.json_grammar) {
    // Refused before generating: the reply's room is the smaller of the two limits.
    const int64_t room = std::min<int64_t>(config.max_new_tokens, context - static_cast<int64_t>(prompt.size()) + 1);
    try {
      config.json_grammar->check_room(room);
    } catch (const minimind::Error& e) {
      throw cli::UsageError(std::string(e.what()) + " (raise --max-new-tokens or --ctx)");
    }
  }

  minimind::GenerationResult result;
  if (args.has("--print-ids") || !checkpoint.tokenizer) {
    result = minimind::generate(model, session, prompt, config);
    std::string line;
    for (size_t i = 0; i < result.ids.size(); ++i) {
      if (i) line += ',';
      line += std::to_string(result.ids[i]);
    }
    std::printf("%s\n", line.c_str());
  } else if (args.has("--chat")) {
    cli::ReplyPrinter printer(reply_options, !args.has("--hide-thinking"), isatty(STDOUT_FILENO));
    result = minimind::generate_text(model, *checkpoint.tokenizer, session, prompt, config, [&](std::string_view text) {
      printer.push(text);
      return true;
    });
    printer.finish();
    std::printf("\n");
  } else {
    result = minimind::generate_text(model, *checkpoint.tokenizer, session, prompt, config, [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::printf("\n");
  }
  if (result.stop == minimind::StopReason::ContextFull) {
    std::fprintf(stderr, "minimind-generate: stopped: the context of %lld tokens is full (raise --ctx)\n",
                 static_cast<long long>(session.context()));
  }
  std::fprintf(stderr, "prompt tokens %lld, generated tokens %zu, prefill %.1f tokens/s, decode %.1f tokens/s, stop: %s\n",
               static_cast<long long>(result.prompt_tokens), result.ids.size(), result.prefill_tokens_per_second(),
               result.decode_tokens_per_second(), minimind::to_string(result.stop));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-generate", [&] { return run(argc, argv); });
}
