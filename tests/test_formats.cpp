// Golden cases in every weight format. f32 must match PyTorch as test_model.cpp checks
// (logit_tolerance in golden.hpp);
// bf16 must stay within the F16/BF16 tolerance on the cases stored as BF16 (their values are
// exactly representable, so only summation order differs) and pick the same top-1 token at
// >= 98% of the other cases' positions; q8 must pick the same top-1 token at >= 95% of all
// positions (and >= 90% in each case: these tiny random-weight cases, hidden 24..64, have top-1
// margins often below 0.1). q4's step is 16 times q8's (a block's largest weight over 8 levels, not
// 127), and so is its error: pooled relative L2 of the logits within 20 times q8's (measured 16.5x
// on the shared cases, 13.9x on ours), KL divergence of the next token within 400 times (the square;
// measured 273x and 167x), and each case's relative L2 at most 0.8 (measured 0.20-0.66; logits
// unrelated to the expected ones would be near sqrt 2). On these cases q4 picks the same top-1
// token at only 32% (shared) and 74% (ours) of the positions, as the same blocks fake-quantized in
// PyTorch do. The test prints the rates, KL divergences, relative L2 and the largest logit
// difference per format.
#include "golden.hpp"

#include <cmath>
#include <map>

using namespace minimind;
using minimind::testing::read_golden_case;

namespace {

struct Agreement {
  size_t positions = 0, same_top1 = 0;
  double max_diff = 0;
  double kl = 0;                      // sum over positions of KL(expected || ours) of the next token
  double diff_squares = 0, squares = 0;  // sums of (ours - expected)^2 and expected^2 over the logits
  double rate() const { return positions ? static_cast<double>(same_top1) / static_cast<double>(positions) : 1.0; }
  double mean_kl() const { return positions ? kl / static_cast<double>(positions) : 0.0; }
  double relative_l2() const { return squares > 0 ? std::sqrt(diff_squares / squares) : 0.0; }
  void add(const Agreement& o) {
    positions += o.positions, same_top1 += o.same_top1, kl += o.kl, diff_squares += o.diff_squares, squares += o.squares;
  }
};

// KL(softmax(expected) || softmax(ours)) in double.
double kl_divergence(const float* expected, const float* ours, Index vocab) {
  const auto log_sum_exp = [vocab](const float* v) {
    const double peak = *std::max_element(v, v + vocab);
    double sum = 0;
    for (Index i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(v[i]) - peak);
    return peak + std::log(sum);
  };
  const double le = log_sum_exp(expected), lo = log_sum_exp(ours);
  double kl = 0;
  for (Index i = 0; i < vocab; ++i) {
    const double log_p = expected[i] - le, log_q = ours[i] - lo;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

// Every position that has expected logits (all rows where a logits file exists, else the last),
// by the full recompute and by the cached path (prefill then one token at a time).
Agreement compare(const std::filesystem::path& dir, WeightFormat format, int threads) {
  const auto golden = read_golden_case(dir);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(dir, {format, threads});
  REQUIRE(model.format() == format);
  Agreement a;
  auto count = [&](const auto& row, const float* expected, Index vocab) {
    Index best = 0, want = 0;
    row.maxCoeff(&best);
    Eigen::Map<const RowVector<float>> e(expected, vocab);
    e.maxCoeff(&want);
    ++a.positions;
    if (best == want) ++a.same_top1;
    const RowVector<float> ours = row;
    a.kl += kl_divergence(expected, ours.data(), vocab);
    a.diff_squares += (ours - e).squaredNorm();
    a.squares += e.squaredNorm();
    a.max_diff = minimind::testing::worse(a.max_diff, minimind::testing::max_abs_diff(row, e));
  };
  for (const auto& prompt : golden.prompts) {
    const Index len = static_cast<Index>(prompt.ids.size()), vocab = static_cast<Index>(prompt.last_logits.size());
    const MatrixRM<float> full = model.forward(prompt.ids);
    if (!prompt.all_logits.empty()) {
      for (Index i = 0; i < len; ++i) count(full.row(i), prompt.all_logits.data() + i * vocab, vocab);
    } else {
      count(full.row(len - 1), prompt.last_logits.data(), vocab);
    }
    auto session = model.new_session(len);
    const Index split = std::max<Index>(len - 8, len / 2);  // the last (up to 8) positions one at a time
    if (split > 0) model.forward(session, std::span<const int32_t>(prompt.ids.data(), static_cast<size_t>(split)), false);
    for (Index i = split; i < len; ++i) {
      auto row = model.forward(session, std::span<const int32_t>(&prompt.ids[static_cast<size_t>(i)], 1));
      if (!prompt.all_logits.empty()) count(row.row(0), prompt.all_logits.data() + i * vocab, vocab);
      else if (i == len - 1) count(row.row(0), prompt.last_logits.data(), vocab);
    }
  }
  return a;
}

bool stored_as(const std::filesystem::path& dir, const char* dtype) {
  const auto json = io::read_json_file(dir / "expected.json");
  return json.value("weights_dtype", std::string()) == dtype;
}

void check_formats_in(const std::filesystem::path& root) {
  std::map<std::string, double> worst;
  std::map<std::string, Agreement> pooled;  // over the cases where agreement is the criterion
  size_t cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    const auto dir = entry.path();
    if (!std::filesystem::exists(dir / "expected.json")) continue;
    ++cases;
    const auto golden = read_golden_case(dir);
    // f32 both ways, whatever this CPU's kernels hold it as: row-major and in f32_panels.
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels, WeightFormat::Q4}) {
      const std::string name = format_name(format);
      CAPTURE(dir.filename().string());
      CAPTURE(name);
      const Agreement a = compare(dir, format, 2);
      worst[name] = minimind::testing::worse(worst[name], a.max_diff);
      const bool exact_bf16 = stored_as(dir, "bfloat16") || stored_as(dir, "BF16");
      const bool f32 = format == WeightFormat::F32 || format == WeightFormat::F32Panels;
      if (!f32 && !(format == WeightFormat::BF16 && exact_bf16)) pooled[name].add(a);
      MESSAGE(dir.filename().string() << " " << name << ": max |logit difference| " << a.max_diff << ", top-1 agreement "
                                      << a.same_top1 << "/" << a.positions << ", KL " << a.mean_kl() << ", relative L2 "
                                      << a.relative_l2());
      switch (format) {
        case WeightFormat::F32:
        case WeightFormat::F32Panels:
          CHECK(a.max_diff <= minimind::testing::logit_tolerance(golden));
          CHECK(a.same_top1 == a.positions);
          break;
        case WeightFormat::BF16:
          if (exact_bf16) CHECK(a.max_diff <= std::max(golden.tolerance, 1e-2));
          else CHECK(a.rate() >= 0.90);
          break;
        case WeightFormat::Q8: CHECK(a.rate() >= 0.90); break;
        case WeightFormat::Q4: CHECK(a.relative_l2() <= 0.8); break;
        case WeightFormat::Ggml: break;  // not in the list: only a GGUF's quantized tensors are held so
      }
    }
  }
  CHECK(cases > 0);
  for (const auto& [name, diff] : worst) MESSAGE(root.string() << ": " << name << " max |logit difference| over all cases " << diff);
  for (const auto& [name, a] : pooled) {
    MESSAGE(root.string() << ": " << name << " top-1 agreement " << a.same_top1 << "/" << a.positions << " = " << a.rate()
                          << ", mean KL " << a.mean_kl() << ", relative L2 " << a.relative_l2());
  }
  CHECK(pooled["bf16"].rate() >= 0.98);
  CHECK(pooled["q8"].rate() >= 0.95);
  CHECK(pooled["q4"].relative_l2() <= 20 * pooled["q8"].relative_l2());
  CHECK(pooled["q4"].mean_kl() <= 400 * pooled["q8"].mean_kl());
}

}  // namespace

