#pragma once
// Constrained decoding to JSON: at each step only the tokens that keep the text a prefix of a
// document the schema accepts may be sampled, an end-of-sequence id only once the document is
// whole, and the document always ends within the tokens allowed.
//
//   auto grammar = JsonGrammar::from_schema(schema, tokenizer);   // once per schema; shareable
//   JsonConstraint constraint(grammar, max_tokens, eos_ids);      // once per reply
//   each step:  constraint.apply(logits);  id = sample(logits);  constraint.accept(id);
//
// The schema subset: type (object, array, string, number, integer, boolean, null, or a list of
// them), properties, required, additionalProperties (absent beside properties: no other key is
// written, which every validator accepts; absent with no properties: any key), enum, const,
// items, minItems, maxItems, anyOf; title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly are ignored. Any other keyword
// (pattern, format, minimum, $ref, oneOf, ...) throws Error naming it and its JSON pointer.
// JsonGrammar::any_object() accepts any JSON object (OpenAI's json_object mode).
//
// What is written: no whitespace but one optional space after ':' and ','; numbers with at most
// 15 integer and 15 fraction digits and a two-digit exponent (so every parser reads them as a
// double); strings of well-formed UTF-8 (a character may be split across tokens) with JSON's
// escapes, \u escapes of surrogate halves left out; enum and const values as nlohmann's dump()
// writes them; objects and arrays nested at most 31 deep.
//
// Within max_tokens: the grammar knows the shortest ending of every parse. A token is allowed
// only if the ending after it still fits, one position being kept for the end-of-sequence id;
// once nothing else fits, the tokens of the shortest ending (fewest tokens of this vocabulary
// that spell it) are all that is allowed. A schema whose shortest document does not fit is
// refused by the constructor.
//
// Thread safety: a JsonGrammar is immutable and may be shared by any number of threads (hold it
// by shared_ptr); a JsonConstraint is one sequence's state, used by one thread at a time.
#include "minimind/error.hpp"
#include "minimind/detail/json_grammar.hpp"
#include "minimind/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minimind {

