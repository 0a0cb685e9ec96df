#pragma once
// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}), reproducing the
// tokenizers library's algorithm step for step so that ids match it exactly:
// - a word (already in the vocabulary's spelling, e.g. byte-level "Ġhello") starts as one symbol a
//   character; characters missing from the vocabulary become unk_token (fused when fuse_unk) or,
//   with no unk_token, are dropped, as Hugging Face does;
// - merges are applied lowest rank first, leftmost first among equal ranks, via a priority queue
//   whose stale entries are recognised the way Hugging Face recognises them;
// - with ignore_merges, a word that is itself in the vocabulary is taken whole before merging;
// - merges may be stored as "a b" strings or ["a", "b"] pairs; a later duplicate of a pair
//   replaces the earlier one's rank (Hugging Face collects them into a hash map).
//
// Thread safety: a const BpeModel may be used from many threads at once. Its per-word cache is
// split into shards, each behind its own mutex, so concurrent encoders rarely wait on each other.
// Copying a model gives the copy a fresh, empty cache.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "minimind/detail/tokenizer/json_fields.hpp"
#include "minimind/detail/tokenizer/unicode.hpp"

namespace minimind::bpe {

// std::string keys looked up by std::string_view without building a string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// (left id, right id) -> (rank, merged id), open addressing: this lookup is the inner loop.
class MergeTable {
 public:
  struct Entry {
    std::uint64_t key = kEmpty;
    std::uint32_t rank = 0;
    std::int32_t merged_id = 0;
  };

  void reserve(std::size_t merges) {
    std::size_t capacity = 16;
    while (capacity < merges * 2) capacity *= 2;
    entries_.assign(capacity, Entry{});
    mask_ = capacity - 1;
  }

  // A pair seen again takes the new rank, as a later insert into Hugging Face's map does.
  void insert(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t merged_id) {
    Entry& entry = entries_[slot_index(pair_key(left, right))];
    if (entry.key == kEmpty) ++size_;
    entry = {pair_key(left, right), rank, merged_id};
  }

  const Entry* find(std::int32_t left, std::int32_t right) const {
    const Entry& entry = entries_[slot_index(pair_key(left, right))];
    return entry.key == kEmpty ? nullptr : &entry;
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // ids are >= 0, so never a key

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right);
  }

  // The slot holding `key`, or the empty slot where it would go (linear probing).
  std::size_t slot_index(std::uint64_t key) const {
    std::size_t index = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask_;
    while (entries_[index].key != kEmpty && entries_[index].key != key) index = (index + 1) & mask_;
    return index;
  }

  std::vector<Entry> entries_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// A fast 64-bit hash of a short byte string (8 bytes a step, multiply-xorshift mixing): the word
// cache hashes every word of the input, and std::hash was a visible share of encode time.
inline std::uint64_t hash_word(std::string_view word) {
  std::uint64_t hash = 0x9E3779B97F4A7C15ull ^ word.size();
  const auto mix = [](std::uint64_t value) {
    value *= 0xBF58476D1CE4E5B9ull;
    return value ^ (value >> 31);
  };
  std::size_t offset = 0;
  for (; offset + 8 <= word.size(); offset += 8) {
    std::uint64_t chunk;
    std::memcpy(&chunk, word.data() + offset, 8);
    hash = mix(hash ^ chunk);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, word.data() + offset, word.size() - offset);
  return mix(mix(hash ^ tail));
}

// Finished words and their ids. It stops taking new words when full rather than evicting, as
// Hugging Face's cache does: the words of a corpus's first pages are its most common ones anyway.
// Each shard is one flat open-addressing table over two arenas (word bytes, ids), so a lookup
// touches three cache lines at most; node-based maps spent most encode time waiting on memory.
class WordCache {
 public:
  explicit WordCache(std::size_t capacity) : words_per_shard_(capacity / kShards + 1) {
    std::size_t slots = 16;
    while (slots < words_per_shard_ * 2) slots *= 2;
    for (Shard& shard : shards_) shard.slots.assign(slots, Slot{});
  }

  bool append_cached(std::string_view word, std::vector<std::int32_t>& ids) const {
    const std::uint64_t hash = hash_word(word) | 1;  // 0 marks an empty slot
    Shard& shard = shard_of(hash);
    std::lock_guard lock(shard.mutex);
    const Slot& slot = shard.slots[find_slot(shard, word, hash)];
    if (slot.hash == 0) return false;
    const std::int32_t* first = shard.ids.data() + slot.ids_offset;
    ids.insert(ids.end(), first, first + slot.id_count);
    return true;
  }

