#pragma once
// Which blocks of KV cache hold which token prefixes, so that sequences that start alike share
// those blocks (a prompt cache across requests; docs/design-prompt-cache.md). Only numbers and ids
// live here: a node is one block of some sequence's positions (the block's number in the pool of
// KV blocks, the ids it holds, its parent: the block before it). The caller keeps the rows, copies
// rows where find() says so, and frees the blocks that evict() and insert() hand back.
//
// A full node (block_positions ids) is found by a hash map keyed by a chained hash of its parent's
// key and its ids; a hit is confirmed against the stored parent and ids, so a collision costs a
// miss, never a wrong prefix. A partial node (a sequence's partly filled last block) is found by
// scanning its parent's children for the longest common prefix. Nodes in use by a sequence are
// referenced; unreferenced nodes without children are evicted least recently used first.
#include "minimind/error.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace minimind {

class PrefixIndex {
 public:
  static constexpr int32_t kRoot = -1;  // the parent of a sequence's first block

  // What find() matched of a prompt: `nodes` (full blocks, referenced, to be read as they are)
  // hold positions [0, nodes.size() * block_positions); then, if copy_rows > 0, the first
  // copy_rows rows of node copy_from's block hold the next positions, to be copied into a block
  // of the sequence's own before anything else runs (the sequence writes after them).
  struct Match {
    std::vector<int32_t> nodes;
    int32_t copy_from = kRoot;
    Index copy_rows = 0;
  };

  // `max_nodes`: how many blocks the index may hold (the cache's bound), referenced ones included.
  PrefixIndex(Index block_positions, size_t max_nodes) : block_positions_(block_positions), max_nodes_(max_nodes) {
    if (block_positions < 1) throw Error("prefix index: block_positions must be >= 1");
  }

  Index block_positions() const { return block_positions_; }
  size_t nodes() const { return live_; }
  size_t max_nodes() const { return max_nodes_; }
  bool full() const { return live_ >= max_nodes_; }
  int32_t block(int32_t node) const { return at(node).block; }
  // Positions a match holds.
  Index positions(const Match& m) const { return static_cast<Index>(m.nodes.size()) * block_positions_ + m.copy_rows; }

  // The longest cached prefix of ids[0, limit): full blocks through the hash map, then the best
  // partial match among the last one's children. Takes a reference on every node in `nodes`.
  Match find(std::span<const int32_t> ids, Index limit) {
    limit = std::min<Index>(limit, static_cast<Index>(ids.size()));
    Match m;
    int32_t parent = kRoot;
    Index start = 0;
    for (; start + block_positions_ <= limit; start += block_positions_) {
      const int32_t node = full_child(parent, ids.subspan(static_cast<size_t>(start), static_cast<size_t>(block_positions_)));
      if (node == kRoot) break;
      m.nodes.push_back(node);
      parent = node;
    }
    for (const int32_t child : children_of(parent)) {
      const std::vector<int32_t>& held = at(child).ids;
      const auto rest = ids.subspan(static_cast<size_t>(start), static_cast<size_t>(limit - start));
      const Index common = std::mismatch(held.begin(), held.end(), rest.begin(), rest.end()).first - held.begin();
      if (common > m.copy_rows) m.copy_rows = common, m.copy_from = child;
    }
    for (const int32_t node : m.nodes) reference(node);
    if (m.copy_from != kRoot) touch(m.copy_from);
    return m;
  }

  // A sequence's block `block`, holding `ids` (at most block_positions; fewer for its last, partly
  // filled block, which nobody may write afterwards) after node `parent`, goes into the index.
  // Returns the node that now holds these ids, referenced by the caller: the block's own new node,
  // or an equal node already there (then the caller reads that node's block and frees its own,
  // which `adopted` says). Returns kRoot when the index is full() (the caller evict()s first, or
  // keeps its block unshared).
  int32_t insert(int32_t parent, std::span<const int32_t> ids, int32_t block, bool& adopted) {
    if (ids.empty() || static_cast<Index>(ids.size()) > block_positions_) {
      throw Error("prefix index: a block holds 1 to " + std::to_string(block_positions_) + " ids, not " + std::to_string(ids.size()));
    }
    adopted = false;
    const bool whole = static_cast<Index>(ids.size()) == block_positions_;
    const int32_t same = whole ? full_child(parent, ids) : partial_child(parent, ids);
    if (same != kRoot) {
      reference(same);
      adopted = true;
      return same;
    }
    if (full()) return kRoot;
    const int32_t node = new_node();
    Node& n = nodes_[static_cast<size_t>(node)];
    n.parent = parent;
    n.block = block;
    n.ids.assign(ids.begin(), ids.end());
    n.key = key_of(parent, ids);
    n.refs = 1;
    n.used = ++clock_;
    n.children.clear();
    if (whole) by_key_.emplace(n.key, node);
    if (parent != kRoot) set_evictable(parent, false);
    children_of(parent).push_back(node);
    return node;
  }