class JsonGrammar {
 public:
  // A JSON Schema (the subset above), over the tokens of `tokenizer`.
  static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::json& schema, const Tokenizer& tokenizer) {
    return std::shared_ptr<const JsonGrammar>(new JsonGrammar(json_grammar::Grammar::from_schema(schema), tokenizer));
  }
  // Any JSON object.
  static std::shared_ptr<const JsonGrammar> any_object(const Tokenizer& tokenizer) {
    return std::shared_ptr<const JsonGrammar>(new JsonGrammar(json_grammar::Grammar::any_object(), tokenizer));
  }

  // The shortest document and the fewest tokens that spell it: a reply needs one more position,
  // for the end-of-sequence id.
  const std::string& shortest_document() const { return grammar_.shortest_document(); }
  int64_t shortest_document_tokens() const { return shortest_tokens_; }
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }

  // Throws Error unless a reply of `max_tokens` tokens can hold the shortest document and the
  // end id (what JsonConstraint's constructor checks; a server answers it with 400).
  void check_room(int64_t max_tokens) const {
    if (max_tokens < shortest_tokens_ + 1) {
      throw Error("a reply of at most " + std::to_string(max_tokens) + " tokens cannot hold the JSON schema's shortest document, " +
                  shortest_document() + ": it takes " + std::to_string(shortest_tokens_) + " tokens and the end id one more");
    }
  }
  const json_grammar::Grammar& grammar() const { return grammar_; }

  // The fewest tokens spelling `text`, appended to `ids` (all of them text tokens).
  void tokens_of(std::string_view text, std::vector<int32_t>& ids, std::vector<int32_t>& scratch) const {
    const size_t n = text.size();
    // scratch[i]: fewest tokens for text[i:]; scratch[n + 1 + i]: the first of them.
    scratch.assign(2 * n + 1, std::numeric_limits<int32_t>::max());
    scratch[n] = 0;
    for (size_t i = n; i-- > 0;) {
      int32_t at = 0;
      for (size_t k = i; k < n; ++k) {
        at = child(at, static_cast<uint8_t>(text[k]));
        if (at < 0) break;
        const VocabNode& v = nodes_[static_cast<size_t>(at)];
        if (v.token >= 0 && scratch[k + 1] != std::numeric_limits<int32_t>::max() && scratch[k + 1] + 1 < scratch[i]) {
          scratch[i] = scratch[k + 1] + 1;
          scratch[n + 1 + i] = v.token;
        }
      }
    }
    for (size_t i = 0; i < n;) {
      const int32_t id = scratch[n + 1 + i];
      ids.push_back(id);
      i += pieces_[static_cast<size_t>(id)].size();
    }
  }

 private:
  friend class JsonConstraint;

  // The vocabulary as a byte trie: a node's children are contiguous and sorted by byte, so the
  // mask walks every token once, sharing the work of common prefixes.
  struct VocabNode {
    uint8_t byte = 0;
    int32_t first_child = 0, children = 0;
    int32_t token = -1;  // the token spelled by the path to here
  };

  JsonGrammar(json_grammar::Grammar grammar, const Tokenizer& tokenizer) : grammar_(std::move(grammar)) {
    const int32_t vocab = tokenizer.vocab_size();
    pieces_.resize(static_cast<size_t>(vocab));
    std::vector<int32_t> ids, markup_ids;
    for (int32_t id = 0; id < vocab; ++id) {
      // Added tokens (special or not) are left out: their text is markup, not JSON.
      if (tokenizer.is_added(id)) continue;
      const std::string& piece = pieces_[static_cast<size_t>(id)] = tokenizer.token_to_piece(id);
      if (piece.empty()) continue;
      ids.push_back(id);
      if (std::any_of(piece.begin(), piece.end(), [](char c) { return c == '"' || c == '\\' || static_cast<uint8_t>(c) < 0x20; })) {
        markup_ids.push_back(id);
      }
    }
    nodes_ = build_trie(ids);
    string_markup_nodes_ = build_trie(markup_ids);
    // Every byte must be a token of its own: then an ending of n bytes takes at most n tokens,
    // which is what lets the mask test the budget in bytes.
    for (int byte = 0; byte < 256; ++byte) {
      const int32_t at = child(0, static_cast<uint8_t>(byte));
      if (at < 0 || nodes_[static_cast<size_t>(at)].token < 0) {
        throw Error("json constraint: the tokenizer has no token for the single byte " + std::to_string(byte));
      }
    }
    // Inside a string most tokens are plain text whatever the parse below it: listed once per
    // state of a UTF-8 character, with the bytes of a character they leave unfinished.
    for (size_t start = 0; start < kUtf8Starts.size(); ++start) {
      for (const int32_t id : ids) {
        uint8_t pending = kUtf8Starts[start].first, range = kUtf8Starts[start].second;
        const std::string& piece = pieces_[static_cast<size_t>(id)];
        const bool plain = std::all_of(piece.begin(), piece.end(), [&](char ch) {
          const auto c = static_cast<uint8_t>(ch);
          return c >= 0x20 && c != '"' && c != '\\' && json_grammar::Utf8::feed(pending, range, c);
        });
        if (plain) string_text_[start].push_back({id, pending});
      }
    }
    std::vector<int32_t> shortest, scratch;
    tokens_of(grammar_.shortest_document(), shortest, scratch);
    shortest_tokens_ = static_cast<int64_t>(shortest.size());
  }

  // The trie of `ids`, breadth first so that each node's children are contiguous.
  std::vector<VocabNode> build_trie(std::vector<int32_t> ids) {
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      const std::string &pa = pieces_[static_cast<size_t>(a)], &pb = pieces_[static_cast<size_t>(b)];
      return pa < pb || (pa == pb && a < b);
    });
    struct Range {
      int32_t node;
      size_t lo, hi, depth;
    };
    std::vector<VocabNode> nodes(1);
    std::vector<Range> queue{{0, 0, ids.size(), 0}};
    for (size_t q = 0; q < queue.size(); ++q) {
      const Range r = queue[q];
      auto piece = [&](size_t i) -> const std::string& { return pieces_[static_cast<size_t>(ids[i])]; };
      size_t i = r.lo;
      // The lowest id of equal pieces stands for them all.
      if (i < r.hi && piece(i).size() == r.depth) nodes[static_cast<size_t>(r.node)].token = ids[i];
      while (i < r.hi && piece(i).size() == r.depth) ++i;
      nodes[static_cast<size_t>(r.node)].first_child = static_cast<int32_t>(nodes.size());
      while (i < r.hi) {
        const auto byte = static_cast<uint8_t>(piece(i)[r.depth]);
        size_t j = i;
        while (j < r.hi && static_cast<uint8_t>(piece(j)[r.depth]) == byte) ++j;
        VocabNode child;
        child.byte = byte;
        nodes.push_back(child);
        queue.push_back({static_cast<int32_t>(nodes.size() - 1), i, j, r.depth + 1});
        i = j;
      }
      nodes[static_cast<size_t>(r.node)].children = static_cast<int32_t>(nodes.size()) - nodes[static_cast<size_t>(r.node)].first_child;
      max_token_bytes_ = std::max(max_token_bytes_, r.depth);
    }
    return nodes;
  }

  // The states of an unfinished UTF-8 character (pending continuation bytes, Utf8 range).
  static constexpr std::array<std::pair<uint8_t, uint8_t>, 8> kUtf8Starts = {
      {{0, 0}, {1, 0}, {2, 0}, {2, 1}, {2, 2}, {3, 0}, {3, 3}, {3, 4}}};
  static size_t utf8_start(uint8_t pending, uint8_t range) {
    for (size_t i = 0; i < kUtf8Starts.size(); ++i)
      if (kUtf8Starts[i].first == pending && kUtf8Starts[i].second == range) return i;
    return 0;
  }

  int32_t child(int32_t node, uint8_t byte) const {
    const VocabNode& v = nodes_[static_cast<size_t>(node)];
    const auto first = nodes_.begin() + v.first_child, last = first + v.children;
    const auto found = std::lower_bound(first, last, byte, [](const VocabNode& n, uint8_t b) { return n.byte < b; });
    return found != last && found->byte == byte ? static_cast<int32_t>(found - nodes_.begin()) : -1;
  }

  json_grammar::Grammar grammar_;
  std::vector<std::string> pieces_;  // id -> bytes; empty for the tokens left out
  std::vector<VocabNode> nodes_;     // node 0 is the root
  std::vector<VocabNode> string_markup_nodes_;  // the tokens holding '"', '\\' or a control byte
  struct StringText {
    int32_t id;
    uint8_t pending;  // continuation bytes of a character it leaves unfinished
  };
  std::array<std::vector<StringText>, kUtf8Starts.size()> string_text_;
  size_t max_token_bytes_ = 0;
  int64_t shortest_tokens_ = 0;
};

