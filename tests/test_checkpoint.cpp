// minimind::load_checkpoint (checkpoint.hpp), and MiniMindForCausalLM::from_pretrained through it: one entry point for a safetensors
// directory or file, a .pth state dict (config.json beside it, or inferred from the shapes, with
// overrides for what shapes cannot tell) and a GGUF file (config and tokenizer from metadata).
#include <doctest/doctest.h>
#include <minimind/checkpoint.hpp>
#include <minimind/model.hpp>

#include "format_files.hpp"

using namespace minimind;
using namespace minimind::testing;

namespace {

std::filesystem::path golden(const std::string& name) { return data_dir() / "golden" / name; }
std::filesystem::path pth(const std::string& name) { return formats_dir() / "pth" / name; }
std::filesystem::path gguf(const std::string& name) { return formats_dir() / "gguf" / name; }

double max_diff_to(const std::filesystem::path& reference, const MiniMindForCausalLM<float>& model) {
  const auto ref = MiniMindForCausalLM<float>::from_pretrained(reference, one_thread());
  io::Json entry = {{"reference", std::filesystem::relative(reference, source_dir()).string()}};
  return compare_logits(ref, model, reference_prompts(entry)).max_abs;
}

}  // namespace

TEST_CASE("a safetensors directory, and a .safetensors file with config.json beside it") {
  const Checkpoint dir = load_checkpoint(golden("mm3-moe"));
  CHECK(dir.format == CheckpointFormat::Safetensors);
  CHECK(dir.config.num_experts == 4);
  CHECK(dir.directory() == golden("mm3-moe"));
  CHECK_FALSE(dir.tokenizer_json);
  const Checkpoint file = load_checkpoint(golden("mm3-moe") / "model.safetensors");
  CHECK(file.format == CheckpointFormat::Safetensors);
  CHECK(file.config_json == dir.config_json);
  CHECK(max_diff_to(golden("mm3-moe"), MiniMindForCausalLM<float>::from_pretrained(golden("mm3-moe") / "model.safetensors", one_thread())) == 0.0);
}

TEST_CASE("a .pth with config.json beside it, and an HF directory holding pytorch_model.bin") {
  const auto dir = scratch_dir("checkpoint_pth_beside");
  std::filesystem::copy_file(pth("mm2-dense-f32.pth"), dir / "full_sft_512.pth");
  std::filesystem::copy_file(golden("mm2-dense-f32") / "config.json", dir / "config.json");
  const Checkpoint c = load_checkpoint(dir / "full_sft_512.pth");
  CHECK(c.format == CheckpointFormat::Pth);
  CHECK(c.config.num_attention_heads == 2);
  CHECK(max_diff_to(golden("mm2-dense-f32"), MiniMindForCausalLM<float>::from_pretrained(dir / "full_sft_512.pth", one_thread())) == 0.0);

  std::filesystem::rename(dir / "full_sft_512.pth", dir / "pytorch_model.bin");
  const Checkpoint hf = load_checkpoint(dir);
  CHECK(hf.format == CheckpointFormat::Pth);
  CHECK(max_diff_to(golden("mm2-dense-f32"), MiniMindForCausalLM<float>::from_pretrained(dir, one_thread())) == 0.0);
}

TEST_CASE("a minimind-3 .pth without config.json: every dimension from the shapes") {
  // tests/data/formats/pth/ has no config.json, so this is the bare-file path.
  REQUIRE_FALSE(std::filesystem::exists(formats_dir() / "pth" / "config.json"));
  const Checkpoint c = load_checkpoint(pth("mm3-dense-f32.pth"));
  const Config want = Config::from_pretrained(golden("mm3-dense"));
  CHECK(c.config.generation == Generation::MiniMind3);  // from the q_norm tensors
  CHECK(c.config.hidden_size == want.hidden_size);
  CHECK(c.config.num_hidden_layers == want.num_hidden_layers);
  CHECK(c.config.num_attention_heads == want.num_attention_heads);
  CHECK(c.config.num_key_value_heads == want.num_key_value_heads);
  CHECK(c.config.head_dim == want.head_dim);
  CHECK(c.config.intermediate_size == want.intermediate_size);
  CHECK(c.config.vocab_size == want.vocab_size);
  CHECK(c.config.tie_word_embeddings);  // lm_head.weight is stored, and is the embedding
  CHECK(c.tensors.contains("lm_head.weight"));
  CHECK(max_diff_to(golden("mm3-dense"), MiniMindForCausalLM<float>::from_pretrained(pth("mm3-dense-f32.pth"), one_thread())) == 0.0);
  // Upstream's half-precision save of a minimind-3 model, likewise.
  CHECK(max_diff_to(golden("f16"), MiniMindForCausalLM<float>::from_pretrained(pth("f16.pth"), one_thread())) == 0.0);
}

