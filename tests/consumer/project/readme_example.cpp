// The C++ examples of README.md ("Using the library") and docs/library.md (Batch), kept compiling
// by the consumer test; tests/docs/check.sh also compiles and runs the README's.
#include <minimind/minimind.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  using namespace minimind;
  // Any checkpoint: a directory, or a .safetensors/.pth/.gguf file.
  const auto pretrained = load_pretrained<float>(argv[1]);
  const auto& model = pretrained.model;                       // const: share it
  const auto& tokenizer = pretrained.require_tokenizer();
  const ChatTemplate chat(tokenizer.chat_template());
  ChatOptions options;
  options.add_generation_prompt = true;
  const auto prompt = tokenizer.encode(chat.render({{"user", "你好"}}, options));

  auto config = pretrained.generation;                        // generation_config.json's defaults
  config.sampling.temperature = 0;                            // greedy
  auto session = model.new_session();                         // this sequence's KV cache
  generate_text(model, tokenizer, session, prompt, config, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);         // whole UTF-8 characters only
    return true;                                              // false stops early
  });
  auto logits = model.forward(tokenizer.encode("今天天气"));   // [positions, vocab]
  std::printf("\n%zu parameters\n", model.num_parameters());

  // docs/library.md's Batch example.
  std::vector<std::vector<int32_t>> prompts = {tokenizer.encode("今天天气"), tokenizer.encode("小明家养了一只")};
  std::vector<Session<float>> sessions;
  for (size_t i = 0; i < prompts.size(); ++i) sessions.push_back(model.new_session());
  std::vector<int32_t> next(prompts.size());
  Batch<float> batch(model);
  for (int step = 0; step < 16; ++step) {
    for (size_t i = 0; i < prompts.size(); ++i)     // the prompt first, then one token per step
      batch.add(sessions[i], step == 0 ? std::span<const int32_t>(prompts[i]) : std::span<const int32_t>(&next[i], 1));
    auto logits = batch.step();                    // [sequences, vocab], one row per add, in order
    for (size_t i = 0; i < prompts.size(); ++i) {  // greedy
      Eigen::Index best;
      logits.row(i).maxCoeff(&best);
      next[i] = static_cast<int32_t>(best);
    }
  }
}
