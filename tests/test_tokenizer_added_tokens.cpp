// minimind/detail/tokenizer/added_tokens.hpp: splitting added tokens out of text, as Hugging Face's
// AddedVocabulary does (its own unit tests' cases are among these, minus their lowercase normalizer).
#include "minimind/detail/tokenizer/added_tokens.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using minimind::added_tokens::AddedToken;
using minimind::added_tokens::AddedTokenSplitter;
using minimind::added_tokens::PatternSet;

namespace {

// Pieces in order: text as itself, a token as "#<id>".
using Pieces = std::vector<std::string>;

Pieces split(const AddedTokenSplitter& splitter, std::string_view text) {
  Pieces pieces;
  splitter.split(
      text, [&](std::string_view piece) { pieces.emplace_back(piece); },
      [&](const AddedToken& token) { pieces.push_back("#" + std::to_string(token.id)); });
  return pieces;
}

AddedToken token(std::int32_t id, std::string content) {
  AddedToken added;
  added.id = id;
  added.content = std::move(content);
  return added;
}

AddedToken with_flags(AddedToken added, bool lstrip, bool rstrip, bool single_word) {
  added.lstrip = lstrip;
  added.rstrip = rstrip;
  added.single_word = single_word;
  return added;
}

}  // namespace

TEST_CASE("PatternSet finds the leftmost match, and the longest among those starting there") {
  PatternSet patterns;
  CHECK(patterns.empty());
  CHECK_FALSE(patterns.find("anything", 0).has_value());
  patterns.add("<tts_text_bos>");
  patterns.add("<tts_text_bos_single>");
  patterns.add("bos_single>x");
  const auto match = patterns.find("a<tts_text_bos_single>x", 0);
  REQUIRE(match.has_value());
  CHECK(match->start == 1);  // leftmost, though "bos_single>x" is longer
  CHECK(match->end == 22);
  CHECK(match->pattern == 1);
  PatternSet nested;  // one pattern a prefix of the other
  nested.add("ab");
  nested.add("abcd");
  const auto shorter = nested.find("xabcx", 0);  // "abcd" fails at x: fall back to "ab"
  REQUIRE(shorter.has_value());
  CHECK(shorter->start == 1);
  CHECK(shorter->pattern == 0);
  CHECK_FALSE(patterns.find("<tts_text_bo", 0).has_value());
  CHECK_FALSE(patterns.find("<tts_text_bos>", 1).has_value());  // search starts at `from`
}

TEST_CASE("added tokens are split out of text, longest first; near-misses stay text") {
  const AddedTokenSplitter splitter({token(1, "<|im_start|>"), token(2, "<|im_end|>"),
                                     token(18, "<tts_text_bos>"), token(20, "<tts_text_bos_single>")});
  CHECK(split(splitter, "<|im_start|>user\n你好<|im_end|>") == Pieces{"#1", "user\n你好", "#2"});
  CHECK(split(splitter, "<|im_start|><|im_start|>") == Pieces{"#1", "#1"});
  CHECK(split(splitter, "<tts_text_bos_single>") == Pieces{"#20"});
  CHECK(split(splitter, "<tts_text_bos>_single>") == Pieces{"#18", "_single>"});
  CHECK(split(splitter, "<|im_start") == Pieces{"<|im_start"});
  CHECK(split(splitter, "<|im_start|") == Pieces{"<|im_start|"});
  CHECK(split(splitter, "<|IM_START|>") == Pieces{"<|IM_START|>"});
  CHECK(split(splitter, "<<|im_end|>>") == Pieces{"<", "#2", ">"});
  CHECK(split(splitter, "") == Pieces{});
  CHECK(split(AddedTokenSplitter(), "no tokens at all") == Pieces{"no tokens at all"});
}

TEST_CASE("tokens with normalized=false are matched first, the normalized ones in what is left") {
  AddedToken normalized = token(7, "ab");
  normalized.normalized = true;
  const AddedTokenSplitter splitter({normalized, token(8, "bX")});
  // "ab" starts further left, but the raw pass takes "bX" before the normalized pass runs.
  CHECK(split(splitter, "abXab") == Pieces{"a", "#8", "#7"});
}

TEST_CASE("the special flag does not change splitting") {
  AddedToken special = token(3, "<think>");
  special.special = true;
  CHECK(split(AddedTokenSplitter({special}), "a<think>b") ==
        split(AddedTokenSplitter({token(3, "<think>")}), "a<think>b"));
}

TEST_CASE("single_word: a match touching a word character on either side is not a token") {
  const AddedTokenSplitter splitter({with_flags(token(0, "<mask>"), false, false, true)});
  CHECK(split(splitter, "<mask> my name <mask> a<mask> <mask>ony <mask>") ==
        Pieces{"#0", " my name ", "#0", " a<mask> <mask>ony ", "#0"});
  // Punctuation is no word character; a combining mark is (Rust's \w has marks).
  CHECK(split(splitter, "<mask>, <mask>- ◌̰<mask>") == Pieces{"#0", ", ", "#0", "- ◌̰<mask>"});
  CHECK(split(splitter, "中<mask>") == Pieces{"中<mask>"});
}

TEST_CASE("lstrip and rstrip take the whitespace around the token, Unicode spaces too") {
  const AddedTokenSplitter both({with_flags(token(0, "<mask>"), true, true, true)});
  CHECK(split(both, "hi <mask> there\t<mask>\t<mask>\u2000") ==
        Pieces{"hi", "#0", "there", "#0", "#0"});
  const AddedTokenSplitter left({with_flags(token(0, "<mask>"), true, false, false)});
  CHECK(split(left, "I saw a  <mask> x") == Pieces{"I saw a", "#0", " x"});
  const AddedTokenSplitter right({with_flags(token(0, "<mask>"), false, true, false)});
  CHECK(split(right, "I saw a <mask>  \u3000x") == Pieces{"I saw a ", "#0", "x"});
}

TEST_CASE("lstrip does not take back whitespace an earlier token's rstrip took") {
  const AddedTokenSplitter splitter({with_flags(token(0, "<a>"), false, true, false),
                                     with_flags(token(1, "<b>"), true, false, false)});
  CHECK(split(splitter, "<a>   <b>") == Pieces{"#0", "#1"});
  CHECK(split(splitter, "x <b>") == Pieces{"x", "#1"});
}
