// The whole forward pass against reference logits made by PyTorch: the project's own cases under
// tests/data/golden (always present) and the shared cases in ../shared/golden (when present).
#include "checkpoint_writer.hpp"
#include "golden.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

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

TEST_CASE("a NaN logit fails the golden comparison instead of being skipped by std::max") {
  using minimind::testing::max_abs_diff;
  using minimind::testing::worse;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(worse(0.5, nan)));
  CHECK(std::isnan(worse(nan, 0.5)));
  CHECK(worse(0.25, 0.5) == 0.5);
  MatrixRM<float> got = MatrixRM<float>::Zero(2, 3), expected = MatrixRM<float>::Zero(2, 3);
  got(1, 2) = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(max_abs_diff(got, expected) <= 1e-4);
  const std::vector<float> row(3, 0.0f);
  CHECK_FALSE(minimind::testing::max_abs_row_diff(got, row, 1) <= 1e-4);
}

TEST_CASE("num_parameters counts the tied matrix once") {
  const auto small = MiniMindForCausalLM<float>::random(Config::minimind2_small());
  CHECK(small.num_parameters() == 25'829'888);
  CHECK(small.is_tied());
  const auto mm3 = MiniMindForCausalLM<float>::random(Config::minimind3());
  CHECK(mm3.num_parameters() == 63'912'192);
}

TEST_CASE("tied checkpoints hold one matrix, untied two, and row-major F32 weights are viewed in the file") {
  const auto root = minimind::testing::data_dir() / "golden";
  LoadOptions row_major;
  row_major.f32_panels = false;
  const auto tied = MiniMindForCausalLM<float>::from_pretrained(root / "tied-lm-head-stored", row_major);
  CHECK(tied.is_tied());
  CHECK(&tied.lm_head() == &tied.model.embed_tokens);
  CHECK(tied.lm_head().weight().data() == tied.model.embed_tokens.weight().data());
  CHECK(tied.model.embed_tokens.weight().is_view());  // zero copy
  const auto untied = MiniMindForCausalLM<float>::from_pretrained(root / "untied", row_major);
  CHECK_FALSE(untied.is_tied());
  CHECK(untied.lm_head().weight().data() != untied.model.embed_tokens.weight().data());
  // In f32_panels (explicitly, or f32 on a CPU whose kernels ask for it) the tied matrix is still one.
  const auto panels = MiniMindForCausalLM<float>::from_pretrained(root / "tied-lm-head-stored", {WeightFormat::F32Panels});
  CHECK(&panels.lm_head() == &panels.model.embed_tokens);
  CHECK(panels.model.embed_tokens.weight().format() == WeightFormat::F32Panels);
  CHECK(panels.weight_bytes() >= tied.weight_bytes());  // (with the zero rows of the last panels)
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
  CHECK(minimind::testing::max_abs_diff(interleaved_a, model.forward(a)) < 1e-5);
  sa.reset();
  CHECK(minimind::testing::max_abs_diff(model.forward(sa, a), model.forward(a)) < 1e-5);
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
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir / "nope"), doctest::Contains("nope: no such file or directory"), Error);
  }
}

namespace {

// tiny_tensors() with one tensor replaced by `replacement` (same name).
std::vector<minimind::testing::TensorBytes> tiny_with(const minimind::testing::TensorBytes& replacement) {
  auto tensors = minimind::testing::tiny_tensors();
  for (auto& t : tensors)
    if (t.name == replacement.name) t = replacement;
  return tensors;
}

std::string repeat16(uint16_t bits, size_t n) {
  std::string s(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) std::memcpy(s.data() + 2 * i, &bits, 2);
  return s;
}

}  // namespace

TEST_CASE("non-finite weights are refused at load, naming the tensor and the element") {
  using namespace minimind::testing;
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> values(64, 0.25f);
  values[19] = nan;  // row 2, column 3 of [8, 8]
  const auto nan_dir = write_checkpoint("model_nan", tiny_config(), safetensors_image(tiny_with({q, {8, 8}, "F32", f32_bytes(values)})));
  for (const WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    CAPTURE(format_name(format));
    LoadOptions options;
    options.format = format;
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(nan_dir, options),
                         doctest::Contains(("model.safetensors: tensor \"" + q + "\" holds NaN at element 19 [2, 3]; non-finite weights are refused").c_str()),
                         Error);
  }
  values[19] = -inf;
  const auto inf_dir = write_checkpoint("model_inf", tiny_config(), safetensors_image(tiny_with({q, {8, 8}, "F32", f32_bytes(values)})));
  CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(inf_dir), doctest::Contains("holds an infinity at element 19 [2, 3]"), Error);
  // F16 and BF16 infinities (exponent all ones), in a norm vector: no [row, column].
  const std::string norm = "model.norm.weight";
  for (const auto& dtype_bits : {std::pair<std::string, uint16_t>{"F16", 0x7C00}, {"BF16", 0xFF80}}) {
    const std::string dtype = dtype_bits.first;  // not a structured binding: clang 14 cannot capture one
    const uint16_t bits = dtype_bits.second;
    CAPTURE(dtype);
    std::string data = repeat16(dtype == "F16" ? 0x3C00 : 0x3F80, 8);  // ones
    std::memcpy(data.data() + 2 * 5, &bits, 2);
    const auto dir = write_checkpoint("model_inf16", tiny_config(), safetensors_image(tiny_with({norm, {8}, dtype, data})));
    CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir),
                         doctest::Contains(("tensor \"" + norm + "\" holds an infinity at element 5; non-finite").c_str()), Error);
  }
  // The largest finite values are weights like any other.
  values[19] = std::numeric_limits<float>::max();
  const auto max_dir = write_checkpoint("model_max", tiny_config(), safetensors_image(tiny_with({q, {8, 8}, "F32", f32_bytes(values)})));
  CHECK_NOTHROW(MiniMindForCausalLM<float>::from_pretrained(max_dir));
}