TEST_CASE("what the shapes cannot tell comes from overrides") {
  // MiniMind2 has no q_norm: the shapes give only the query / kv head ratio, so without a
  // config.json the head count is upstream's default 8 unless given.
  const Checkpoint guessed = load_checkpoint(pth("mm2-dense-f32.pth"));
  CHECK(guessed.config.generation == Generation::MiniMind2);
  CHECK(guessed.config.num_attention_heads == 8);
  CHECK(guessed.config.num_key_value_heads == 4);  // keeps the stored 2:1 ratio of rows
  CheckpointOptions heads;
  heads.config_overrides = {{"num_attention_heads", 2}};
  const Checkpoint given = load_checkpoint(pth("mm2-dense-f32.pth"), heads);
  CHECK(given.config.num_key_value_heads == 1);
  CHECK(max_diff_to(golden("mm2-dense-f32"), MiniMindForCausalLM<float>::from_pretrained(pth("mm2-dense-f32.pth"), one_thread(), heads)) == 0.0);
  // MoE: the expert count is in the shapes, top-k is not.
  CheckpointOptions top2;
  top2.config_overrides = {{"num_experts_per_tok", 2}};
  const Checkpoint moe = load_checkpoint(pth("mm3-moe-f16.pth"), top2);
  CHECK(moe.config.num_experts == 4);
  CHECK(moe.config.moe_intermediate_size == 16);
  CHECK(moe.config.num_experts_per_tok == 2);
  // Overrides apply over a config.json or GGUF metadata too.
  CheckpointOptions theta;
  theta.config_overrides = {{"rope_theta", 1234.0}};
  CHECK(load_checkpoint(gguf("mm3-dense-f32.gguf"), theta).config.rope_theta == 1234.0);
  CHECK(load_checkpoint(golden("mha"), theta).config.rope_theta == 1234.0);
}

TEST_CASE("a GGUF file: config, tensors and tokenizer from the one file") {
  const Checkpoint c = load_checkpoint(gguf("demo-q4_0.gguf"));
  CHECK(c.format == CheckpointFormat::Gguf);
  CHECK(c.config.architecture == "LlamaForCausalLM");
  CHECK(c.config.vocab_size == 1024);
  CHECK(c.config.eos_token_ids == std::vector<int64_t>{2});
  CHECK(c.tokenizer_json);
  CHECK(c.tokenizer_config_json);
  // A model alone does not read the tokenizer (from_pretrained asks for none).
  CheckpointOptions model_only;
  model_only.tokenizer = false;
  const Checkpoint m = load_checkpoint(gguf("demo-q4_0.gguf"), model_only);
  CHECK_FALSE(m.tokenizer_json);
  CHECK_FALSE(m.tokenizer_config_json);
  CHECK(m.config.vocab_size == 1024);
  CHECK(max_diff_to(golden("mm3-dense"), MiniMindForCausalLM<float>::from_pretrained(gguf("mm3-dense-f32.gguf"), one_thread())) == 0.0);
}

TEST_CASE("what load_checkpoint refuses") {
  CHECK_THROWS_WITH_AS(load_checkpoint(formats_dir() / "nothing-here.pth"), doctest::Contains("no such file or directory"), Error);
  const auto empty = scratch_dir("checkpoint_empty");
  CHECK_THROWS_WITH_AS(load_checkpoint(empty), doctest::Contains("config.json: missing"), Error);
  write_file(empty / "notes.txt", "hello, not a model");
  CHECK_THROWS_WITH_AS(load_checkpoint(empty / "notes.txt"), doctest::Contains("not a checkpoint directory, a .safetensors file"), Error);
  std::filesystem::copy_file(golden("mha") / "model.safetensors", empty / "lonely.safetensors");
  CHECK_THROWS_WITH_AS(load_checkpoint(empty / "lonely.safetensors"), doctest::Contains("needs config.json beside it"), Error);
  CheckpointOptions bad;
  bad.config_overrides = io::Json::array();
  CHECK_THROWS_WITH_AS(load_checkpoint(golden("mha"), bad), doctest::Contains("config overrides must be a JSON object"), Error);
  bad.config_overrides = {{"hidden_size", "big"}};
  CHECK_THROWS_WITH_AS(load_checkpoint(golden("mha"), bad), doctest::Contains("field \"hidden_size\" has the wrong type"), Error);
  CheckpointOptions three;
  three.config_overrides = {{"num_attention_heads", 3}};
  CHECK_THROWS_WITH_AS(load_checkpoint(pth("mm2-dense-f32.pth"), three),
                       doctest::Contains("hidden_size 16 divisible by num_attention_heads 3"), Error);
  // A truncated .pth reached through the entry point says so too.
  const std::string image = read_file(pth("mm2-dense-f16.pth"));
  write_file(empty / "cut.pth", image.substr(0, image.size() / 2));
  CHECK_THROWS_AS(load_checkpoint(empty / "cut.pth"), Error);
}

TEST_CASE("the programs' --model takes a GGUF (with its tokenizer) and a .pth") {
  auto r = run_command(program("minimind-next") + " --model " + gguf("demo-q4_0.gguf").string() + " --prompt 今天天气 --top 1");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("477") != std::string::npos);
  CHECK(r.out.find("\"很\"") != std::string::npos);
  r = run_command(program("minimind-next") + " --model " + pth("mm3-dense-f32.pth").string() + " --ids 1,2,3 --info");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("minimind-3") != std::string::npos);
  r = run_command(program("minimind-next") + " --model " + pth("mm3-dense-f32.pth").string() + " --prompt hi");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("no tokenizer") != std::string::npos);
}
