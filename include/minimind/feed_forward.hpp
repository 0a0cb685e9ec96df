#pragma once
// The position-wise MLP of a block. Dense: SwiGLU, down_proj(silu(gate_proj(x)) * up_proj(x)).
// MoE: a router (mlp.gate) scores the experts with a softmax, each token goes through its
// num_experts_per_tok best experts, weighted by their scores (optionally renormalised), plus the
// always-on shared experts of MiniMind2-MoE.
#include "minimind/config.hpp"
#include "minimind/detail/kernels/linear.hpp"
#include "minimind/lora.hpp"
#include "minimind/tensor.hpp"
#include "minimind/weights.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

namespace minimind {

// A SwiGLU FFN's buffers: gate and up projections of up to `rows` positions [rows, width].
template <class T>
struct FeedForwardScratch {
  MatrixRM<T> gate, up;
  void reserve(const Config& c, Index rows) {
    if (rows <= gate.rows()) return;
    const Index width = std::max(c.intermediate_size, c.moe_intermediate_size);
    gate.resize(rows, width);
    up.resize(rows, width);
  }
};

// The MoE router's buffers, and the rows gathered for one expert at a time.
template <class T>
struct MoEScratch {
  MatrixRM<T> router;                // [rows, experts] router probabilities
  std::vector<int> chosen;           // [rows * top_k] the experts chosen for each row
  std::vector<T> chosen_weight;      // [rows * top_k] their weights
  MatrixRM<T> expert_in;             // [rows, hidden] the rows one expert serves
  MatrixRM<T> expert_out;            // [rows, hidden]
  std::vector<Index> expert_rows;    // [rows] which rows those are
  std::vector<T> expert_weights;     // [rows] and their routing weights
  void reserve(const Config& c, Index rows) {
    if (c.num_experts == 0 || rows <= router.rows()) return;
    router.resize(rows, c.num_experts);
    chosen.resize(static_cast<size_t>(rows * c.num_experts_per_tok));
    chosen_weight.resize(static_cast<size_t>(rows * c.num_experts_per_tok));
    expert_in.resize(rows, c.hidden_size);
    expert_out.resize(rows, c.hidden_size);
    expert_rows.resize(static_cast<size_t>(rows));
    expert_weights.resize(static_cast<size_t>(rows));
  }
};

template <class T>
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(const WeightLoader<T>& w, const std::string& prefix, const Config& c, int64_t width) {
    const std::string dims = "hidden_size " + std::to_string(c.hidden_size) + ", FFN width " + std::to_string(width);
    gate_proj = w.matrix(prefix + ".gate_proj.weight", width, c.hidden_size, dims);
    up_proj = w.matrix(prefix + ".up_proj.weight", width, c.hidden_size, dims);
    down_proj = w.matrix(prefix + ".down_proj.weight", c.hidden_size, width, dims);
  }

  Index width() const { return gate_proj.rows(); }

  // out [n, hidden] = down(silu(gate(x)) * up(x)) for x [n, hidden]; each product plus the
  // unmerged adapters' B A x of the sequences that run some.
  template <class In, class Out>
  void forward(const In& x, Out&& out, FeedForwardScratch<T>& s, kernels::Workspace& work, const LoraAt<T>& lora = {}) const {
    const Index n = x.rows(), f = width();
    auto gate = s.gate.topLeftCorner(n, f);
    auto up = s.up.topLeftCorner(n, f);
    kernels::linear_each(x, work, std::tie(gate_proj, gate), std::tie(up_proj, up));  // x gate^T, x up^T
    lora.add(LoraSlot::Gate, x, gate);
    lora.add(LoraSlot::Up, x, up);
    work.parallel_for(n, 1, [&](Index first, Index last) {  // silu(gate) * up
      for (Index r = first; r < last; ++r) work.silu_mul(&gate(r, 0), &up(r, 0), f);
    });
    kernels::linear(gate, down_proj, out, work);
    lora.add(LoraSlot::Down, gate, out);
  }

  size_t num_parameters() const { return static_cast<size_t>(3 * gate_proj.rows() * gate_proj.cols()); }
  size_t weight_bytes() const { return gate_proj.bytes() + up_proj.bytes() + down_proj.bytes(); }

  Weight<T> gate_proj;  // [width, hidden]
  Weight<T> up_proj;    // [width, hidden]
  Weight<T> down_proj;  // [hidden, width]
};

