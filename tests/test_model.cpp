// The whole forward pass against reference logits made by PyTorch: the project's own cases under
// tests/data/golden (always present) and the shared cases in ../shared/golden (when present).
#include "checkpoint_writer.hpp"
#include "golden.hpp"

using namespace minimind;
using minimind::testing::check_golden_case;

namespace {

void check_cases_in(const std::filesystem::path& root) {
  size_t cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "expected.json")) continue;
    SUBCASE(entry.path().filename().string().c_str()) {
      const double worst = check_golden_case(entry.path());
      MESSAGE(entry.path().filename().string() << ": max |logit difference| " << worst);
    }
    ++cases;
  }
  CHECK(cases > 0);
}

}  // namespace

TEST_CASE("shared golden cases: logits and greedy ids, full and cached") {
  auto dir = minimind::testing::shared_dir("golden");
  if (!dir) return;
  check_cases_in(*dir);
}

TEST_CASE("own golden cases (tests/data/golden): logits and greedy ids, full and cached") {
  const auto dir = minimind::testing::data_dir() / "golden";
  REQUIRE_MESSAGE(std::filesystem::exists(dir), "tests/data/golden is missing; run tools/make_golden.py");
  check_cases_in(dir);
}

TEST_CASE("num_parameters counts the tied matrix once") {
  const auto small = MiniMindForCausalLM<float>::random(Config::minimind2_small());
  CHECK(small.num_parameters() == 25'829'888);
  CHECK(small.is_tied());
  const auto mm3 = MiniMindForCausalLM<float>::random(Config::minimind3());
  CHECK(mm3.num_parameters() == 63'912'192);
}

TEST_CASE("tied checkpoints hold one matrix, untied two, and F32 weights are viewed in the file") {
  const auto root = minimind::testing::data_dir() / "golden";
  const auto tied = MiniMindForCausalLM<float>::from_pretrained(root / "tied-lm-head-stored");
  CHECK(tied.is_tied());
  CHECK(&tied.lm_head() == &tied.model.embed_tokens);
  CHECK(tied.lm_head().weight().data() == tied.model.embed_tokens.weight().data());
  CHECK(tied.model.embed_tokens.weight().is_view());  // zero copy
  const auto untied = MiniMindForCausalLM<float>::from_pretrained(root / "untied");
  CHECK_FALSE(untied.is_tied());
  CHECK(untied.lm_head().weight().data() != untied.model.embed_tokens.weight().data());
  CHECK(untied.num_parameters() == untied.model.num_parameters() + untied.lm_head().num_parameters());
  const auto bf16 = MiniMindForCausalLM<float>::from_pretrained(root / "bf16");
  CHECK_FALSE(bf16.model.embed_tokens.weight().is_view());  // widened once into our own buffer
}

TEST_CASE("sessions are independent: two sequences share one const model") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(minimind::testing::data_dir() / "golden" / "mm3-dense");
  const std::vector<int32_t> a = {1, 5, 9, 13}, b = {2, 4, 6};
  auto sa = model.new_session(16), sb = model.new_session(16);
  MatrixRM<float> interleaved_a(a.size(), model.config().vocab_size);
  for (size_t i = 0; i < a.size(); ++i) {
    interleaved_a.row(static_cast<Index>(i)) = model.forward(sa, std::span(&a[i], 1)).row(0);
    if (i < b.size()) model.forward(sb, std::span(&b[i], 1));
  }
  CHECK((interleaved_a - model.forward(a)).cwiseAbs().maxCoeff() < 1e-5f);
  sa.reset();
  CHECK((model.forward(sa, a) - model.forward(a)).cwiseAbs().maxCoeff() < 1e-5f);
}

TEST_CASE("bad input to the model") {
  using namespace minimind::testing;
  const auto model = MiniMindForCausalLM<float>::from_pretrained(write_tiny_checkpoint("model_ok"));
  SUBCASE("token ids outside the vocabulary name the id and the vocab size") {
    CHECK_THROWS_WITH_AS(model.forward(std::vector<int32_t>{1, 16}), doctest::Contains("token id 16 is outside the vocabulary [0, 16)"), Error);
    CHECK_THROWS_WITH_AS(model.forward(std::vector<int32_t>{-3}), doctest::Contains("token id -3"), Error);
  }
  SUBCASE("a sequence longer than max_position_embeddings") {
    CHECK_THROWS_WITH_AS(model.forward(std::vector<int32_t>(65, 1)), doctest::Contains("exceeds max_position_embeddings 64"), Error);
    auto session = model.new_session(8);
    model.forward(session, std::vector<int32_t>(8, 1));
    CHECK_THROWS_WITH_AS(model.forward(session, std::vector<int32_t>{1}), doctest::Contains("exceeds the session's context of 8"), Error);
  }
  SUBCASE("an empty prompt") { CHECK_THROWS_AS(model.forward(std::vector<int32_t>{}), Error); }
  SUBCASE("a shape that disagrees with config names the tensor and the config fields") {
    auto config = tiny_config();
    config["intermediate_size"] = 32;
    const auto dir = write_checkpoint("model_shape", config, safetensors_image(tiny_tensors()));
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir),
                         doctest::Contains("tensor \"model.layers.0.mlp.gate_proj.weight\" has shape [16, 8] but the config implies [32, 8]"),
                         Error);
  }
  SUBCASE("a missing tensor is named") {
    auto tensors = tiny_tensors();
    tensors.pop_back();
    const auto dir = write_checkpoint("model_missing", tiny_config(), safetensors_image(tensors));
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("missing tensor \"model.norm.weight\""), Error);
  }
  SUBCASE("untied without lm_head.weight") {
    auto config = tiny_config();
    config["tie_word_embeddings"] = false;
    const auto dir = write_checkpoint("model_untied", config, safetensors_image(tiny_tensors()));
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("missing tensor \"lm_head.weight\""), Error);
  }
  SUBCASE("unknown architecture") {
    auto config = tiny_config();
    config["architectures"] = {"BertModel"};
    const auto dir = write_checkpoint("model_arch", config, safetensors_image(tiny_tensors()));
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("unknown architecture \"BertModel\""), Error);
  }
  SUBCASE("missing files") {
    const auto dir = scratch_dir("model_empty");
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("config.json: missing"), Error);
    write_file(dir / "config.json", tiny_config().dump());
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("no model.safetensors"), Error);
    write_file(dir / "config.json", "{");
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("malformed JSON"), Error);
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir / "nope"), doctest::Contains("not a checkpoint directory"), Error);
  }
}
