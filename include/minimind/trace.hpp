#pragma once
// One prediction, step by step: what the tutorial walks through (ids -> an embedding row -> the
// blocks -> the final RMSNorm -> logits h . E[id]), recorded by a ForwardObserver while the prompt
// runs once. Per block it keeps the residual stream after the block, the entropy of each head's
// attention at the last position, and the logit lens: that residual passed through the model's own
// final RMSNorm and lm_head, as if the network stopped there. Trace::to_json is what
// `minimind-next --trace --json` prints and what the server's /v1/inspect returns.
#include "minimind/model.hpp"
#include "minimind/observer.hpp"
#include "minimind/tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace minimind {

struct TokenScore {
  int32_t id = 0;
  std::string piece;  // empty without a tokenizer
  double logit = 0;
  double probability = 0;
};

// The k highest logits of one row, best first (ties to the lower id), with their softmax
// probabilities over the whole row, computed in double.
template <class Row>
std::vector<TokenScore> top_tokens(const Row& logits, int64_t k) {
  const Index vocab = logits.size();
  const double max_logit = static_cast<double>(logits.maxCoeff());
  double total = 0;
  for (Index j = 0; j < vocab; ++j) total += std::exp(static_cast<double>(logits[j]) - max_logit);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  k = std::clamp<int64_t>(k, 0, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<TokenScore> out;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = order[static_cast<size_t>(i)];
    const double logit = static_cast<double>(logits[id]);
    out.push_back({id, {}, logit, std::exp(logit - max_logit) / total});
  }
  return out;
}

struct TraceOptions {
  int64_t top = 5;              // candidates in Trace::top
  int64_t embedding_values = 8;  // first values of the embedding row kept
  bool attention = false;       // keep the attention maps (entropies are kept always)
};

struct TraceLayer {
  double residual_norm = 0;                  // L2 norm of the residual after the block, last position
  std::vector<double> attention_entropy;     // per head, of the last position's row, in nats
  std::vector<TokenScore> lens;              // per position: the lens's top token
  std::vector<int32_t> experts;              // MoE: the last position's experts, empty if dense
  std::vector<double> expert_weights;        // ... and their weights
  std::vector<std::vector<std::vector<double>>> attention;  // [head][pos][pos] when asked
};

struct Trace {
  std::vector<int32_t> ids;
  std::vector<std::string> pieces;  // empty without a tokenizer
  std::vector<double> embedding_first;  // the last position's embedding row, first values
  double embedding_norm = 0;
  int64_t hidden_size = 0;
  std::vector<TraceLayer> layers;
  double final_norm = 0;  // L2 norm of the final RMSNorm's output, last position
  std::vector<TokenScore> top;
  bool has_attention = false;

  nlohmann::json to_json() const {
    auto scores = [](const TokenScore& s, bool with_logit) {
      nlohmann::json j = {{"id", s.id}, {"piece", s.piece}, {"probability", s.probability}};
      if (with_logit) j["logit"] = s.logit;
      return j;
    };
    nlohmann::json j;
    j["ids"] = ids;
    j["pieces"] = pieces;
    j["hidden_size"] = hidden_size;
    j["embedding"] = {{"first", embedding_first}, {"norm", embedding_norm}};
    j["layers"] = nlohmann::json::array();
    for (const auto& layer : layers) {
      nlohmann::json l = {{"residual_norm", layer.residual_norm},
                          {"attention_entropy", layer.attention_entropy},
                          {"lens_top1", layer.lens.back().id},
                          {"lens_piece", layer.lens.back().piece},
                          {"lens_probability", layer.lens.back().probability}};
      l["lens"] = nlohmann::json::array();
      for (const auto& s : layer.lens) l["lens"].push_back(scores(s, false));
      if (!layer.experts.empty()) l["router"] = {{"experts", layer.experts}, {"weights", layer.expert_weights}};
      if (has_attention) l["attention"] = layer.attention;
      j["layers"].push_back(std::move(l));
    }
    j["final_norm"] = final_norm;
    j["top"] = nlohmann::json::array();
    for (const auto& s : top) j["top"].push_back(scores(s, true));
    return j;
  }
};

