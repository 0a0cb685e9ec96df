#pragma once
// One sequence's keys and values, per layer, for every position it has run. Written once per
// position (k after q/k norm and RoPE), read by every later position's attention.
#include "minimind/config.hpp"
#include "minimind/lora.hpp"
#include "minimind/tensor.hpp"

#include <span>
#include <vector>

namespace minimind {

template <class T>
struct KVCache {
  // Per layer, head-major so one kv head's history is a contiguous [positions, head_dim] matrix:
  // [num_key_value_heads * capacity, head_dim].
  std::vector<MatrixRM<T>> k, v;
  Index capacity = 0;

  KVCache() = default;
  KVCache(const Config& c, Index context) : capacity(context), heads_(c.num_key_value_heads) {
    k.assign(static_cast<size_t>(c.num_hidden_layers), MatrixRM<T>::Zero(heads_ * context, c.head_dim));
    v = k;
  }

  // Grows to hold `positions` (no-op if it already does), keeping the cached ones: each head's
  // rows move to the new stride. Allocates and copies, so callers grow in large steps.
  void grow(Index positions) {
    if (positions <= capacity) return;
    for (auto* layers : {&k, &v}) {
      for (MatrixRM<T>& m : *layers) {
        MatrixRM<T> grown = MatrixRM<T>::Zero(heads_ * positions, m.cols());
        for (Index h = 0; h < heads_; ++h) grown.middleRows(h * positions, capacity) = m.middleRows(h * capacity, capacity);
        m.swap(grown);
      }
    }
    capacity = positions;
  }

  // Stores one position's k and v rows [kv_heads * head_dim] of `layer`.
  template <class Row>
  void write(size_t layer, Index position, const Row& k_row, const Row& v_row) {
    const Index head_dim = k[layer].cols(), heads = k_row.size() / head_dim;
    for (Index h = 0; h < heads; ++h) {
      k[layer].row(h * capacity + position) = k_row.segment(h * head_dim, head_dim);
      v[layer].row(h * capacity + position) = v_row.segment(h * head_dim, head_dim);
    }
  }
  // The cached keys (or values) of kv head `head` of `layer` for positions [0, length).
  ConstMatrixMap<T> keys(size_t layer, Index head, Index length) const { return slice(k[layer], head, length); }
  ConstMatrixMap<T> values(size_t layer, Index head, Index length) const { return slice(v[layer], head, length); }

 private:
  ConstMatrixMap<T> slice(const MatrixRM<T>& m, Index head, Index length) const {
    return {m.data() + head * capacity * m.cols(), length, m.cols()};
  }
  Index heads_ = 0;
};

// Where one sequence's rows sit in a forward step that may hold several sequences: rows
// [first_row, first_row + rows) of the step's matrices are its positions [start, start + rows),
// run with the unmerged adapters it names (its session's).
template <class T>
struct SequenceRows {
  KVCache<T>* cache;
  Index first_row, rows, start;
  std::span<const LoraUse> adapters = {};
  Index length() const { return start + rows; }  // positions its last row attends over
};

}  // namespace minimind