TEST_CASE("finite weights that overflow give non-finite logits, and generation refuses them") {
  using namespace minimind::testing;
  // o_proj all 3e38: attention's output, and so the residual stream, overflows to infinity, and
  // the next RMSNorm makes it NaN (inf / inf).
  const auto dir = write_checkpoint("model_overflow", tiny_config(),
                                    safetensors_image(tiny_with({"model.layers.0.self_attn.o_proj.weight", {8, 8}, "F32",
                                                                 f32_bytes(std::vector<float>(64, 3e38f))})));
  for (const WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    CAPTURE(format_name(format));
    LoadOptions options;
    options.format = format;
    const auto model = MiniMindForCausalLM<float>::from_pretrained(dir, options);
    const MatrixRM<float> logits = model.forward(std::vector<int32_t>{1, 2, 3});
    CHECK_FALSE(logits.allFinite());  // propagated, not hidden (q8 included: no NaN reaches an int8)
    auto session = model.new_session(8);
    GenerationConfig greedy;
    greedy.sampling.temperature = 0;
    CHECK_THROWS_WITH_AS(generate(model, session, std::vector<int32_t>{1, 2, 3}, greedy), doctest::Contains("is NaN"), Error);
  }
}

TEST_CASE("claims of 10^12-element tensors fail fast, before anything of that size is allocated") {
  using namespace minimind::testing;
  // A header claiming it (the parser bounds every shape by the file's data bytes)...
  auto config = tiny_config();
  config["vocab_size"] = 1'000'000;
  config["hidden_size"] = 1'000'000;
  config["num_attention_heads"] = 1000;
  config["num_key_value_heads"] = 1000;
  const std::string header = R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})";
  auto dir = write_checkpoint("model_claim_header", config, safetensors_image(header, std::string(64, '\0')));
  CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("shape is larger than the file's 64 data bytes"), Error);
  // ...or a config claiming it over a small file (each shape is checked before its data is read).
  // An attempt to allocate 4 TB would throw std::bad_alloc (or abort under ASan), not this Error.
  dir = write_checkpoint("model_claim_config", config, safetensors_image(tiny_tensors()));
  CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir),
                       doctest::Contains("tensor \"model.embed_tokens.weight\" has shape [16, 8] but the config implies [1000000, 1000000]"), Error);
  config = tiny_config();
  config["head_dim"] = int64_t{1} << 30;  // rotary tables are sized by head_dim: built only after the tensors agree
  dir = write_checkpoint("model_claim_head_dim", config, safetensors_image(tiny_tensors()));
  CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(dir), doctest::Contains("q_proj.weight\" has shape [8, 8]"), Error);
}

TEST_CASE("ids of any int32 value are refused by forward without touching the session") {
  using namespace minimind::testing;
  const auto model = MiniMindForCausalLM<float>::from_pretrained(write_tiny_checkpoint("model_ids"));
  auto session = model.new_session(8);
  for (const int32_t bad : {INT32_MIN, -1, 16, INT32_MAX}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(model.forward(session, std::vector<int32_t>{1, bad}),
                         doctest::Contains(("token id " + std::to_string(bad) + " is outside the vocabulary [0, 16)").c_str()), Error);
    CHECK(session.position() == 0);
    CHECK_THROWS_AS(model.forward(std::vector<int32_t>{bad}), Error);
  }
  CHECK(model.forward(session, std::vector<int32_t>{15}).cols() == 16);
  CHECK(session.position() == 1);
}

TEST_CASE("a session made by a model of another shape is refused, not written past") {
  using namespace minimind::testing;
  const auto tiny = MiniMindForCausalLM<float>::from_pretrained(write_tiny_checkpoint("model_session_a"));
  const auto other = MiniMindForCausalLM<float>::from_pretrained(minimind::testing::data_dir() / "golden" / "mm3-dense");
  auto small_session = tiny.new_session(8);
  CHECK_THROWS_WITH_AS(other.forward(small_session, std::vector<int32_t>{1, 2}),
                       doctest::Contains("this session was made for a model of another shape (hidden_size 8, 1 layers)"), Error);
  CHECK(small_session.position() == 0);
  auto session = other.new_session(8);
  CHECK(other.forward(session, std::vector<int32_t>{1, 2}).rows() == 2);
}

