#pragma once
// Causal grouped-query self-attention with a KV cache. Query head h reads kv head
// h / (num_attention_heads / num_key_value_heads). In minimind-3, q and k get a per-head RMSNorm
// (q_norm, k_norm) before RoPE; the cache stores k after both, so cached keys are never touched again.
#include "minimind/activations.hpp"
#include "minimind/config.hpp"
#include "minimind/kernels/linear.hpp"
#include "minimind/rms_norm.hpp"
#include "minimind/rope.hpp"
#include "minimind/tensor.hpp"
#include "minimind/weights.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <string>

namespace minimind {

template <class T>
class Attention {
 public:
  Attention() = default;
  Attention(const WeightLoader<T>& w, const std::string& prefix, const Config& c)
      : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
    const std::string q_dims = "num_attention_heads " + std::to_string(heads_) + " x head_dim " + std::to_string(head_dim_) +
                               ", hidden_size " + std::to_string(c.hidden_size);
    const std::string kv_dims = "num_key_value_heads " + std::to_string(kv_heads_) + " x head_dim " +
                                std::to_string(head_dim_) + ", hidden_size " + std::to_string(c.hidden_size);
    q_proj = w.matrix(prefix + ".q_proj.weight", heads_ * head_dim_, c.hidden_size, q_dims);
    k_proj = w.matrix(prefix + ".k_proj.weight", kv_heads_ * head_dim_, c.hidden_size, kv_dims);
    v_proj = w.matrix(prefix + ".v_proj.weight", kv_heads_ * head_dim_, c.hidden_size, kv_dims);
    o_proj = w.matrix(prefix + ".o_proj.weight", c.hidden_size, heads_ * head_dim_, q_dims);
    if (c.use_qk_norm) {
      const std::string dims = "head_dim " + std::to_string(head_dim_);
      q_norm = RMSNorm<T>(w.vector(prefix + ".q_norm.weight", head_dim_, dims), c.rms_norm_eps);
      k_norm = RMSNorm<T>(w.vector(prefix + ".k_norm.weight", head_dim_, dims), c.rms_norm_eps);
    }
  }

  // Attends the n positions [start, start + n) whose normalised inputs are x [n, hidden] over the
  // cache plus themselves; writes their k and v into the cache; out [n, hidden].
  // act.cos / act.sin must hold the rotary angles of those positions.
  template <class In, class Out>
  void forward(const In& x, Index start, MatrixRM<T>& cache_k, MatrixRM<T>& cache_v, Index capacity,
               const RotaryEmbedding<T>& rope, Out&& out, Activations<T>& act) const {
    const Index n = x.rows(), length = start + n, group = heads_ / kv_heads_;
    auto q = act.q.topRows(n);
    auto k = act.k.topRows(n);
    auto v = act.v.topRows(n);
    // q = x q_proj^T, k = x k_proj^T, v = x v_proj^T
    kernels::linear_each(x, act.work, std::tie(q_proj, q), std::tie(k_proj, k), std::tie(v_proj, v));
    // Per position (split across the pool for a prompt): q/k norm, rotation, into the cache.
    act.work.parallel_for(n, 1, [&](Index first, Index last) {
      for (Index i = first; i < last; ++i) {
        if (q_norm) {
          q_norm->forward(&q(i, 0), &q(i, 0), heads_);
          k_norm->forward(&k(i, 0), &k(i, 0), kv_heads_);
        }
        rope.rotate(&q(i, 0), heads_, &act.cos(i, 0), &act.sin(i, 0));
        rope.rotate(&k(i, 0), kv_heads_, &act.cos(i, 0), &act.sin(i, 0));
        for (Index h = 0; h < kv_heads_; ++h) {
          cache_k.row(h * capacity + start + i) = k.row(i).segment(h * head_dim_, head_dim_);
          cache_v.row(h * capacity + start + i) = v.row(i).segment(h * head_dim_, head_dim_);
        }
      }
    });

    // Each head on its own, in blocks of queries: the scores of the block against the keys its
    // last query sees (one matrix product), a causal softmax per row (the keys a row may not see
    // get weight 0), and the weighted sum of the values (another). Heads are split across the
    // thread pool; each thread keeps a block of score rows (act.scores rows t * query_block...).
    const T scale = T(1) / std::sqrt(static_cast<T>(head_dim_));
    act.work.parallel_for_indexed(heads_, 1, [&](Index first_head, Index last_head, int thread) {
      for (Index h = first_head; h < last_head; ++h) {
        const auto keys = KVCache<T>::head(cache_k, h / group, capacity, length);
        const auto values = KVCache<T>::head(cache_v, h / group, capacity, length);
        for (Index i0 = 0; i0 < n; i0 += act.query_block) {
          const Index m = std::min(act.query_block, n - i0);
          const Index reach = start + i0 + m;  // the block's last query sees [0, reach)
          auto scores = act.scores.block(thread * act.query_block, 0, m, reach);
          scores.noalias() = q.block(i0, h * head_dim_, m, head_dim_) * keys.topRows(reach).transpose();
          for (Index i = 0; i < m; ++i) {
            const Index visible = start + i0 + i + 1;  // causal: position start + i0 + i sees [0, visible)
            auto seen = scores.row(i).head(visible);
            seen = ((seen.array() - seen.maxCoeff()) * scale).exp();
            seen /= seen.sum();
            scores.row(i).tail(reach - visible).setZero();
          }
          act.attn.block(i0, h * head_dim_, m, head_dim_).noalias() = scores * values.topRows(reach);
        }
      }
    });
    kernels::linear(act.attn.topRows(n), o_proj, out, act.work);
  }

  size_t num_parameters() const {
    size_t total = static_cast<size_t>(q_proj.rows() * q_proj.cols() + k_proj.rows() * k_proj.cols() +
                                       v_proj.rows() * v_proj.cols() + o_proj.rows() * o_proj.cols());
    if (q_norm) total += static_cast<size_t>(q_norm->dim() + k_norm->dim());
    return total;
  }

  size_t weight_bytes() const {
    size_t total = q_proj.bytes() + k_proj.bytes() + v_proj.bytes() + o_proj.bytes();
    if (q_norm) total += q_norm->weight().bytes() + k_norm->weight().bytes();
    return total;
  }

  Weight<T> q_proj;  // [heads * head_dim, hidden]
  Weight<T> k_proj;  // [kv_heads * head_dim, hidden]
  Weight<T> v_proj;  // [kv_heads * head_dim, hidden]
  Weight<T> o_proj;  // [hidden, heads * head_dim]
  std::optional<RMSNorm<T>> q_norm, k_norm;  // [head_dim] each, minimind-3 only

 private:
  Index heads_ = 0, kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace minimind