  void store(std::string_view word, std::span<const std::int32_t> ids) const {
    if (word.size() > UINT16_MAX || ids.size() > UINT16_MAX) return;
    const std::uint64_t hash = hash_word(word) | 1;
    Shard& shard = shard_of(hash);
    std::lock_guard lock(shard.mutex);
    if (shard.word_count >= words_per_shard_) return;
    Slot& slot = shard.slots[find_slot(shard, word, hash)];
    if (slot.hash != 0) return;  // another thread stored it first
    slot = {hash, static_cast<std::uint32_t>(shard.words.size()),
            static_cast<std::uint32_t>(shard.ids.size()), static_cast<std::uint16_t>(word.size()),
            static_cast<std::uint16_t>(ids.size())};
    shard.words.append(word);
    shard.ids.insert(shard.ids.end(), ids.begin(), ids.end());
    ++shard.word_count;
  }

 private:
  static constexpr std::size_t kShards = 16;

  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t word_offset = 0;
    std::uint32_t ids_offset = 0;
    std::uint16_t word_bytes = 0;
    std::uint16_t id_count = 0;
  };
  struct Shard {
    std::mutex mutex;
    std::vector<Slot> slots;
    std::string words;
    std::vector<std::int32_t> ids;
    std::size_t word_count = 0;
  };

  Shard& shard_of(std::uint64_t hash) const { return shards_[hash >> 60]; }

  // The slot holding `word`, or the empty slot where it would go (linear probing).
  static std::size_t find_slot(const Shard& shard, std::string_view word, std::uint64_t hash) {
    const std::size_t mask = shard.slots.size() - 1;
    for (std::size_t index = hash & mask;; index = (index + 1) & mask) {
      const Slot& slot = shard.slots[index];
      if (slot.hash == 0) return index;
      if (slot.hash == hash && slot.word_bytes == word.size() &&
          std::string_view(shard.words).substr(slot.word_offset, slot.word_bytes) == word) {
        return index;
      }
    }
  }

  static_assert(kShards == 16, "shard_of takes the hash's top four bits");
  mutable std::array<Shard, kShards> shards_;
  std::size_t words_per_shard_;
};

class BpeModel {
 public:
  // Hugging Face caches words shorter than 256 bytes, up to 10,000 of them; we keep more words,
  // which changes only the speed (a cached word's ids are the ids the merges would give).
  static constexpr std::size_t kMaxCachedWordBytes = 256;
  static constexpr std::size_t kCacheCapacity = 1 << 16;

  // Builds the model from tokenizer.json's "model" object; `where` names that object for errors.
  static BpeModel from_json(const json_fields::Json& model, const json_fields::Location& where);

  BpeModel(const BpeModel& other)
      : vocab_(other.vocab_),
        merges_(other.merges_),
        small_char_ids_(other.small_char_ids_),
        large_char_ids_(other.large_char_ids_),
        unk_id_(other.unk_id_),
        fuse_unk_(other.fuse_unk_),
        ignore_merges_(other.ignore_merges_),
        cache_(std::make_unique<WordCache>(kCacheCapacity)) {}
  BpeModel(BpeModel&&) noexcept = default;
  BpeModel& operator=(BpeModel other) noexcept {
    swap(*this, other);
    return *this;
  }
  friend void swap(BpeModel& a, BpeModel& b) noexcept {
    using std::swap;
    swap(a.vocab_, b.vocab_);
    swap(a.merges_, b.merges_);
    swap(a.small_char_ids_, b.small_char_ids_);
    swap(a.large_char_ids_, b.large_char_ids_);
    swap(a.unk_id_, b.unk_id_);
    swap(a.fuse_unk_, b.fuse_unk_);
    swap(a.ignore_merges_, b.ignore_merges_);
    swap(a.cache_, b.cache_);
  }

  // Appends the ids of one pre-tokenized word, given as valid UTF-8 in the vocabulary's spelling.
  void encode_word(std::string_view word, std::vector<std::int32_t>& ids) const {
    if (word.empty()) return;
    // A one-character word in the vocabulary is its own token, merges or not; no cache needed.
    std::size_t first_length = 0;
    const char32_t first_char = unicode::decode_valid(word, 0, first_length);
    if (first_length == word.size()) {
      if (const std::int32_t id = char_id(first_char); id >= 0) {
        ids.push_back(id);
        return;
      }
    }
    if (ignore_merges_) {
      if (const auto found = vocab_.find(word); found != vocab_.end()) {
        ids.push_back(found->second);
        return;
      }
    }
    if (cache_->append_cached(word, ids)) return;
    const std::size_t first = ids.size();
    merge_word(word, ids);
    if (word.size() < kMaxCachedWordBytes) {
      cache_->store(word, std::span<const std::int32_t>(ids).subspan(first));
    }
  }

