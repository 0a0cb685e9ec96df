#pragma once
// Causal grouped-query self-attention with a KV cache. Query head h reads kv head
// h / (num_attention_heads / num_key_value_heads). In minimind-3, q and k get a per-head RMSNorm
// (q_norm, k_norm) before RoPE; the cache stores k after both, so cached keys are never touched again.
// The steps are separate calls so that the model's forward recipe shows them in order:
// project (q, k, v) -> rotate_and_cache (q/k norm, RoPE, cache write) -> attend -> o_proj.
// A step's rows may belong to several sequences (a batch); only attend tells them apart.
#include "minimind/config.hpp"
#include "minimind/detail/kernels/linear.hpp"
#include "minimind/detail/line_aligned.hpp"
#include "minimind/kv_cache.hpp"
#include "minimind/lora.hpp"
#include "minimind/rms_norm.hpp"
#include "minimind/rope.hpp"
#include "minimind/tensor.hpp"
#include "minimind/weights.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <tuple>

namespace minimind {

// The attention's buffers for a step of up to `rows` positions over up to `context` keys.
template <class T>
struct AttentionScratch {
  static constexpr Index kQueryBlock = 32;  // queries a thread scores at once (one matrix product)
  MatrixRM<T> q;         // [rows, heads * head_dim]
  MatrixRM<T> k, v;      // [rows, kv_heads * head_dim]
  MatrixRM<T> cos, sin;  // [rows, head_dim / 2] rotary angles of each row's position
  MatrixRM<T> out;       // [rows, heads * head_dim] the heads' weighted values, before o_proj
  MatrixRM<T> scores;    // [threads * group * query_block, context] per thread a block of score rows per head of a group
  MatrixRM<T> probs;     // [heads * rows, keys] kept for an observer only
  LineVector<T> panels;  // per thread: kernels::attention_panel_floats(head_dim), the tiles' packed keys and values
  Index query_block = 1;

  void reserve(const Config& c, Index rows, Index context, int threads) {
    if (rows > q.rows()) {
      q.resize(rows, c.num_attention_heads * c.head_dim);
      k.resize(rows, c.num_key_value_heads * c.head_dim);
      v.resize(rows, c.num_key_value_heads * c.head_dim);
      cos.resize(rows, c.head_dim / 2);
      sin.resize(rows, c.head_dim / 2);
      out.resize(rows, c.num_attention_heads * c.head_dim);
      query_block = std::min(rows, kQueryBlock);
    }
    const Index score_rows = threads * c.num_attention_heads / c.num_key_value_heads * query_block;
    if (score_rows > scores.rows() || context > scores.cols()) {
      scores.resize(std::max(score_rows, scores.rows()), std::max(context, scores.cols()));
    }
    const auto panel_floats = static_cast<size_t>(threads * kernels::attention_panel_floats(c.head_dim));
    if (rows > 1 && panels.size() < panel_floats) panels.resize(panel_floats);
  }
};

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

  // q = x q_proj^T, k = x k_proj^T, v = x v_proj^T for the step's n rows x [n, hidden], plus
  // the unmerged adapters' B A x of each sequence that runs some.
  template <class In>
  void project(const In& x, AttentionScratch<T>& s, kernels::Workspace& work, const LoraAt<T>& lora = {}) const {
    const Index n = x.rows();
    auto q = s.q.topRows(n);
    auto k = s.k.topRows(n);
    auto v = s.v.topRows(n);
    kernels::linear_each(x, work, std::tie(q_proj, q), std::tie(k_proj, k), std::tie(v_proj, v));
    lora.add(LoraSlot::Q, x, q);
    lora.add(LoraSlot::K, x, k);
    lora.add(LoraSlot::V, x, v);
  }