namespace detail {

// Copies what the trace needs while the forward pass runs; the views die with each call.
template <class T>
class TraceRecorder final : public ForwardObserver<T> {
 public:
  TraceRecorder(int64_t layers, int64_t heads) : residuals(static_cast<size_t>(layers)), attention_maps(static_cast<size_t>(layers)) {
    for (auto& layer : attention_maps) layer.resize(static_cast<size_t>(heads));
  }
  bool wants_attention() const override { return true; }
  void embedding(ConstMatrixMap<T> h) override { embedded = h; }
  void attention(int64_t layer, int64_t head, ConstMatrixMap<T> probs) override {
    attention_maps.at(static_cast<size_t>(layer)).at(static_cast<size_t>(head)) = probs;
  }
  void router(int64_t layer, std::span<const int> chosen, std::span<const T> chosen_weights, int64_t top_k) override {
    const size_t last = chosen.size() - static_cast<size_t>(top_k);
    auto& [e, w] = routes[layer];
    e.assign(chosen.begin() + static_cast<std::ptrdiff_t>(last), chosen.end());
    w.assign(chosen_weights.begin() + static_cast<std::ptrdiff_t>(last), chosen_weights.end());
  }
  void residual_after_ffn(int64_t layer, ConstMatrixMap<T> x) override { residuals.at(static_cast<size_t>(layer)) = x; }
  void final_norm(ConstMatrixMap<T> h) override { normed = h; }
  void logits(ConstMatrixMap<T> l) override { last_logits = l.row(l.rows() - 1); }

  MatrixRM<T> embedded, normed;
  std::vector<MatrixRM<T>> residuals;
  std::vector<std::vector<MatrixRM<T>>> attention_maps;  // [layer][head] [n, n]
  std::map<int64_t, std::pair<std::vector<int32_t>, std::vector<double>>> routes;
  RowVector<T> last_logits;
};

inline std::string piece_of(const Tokenizer* tokenizer, int32_t id) {
  // A token may be half a UTF-8 character: shown as U+FFFD so text and JSON stay valid.
  return tokenizer ? unicode::to_valid_utf8(tokenizer->token_to_piece(id)) : std::string();
}

}  // namespace detail

// Runs ids through a fresh session of `model` once and records the trace.
template <class T>
Trace trace(const MiniMindForCausalLM<T>& model, std::span<const int32_t> ids, const Tokenizer* tokenizer,
            const TraceOptions& options = {}) {
  if (ids.empty()) throw Error("trace: no token ids");
  const Config& config = model.config();
  detail::TraceRecorder<T> recorder(config.num_hidden_layers, config.num_attention_heads);
  auto session = model.new_session(static_cast<Index>(ids.size()));
  model.forward(session, ids, false, &recorder);
  const Index n = static_cast<Index>(ids.size()), last = n - 1;

  Trace t;
  t.ids.assign(ids.begin(), ids.end());
  if (tokenizer) {
    for (int32_t id : ids) t.pieces.push_back(detail::piece_of(tokenizer, id));
  }
  t.hidden_size = config.hidden_size;
  const auto embedded = recorder.embedded.row(last);
  for (Index c = 0; c < std::min<Index>(options.embedding_values, embedded.size()); ++c) {
    t.embedding_first.push_back(static_cast<double>(embedded[c]));
  }
  t.embedding_norm = static_cast<double>(embedded.norm());

  MatrixRM<T> normed(n, config.hidden_size), lens_logits(n, config.vocab_size);
  for (size_t l = 0; l < recorder.residuals.size(); ++l) {
    TraceLayer layer;
    const MatrixRM<T>& residual = recorder.residuals[l];
    layer.residual_norm = static_cast<double>(residual.row(last).norm());
    for (const MatrixRM<T>& probs : recorder.attention_maps[l]) {
      double entropy = 0;
      for (Index k = 0; k < probs.cols(); ++k) {
        const double p = static_cast<double>(probs(last, k));
        if (p > 0) entropy -= p * std::log(p);
      }
      layer.attention_entropy.push_back(entropy);
      if (options.attention) {
        auto& map = layer.attention.emplace_back(static_cast<size_t>(n));
        for (Index i = 0; i < n; ++i) {
          for (Index k = 0; k < probs.cols(); ++k) map[static_cast<size_t>(i)].push_back(static_cast<double>(probs(i, k)));
        }
      }
    }
    model.model.norm.forward(residual, normed);
    model.lm_head().logits(normed, lens_logits);
    for (Index i = 0; i < n; ++i) {
      TokenScore best = top_tokens(lens_logits.row(i), 1).front();
      best.piece = detail::piece_of(tokenizer, best.id);
      layer.lens.push_back(std::move(best));
    }
    if (auto route = recorder.routes.find(static_cast<int64_t>(l)); route != recorder.routes.end()) {
      layer.experts = route->second.first;
      layer.expert_weights = route->second.second;
    }
    t.layers.push_back(std::move(layer));
  }
  t.final_norm = static_cast<double>(recorder.normed.row(last).norm());
  t.top = top_tokens(recorder.last_logits, options.top);
  for (auto& s : t.top) s.piece = detail::piece_of(tokenizer, s.id);
  t.has_attention = options.attention;
  return t;
}

}  // namespace minimind