  const Vocab& vocab() const { return vocab_; }
  std::size_t merge_count() const { return merges_.size(); }
  std::optional<std::int32_t> unk_id() const {
    return unk_id_ < 0 ? std::nullopt : std::optional<std::int32_t>(unk_id_);
  }

 private:
  BpeModel() : cache_(std::make_unique<WordCache>(kCacheCapacity)) {}

  struct Symbol {
    std::int32_t id;
    std::int32_t prev;  // -1: none
    std::int32_t next;  // -1: none
    std::uint32_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t position;
    std::int32_t merged_id;
    // std::push_heap keeps the greatest first; the queue must give the lowest (rank, position).
    bool operator<(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };

  std::int32_t char_id(char32_t code_point) const {
    if (code_point < small_char_ids_.size()) return small_char_ids_[code_point];
    const auto found = large_char_ids_.find(code_point);
    return found == large_char_ids_.end() ? -1 : found->second;
  }

  static void add_symbol(std::vector<Symbol>& symbols, std::int32_t id, std::uint32_t length) {
    const auto count = static_cast<std::int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = count;
    symbols.push_back({id, count - 1, -1, length});
  }

  // One symbol a character; unknown characters handled as Hugging Face's BPE::merge_word does.
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
    symbols.clear();
    std::uint32_t pending_unk_bytes = 0;  // unknown characters not yet given their unk symbol
    std::size_t offset = 0;
    while (offset < word.size()) {
      std::size_t length = 0;
      const std::int32_t id = char_id(unicode::decode_valid(word, offset, length));
      offset += length;
      if (id >= 0) {
        if (pending_unk_bytes) add_symbol(symbols, unk_id_, pending_unk_bytes);
        pending_unk_bytes = 0;
        add_symbol(symbols, id, static_cast<std::uint32_t>(length));
      } else if (unk_id_ >= 0) {
        if (pending_unk_bytes && !fuse_unk_) {
          add_symbol(symbols, unk_id_, pending_unk_bytes);
          pending_unk_bytes = 0;
        }
        pending_unk_bytes += static_cast<std::uint32_t>(length);
      }
    }
    if (pending_unk_bytes) add_symbol(symbols, unk_id_, pending_unk_bytes);
  }

  void push_candidate(std::vector<Candidate>& queue, const std::vector<Symbol>& symbols,
                      std::int32_t position) const {
    const Symbol& left = symbols[static_cast<std::size_t>(position)];
    if (left.next < 0) return;
    const MergeTable::Entry* merge =
        merges_.find(left.id, symbols[static_cast<std::size_t>(left.next)].id);
    if (!merge) return;
    queue.push_back({merge->rank, static_cast<std::uint32_t>(position), merge->merged_id});
    std::push_heap(queue.begin(), queue.end());
  }

  void merge_word(std::string_view word, std::vector<std::int32_t>& ids) const {
    // Scratch reused across calls on this thread: no allocation per word.
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> queue;
    initial_symbols(word, symbols);
    queue.clear();
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const MergeTable::Entry* merge = merges_.find(symbols[i].id, symbols[i + 1].id);
      if (merge) queue.push_back({merge->rank, static_cast<std::uint32_t>(i), merge->merged_id});
    }
    std::make_heap(queue.begin(), queue.end());
    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end());
      const Candidate top = queue.back();
      queue.pop_back();
      Symbol& left = symbols[top.position];
      if (left.length == 0 || left.next < 0) continue;
      const Symbol right = symbols[static_cast<std::size_t>(left.next)];
      // An entry is stale when the pair at its position no longer merges into its token.
      const MergeTable::Entry* current = merges_.find(left.id, right.id);
      if (!current || current->merged_id != top.merged_id) continue;
      symbols[static_cast<std::size_t>(left.next)].length = 0;
      left.id = top.merged_id;
      left.length += right.length;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.position);
      if (left.prev >= 0) push_candidate(queue, symbols, left.prev);
      push_candidate(queue, symbols, static_cast<std::int32_t>(top.position));
    }
    for (const Symbol& symbol : symbols) {
      if (symbol.length != 0) ids.push_back(symbol.id);
    }
  }

  Vocab vocab_;
  MergeTable merges_;
  std::vector<std::int32_t> small_char_ids_;  // one-character tokens below U+0800, -1: none
  std::unordered_map<char32_t, std::int32_t> large_char_ids_;
  std::int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::unique_ptr<WordCache> cache_;
};