TEST_CASE("shared golden cases in f32, bf16, q8 and q4") {
  auto dir = minimind::testing::shared_dir("golden");
  if (!dir) return;
  check_formats_in(*dir);
}

TEST_CASE("own golden cases in f32, bf16, q8 and q4") {
  const auto dir = minimind::testing::data_dir() / "golden";
  REQUIRE(std::filesystem::exists(dir));
  check_formats_in(dir);
}

TEST_CASE("a BF16 checkpoint held as bf16 is viewed in place; held as f32 it is widened") {
  auto dir = minimind::testing::shared_dir("golden/tiny-mm2-bf16");
  if (!dir) return;
  const auto bf16 = MiniMindForCausalLM<float>::from_pretrained(*dir, {WeightFormat::BF16, 1});
  CHECK(bf16.model.layers[0].self_attn.q_proj.is_view());
  CHECK(bf16.model.embed_tokens.weight().is_view());
  const auto f32 = MiniMindForCausalLM<float>::from_pretrained(*dir, {WeightFormat::F32, 1});
  CHECK_FALSE(f32.model.layers[0].self_attn.q_proj.is_view());
  CHECK(bf16.weight_bytes() * 2 - f32.weight_bytes() < 100000);  // norms stay f32
}

TEST_CASE("a model converted from an f32 file keeps nothing of the file; one held as row-major f32 views it") {
  const Checkpoint checkpoint = load_checkpoint(minimind::testing::data_dir() / "golden" / "mm3-dense");
  REQUIRE(checkpoint.tensors.files().size() == 1);
  const auto& file = checkpoint.tensors.files().front();
  const long alone = file.use_count();
  for (const auto format : {WeightFormat::BF16, WeightFormat::Q8, WeightFormat::F32Panels}) {
    const auto model = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, checkpoint.tensors, {format, 1});
    CHECK_FALSE(model.model.norm.weight().is_view());  // the norms too: a view would hold the whole file
    CHECK(file.use_count() == alone);
  }
  // f32 is asked for; it is held row-major unless this CPU's kernels ask for f32_panels.
  const auto f32 = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, checkpoint.tensors, {WeightFormat::F32, 1});
  const bool row_major = WeightLoader<float>::held(WeightFormat::F32) == WeightFormat::F32;
  CHECK(f32.model.norm.weight().is_view() == row_major);
  CHECK((file.use_count() > alone) == row_major);
  CHECK(f32.model.layers[0].self_attn.q_proj.format() == WeightLoader<float>::held(WeightFormat::F32));
}
