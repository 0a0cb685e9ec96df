#pragma once
// Runs a "minimind-golden-1" case directory (format: ../shared/golden/README.md) through the model
// and checks every logit and every greedy id, by full recompute and by the cached path.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace minimind::testing {

// Greedy decoding of exactly max_new_tokens tokens: what the golden greedy ids are made with.
inline GenerationConfig greedy(int64_t max_new_tokens) {
  GenerationConfig g;
  g.max_new_tokens = max_new_tokens;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  return g;
}

struct GoldenPrompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> last_logits;
  std::vector<float> all_logits;  // [len, vocab] or empty
  std::vector<int32_t> greedy_ids;
};

struct GoldenCase {
  std::string name;
  double tolerance = 0;
  std::vector<GoldenPrompt> prompts;
};

inline GoldenCase read_golden_case(const std::filesystem::path& dir) {
  const auto json = io::read_json_file(dir / "expected.json");
  GoldenCase c;
  c.name = json.at("case").get<std::string>();
  c.tolerance = json.at("tolerance").at("logits_max_abs").get<double>();
  for (const auto& p : json.at("prompts")) {
    GoldenPrompt prompt;
    prompt.name = p.at("name").get<std::string>();
    prompt.ids = p.at("ids").get<std::vector<int32_t>>();
    prompt.last_logits = p.at("last_logits").get<std::vector<float>>();
    prompt.greedy_ids = p.at("greedy_ids").get<std::vector<int32_t>>();
    if (!p.at("logits_file").is_null()) {
      const std::string bytes = read_file(dir / p.at("logits_file").get<std::string>());
      prompt.all_logits.resize(bytes.size() / sizeof(float));
      std::memcpy(prompt.all_logits.data(), bytes.data(), bytes.size());
      REQUIRE(prompt.all_logits.size() == prompt.ids.size() * prompt.last_logits.size());
    }
    c.prompts.push_back(std::move(prompt));
  }
  return c;
}

// The largest |logit difference| from PyTorch a float case may show: a few times what the code
// achieves (the worst per case is in the commit that set these), far tighter than the 1e-3 (f32)
// and 1e-2 (f16, bf16) the shared cases store. A new case needs its own entry.
inline double logit_tolerance(const GoldenCase& golden) {
  static const std::map<std::string, double> tolerances = {
      // ../shared/golden
      {"tiny-mm2", 1e-4}, {"tiny-mm3", 1e-4}, {"tiny-mm3-moe", 1e-4}, {"tiny-untied", 1e-4},
      {"tiny-mm2-bf16", 3e-5}, {"tiny-mm2-f16", 3e-5},
      // tests/data/golden
      {"bf16", 2e-5}, {"f16", 2e-5}, {"gqa-1kv", 2e-5}, {"mha", 2e-5}, {"mm2-dense-f32", 2e-5},
      {"mm2-moe", 2e-5}, {"mm2-moe-top1", 2e-5}, {"mm2-yarn", 2e-5}, {"mm3-dense", 2e-5}, {"mm3-moe", 2e-5},
      {"mm3-yarn", 2e-5}, {"tied-lm-head-stored", 2e-5}, {"untied", 2e-5},
  };
  const auto it = tolerances.find(golden.name);
  REQUIRE_MESSAGE(it != tolerances.end(), "golden case " << golden.name << " has no logit tolerance here");
  return std::min(it->second, golden.tolerance);
}

template <class Logits>
double max_abs_row_diff(const Logits& got, const std::vector<float>& expected, Index row) {
  double worst = 0;
  const Index vocab = got.cols();
  for (Index j = 0; j < vocab; ++j) {
    worst = worse(worst, std::abs(static_cast<double>(got(row, j)) - expected[static_cast<size_t>(j)]));
  }
  return worst;
}

template <class Row>
int32_t argmax(const Row& row) {
  Index best = 0;
  row.maxCoeff(&best);
  return static_cast<int32_t>(best);
}

// Checks one case; returns the largest logit difference seen.
template <class T = float>
double check_golden_case(const std::filesystem::path& dir) {
  const GoldenCase golden = read_golden_case(dir);
  const double tolerance = logit_tolerance(golden);
  const auto model = MiniMindForCausalLM<T>::from_pretrained(dir);
  double worst = 0;
  for (const auto& prompt : golden.prompts) {
    CAPTURE(golden.name);
    CAPTURE(prompt.name);
    const Index len = static_cast<Index>(prompt.ids.size());
    const Index vocab = static_cast<Index>(prompt.last_logits.size());

    // Full recompute: every row against the logits file, the last against last_logits.
    const MatrixRM<T> full = model.forward(prompt.ids);
    REQUIRE(full.rows() == len);
    REQUIRE(full.cols() == vocab);
    double diff = max_abs_row_diff(full, prompt.last_logits, len - 1);
    if (!prompt.all_logits.empty()) {
      for (Index i = 0; i < len; ++i) {
        for (Index j = 0; j < vocab; ++j) {
          diff = worse(diff, std::abs(static_cast<double>(full(i, j)) - prompt.all_logits[static_cast<size_t>(i * vocab + j)]));
        }
      }
    }
    CHECK(diff <= tolerance);
    worst = worse(worst, diff);

    // Cached path: the prompt in one batch, then greedy one token at a time.
    auto session = model.new_session(len + static_cast<Index>(prompt.greedy_ids.size()));
    auto last = model.forward(session, prompt.ids, false);
    const double cached_diff = max_abs_row_diff(last, prompt.last_logits, 0);
    CHECK(cached_diff <= tolerance);
    worst = worse(worst, cached_diff);
    std::vector<int32_t> greedy;
    int32_t next = argmax(last.row(0));
    for (size_t step = 0; step < prompt.greedy_ids.size(); ++step) {
      greedy.push_back(next);
      if (step + 1 == prompt.greedy_ids.size()) break;
      auto logits = model.forward(session, std::span<const int32_t>(&next, 1));
      next = argmax(logits.row(0));
    }
    CHECK(greedy == prompt.greedy_ids);

    // Cached prefill one token at a time agrees with the full recompute at every position.
    auto stepwise = model.new_session(len);
    double step_diff = 0;
    for (Index i = 0; i < len; ++i) {
      auto row = model.forward(stepwise, std::span<const int32_t>(&prompt.ids[static_cast<size_t>(i)], 1));
      step_diff = worse(step_diff, max_abs_diff(row.row(0), full.row(i)));
    }
    CHECK(step_diff <= 1e-4);
  }
  return worst;
}

}  // namespace minimind::testing