  // Per row: q/k norm (minimind-3), RoPE at the row's angles (s.cos, s.sin), then k and v into its
  // sequence's cache at its position. Split across the pool by rows for a prompt.
  void rotate_and_cache(std::span<const SequenceRows<T>> seqs, size_t layer, const RotaryEmbedding<T>& rope,
                        AttentionScratch<T>& s, kernels::Workspace& work) const {
    for (const SequenceRows<T>& seq : seqs) {
      work.parallel_for(seq.rows, 1, [&](Index first, Index last) {
        for (Index i = seq.first_row + first; i < seq.first_row + last; ++i) {
          if (q_norm) {
            q_norm->forward(&s.q(i, 0), &s.q(i, 0), heads_);
            k_norm->forward(&s.k(i, 0), &s.k(i, 0), kv_heads_);
          }
          rope.rotate(&s.q(i, 0), heads_, &s.cos(i, 0), &s.sin(i, 0));
          rope.rotate(&s.k(i, 0), kv_heads_, &s.cos(i, 0), &s.sin(i, 0));
          seq.cache->write(layer, seq.start + i - seq.first_row, s.k.row(i), s.v.row(i));
        }
      });
    }
  }

  // s.out = softmax(q k^T / sqrt(head_dim)) v for every head of every sequence, each row over its
  // own sequence's cached keys up to its own position. The query heads that share a kv head go
  // together, a block of queries at a time, through kernels::attend_heads (ops.hpp): scores
  // against the keys, a causal softmax per row (keys a row may not see get weight 0), the
  // weighted sum of the values; each key and value is read once for the group. The (sequence,
  // query block, kv head) triples are split across the pool. With keep_probs (one sequence only) the
  // probabilities are also left in s.probs [heads * rows, length] for an observer.
  void attend(std::span<const SequenceRows<T>> seqs, size_t layer, AttentionScratch<T>& s, kernels::Workspace& work,
              bool keep_probs = false) const {
    const Index group = heads_ / kv_heads_;
    const T scale = T(1) / std::sqrt(static_cast<T>(head_dim_));
    if (keep_probs) s.probs.setZero(heads_ * seqs[0].rows, seqs[0].length());
    Index blocks = 0;  // of queries, in the longest sequence of the step
    for (const SequenceRows<T>& seq : seqs) blocks = std::max(blocks, (seq.rows + s.query_block - 1) / s.query_block);
    const Index per_seq = kv_heads_ * blocks;
    const Index tasks = static_cast<Index>(seqs.size()) * per_seq;
    work.parallel_for_indexed(tasks, 1, [&](Index first_task, Index last_task, int thread) {
      for (Index task = first_task; task < last_task; ++task) {
        const SequenceRows<T>& seq = seqs[static_cast<size_t>(task / per_seq)];
        const Index kv = task % kv_heads_, h0 = kv * group, i0 = task % per_seq / kv_heads_ * s.query_block;
        if (i0 >= seq.rows) continue;  // a shorter sequence than the longest
        const Index m = std::min(s.query_block, seq.rows - i0);
        const Index reach = seq.start + i0 + m;  // the block's last query sees [0, reach)
        auto scores = s.scores.block(thread * group * s.query_block, 0, group * m, reach);
        work.attend_heads(kernels::HeadAttention<T>{
            .q = &s.q(seq.first_row + i0, h0 * head_dim_),
            .q_stride = s.q.outerStride(),
            .m = m,
            .heads = group,
            .first_visible = seq.start + i0 + 1,  // causal: row i sees positions [0, start + i0 + i + 1)
            .kv = seq.cache->head(layer, kv),
            .head_dim = head_dim_,
            .scale = scale,
            .scores = scores.data(),
            .scores_stride = scores.outerStride(),
            .out = &s.out(seq.first_row + i0, h0 * head_dim_),
            .out_stride = s.out.outerStride(),
            .panels = s.panels.empty() ? nullptr : s.panels.data() + thread * kernels::attention_panel_floats(head_dim_),
        });
        if (keep_probs) {
          for (Index g = 0; g < group; ++g) s.probs.block((h0 + g) * seq.rows + i0, 0, m, reach) = scores.middleRows(g * m, m);
        }
      }
    });
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