template <class T>
class MoEFeedForward {
 public:
  MoEFeedForward() = default;
  MoEFeedForward(const WeightLoader<T>& w, const std::string& prefix, const Config& c)
      : top_k_(c.num_experts_per_tok),
        normalize_(c.norm_topk_prob && (c.num_experts_per_tok > 1 || c.normalize_single_expert)) {
    gate = w.matrix(prefix + ".gate.weight", c.num_experts, c.hidden_size,
                    "num_experts " + std::to_string(c.num_experts) + ", hidden_size " + std::to_string(c.hidden_size),
                    /*packed=*/false);
    for (int64_t e = 0; e < c.num_experts; ++e) {
      experts.emplace_back(w, prefix + ".experts." + std::to_string(e), c, c.moe_intermediate_size);
    }
    for (int64_t e = 0; e < c.n_shared_experts; ++e) {
      shared_experts.emplace_back(w, prefix + ".shared_experts." + std::to_string(e), c, c.moe_intermediate_size);
    }
  }

  Index top_k() const { return top_k_; }

  // out [n, hidden] for x [n, hidden]; the choices stay in s.chosen / s.chosen_weight.
  template <class In, class Out>
  void forward(const In& x, Out&& out, MoEScratch<T>& s, FeedForwardScratch<T>& expert, kernels::Workspace& work,
               const LoraAt<T>& lora = {}) const {
    const Index n = x.rows(), num_experts = gate.rows();
    auto router = s.router.topRows(n);
    kernels::linear(x, gate, router, work);
    for (Index r = 0; r < n; ++r) {  // softmax over experts
      auto row = router.row(r);
      row = (row.array() - row.maxCoeff()).exp();
      row /= row.sum();
    }
    choose_experts(router, s);

    out.setZero();
    for (Index e = 0; e < num_experts; ++e) {
      Index count = 0;
      for (Index r = 0; r < n; ++r) {
        for (Index k = 0; k < top_k_; ++k) {
          if (s.chosen[r * top_k_ + k] == e) {
            s.expert_rows[count] = r;
            s.expert_weights[count] = s.chosen_weight[r * top_k_ + k];
            s.expert_in.row(count++) = x.row(r);
          }
        }
      }
      if (count == 0) continue;
      auto expert_out = s.expert_out.topRows(count);
      experts[e].forward(s.expert_in.topRows(count), expert_out, expert, work, lora.expert_at(e, s.expert_rows.data()));
      for (Index i = 0; i < count; ++i) out.row(s.expert_rows[i]) += s.expert_weights[i] * expert_out.row(i);
    }
    for (size_t e = 0; e < shared_experts.size(); ++e) {
      auto expert_out = s.expert_out.topRows(n);
      shared_experts[e].forward(x, expert_out, expert, work, lora.shared_expert_at(static_cast<int64_t>(e)));
      out += expert_out;
    }
  }

  size_t num_parameters() const {
    size_t total = static_cast<size_t>(gate.rows() * gate.cols());
    for (const auto& e : experts) total += e.num_parameters();
    for (const auto& e : shared_experts) total += e.num_parameters();
    return total;
  }
  size_t weight_bytes() const {
    size_t total = gate.bytes();
    for (const auto& e : experts) total += e.weight_bytes();
    for (const auto& e : shared_experts) total += e.weight_bytes();
    return total;
  }

  Weight<T> gate;  // the router [num_experts, hidden]
  std::vector<FeedForward<T>> experts;
  std::vector<FeedForward<T>> shared_experts;

 private:
  // The top_k experts of each row by router probability (ties: the lower index), with weights.
  template <class Router>
  void choose_experts(const Router& router, MoEScratch<T>& s) const {
    const Index n = router.rows(), num_experts = router.cols();
    for (Index r = 0; r < n; ++r) {
      int* chosen = &s.chosen[r * top_k_];
      T* weight = &s.chosen_weight[r * top_k_];
      for (Index s = 0; s < top_k_; ++s) {
        int best = -1;
        for (Index e = 0; e < num_experts; ++e) {
          if (std::find(chosen, chosen + s, static_cast<int>(e)) != chosen + s) continue;
          if (best < 0 || router(r, e) > router(r, best)) best = static_cast<int>(e);
        }
        chosen[s] = best;
        weight[s] = router(r, best);
      }
      if (normalize_) {
        T sum = 0;
        for (Index s = 0; s < top_k_; ++s) sum += weight[s];
        for (Index s = 0; s < top_k_; ++s) weight[s] /= sum + T(1e-20);
      }
    }
  }

  Index top_k_ = 1;
  bool normalize_ = true;
};

}  // namespace minimind
