// Trace: every recorded step against a computation that does not go through the observer: the
// PyTorch reference's hidden states (hidden_<k>.f32 from tools/make_golden.py --hidden-states),
// the model's own logits, and the same model cut after fewer blocks.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>
#include <minimind/trace.hpp>

#include "golden.hpp"
#include "test_support.hpp"

#include <cmath>
#include <cstring>

using namespace minimind;
using namespace minimind::testing;

namespace {

std::vector<std::filesystem::path> golden_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir() / "golden")) {
    if (entry.is_directory()) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// hidden_<k>.f32 beside logits_<k>.f32: [layers, len, hidden].
std::vector<float> read_hidden(const std::filesystem::path& dir, size_t prompt_index) {
  const std::string bytes = read_file(dir / ("hidden_" + std::to_string(prompt_index) + ".f32"));
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

double softmax_at(const RowVector<float>& row, Index j) {
  const double m = row.maxCoeff();
  double total = 0;
  for (Index k = 0; k < row.size(); ++k) total += std::exp(static_cast<double>(row[k]) - m);
  return std::exp(static_cast<double>(row[j]) - m) / total;
}

}  // namespace

TEST_CASE("trace: residual norms and the final norm agree with the PyTorch reference's hidden states") {
  for (const auto& dir : golden_dirs()) {
    const auto golden = read_golden_case(dir);
    const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
    const auto& config = model.config();
    for (size_t p = 0; p < golden.prompts.size(); ++p) {
      const auto& prompt = golden.prompts[p];
      if (prompt.all_logits.empty()) continue;
      CAPTURE(dir.filename().string());
      CAPTURE(prompt.name);
      const auto hidden = read_hidden(dir, p);
      const auto len = static_cast<Index>(prompt.ids.size()), width = config.hidden_size;
      REQUIRE(hidden.size() == static_cast<size_t>(config.num_hidden_layers * len * width));
      const Trace t = trace(model, prompt.ids, nullptr);
      REQUIRE(t.layers.size() == static_cast<size_t>(config.num_hidden_layers));
      for (size_t l = 0; l < t.layers.size(); ++l) {
        const float* row = hidden.data() + (static_cast<Index>(l) * len + len - 1) * width;
        const double expected = Eigen::Map<const RowVector<float>>(row, width).cast<double>().norm();
        CHECK(std::abs(t.layers[l].residual_norm - expected) <= 1e-4 * expected);
      }
      // The final RMSNorm by hand, in double, from the reference's last residual.
      const float* last = hidden.data() + ((config.num_hidden_layers - 1) * len + len - 1) * width;
      const RowVector<double> x = Eigen::Map<const RowVector<float>>(last, width).cast<double>();
      const RowVector<double> gamma = model.model.norm.weight().vector().cast<double>();
      const double rms = std::sqrt(x.squaredNorm() / static_cast<double>(width) + config.rms_norm_eps);
      const double expected_final = (x / rms).cwiseProduct(gamma).norm();
      CHECK(std::abs(t.final_norm - expected_final) <= 1e-4 * expected_final);
    }
  }
}

TEST_CASE("trace: the logit lens of block l is the top token of the model cut after block l, at every position") {
  for (const auto& dir : golden_dirs()) {
    const auto golden = read_golden_case(dir);
    const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
    const auto& ids = golden.prompts[0].ids;
    CAPTURE(dir.filename().string());
    const Trace t = trace(model, ids, nullptr);
    for (size_t l = 0; l < t.layers.size(); ++l) {
      auto cut = model;
      cut.model.layers.resize(l + 1);
      const MatrixRM<float> logits = cut.forward(ids);
      REQUIRE(t.layers[l].lens.size() == ids.size());
      for (Index i = 0; i < logits.rows(); ++i) {
        const RowVector<float> row = logits.row(i);
        const int32_t best = argmax(row);
        CHECK(t.layers[l].lens[static_cast<size_t>(i)].id == best);
        CHECK(t.layers[l].lens[static_cast<size_t>(i)].probability == doctest::Approx(softmax_at(row, best)).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("trace: the embedding row, the top-k against the model's logits, probabilities summing to 1") {
  for (const auto& dir : golden_dirs()) {
    const auto golden = read_golden_case(dir);
    const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
    const auto& prompt = golden.prompts[0];
    CAPTURE(dir.filename().string());
    const auto vocab = model.config().vocab_size;
    TraceOptions options;
    options.top = vocab;
    const Trace t = trace(model, prompt.ids, nullptr, options);

    const RowVector<float> e = model.model.embed_tokens.lookup(prompt.ids.back());
    CHECK(t.embedding_norm == doctest::Approx(e.norm()).epsilon(1e-6));
    REQUIRE(t.embedding_first.size() == 8);
    for (size_t c = 0; c < t.embedding_first.size(); ++c) CHECK(t.embedding_first[c] == e[static_cast<Index>(c)]);

    REQUIRE(t.top.size() == static_cast<size_t>(vocab));
    double total = 0;
    for (size_t r = 0; r < t.top.size(); ++r) {
      total += t.top[r].probability;
      CHECK(std::abs(t.top[r].logit - prompt.last_logits[static_cast<size_t>(t.top[r].id)]) <= golden.tolerance);
      if (r > 0) CHECK(t.top[r].logit <= t.top[r - 1].logit);
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-9));
    // The last block's lens is the model's own prediction.
    CHECK(t.layers.back().lens.back().id == t.top[0].id);
    CHECK(t.layers.back().lens.back().probability == doctest::Approx(t.top[0].probability).epsilon(1e-6));

    const auto& config = model.config();
    for (const auto& layer : t.layers) {
      if (config.num_experts > 0) {
        CHECK(layer.experts.size() == static_cast<size_t>(config.num_experts_per_tok));
        for (int32_t expert : layer.experts) CHECK((expert >= 0 && expert < config.num_experts));
      } else {
        CHECK(layer.experts.empty());
      }
    }
  }
}

TEST_CASE("trace: attention maps are causal rows that sum to 1, and the entropies are theirs") {
  const auto dir = data_dir() / "golden" / "mm3-dense";
  const auto golden = read_golden_case(dir);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
  const auto& ids = golden.prompts[0].ids;
  const size_t n = ids.size();
  TraceOptions options;
  options.attention = true;
  const Trace t = trace(model, ids, nullptr, options);
  for (const auto& layer : t.layers) {
    REQUIRE(layer.attention.size() == static_cast<size_t>(model.config().num_attention_heads));
    for (size_t h = 0; h < layer.attention.size(); ++h) {
      const auto& map = layer.attention[h];
      REQUIRE(map.size() == n);
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(map[i].size() == n);
        double total = 0;
        for (size_t k = 0; k < n; ++k) {
          if (k > i) CHECK(map[i][k] == 0);
          CHECK(map[i][k] >= 0);
          total += map[i][k];
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
      }
      double entropy = 0;
      for (double p : map[n - 1]) entropy -= p > 0 ? p * std::log(p) : 0;
      CHECK(layer.attention_entropy[h] == doctest::Approx(entropy));
      // Position 0 sees only itself.
      CHECK(map[0][0] == doctest::Approx(1.0));
    }
  }
  const auto json = t.to_json();
  REQUIRE(json.at("layers").size() == t.layers.size());
  CHECK(json["layers"][1]["attention"] == nlohmann::json(t.layers[1].attention));
}

TEST_CASE("trace: to_json names the steps at the last position") {
  const auto dir = data_dir() / "golden" / "mm2-moe";
  const auto golden = read_golden_case(dir);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
  const Trace t = trace(model, golden.prompts[0].ids, nullptr);
  const auto json = t.to_json();
  CHECK(json.at("ids") == nlohmann::json(golden.prompts[0].ids));
  CHECK(json.at("embedding").at("norm").get<double>() == t.embedding_norm);
  CHECK(json.at("final_norm").get<double>() == t.final_norm);
  REQUIRE(json.at("layers").size() == t.layers.size());
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const auto& layer = json["layers"][l];
    CHECK(layer.at("residual_norm").get<double>() == t.layers[l].residual_norm);
    CHECK(layer.at("lens_top1").get<int32_t>() == t.layers[l].lens.back().id);
    CHECK(layer.at("lens").size() == golden.prompts[0].ids.size());
    CHECK(layer.at("router").at("experts") == nlohmann::json(t.layers[l].experts));
    CHECK_FALSE(layer.contains("attention"));
  }
  REQUIRE(json.at("top").size() == 5);
  CHECK(json["top"][0].at("id").get<int32_t>() == t.top[0].id);
  CHECK(json["top"][0].at("logit").get<double>() == t.top[0].logit);
  CHECK(json["top"][0].at("probability").get<double>() == t.top[0].probability);
}
