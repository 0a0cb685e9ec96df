#pragma once
// Everything that changes while one sequence runs: the KV cache and the scratch buffers of a
// forward pass. Sized when a session is made (and grown only when a prompt is longer than any
// before), so decoding one token at a time allocates nothing.
#include "minimind/config.hpp"
#include "minimind/kernels/linear.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <vector>

namespace minimind {

template <class T>
struct KVCache {
  // Per layer, k and v of every cached position, head-major so one kv head's history is a
  // contiguous [positions, head_dim] matrix: [num_key_value_heads * capacity, head_dim].
  std::vector<MatrixRM<T>> k, v;
  Index capacity = 0;

  KVCache() = default;
  KVCache(const Config& c, Index context) : capacity(context) {
    k.assign(static_cast<size_t>(c.num_hidden_layers), MatrixRM<T>::Zero(c.num_key_value_heads * context, c.head_dim));
    v = k;
  }
  // The cached keys (or values) of kv head `head` for positions [0, length).
  static ConstMatrixMap<T> head(const MatrixRM<T>& m, Index head, Index capacity, Index length) {
    return {m.data() + head * capacity * m.cols(), length, m.cols()};
  }
  size_t bytes() const {
    size_t total = 0;
    for (const auto& m : k) total += 2 * static_cast<size_t>(m.size()) * sizeof(T);
    return total;
  }
};

// Scratch for a batch of up to `rows` positions attending over up to `context` positions.
template <class T>
struct Activations {
  Index rows = 0;
  MatrixRM<T> x;            // [rows, hidden] the residual stream
  MatrixRM<T> normed;       // [rows, hidden] input of the current sub-layer after its RMSNorm
  MatrixRM<T> sublayer;     // [rows, hidden] output of the current sub-layer before the residual add
  MatrixRM<T> q;            // [rows, heads * head_dim]
  MatrixRM<T> k, v;         // [rows, kv_heads * head_dim]
  MatrixRM<T> attn;         // [rows, heads * head_dim] attention output before o_proj
  MatrixRM<T> scores;       // [threads * query_block, context] attention weights, a block of queries per thread
  MatrixRM<T> cos, sin;     // [rows, head_dim / 2] rotary angles of each position
  MatrixRM<T> gate, up;     // [rows, max FFN width]
  MatrixRM<T> router;       // [rows, experts] MoE router probabilities
  MatrixRM<T> expert_in;    // [rows, hidden] tokens gathered for one expert
  MatrixRM<T> expert_out;   // [rows, hidden]
  std::vector<Index> expert_tokens;   // [rows] which rows the current expert serves
  std::vector<T> expert_weights;      // [rows] their routing weights
  std::vector<int> chosen;            // [rows * experts_per_tok] chosen experts per row
  std::vector<T> chosen_weight;       // [rows * experts_per_tok]
  MatrixRM<T> logits;       // [rows, vocab]
  kernels::Workspace work;  // the thread pool to run on and the kernels' scratch
  static constexpr Index kQueryBlock = 32;  // queries a thread scores at once (a matrix product)
  Index query_block = 1;    // min(rows, kQueryBlock)
  int score_threads = 1;    // threads that scores has room for

  void reserve(const Config& c, Index new_rows, Index context) {
    if (new_rows <= rows && scores.cols() >= context) return;
    rows = std::max(rows, new_rows);
    const Index width = std::max(c.intermediate_size, c.moe_intermediate_size);
    x.resize(rows, c.hidden_size);
    normed.resize(rows, c.hidden_size);
    sublayer.resize(rows, c.hidden_size);
    q.resize(rows, c.num_attention_heads * c.head_dim);
    k.resize(rows, c.num_key_value_heads * c.head_dim);
    v.resize(rows, c.num_key_value_heads * c.head_dim);
    attn.resize(rows, c.num_attention_heads * c.head_dim);
    query_block = std::min(rows, kQueryBlock);
    scores.resize(score_threads * query_block, std::max(context, scores.cols()));
    cos.resize(rows, c.head_dim / 2);
    sin.resize(rows, c.head_dim / 2);
    gate.resize(rows, width);
    up.resize(rows, width);
    if (c.num_experts > 0) {
      router.resize(rows, c.num_experts);
      expert_in.resize(rows, c.hidden_size);
      expert_out.resize(rows, c.hidden_size);
      expert_tokens.resize(static_cast<size_t>(rows));
      expert_weights.resize(static_cast<size_t>(rows));
      chosen.resize(static_cast<size_t>(rows * c.num_experts_per_tok));
      chosen_weight.resize(static_cast<size_t>(rows * c.num_experts_per_tok));
    }
    logits.resize(rows, c.vocab_size);
    const Index widest = std::max({c.hidden_size, c.num_attention_heads * c.head_dim, width});
    work.reserve_q8(1, widest);
  }
  // Room for `threads` threads to work at once (a block of score rows each).
  void reserve_threads(int threads) {
    if (threads <= score_threads) return;
    score_threads = threads;
    scores.resize(score_threads * query_block, scores.cols());
  }
};

}  // namespace minimind
