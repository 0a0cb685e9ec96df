#pragma once
// One sequence's keys and values, per layer, for every position it has run. Written once per
// position (k after q/k norm and RoPE), read by every later position's attention. Held in blocks
// of positions, which a prompt cache can share between sequences (docs/design-prompt-cache.md).
#include "minimind/config.hpp"
#include "minimind/error.hpp"
#include "minimind/detail/kernels/ops.hpp"
#include "minimind/lora.hpp"
#include "minimind/tensor.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minimind {

// The storage of KV blocks, for every layer and kv head: per layer, keys and values are each a
// matrix [blocks * kv_heads * kBlockPositions, head_dim], where kv head h of block b is the rows
// [(b * kv_heads + h) * kBlockPositions, +kBlockPositions), so one head's part of a block is a
// contiguous [kBlockPositions, head_dim] matrix. A block is named by its number, which is all a
// sequence's block table holds, so sequences may share blocks (a prompt cache,
// docs/design-prompt-cache.md). A pool shared by several sequences is made with all its blocks
// at once and never grows: the storage is allocated, not written, so the memory a process uses
// is the blocks it has written.
template <class T>
class KVBlockPool {
 public:
  // Positions per block. A multiple of every target's panel of keys (kernels::kAttentionKeyPanel),
  // so that the tiled attention packs a panel from one block.
  static constexpr Index kBlockPositions = kernels::kAttentionKeyPanel;

  // Bytes one block of a model of shape `c` holds (keys and values of every layer).
  static size_t block_bytes(const Config& c) {
    return 2 * sizeof(T) * static_cast<size_t>(c.num_hidden_layers * c.num_key_value_heads * c.head_dim * kBlockPositions);
  }

  // Storage for `blocks` blocks, all free.
  KVBlockPool(const Config& c, Index blocks) : heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
    k.assign(static_cast<size_t>(c.num_hidden_layers), MatrixRM<T>(0, c.head_dim));
    v = k;
    grow(blocks);
  }

  Index blocks() const { return blocks_; }
  size_t free_blocks() const { return free_.size(); }
  Index heads() const { return heads_; }
  Index head_dim() const { return head_dim_; }

  // Adds `more` free blocks. The storage moves (keeping every block's rows), so only while no
  // step reads the pool.
  void grow(Index more) {
    if (more <= 0) return;
    for (auto* layers : {&k, &v}) {
      for (MatrixRM<T>& m : *layers) m.conservativeResize((blocks_ + more) * heads_ * kBlockPositions, head_dim_);
    }
    // Lowest numbers first out: a sequence of a private pool gets blocks 0, 1, 2, ...
    for (Index b = blocks_ + more - 1; b >= blocks_; --b) free_.push_back(static_cast<int32_t>(b));
    blocks_ += more;
  }

  int32_t allocate() {
    if (free_.empty()) throw Error("KV block pool: all " + std::to_string(blocks_) + " blocks are in use");
    const int32_t block = free_.back();
    free_.pop_back();
    return block;
  }
  void free(int32_t block) { free_.push_back(block); }

  // Copies positions [0, rows) of block `from` into block `to`, every layer and head.
  void copy_rows(int32_t from, int32_t to, Index rows) {
    for (auto* layers : {&k, &v}) {
      for (MatrixRM<T>& m : *layers) {
        for (Index h = 0; h < heads_; ++h) m.middleRows(first_row(to, h), rows) = m.middleRows(first_row(from, h), rows);
      }
    }
  }

  // The row of kv head `head`'s position `offset` (< kBlockPositions) of block `block`.
  Index row(int32_t block, Index head, Index offset) const { return first_row(block, head) + offset; }

  std::vector<MatrixRM<T>> k, v;  // per layer

 private:
  Index first_row(int32_t block, Index head) const { return (block * heads_ + head) * kBlockPositions; }

  Index heads_ = 0, head_dim_ = 0, blocks_ = 0;
  std::vector<int32_t> free_;
};

// One sequence's keys and values: its block table over a pool of blocks, its own (grown as the
// sequence needs) or one shared with other sequences (whose owner gives blocks back; the cache
// holds numbers only).
template <class T>
struct KVCache {
  static constexpr Index kBlockPositions = KVBlockPool<T>::kBlockPositions;

  // The sequence's positions [i * kBlockPositions, (i + 1) * kBlockPositions) are block blocks[i].
  std::vector<int32_t> blocks;
  Index capacity = 0;  // positions it may hold

  KVCache() = default;
  // A cache with a pool of its own, holding `context` positions.
  KVCache(const Config& c, Index context) : own_(std::make_unique<KVBlockPool<T>>(c, 0)), pool_(own_.get()) { grow(context); }
  // A cache of no positions whose blocks come from `pool`, shared.
  explicit KVCache(KVBlockPool<T>& pool) : pool_(&pool) {}

  // Grows to hold `positions` (no-op if it already does), keeping the cached ones: blocks are
  // added after the last, so no cached row changes its block or its place in it. A shared pool
  // must have the free blocks.
  void grow(Index positions) {
    if (positions <= capacity) return;
    const Index need = (positions + kBlockPositions - 1) / kBlockPositions;
    if (own_) own_->grow(need - static_cast<Index>(blocks.size()));
    while (static_cast<Index>(blocks.size()) < need) blocks.push_back(pool_->allocate());
    capacity = positions;
  }

  // Stores one position's k and v rows [kv_heads * head_dim] of `layer`.
  template <class Row>
  void write(size_t layer, Index position, const Row& k_row, const Row& v_row) {
    const Index d = pool_->head_dim();
    for (Index h = 0; h < pool_->heads(); ++h) {
      pool_->k[layer].row(row_of(h, position)) = k_row.segment(h * d, d);
      pool_->v[layer].row(row_of(h, position)) = v_row.segment(h * d, d);
    }
  }
  // The cached key (or value) [head_dim] of kv head `head` of `layer` at `position`.
  const T* key(size_t layer, Index head, Index position) const { return pool_->k[layer].row(row_of(head, position)).data(); }
  const T* value(size_t layer, Index head, Index position) const { return pool_->v[layer].row(row_of(head, position)).data(); }
  // Where attention reads kv head `head` of `layer`.
  kernels::KVBlocks<T> head(size_t layer, Index head) const {
    const Index offset = pool_->row(0, head, 0) * pool_->head_dim();
    return {pool_->k[layer].data() + offset, pool_->v[layer].data() + offset, blocks.data(), kBlockPositions,
            pool_->heads() * kBlockPositions * pool_->head_dim()};
  }

  KVBlockPool<T>& pool() { return *pool_; }

 private:
  Index row_of(Index head, Index position) const {
    return pool_->row(blocks[static_cast<size_t>(position / kBlockPositions)], head, position % kBlockPositions);
  }
  std::unique_ptr<KVBlockPool<T>> own_;
  KVBlockPool<T>* pool_ = nullptr;
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
