// The float64 oracle: every golden case (ours in tests/data/golden/, and ../shared/golden/'s) run as
// MiniMindForCausalLM<double> against tools/make_golden.py --f64, a float64 PyTorch reference with
// float64 RoPE, to 1e-9 on every stored logit. float32 tolerances (1e-4 and up) cannot see a formula
// that is off by a few ulps of float32, such as eps outside RMSNorm's square root; this can.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "test_support.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

using namespace minimind;
using namespace minimind::testing;

namespace {

struct OraclePrompt {
  std::string name;
  std::vector<int32_t> ids;
  bool all_rows = false;        // logits at every position, else at the last one only
  std::vector<double> logits;   // [rows, vocab]
};

struct OracleCase {
  std::string name, source;  // source: "project" or "shared"
  Index vocab = 0;
  std::vector<OraclePrompt> prompts;
};

std::filesystem::path oracle_dir() { return data_dir() / "golden-f64"; }

std::vector<OracleCase> read_oracle(double& tolerance) {
  const auto index = io::read_json_file(oracle_dir() / "cases.json");
  REQUIRE(index.at("format").get<std::string>() == "minimind-golden-f64-1");
  tolerance = index.at("tolerance").at("logits_max_abs").get<double>();
  std::vector<OracleCase> cases;
  for (const auto& c : index.at("cases")) {
    OracleCase oc;
    oc.name = c.at("case").get<std::string>();
    oc.source = c.at("source").get<std::string>();
    oc.vocab = c.at("vocab_size").get<Index>();
    const std::string bytes = read_file(oracle_dir() / c.at("logits_file").get<std::string>());
    for (const auto& p : c.at("prompts")) {
      OraclePrompt op;
      op.name = p.at("name").get<std::string>();
      op.ids = p.at("ids").get<std::vector<int32_t>>();
      op.all_rows = p.at("rows").get<std::string>() == "all";
      const auto shape = p.at("shape").get<std::vector<size_t>>();
      const auto offset = p.at("offset").get<size_t>();
      REQUIRE(shape.size() == 2);
      REQUIRE(shape[0] == (op.all_rows ? op.ids.size() : 1));
      REQUIRE(shape[1] == static_cast<size_t>(oc.vocab));
      op.logits.resize(shape[0] * shape[1]);
      REQUIRE((offset + op.logits.size()) * sizeof(double) <= bytes.size());
      std::memcpy(op.logits.data(), bytes.data() + offset * sizeof(double), op.logits.size() * sizeof(double));
      oc.prompts.push_back(std::move(op));
    }
    cases.push_back(std::move(oc));
  }
  return cases;
}

// Largest |got - expected| over one row; NaN if either side has a NaN, so it fails any `<= tol`.
template <class Row>
double row_diff(const Row& got, const double* expected, Index vocab) {
  REQUIRE(got.size() == vocab);
  double worst = 0;
  for (Index j = 0; j < vocab; ++j) {
    const double d = std::abs(static_cast<double>(got(j)) - expected[j]);
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    worst = std::max(worst, d);
  }
  return worst;
}

// Worst difference over a case's stored rows, by full recompute and token by token through the
// KV cache; NaN as soon as one logit is NaN.
double check_case(const OracleCase& oc, const std::filesystem::path& dir) {
  const auto model = MiniMindForCausalLM<double>::from_pretrained(dir);
  REQUIRE(model.config().vocab_size == oc.vocab);
  double worst = 0;
  auto account = [&worst](double d) {
    if (std::isnan(d) || d > worst) worst = d;  // once NaN, no number replaces it
  };
  for (const auto& p : oc.prompts) {
    CAPTURE(p.name);
    const Index len = static_cast<Index>(p.ids.size());
    auto expected_row = [&](Index position) -> const double* {
      if (p.all_rows) return p.logits.data() + position * oc.vocab;
      return position == len - 1 ? p.logits.data() : nullptr;
    };
    const MatrixRM<double> full = model.forward(p.ids);
    REQUIRE(full.rows() == len);
    auto session = model.new_session(len);
    for (Index i = 0; i < len; ++i) {
      const auto cached = model.forward(session, std::span<const int32_t>(&p.ids[static_cast<size_t>(i)], 1));
      const double* expected = expected_row(i);
      if (!expected) continue;
      const double full_diff = row_diff(full.row(i), expected, oc.vocab);
      const double cached_diff = row_diff(cached.row(0), expected, oc.vocab);
      CAPTURE(i);
      CHECK(full_diff <= 1e-9);
      CHECK(cached_diff <= 1e-9);
      account(full_diff);
      account(cached_diff);
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("every golden case in double matches the float64 reference to 1e-9 (full and cached)") {
  double tolerance = 0;
  const auto cases = read_oracle(tolerance);
  CHECK(tolerance == 1e-9);
  int checked = 0, skipped = 0;
  for (const auto& oc : cases) {
    CAPTURE(oc.name);
    std::optional<std::filesystem::path> dir;
    if (oc.source == "project") dir = data_dir() / "golden" / oc.name;
    else dir = shared_dir("golden/" + oc.name);
    if (!dir) {
      ++skipped;
      continue;
    }
    const double worst = check_case(oc, *dir);
    CHECK(worst <= tolerance);
    MESSAGE(oc.name << ": max |double - float64 reference| " << worst);
    ++checked;
  }
  MESSAGE(checked << " cases checked, " << skipped << " skipped");
  CHECK(checked + skipped == static_cast<int>(cases.size()));
  CHECK(checked >= 13);  // our own cases are always there
}

TEST_CASE("the comparison counts NaN as a failure") {
  RowVector<double> got(3);
  got << 1.0, std::numeric_limits<double>::quiet_NaN(), 3.0;
  const double expected[3] = {1.0, 2.0, 3.0};
  CHECK_FALSE(row_diff(got, expected, 3) <= 1e-9);
  got(1) = 2.0;
  CHECK(row_diff(got, expected, 3) == 0.0);
}

TEST_CASE("a double model refuses the float-only weight formats with an Error") {
  Config c = Config::minimind3();
  c.hidden_size = 16, c.num_hidden_layers = 1, c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8;
  c.intermediate_size = 32, c.vocab_size = 64;
  for (const WeightFormat format : {WeightFormat::BF16, WeightFormat::Q8}) {
    CAPTURE(format_name(format));
    LoadOptions options;
    options.format = format;
    CHECK_THROWS_AS(MiniMindForCausalLM<double>::random(c, 1, options), Error);
  }
  static_assert(!Weight<double>::kHasPackedFormats && Weight<float>::kHasPackedFormats);
}