  // The caller no longer reads `node`'s block: one reference fewer; it counts as used now.
  void release(int32_t node) {
    Node& n = at(node);
    if (n.refs <= 0) throw Error("prefix index: node " + std::to_string(node) + " released more often than referenced");
    set_evictable(node, false);
    --n.refs;
    n.used = ++clock_;
    set_evictable(node, true);
  }

  // Drops the least recently used node that nobody references and that has no children, and
  // returns its block for the caller to free; kRoot when there is none.
  int32_t evict() {
    if (evictable_.empty()) return kRoot;
    const int32_t node = evictable_.begin()->second;
    const int32_t block = at(node).block;
    remove(node);
    return block;
  }

 private:
  struct Node {
    int32_t parent = kRoot, block = kRoot;
    std::vector<int32_t> ids;
    uint64_t key = 0;
    int refs = 0;  // -1: a free slot
    uint64_t used = 0;
    std::vector<int32_t> children;
  };

  Node& at(int32_t node) { return nodes_.at(static_cast<size_t>(node)); }
  const Node& at(int32_t node) const { return nodes_.at(static_cast<size_t>(node)); }
  std::vector<int32_t>& children_of(int32_t node) { return node == kRoot ? roots_ : at(node).children; }

  // The chained hash: a full node's key depends on every id before it through its parent's key.
  uint64_t key_of(int32_t parent, std::span<const int32_t> ids) const {
    uint64_t h = parent == kRoot ? 0x9e3779b97f4a7c15ull : at(parent).key;
    for (const int32_t id : ids) {
      h ^= static_cast<uint32_t>(id);
      h *= 0x100000001b3ull;  // FNV-1a's prime, over 64 bits
      h ^= h >> 29;
    }
    return h;
  }

  int32_t full_child(int32_t parent, std::span<const int32_t> ids) const {
    const auto [first, last] = by_key_.equal_range(key_of(parent, ids));
    for (auto it = first; it != last; ++it) {
      const Node& n = at(it->second);
      if (n.parent == parent && std::equal(n.ids.begin(), n.ids.end(), ids.begin(), ids.end())) return it->second;
    }
    return kRoot;
  }
  int32_t partial_child(int32_t parent, std::span<const int32_t> ids) {
    for (const int32_t child : children_of(parent)) {
      const Node& n = at(child);
      if (std::equal(n.ids.begin(), n.ids.end(), ids.begin(), ids.end())) return child;
    }
    return kRoot;
  }

  void reference(int32_t node) {
    set_evictable(node, false);
    ++at(node).refs;
  }
  void touch(int32_t node) {
    set_evictable(node, false);
    at(node).used = ++clock_;
    set_evictable(node, true);
  }
  // Adds (if it qualifies) or removes `node` from the eviction order.
  void set_evictable(int32_t node, bool add) {
    const Node& n = at(node);
    if (!add) evictable_.erase({n.used, node});
    else if (n.refs == 0 && n.children.empty()) evictable_.insert({n.used, node});
  }

  int32_t new_node() {
    ++live_;
    if (!free_slots_.empty()) {
      const int32_t node = free_slots_.back();
      free_slots_.pop_back();
      return node;
    }
    nodes_.emplace_back();
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  void remove(int32_t node) {
    Node& n = at(node);
    set_evictable(node, false);
    if (static_cast<Index>(n.ids.size()) == block_positions_) {
      const auto [first, last] = by_key_.equal_range(n.key);
      for (auto it = first; it != last; ++it) {
        if (it->second == node) {
          by_key_.erase(it);
          break;
        }
      }
    }
    std::erase(children_of(n.parent), node);
    if (n.parent != kRoot) set_evictable(n.parent, true);
    n.refs = -1;
    n.ids.clear();
    free_slots_.push_back(node);
    --live_;
  }

  Index block_positions_;
  size_t max_nodes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_slots_, roots_;
  size_t live_ = 0;
  uint64_t clock_ = 0;
  std::unordered_multimap<uint64_t, int32_t> by_key_;
  std::set<std::pair<uint64_t, int32_t>> evictable_;  // (last use, node)
};

}  // namespace minimind
