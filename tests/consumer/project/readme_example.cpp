// The C++ example of README.md, kept compiling by the consumer test.
#include <minimind/minimind.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  using namespace minimind;
  const auto model = MiniMindForCausalLM<float>::from_pretrained(argv[1]);  // const: share it
  const auto tokenizer = Tokenizer::from_pretrained(argv[1]);
  const ChatTemplate chat(tokenizer.chat_template());
  ChatOptions options;
  options.add_generation_prompt = true;
  const auto prompt = tokenizer.encode(chat.render({{"user", "你好"}}, options));

  auto config = GenerationConfig::from_pretrained(argv[1], model.config(), &tokenizer);
  config.sampling.temperature = 0;                            // greedy
  auto session = model.new_session();                         // this sequence's KV cache
  generate_text(model, tokenizer, session, prompt, config, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);         // whole UTF-8 characters only
    return true;                                              // false stops early
  });
  auto logits = model.forward(tokenizer.encode("今天天气"));   // [positions, vocab]
  std::printf("\n%zu parameters\n", model.num_parameters());
}
