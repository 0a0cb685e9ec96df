#pragma once
// Splitting added tokens (tokenizer.json "added_tokens") out of the text before pre-tokenization,
// as Hugging Face's AddedVocabulary does:
// - tokens with normalized=false are matched first on the raw text, then tokens with
//   normalized=true on the pieces left over (with no normalizer, on those pieces as they are);
// - in each pass the leftmost match wins and, among matches starting there, the longest
//   (Aho-Corasick LeftmostLongest); the search resumes after a match even when single_word
//   then rejects it;
// - single_word: the match counts only if no \w character touches either side of it;
// - lstrip / rstrip: the token also swallows the whitespace on its left / right;
// - `special` plays no part here; it only matters to decode's skip_special_tokens.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minimind/detail/tokenizer/unicode.hpp"

namespace minimind::added_tokens {

struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A set of byte strings searched leftmost-longest, through a byte trie.
class PatternSet {
 public:
  struct Match {
    std::size_t start;
    std::size_t end;
    std::size_t pattern;  // index in the order patterns were added
  };

  // Patterns must be non-empty.
  void add(std::string_view pattern) {
    if (nodes_.empty()) nodes_.emplace_back();
    std::size_t node = 0;
    for (const char byte : pattern) {
      const std::int32_t child = child_of(node, byte);
      if (child >= 0) {
        node = static_cast<std::size_t>(child);
        continue;
      }
      nodes_[node].children.emplace_back(byte, static_cast<std::int32_t>(nodes_.size()));
      node = nodes_.size();
      nodes_.emplace_back();
    }
    nodes_[node].pattern = static_cast<std::int32_t>(pattern_count_++);
    is_first_byte_[static_cast<unsigned char>(pattern.front())] = true;
  }

  bool empty() const { return pattern_count_ == 0; }

  std::optional<Match> find(std::string_view text, std::size_t from) const {
    if (empty()) return std::nullopt;
    for (std::size_t start = from; start < text.size(); ++start) {
      if (!is_first_byte_[static_cast<unsigned char>(text[start])]) continue;
      std::optional<Match> longest;
      std::size_t node = 0;
      for (std::size_t i = start; i < text.size(); ++i) {
        const std::int32_t child = child_of(node, text[i]);
        if (child < 0) break;
        node = static_cast<std::size_t>(child);
        if (nodes_[node].pattern >= 0) {
          longest = Match{start, i + 1, static_cast<std::size_t>(nodes_[node].pattern)};
        }
      }
      if (longest) return longest;
    }
    return std::nullopt;
  }

 private:
  struct Node {
    std::vector<std::pair<char, std::int32_t>> children;
    std::int32_t pattern = -1;
  };

  std::int32_t child_of(std::size_t node, char byte) const {
    for (const auto& [edge, child] : nodes_[node].children) {
      if (edge == byte) return child;
    }
    return -1;
  }

  std::vector<Node> nodes_;
  std::array<bool, 256> is_first_byte_{};
  std::size_t pattern_count_ = 0;
};

namespace detail {

// Where the character that ends just before `end` starts.
inline std::size_t previous_char_start(std::string_view text, std::size_t end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

inline char32_t code_point_at(std::string_view text, std::size_t offset) {
  std::size_t length = 0;
  return unicode::decode_valid(text, offset, length);
}

// Start of the whitespace run that ends at `end` (Rust regex \s*$).
inline std::size_t whitespace_run_start(std::string_view text, std::size_t end) {
  while (end > 0) {
    const std::size_t start = previous_char_start(text, end);
    if (!unicode::is_whitespace(code_point_at(text, start))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `start` (Rust regex ^\s*).
inline std::size_t whitespace_run_end(std::string_view text, std::size_t start) {
  while (start < text.size()) {
    std::size_t length = 0;
    if (!unicode::is_whitespace(unicode::decode_valid(text, start, length))) break;
    start += length;
  }
  return start;
}

}  // namespace detail

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;

  // Tokens with empty content never match (Hugging Face ignores them).
  explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens) {
    for (const AddedToken& token : tokens) {
      if (token.content.empty()) continue;
      Pass& pass = token.normalized ? normalized_ : raw_;
      pass.patterns.add(token.content);
      pass.tokens.push_back(token);
    }
  }

  // Splits valid UTF-8 `text` into pieces in order: on_text(std::string_view) for text between
  // added tokens (never empty), on_token(const AddedToken&) for each added token found.
  template <class OnText, class OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    split_pass(raw_, text, [&](std::string_view piece) {
      split_pass(normalized_, piece, on_text, on_token);
    }, on_token);
  }

 private:
  struct Pass {
    PatternSet patterns;
    std::vector<AddedToken> tokens;  // in pattern order
  };

  // Hugging Face's AddedVocabulary::find_matches, piece by piece.
  template <class OnText, class OnToken>
  static void split_pass(const Pass& pass, std::string_view text, OnText&& on_text,
                         OnToken&& on_token) {
    std::size_t text_start = 0;
    std::size_t search_from = 0;
    while (const std::optional<PatternSet::Match> match = pass.patterns.find(text, search_from)) {
      search_from = match->end;
      const AddedToken& token = pass.tokens[match->pattern];
      std::size_t start = match->start;
      std::size_t stop = match->end;
      if (token.single_word) {
        const bool word_before = start > 0 && unicode::is_word_character(detail::code_point_at(
                                                   text, detail::previous_char_start(text, start)));
        const bool word_after =
            stop < text.size() && unicode::is_word_character(detail::code_point_at(text, stop));
        if (word_before || word_after) continue;
      }
      // The whitespace lstrip takes may already belong to the previous token (its rstrip).
      if (token.lstrip) start = std::max(detail::whitespace_run_start(text, start), text_start);
      if (token.rstrip) stop = detail::whitespace_run_end(text, stop);
      if (text_start < start) on_text(text.substr(text_start, start - text_start));
      on_token(token);
      text_start = stop;
    }
    if (text_start < text.size()) on_text(text.substr(text_start));
  }

  Pass raw_;
  Pass normalized_;
};

}  // namespace minimind::added_tokens
