#pragma once
// minimind::StreamingDecoder: decodes ids one at a time as a model generates them, emitting text
// only once its UTF-8 is complete. A Chinese character is often two byte-level tokens, and
// printing each token's bytes alone would show U+FFFD halves.
//
// The pieces push() and flush() return, joined, equal Tokenizer::decode of all the ids pushed
// (with the same skip_special_tokens): bytes that can never become UTF-8 are rendered as U+FFFD
// at once, just as decode renders them, and only a tail that may still complete is held back.
#include <cstdint>
#include <string>

#include "minimind/tokenizer.hpp"
#include "minimind/detail/tokenizer/unicode.hpp"

namespace minimind {

class StreamingDecoder {
 public:
  // The tokenizer must outlive the decoder. One decoder per stream: it is not safe to push from
  // two threads at once (the tokenizer it reads may be shared).
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text that `id` completes (often empty). Throws minimind::Error for an id out of range.
  std::string push(std::int32_t id) {
    const std::string piece = tokenizer_->token_to_piece(id);
    if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
    pending_ += piece;
    std::string text;
    pending_.erase(0, unicode::append_valid_utf8(text, pending_, /*finish=*/false));
    return text;
  }

  // What is left at the end of the stream: an incomplete sequence comes out as U+FFFD.
  std::string flush() {
    std::string text = unicode::to_valid_utf8(pending_);
    pending_.clear();
    return text;
  }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of a character still incomplete
};

}  // namespace minimind
