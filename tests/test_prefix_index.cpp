// PrefixIndex: which blocks hold which token prefixes, on blocks of 4 positions.
#include <doctest/doctest.h>
#include <minimind/prefix_index.hpp>

#include <cstdint>
#include <vector>

using namespace minimind;

namespace {

constexpr int32_t kRoot = PrefixIndex::kRoot;

// Puts a sequence's ids into the index as its blocks (numbered first_block, first_block + 1, ...)
// and releases them, as a request that ended does; returns the nodes.
std::vector<int32_t> add_sequence(PrefixIndex& index, const std::vector<int32_t>& ids, int32_t first_block) {
  std::vector<int32_t> nodes;
  int32_t parent = kRoot;
  for (size_t start = 0; start < ids.size(); start += 4) {
    const size_t n = std::min<size_t>(4, ids.size() - start);
    bool adopted = true;
    parent = index.insert(parent, std::span<const int32_t>(ids).subspan(start, n), first_block + static_cast<int32_t>(start / 4), adopted);
    REQUIRE(parent != kRoot);
    CHECK_FALSE(adopted);
    nodes.push_back(parent);
  }
  for (const int32_t node : nodes) index.release(node);
  return nodes;
}

void release(PrefixIndex& index, const PrefixIndex::Match& m) {
  for (const int32_t node : m.nodes) index.release(node);
}

// What find() gives for ids[0, limit): the shared nodes, then the node copied from and its rows.
void check_find(PrefixIndex& index, const std::vector<int32_t>& ids, Index limit, const std::vector<int32_t>& nodes,
                int32_t copy_from, Index copy_rows) {
  const PrefixIndex::Match m = index.find(ids, limit);
  CHECK(m.nodes == nodes);
  CHECK(m.copy_from == copy_from);
  CHECK(m.copy_rows == copy_rows);
  CHECK(index.positions(m) == static_cast<Index>(nodes.size()) * index.block_positions() + copy_rows);
  release(index, m);
}

}  // namespace

TEST_CASE("a prompt finds the longest cached prefix: 0 blocks, 1 block, part of a block, the whole prompt") {
  PrefixIndex index(4, 100);
  const std::vector<int32_t> cached = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<int32_t> nodes = add_sequence(index, cached, 20);  // blocks 20, 21 full; 22 holds 9, 10
  REQUIRE(nodes.size() == 3);
  CHECK(index.nodes() == 3);
  CHECK(index.block(nodes[2]) == 22);

  SUBCASE("nothing shared") { check_find(index, {2, 3, 4, 5, 6}, 4, {}, kRoot, 0); }
  SUBCASE("one block, then a different id") { check_find(index, {1, 2, 3, 4, 99, 6, 7, 8, 9}, 8, {nodes[0]}, kRoot, 0); }
  SUBCASE("a block and part of the next: its first rows are copied") {
    check_find(index, {1, 2, 3, 4, 5, 6, 42, 42}, 7, {nodes[0]}, nodes[1], 2);
  }
  SUBCASE("the whole cached sequence and more: the partly filled last block is copied") {
    check_find(index, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 10, {nodes[0], nodes[1]}, nodes[2], 2);
  }
  SUBCASE("the limit (a prompt's last position always runs) cuts a full block to a copy") {
    check_find(index, {1, 2, 3, 4, 5, 6, 7, 8}, 7, {nodes[0]}, nodes[1], 3);
  }
  SUBCASE("a block's ids match only after the same parent") {
    check_find(index, {5, 6, 7, 8, 9}, 5, {}, kRoot, 0);
    check_find(index, {0, 2, 3, 4, 5, 6, 7, 8, 9}, 8, {}, kRoot, 0);
  }
}

TEST_CASE("an equal block is adopted, not added twice") {
  PrefixIndex index(4, 100);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> nodes = add_sequence(index, ids, 0);
  bool adopted = false;
  CHECK(index.insert(kRoot, std::span<const int32_t>(ids).first(4), 7, adopted) == nodes[0]);
  CHECK(adopted);
  CHECK(index.insert(nodes[0], std::span<const int32_t>(ids).subspan(4), 8, adopted) == nodes[1]);
  CHECK(adopted);
  CHECK(index.block(nodes[0]) == 0);
  CHECK(index.nodes() == 2);
  // A longer partial block after the same parent is a node of its own beside the shorter one.
  const std::vector<int32_t> longer = {5, 6, 7};
  const int32_t node = index.insert(nodes[0], longer, 9, adopted);
  CHECK_FALSE(adopted);
  CHECK(node != nodes[1]);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto m = index.find(prompt, 8);
  CHECK(m.copy_from == node);
  CHECK(m.copy_rows == 3);
}

TEST_CASE("eviction: least recently used first, never a referenced block or one with children") {
  PrefixIndex index(4, 4);
  add_sequence(index, {1, 2, 3, 4, 5, 6, 7, 8}, 10);  // blocks 10, 11
  const std::vector<int32_t> b = add_sequence(index, {9, 9, 9, 9}, 12);              // block 12
  // a's first block has a child: its leaf (block 11) goes first, then a's first block, then b.
  const std::vector<int32_t> prompt = {9, 9, 9, 9, 1};
  auto m = index.find(prompt, 4);  // b is referenced now
  CHECK(m.nodes == std::vector<int32_t>{b[0]});
  CHECK(index.evict() == 11);
  CHECK(index.evict() == 10);
  CHECK(index.evict() == kRoot);  // b is in use
  release(index, m);
  CHECK(index.evict() == 12);
  CHECK(index.nodes() == 0);
  CHECK(index.find(prompt, 4).nodes.empty());

  // Using a block makes it the most recent: c is evicted before d.
  add_sequence(index, {1, 1, 1, 1}, 20);
  add_sequence(index, {2, 2, 2, 2}, 21);
  const std::vector<int32_t> use_c = {1, 1, 1, 1, 3};
  release(index, index.find(use_c, 4));
  CHECK(index.evict() == 21);
  CHECK(index.evict() == 20);
}

TEST_CASE("the index holds at most its bound, and refuses what it cannot hold") {
  PrefixIndex index(4, 2);
  add_sequence(index, {1, 2, 3, 4, 5}, 0);
  CHECK(index.full());
  bool adopted = false;
  const std::vector<int32_t> ids = {7, 7};
  CHECK(index.insert(kRoot, ids, 5, adopted) == kRoot);
  CHECK(index.evict() == 1);
  CHECK_FALSE(index.full());
  CHECK(index.insert(kRoot, ids, 5, adopted) != kRoot);

  const std::vector<int32_t> too_many = {1, 2, 3, 4, 5};
  CHECK_THROWS_WITH_AS(index.insert(kRoot, too_many, 6, adopted), "prefix index: a block holds 1 to 4 ids, not 5", Error);
  PrefixIndex other(4, 2);
  const std::vector<int32_t> one = {1};
  const int32_t node = other.insert(kRoot, one, 0, adopted);
  other.release(node);
  CHECK_THROWS_WITH_AS(other.release(node), "prefix index: node 0 released more often than referenced", Error);
}
