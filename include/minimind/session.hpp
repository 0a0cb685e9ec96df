#pragma once
// One sequence's state: its KV cache, its position and its scratch buffers. The model is const and
// shared; each concurrent sequence owns a Session. A Session is not safe to use from two threads
// at once, but may move from one thread to another between calls. It works only with models of
// the shape it was made for (its buffers are sized by it); forward refuses any other.
#include "minimind/activations.hpp"
#include "minimind/config.hpp"
#include "minimind/error.hpp"

#include <array>
#include <cstdint>
#include <string>

namespace minimind {

template <class T>
class Session {
 public:
  // `context`: how many positions the cache holds (at most max_position_embeddings).
  Session(const Config& config, Index context) : cache_(config, context), shape_(shape_of(config)) {
    if (context <= 0 || context > config.max_position_embeddings) {
      throw Error("session context " + std::to_string(context) + " must be in [1, max_position_embeddings " +
                  std::to_string(config.max_position_embeddings) + "]");
    }
    act_.reserve(config, 1, context);
  }

  Index position() const { return position_; }  // how many positions are cached
  Index context() const { return cache_.capacity; }
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
  size_t cache_bytes() const { return cache_.bytes(); }

  KVCache<T>& cache() { return cache_; }
  Activations<T>& activations() { return act_; }
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
  Activations<T> act_;
  Index position_ = 0;
  Shape shape_;
};

}  // namespace minimind
