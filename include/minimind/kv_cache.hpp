#pragma once
// One sequence's keys and values, per layer, for every position it has run. Written once per
// position (k after q/k norm and RoPE), read by every later position's attention. Held in blocks
// of positions, which a prompt cache can share between sequences (docs/design-prompt-cache.md).
#include "minimind/config.hpp"
#include "minimind/detail/kernels/ops.hpp"
#include "minimind/lora.hpp"
#include "minimind/tensor.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace minimind {

template <class T>
struct KVCache {
  // Positions per block. A multiple of every target's panel of keys (kernels::kAttentionKeyPanel),
  // so that the tiled attention packs a panel from one block.
  static constexpr Index kBlockPositions = kernels::kAttentionKeyPanel;

  // Per layer, in blocks of kBlockPositions positions: kv head h of block b is the rows
  // [(b * kv_heads + h) * kBlockPositions, +kBlockPositions) of [blocks * kv_heads * kBlockPositions,
  // head_dim], so one head's part of a block is a contiguous [kBlockPositions, head_dim] matrix.
  std::vector<MatrixRM<T>> k, v;
  // The sequence's positions [i * kBlockPositions, (i + 1) * kBlockPositions) are block blocks[i].
  std::vector<int32_t> blocks;
  Index capacity = 0;  // positions it may hold

  KVCache() = default;
  KVCache(const Config& c, Index context) : heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
    k.assign(static_cast<size_t>(c.num_hidden_layers), MatrixRM<T>(0, c.head_dim));
    v = k;
    grow(context);
  }

  // Grows to hold `positions` (no-op if it already does), keeping the cached ones: blocks are
  // added after the last, so no cached row changes its block or its place in it.
  void grow(Index positions) {
    if (positions <= capacity) return;
    const Index have = static_cast<Index>(blocks.size()), need = (positions + kBlockPositions - 1) / kBlockPositions;
    if (need > have) {
      for (auto* layers : {&k, &v}) {
        for (MatrixRM<T>& m : *layers) m.conservativeResize(need * heads_ * kBlockPositions, head_dim_);
      }
      for (Index b = have; b < need; ++b) blocks.push_back(static_cast<int32_t>(b));
    }
    capacity = positions;
  }

  // Stores one position's k and v rows [kv_heads * head_dim] of `layer`.
  template <class Row>
  void write(size_t layer, Index position, const Row& k_row, const Row& v_row) {
    for (Index h = 0; h < heads_; ++h) {
      k[layer].row(row_of(h, position)) = k_row.segment(h * head_dim_, head_dim_);
      v[layer].row(row_of(h, position)) = v_row.segment(h * head_dim_, head_dim_);
    }
  }
  // The cached key (or value) [head_dim] of kv head `head` of `layer` at `position`.
  const T* key(size_t layer, Index head, Index position) const { return k[layer].row(row_of(head, position)).data(); }
  const T* value(size_t layer, Index head, Index position) const { return v[layer].row(row_of(head, position)).data(); }
  // Where attention reads kv head `head` of `layer`.
  kernels::KVBlocks<T> head(size_t layer, Index head) const {
    const Index offset = head * kBlockPositions * head_dim_;
    return {k[layer].data() + offset, v[layer].data() + offset, blocks.data(), kBlockPositions,
            heads_ * kBlockPositions * head_dim_};
  }

 private:
  Index row_of(Index head, Index position) const {
    const Index block = blocks[static_cast<size_t>(position / kBlockPositions)];
    return (block * heads_ + head) * kBlockPositions + position % kBlockPositions;
  }
  Index heads_ = 0, head_dim_ = 0;
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
