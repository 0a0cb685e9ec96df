// minimind::load_pretrained (pretrained.hpp): the model, tokenizer and generation defaults of any
// checkpoint path, as the programs load them; load_tokenizer finds a GGUF's own tokenizer or
// tokenizer.json beside the weights.
#include <doctest/doctest.h>
#include <minimind/pretrained.hpp>

#include "format_files.hpp"

using namespace minimind;
using namespace minimind::testing;

namespace {
const std::filesystem::path demo = source_dir() / "examples" / "models" / "demo";
std::filesystem::path pth(const std::string& name) { return formats_dir() / "pth" / name; }
std::filesystem::path gguf(const std::string& name) { return formats_dir() / "gguf" / name; }
}  // namespace

TEST_CASE("a directory: the model from_pretrained loads, its tokenizer and generation_config.json") {
  const Pretrained<float> p = load_pretrained<float>(demo, one_thread());
  CHECK(p.path == demo);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo, one_thread());
  CHECK(compare_logits(model, p.model, {{1, 308, 262}}).max_abs == 0.0);
  REQUIRE(p.tokenizer);
  CHECK(p.require_tokenizer().encode("今天天气") == Tokenizer::from_pretrained(demo).encode("今天天气"));
  CHECK(p.generation.max_new_tokens == 32);  // generation_config.json
  CHECK(p.generation.sampling.temperature == doctest::Approx(0.7));
  CHECK(p.generation.sampling.top_k == 20);
}

TEST_CASE("a GGUF file: its own tokenizer, and upstream's generation defaults without generation_config.json") {
  REQUIRE_FALSE(std::filesystem::exists(gguf("") / "generation_config.json"));
  const Pretrained<float> p = load_pretrained<float>(gguf("demo-q4_0.gguf"), one_thread());
  REQUIRE(p.tokenizer);
  CHECK(p.tokenizer->encode("今天天气") == std::vector<int32_t>{484, 321, 321, 385});
  CHECK(p.generation.max_new_tokens == GenerationConfig{}.max_new_tokens);
  CHECK(p.generation.eos_token_ids == std::vector<int32_t>{2, 0});  // the tokenizer's eos and <|endoftext|>
}

TEST_CASE("a .pth finds tokenizer.json beside it; without one, text needs a tokenizer and says so") {
  const auto dir = scratch_dir("pretrained_pth_tokenizer");
  std::filesystem::copy_file(pth("mm3-dense-f32.pth"), dir / "model.pth");
  const Pretrained<float> bare = load_pretrained<float>(dir / "model.pth", one_thread());
  CHECK_FALSE(bare.tokenizer);
  CHECK_FALSE(load_tokenizer(load_checkpoint(dir / "model.pth")));
  CHECK_THROWS_WITH_AS(bare.require_tokenizer(), doctest::Contains(((dir / "model.pth").string() + ": no tokenizer").c_str()), Error);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::copy_file(demo / f, dir / f);
  const auto tok = load_tokenizer(load_checkpoint(dir / "model.pth"));
  REQUIRE(tok);
  CHECK(tok->eos_id() == 2);
}
