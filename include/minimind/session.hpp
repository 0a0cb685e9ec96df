#pragma once
// One sequence's state: its KV cache, its position and the scratch buffers of its forward passes.
// The model is const and shared; each concurrent sequence owns a Session. A Session is not safe
// to use from two threads at once, but may move from one thread to another between calls. It
// works only with models of the shape it was made for (its buffers are sized by it); forward
// refuses any other.
#include "minimind/attention.hpp"
#include "minimind/config.hpp"
#include "minimind/error.hpp"
#include "minimind/feed_forward.hpp"
#include "minimind/detail/kernels/linear.hpp"
#include "minimind/kv_cache.hpp"
#include "minimind/lora.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace minimind {

// The buffers of a forward step of up to `rows` positions, one per operation that needs one.
// Grown when a step is larger than any before, so decoding one token at a time allocates nothing.
template <class T>
struct ForwardScratch {
  MatrixRM<T> x;         // [rows, hidden] the residual stream
  MatrixRM<T> normed;    // [rows, hidden] the current sub-layer's input after its RMSNorm
  MatrixRM<T> sublayer;  // [rows, hidden] the current sub-layer's output, before the residual add
  MatrixRM<T> logits;    // [rows, vocab]
  AttentionScratch<T> attention;
  FeedForwardScratch<T> mlp;
  MoEScratch<T> moe;
  LoraStep<T> lora;         // A x of the unmerged adapters
  kernels::Workspace work;  // the thread pool to run on and the kernels' own scratch

  void reserve(const Config& c, Index rows, Index context, int threads) {
    if (rows > x.rows()) {
      x.resize(rows, c.hidden_size);
      normed.resize(rows, c.hidden_size);
      sublayer.resize(rows, c.hidden_size);
      logits.resize(rows, c.vocab_size);
      const Index widest = std::max({c.hidden_size, c.num_attention_heads * c.head_dim, c.intermediate_size,
                                     c.moe_intermediate_size});
      work.reserve_inputs(1, widest);
    }
    attention.reserve(c, rows, context, threads);
    mlp.reserve(c, rows);
    moe.reserve(c, rows);
  }
};

template <class T>
class Session {
 public:
  // `context`: how many positions the cache holds (at most max_position_embeddings).
  Session(const Config& config, Index context)
      : cache_(config, context), shape_(shape_of(config)), max_context_(config.max_position_embeddings), config_(config) {
    if (context <= 0 || context > config.max_position_embeddings) {
      throw Error("session context " + std::to_string(context) + " must be in [1, max_position_embeddings " +
                  std::to_string(config.max_position_embeddings) + "]");
    }
    scratch_.reserve(config, 1, context, 1);
  }
  // A session of no positions whose cache takes its blocks from `pool`, shared with other
  // sessions (an Engine's): reserve() takes free blocks from it; whoever shares the pool gives
  // them back.
  Session(const Config& config, KVBlockPool<T>& pool)
      : cache_(pool), shape_(shape_of(config)), max_context_(config.max_position_embeddings), config_(config) {
    scratch_.reserve(config, 1, 1, 1);
  }

  Index position() const { return position_; }  // how many positions are cached
  Index context() const { return cache_.capacity; }  // how many positions the cache holds
  // Grows the cache to hold `context` positions (at most max_position_embeddings), keeping what
  // it holds: a session may start small and grow as its sequence does (minimind-server grows
  // each request's in blocks). Allocates, so not between the tokens of a decode loop that must not.
  void reserve(Index context) {
    if (context > max_context_) {
      throw Error("session context " + std::to_string(context) + " exceeds max_position_embeddings " + std::to_string(max_context_));
    }
    cache_.grow(context);
  }
  Index remaining() const { return cache_.capacity - position_; }
  // Forgets the sequence; the buffers stay allocated.
  void reset() { position_ = 0; }
  // Drops cached positions from `length` on (e.g. to re-run a shared prefix).
  void truncate(Index length) {
    if (length < 0 || length > position_) {
      throw Error("cannot truncate a session at position " + std::to_string(position_) + " to " + std::to_string(length));
    }
    position_ = length;
  }

  // The adapters this sequence runs with, unmerged: the model's matrices stay as loaded and each
  // forward adds scale * B (A x) for this sequence's rows only, so sequences with other adapters
  // (or none) share the model and a batched step. Checked against the model's shape here (an
  // adapter of another base model is refused); the scratch of A x is sized here, not per token.
  // Changing them mid-sequence keeps the cache the old ones made.
  void set_adapters(std::vector<LoraUse> adapters) {
    check_adapters(adapters, config_);
    Index rank = 0;
    for (const LoraUse& use : adapters) rank = std::max(rank, use.adapter->rank());
    scratch_.lora.reserve(1, rank);
    adapters_ = std::move(adapters);
  }
  std::span<const LoraUse> adapters() const { return adapters_; }

  KVCache<T>& cache() { return cache_; }
  ForwardScratch<T>& scratch() { return scratch_; }
  void advance(Index n) { position_ += n; }

  // Throws unless `config` has the shape this session was made for: a session of a smaller model
  // would be read and written past its buffers.
  void check_shape(const Config& config) const {
    if (shape_of(config) != shape_) {
      throw Error("this session was made for a model of another shape (hidden_size " + std::to_string(shape_[1]) + ", " +
                  std::to_string(shape_[2]) + " layers); make one with this model's new_session()");
    }
  }

 private:
  using Shape = std::array<int64_t, 10>;
  static Shape shape_of(const Config& c) {
    return {c.vocab_size,        c.hidden_size, c.num_hidden_layers,     c.num_attention_heads,   c.num_key_value_heads,
            c.head_dim,          c.intermediate_size, c.moe_intermediate_size, c.num_experts, c.num_experts_per_tok};
  }

  KVCache<T> cache_;
  ForwardScratch<T> scratch_;
  Index position_ = 0;
  Shape shape_;
  Index max_context_;
  Config config_;  // what adapters are checked against
  std::vector<LoraUse> adapters_;
};

}  // namespace minimind