class JsonConstraint {
 public:
  // A reply of at most `max_tokens` ids, the last an id of `eos_ids`. Throws Error if the
  // shortest document and its end id do not fit.
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, int64_t max_tokens, std::span<const int32_t> eos_ids)
      : grammar_(std::move(grammar)), eos_(eos_ids.begin(), eos_ids.end()) {
    if (!grammar_) throw Error("json constraint: no grammar");
    if (eos_.empty()) throw Error("json constraint: needs an end-of-sequence id to end the document");
    grammar_->check_room(max_tokens);
    document_budget_ = max_tokens - 1;
    states_.resize(grammar_->max_token_bytes_ + 1);
    grammar_->grammar_.start(state_);
    next_ = state_;
    allowed_.assign(static_cast<size_t>(grammar_->vocab_size()), 0);
    grammar_->tokens_of(grammar_->shortest_document(), plan_, scratch_ids_);
    plan_valid_ = true;
  }

  // Sets the logit of every id that may not come next to -inf. `logits` may be longer than the
  // tokenizer's vocabulary; the ids past it are masked.
  void apply(std::span<float> logits) {
    compute_allowed();
    const size_t vocab = allowed_.size();
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i)
      if (i >= vocab || !allowed_[i]) logits[i] = kMasked;
  }

  // Whether `id` was allowed by the last apply().
  bool allowed(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < allowed_.size() && allowed_[static_cast<size_t>(id)]; }

  // Records the id chosen; throws Error if it does not continue the document.
  void accept(int32_t id) {
    if (finished_) throw Error("json constraint: token " + std::to_string(id) + " after the end of the reply");
    if (is_eos(id)) {
      if (!grammar_->grammar_.complete(state_)) throw Error("json constraint: the end token " + std::to_string(id) + " before the document is complete");
      finished_ = true;
      return;
    }
    if (id < 0 || id >= grammar_->vocab_size() || grammar_->pieces_[static_cast<size_t>(id)].empty()) {
      throw Error("json constraint: token " + std::to_string(id) + " is not JSON text");
    }
    if (!advance(state_, grammar_->pieces_[static_cast<size_t>(id)], next_)) {
      throw Error("json constraint: token " + std::to_string(id) + " does not continue the document");
    }
    std::swap(state_, next_);
    ++document_tokens_;
    if (plan_valid_ && plan_next_ < plan_.size() && plan_[plan_next_] == id) {
      ++plan_next_;
    } else {
      plan_valid_ = false;
    }
  }

  // The text so far is a whole document (the end id may come).
  bool complete() const { return grammar_->grammar_.complete(state_); }
  // The end id was accepted.
  bool finished() const { return finished_; }

 private:
  bool is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

  bool advance(const json_grammar::State& from, const std::string& bytes, json_grammar::State& to) {
    const json_grammar::State* at = &from;
    for (size_t i = 0; i < bytes.size(); ++i) {
      json_grammar::State& out = i + 1 == bytes.size() ? to : states_[i % 2 == 0 ? 1 : 0];
      grammar_->grammar_.step(*at, static_cast<uint8_t>(bytes[i]), out);
      if (out.threads == 0) return false;
      at = &out;
    }
    return true;
  }

  void compute_allowed() {
    std::fill(allowed_.begin(), allowed_.end(), 0);
    if (finished_) throw Error("json constraint: the reply has ended");
    const json_grammar::Grammar& g = grammar_->grammar_;
    left_ = document_budget_ - document_tokens_;
    some_did_not_fit_ = false;
    states_[0].copy_from(state_);
    uint8_t pending = 0, range = 0;
    if (g.in_free_string(state_, pending, range)) {
      // Plain text keeps the parse below the string as it is: only the character in progress
      // changes the ending's length.
      const int64_t base = static_cast<int64_t>(g.min_bytes(state_)) - pending;
      for (const auto& t : grammar_->string_text_[JsonGrammar::utf8_start(pending, range)]) {
        if (base + t.pending <= left_ - 1) allowed_[static_cast<size_t>(t.id)] = 1;
        else some_did_not_fit_ = true;
      }
      walk(grammar_->string_markup_nodes_, 0, 0);
    } else {
      walk(grammar_->nodes_, 0, 0);
    }
    if (some_did_not_fit_ && !g.complete(state_)) {
      // The last token fitted in bytes, so the shortest ending of this parse fits in tokens.
      if (!plan_valid_) {
        plan_.clear();
        plan_next_ = 0;
        ending_.clear();
        g.shortest_ending(state_, ending_);
        grammar_->tokens_of(ending_, plan_, scratch_ids_);
        plan_valid_ = true;
      }
      if (plan_next_ < plan_.size()) allowed_[static_cast<size_t>(plan_[plan_next_])] = 1;
    }
    if (g.complete(state_))
      for (const int32_t id : eos_)
        if (id >= 0 && static_cast<size_t>(id) < allowed_.size()) allowed_[static_cast<size_t>(id)] = 1;
  }

  // Marks the tokens below `node` of `trie` whose bytes continue the parse states_[level].
  void walk(const std::vector<JsonGrammar::VocabNode>& trie, int32_t node, size_t level) {
    const json_grammar::Grammar& g = grammar_->grammar_;
    const auto& v = trie[static_cast<size_t>(node)];
    for (int32_t c = v.first_child; c < v.first_child + v.children; ++c) {
      const auto& child = trie[static_cast<size_t>(c)];
      json_grammar::State& next = states_[level + 1];
      g.step(states_[level], child.byte, next);
      if (next.threads == 0) continue;
      if (child.token >= 0) {
        if (static_cast<int64_t>(g.min_bytes(next)) <= left_ - 1) allowed_[static_cast<size_t>(child.token)] = 1;
        else some_did_not_fit_ = true;
      }
      if (child.children) walk(trie, c, level + 1);
    }
  }

  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<int32_t> eos_;
  int64_t document_budget_ = 0, document_tokens_ = 0, left_ = 0;
  json_grammar::State state_, next_;
  std::vector<json_grammar::State> states_;  // the walk's parse after each byte of a token
  std::vector<uint8_t> allowed_;
  // The tokens of the shortest ending, followed while the sampler picks them.
  std::vector<int32_t> plan_, scratch_ids_;
  size_t plan_next_ = 0;
  bool plan_valid_ = false, some_did_not_fit_ = false, finished_ = false;
  std::string ending_;
};

}  // namespace minimind
