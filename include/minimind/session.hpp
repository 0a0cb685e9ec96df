#pragma once
// One sequence's state: its KV cache, its position and its scratch buffers. The model is const and
// shared; each concurrent sequence owns a Session. A Session is not safe to use from two threads
// at once.
#include "minimind/activations.hpp"
#include "minimind/config.hpp"
#include "minimind/error.hpp"

#include <string>

namespace minimind {

template <class T>
class Session {
 public:
  // `context`: how many positions the cache holds (at most max_position_embeddings).
  Session(const Config& config, Index context) : cache_(config, context) {
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

 private:
  KVCache<T> cache_;
  Activations<T> act_;
  Index position_ = 0;
};

}  // namespace minimind