namespace {

// Records what a forward pass reports.
struct Recorder : ForwardObserver<float> {
  bool attention_wanted = false;
  std::vector<std::string> steps;
  MatrixRM<float> embedding_rows, last_residual, final_rows, logit_rows;
  std::vector<MatrixRM<float>> probs;
  std::vector<int> experts;
  bool wants_attention() const override { return attention_wanted; }
  void embedding(ConstMatrixMap<float> h) override {
    steps.push_back("embedding");
    embedding_rows = h;
  }
  void attention(int64_t layer, int64_t head, ConstMatrixMap<float> p) override {
    steps.push_back("attention " + std::to_string(layer) + "." + std::to_string(head));
    probs.emplace_back(p);
  }
  void residual_after_attention(int64_t layer, ConstMatrixMap<float>) override {
    steps.push_back("after attention " + std::to_string(layer));
  }
  void router(int64_t layer, std::span<const int> chosen, std::span<const float>, int64_t) override {
    steps.push_back("router " + std::to_string(layer));
    experts.assign(chosen.begin(), chosen.end());
  }
  void residual_after_ffn(int64_t layer, ConstMatrixMap<float> x) override {
    steps.push_back("after ffn " + std::to_string(layer));
    last_residual = x;
  }
  void final_norm(ConstMatrixMap<float> h) override {
    steps.push_back("final norm");
    final_rows = h;
  }
  void logits(ConstMatrixMap<float> l) override {
    steps.push_back("logits");
    logit_rows = l;
  }
};

}  // namespace

TEST_CASE("an observer sees every step in order, and the values it sees are the model's") {
  const auto root = minimind::testing::data_dir() / "golden";
  const auto model = MiniMindForCausalLM<float>::from_pretrained(root / "mm3-moe");
  const Config& c = model.config();
  const std::vector<int32_t> ids = {1, 5, 9, 13, 2};
  Recorder recorder;
  recorder.attention_wanted = true;
  auto session = model.new_session(16);
  const MatrixRM<float> seen = model.forward(session, ids, true, &recorder);
  auto unobserved = model.new_session(16);  // the same shape of scratch: bit for bit the same
  CHECK((seen - model.forward(unobserved, ids)).cwiseAbs().maxCoeff() == 0);  // observing changes nothing

  std::vector<std::string> expected = {"embedding"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int64_t h = 0; h < c.num_attention_heads; ++h) expected.push_back("attention " + std::to_string(l) + "." + std::to_string(h));
    expected.push_back("after attention " + std::to_string(l));
    if (c.layer_is_moe(l)) expected.push_back("router " + std::to_string(l));
    expected.push_back("after ffn " + std::to_string(l));
  }
  expected.insert(expected.end(), {"final norm", "logits"});
  CHECK(recorder.steps == expected);

  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(recorder.embedding_rows.row(static_cast<Index>(i)) == model.model.embed_tokens.lookup(ids[i]));
  }
  CHECK(recorder.logit_rows == seen);
  // The final norm is RMSNorm of the last residual, and the logits are its rows times E^T.
  MatrixRM<float> normed(recorder.last_residual.rows(), recorder.last_residual.cols());
  model.model.norm.forward(recorder.last_residual, normed);
  CHECK((normed - recorder.final_rows).cwiseAbs().maxCoeff() < 1e-6f);
  const Weight<float>& e = model.lm_head().weight();  // row by row: f32_panels is not row-major
  MatrixRM<float> rows(e.rows(), e.cols());
  for (Index r = 0; r < e.rows(); ++r) e.row_to(r, rows.row(r).data());
  const MatrixRM<float> logits = recorder.final_rows * rows.transpose();
  CHECK((logits - seen).cwiseAbs().maxCoeff() < 1e-4f);
  // Attention: each row a distribution over the positions it may see, zero past them.
  REQUIRE(recorder.probs.size() == static_cast<size_t>(c.num_hidden_layers * c.num_attention_heads));
  for (const auto& p : recorder.probs) {
    REQUIRE(p.rows() == 5);
    REQUIRE(p.cols() == 5);
    for (Index i = 0; i < 5; ++i) {
      CHECK(std::abs(p.row(i).head(i + 1).sum() - 1.0f) < 1e-5f);
      CHECK(p.row(i).tail(4 - i).cwiseAbs().sum() == 0);
    }
  }
  CHECK(recorder.experts.size() == ids.size() * static_cast<size_t>(c.num_experts_per_tok));
  for (int e : recorder.experts) CHECK((e >= 0 && e < c.num_experts));
}

TEST_CASE("attention maps are kept only for an observer that asks") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(minimind::testing::data_dir() / "golden" / "mm2-dense-f32");
  Recorder recorder;
  auto session = model.new_session(8);
  model.forward(session, std::vector<int32_t>{1, 2, 3}, false, &recorder);
  CHECK(recorder.probs.empty());
  CHECK(recorder.logit_rows.rows() == 1);
  CHECK(recorder.steps.front() == "embedding");
}
