#pragma once
// A look inside one forward pass. MiniMindForCausalLM::forward(session, ids, ..., observer) calls
// these in the order the network computes them, for the positions the pass runs (row i is
// position session.position() + i, as it was before the call). The views are valid only during
// the call. With no observer the forward pass does no extra work and allocates nothing.
#include "minimind/tensor.hpp"

#include <cstdint>
#include <span>

namespace minimind {

template <class T>
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;

  // Attention probabilities cost a copy of every head's [positions x keys] map: asked for, not given.
  virtual bool wants_attention() const { return false; }

  // The embedding rows E[id] [n, hidden] (the residual stream entering block 0).
  virtual void embedding(ConstMatrixMap<T> /*h*/) {}
  // Block `layer`, head `head`: probs [n, keys], row i the softmax over keys [0, keys) of the cache
  // plus this pass; a position's weights past itself (the causal mask) are 0.
  virtual void attention(int64_t /*layer*/, int64_t /*head*/, ConstMatrixMap<T> /*probs*/) {}
  // The residual stream after block `layer`'s attention (x + attention), [n, hidden].
  virtual void residual_after_attention(int64_t /*layer*/, ConstMatrixMap<T> /*x*/) {}
  // An MoE block's routing: for row i, experts[i * top_k + s] with weight weights[i * top_k + s].
  virtual void router(int64_t /*layer*/, std::span<const int> /*experts*/, std::span<const T> /*weights*/,
                      int64_t /*top_k*/) {}
  // The residual stream after block `layer` (after its FFN), [n, hidden].
  virtual void residual_after_ffn(int64_t /*layer*/, ConstMatrixMap<T> /*x*/) {}
  // The final RMSNorm's output, the hidden states the logits are taken from, [n, hidden].
  virtual void final_norm(ConstMatrixMap<T> /*h*/) {}
  // The logits of the rows the caller asked for (all positions, or the last one), [rows, vocab].
  virtual void logits(ConstMatrixMap<T> /*logits*/) {}
};

}  // namespace minimind