namespace detail {

// One entry of model.merges: "a b" (exactly one space) or ["a", "b"].
inline std::pair<std::string, std::string> parse_merge(const json_fields::Json& entry,
                                                       const json_fields::Location& where) {
  if (entry.is_string()) {
    const std::string& text = entry.get_ref<const std::string&>();
    const std::size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      where.fail(json_fields::in_quotes(text) + " is not two tokens separated by one space");
    }
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  }
  where.fail("expected \"left right\" or [\"left\", \"right\"], found " + entry.dump());
}

}  // namespace detail

inline BpeModel BpeModel::from_json(const json_fields::Json& model,
                                    const json_fields::Location& where) {
  using namespace json_fields;
  require_object(model, where);
  if (const Json* type = member(model, "type"); type && as_string(*type, where / "type") != "BPE") {
    (where / "type").fail(in_quotes(type->get<std::string>()) + " is not supported (only BPE)");
  }
  if (const Json* dropout = member(model, "dropout");
      dropout && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    (where / "dropout").fail(dropout->dump() + " is not supported: dropout makes encoding random");
  }
  if (bool_or(model, "byte_fallback", false, where)) {
    (where / "byte_fallback").fail("true is not supported (byte-level BPE needs no byte fallback)");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::optional<std::string> value = optional_string(model, affix, where);
    if (value && !value->empty()) (where / affix).fail(in_quotes(*value) + " is not supported");
  }

  BpeModel bpe;
  bpe.fuse_unk_ = bool_or(model, "fuse_unk", false, where);
  bpe.ignore_merges_ = bool_or(model, "ignore_merges", false, where);

  const Location vocab_at = where / "vocab";
  const Json& vocab = require_object(require_member(model, "vocab", where), vocab_at);
  // Without a single token every character is unknown and dropped: encode would return no ids
  // for any text, silently.
  if (vocab.empty()) vocab_at.fail("is empty: there is no token to encode text into");
  bpe.vocab_.reserve(vocab.size());
  bpe.small_char_ids_.assign(0x800, -1);
  for (const auto& [token, id_value] : vocab.items()) {
    // nlohmann's parser has already rejected ill-formed UTF-8 in keys.
    const std::int32_t id = as_token_id(id_value, vocab_at / token);
    bpe.vocab_.emplace(token, id);
    std::size_t length = 0;
    const char32_t code_point = token.empty() ? 0 : unicode::decode_valid(token, 0, length);
    if (!token.empty() && length == token.size()) {
      if (code_point < bpe.small_char_ids_.size()) {
        bpe.small_char_ids_[code_point] = id;
      } else {
        bpe.large_char_ids_.emplace(code_point, id);
      }
    }
  }

  if (const std::optional<std::string> unk = optional_string(model, "unk_token", where)) {
    const auto found = bpe.vocab_.find(*unk);
    if (found == bpe.vocab_.end()) (where / "unk_token").fail(in_quotes(*unk) + " is not in model.vocab");
    bpe.unk_id_ = found->second;
  }

  const Location merges_at = where / "merges";
  const Json& merges = require_array(require_member(model, "merges", where), merges_at);
  bpe.merges_.reserve(merges.size());
  const auto vocab_id = [&](const std::string& token, const Location& at) {
    const auto found = bpe.vocab_.find(token);
    if (found == bpe.vocab_.end()) at.fail(in_quotes(token) + " is not in model.vocab");
    return found->second;
  };
  std::uint32_t rank = 0;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    // Hugging Face reads the list as all strings or all pairs, never a mix.
    if (merges[i].is_string() != merges[0].is_string()) {
      merges_at[i].fail("mixes \"left right\" strings with [\"left\", \"right\"] pairs");
    }
    // merges.txt files open with a "#version" line; Hugging Face skips it in the string form.
    if (merges[i].is_string() && merges[i].get_ref<const std::string&>().starts_with("#version")) {
      continue;
    }
    const auto [left, right] = detail::parse_merge(merges[i], merges_at[i]);
    // One statement each, so the first missing token is the one reported.
    const std::int32_t left_id = vocab_id(left, merges_at[i]);
    const std::int32_t right_id = vocab_id(right, merges_at[i]);
    const std::int32_t merged_id = vocab_id(left + right, merges_at[i]);
    bpe.merges_.insert(left_id, right_id, rank++, merged_id);
  }
  return bpe;
}

}  // namespace minimind::bpe
