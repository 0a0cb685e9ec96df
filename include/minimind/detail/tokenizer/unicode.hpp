#pragma once
// UTF-8 decoding and the Unicode classes the tokenizer's rules ask about.
//
// Classes come from tables generated out of the Unicode Character Database
// (tools/gen_unicode_tables.py -> unicode_tables.hpp), so every script, emoji, combining mark and
// space character (U+3000, U+0085, ...) is covered, not just a hand-picked range list.
//
// Malformed UTF-8 is judged by the Unicode standard's table of well-formed byte sequences (no
// overlong forms, no surrogates, nothing above U+10FFFF). Where bytes must be shown anyway, each
// maximal ill-formed subpart becomes one U+FFFD, as Rust's String::from_utf8_lossy (and so the
// Hugging Face decoders) render it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "minimind/error.hpp"
#include "minimind/detail/tokenizer/unicode_tables.hpp"

namespace minimind::unicode {

// The partition of code points the GPT-2 split pattern works with: \p{L}, \p{N}, \s, the rest.
enum class CodePointClass : std::uint8_t { other = 0, letter = 1, number = 2, whitespace = 3 };

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

inline std::uint8_t property_byte(char32_t code_point) {
  if (code_point > tables::kMaxCodePoint) return 0;
  constexpr std::uint32_t block_mask = (1u << tables::kBlockShift) - 1;
  const std::uint32_t block = tables::kBlockIndex[code_point >> tables::kBlockShift];
  return tables::kBlockData[(block << tables::kBlockShift) | (code_point & block_mask)];
}

// \p{L} / \p{N} by general category, \s by the White_Space property (Oniguruma's definitions, which
// the Hugging Face ByteLevel pre-tokenizer uses: U+0085 is whitespace, U+FEFF is not).
inline CodePointClass code_point_class(char32_t code_point) {
  return static_cast<CodePointClass>(property_byte(code_point) & 3u);
}

// \w of Rust's regex crate (Alphabetic, marks, Nd, Pc, Join_Control): added tokens' single_word rule.
inline bool is_word_character(char32_t code_point) { return (property_byte(code_point) & 4u) != 0; }

inline bool is_whitespace(char32_t code_point) {
  return code_point_class(code_point) == CodePointClass::whitespace;
}

inline void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

enum class SequenceStatus { valid, invalid, incomplete };

struct SequenceScan {
  SequenceStatus status;
  // valid: the sequence's length; invalid: the length of its maximal ill-formed subpart (>= 1);
  // incomplete: the bytes left, all a well-formed start that only needs more bytes.
  std::size_t length;
  char32_t code_point;  // meaningful when valid
};

// Judges the sequence that starts at bytes[offset] (offset < bytes.size()).
inline SequenceScan scan_sequence(std::string_view bytes, std::size_t offset) {
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte_at(offset);
  if (lead < 0x80) return {SequenceStatus::valid, 1, lead};
  std::size_t length = 0;
  char32_t code_point = 0;
  // The allowed range of the second byte depends on the lead byte: it is what rules out overlong
  // forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4).
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, code_point = lead & 0x0F;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code_point = lead & 0x07;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  } else {
    return {SequenceStatus::invalid, 1, 0};
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (offset + i >= bytes.size()) return {SequenceStatus::incomplete, i, 0};
    const unsigned char byte = byte_at(offset + i);
    const unsigned char min = i == 1 ? second_min : 0x80;
    const unsigned char max = i == 1 ? second_max : 0xBF;
    if (byte < min || byte > max) return {SequenceStatus::invalid, i, 0};
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  return {SequenceStatus::valid, length, code_point};
}

// Throws minimind::Error naming `what` and the byte offset of the first ill-formed sequence.
inline void validate_utf8(std::string_view text, std::string_view what) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    if (static_cast<unsigned char>(text[offset]) < 0x80) {
      ++offset;
      continue;
    }
    const SequenceScan scan = scan_sequence(text, offset);
    if (scan.status != SequenceStatus::valid) {
      throw Error(std::string(what) + ": invalid UTF-8 at byte offset " + std::to_string(offset) +
                  (scan.status == SequenceStatus::incomplete ? " (truncated sequence at the end)"
                                                             : ""));
    }
    offset += scan.length;
  }
}

// Decodes the code point at text[offset] of text already known to be valid UTF-8.
inline char32_t decode_valid(std::string_view text, std::size_t offset, std::size_t& length) {
  const auto byte_at = [&](std::size_t i) { return static_cast<unsigned char>(text[offset + i]); };
  const unsigned char lead = byte_at(0);
  if (lead < 0x80) return length = 1, lead;
  if (lead < 0xE0) return length = 2, ((lead & 0x1Fu) << 6) | (byte_at(1) & 0x3Fu);
  if (lead < 0xF0) {
    length = 3;
    return ((lead & 0x0Fu) << 12) | ((byte_at(1) & 0x3Fu) << 6) | (byte_at(2) & 0x3Fu);
  }
  length = 4;
  return ((lead & 0x07u) << 18) | ((byte_at(1) & 0x3Fu) << 12) | ((byte_at(2) & 0x3Fu) << 6) |
         (byte_at(3) & 0x3Fu);
}

// Appends `bytes` to `out` as valid UTF-8, one U+FFFD for each maximal ill-formed subpart, and
// stops before a trailing sequence that is incomplete but could still become valid (unless
// `finish`, when that tail too becomes one U+FFFD). Returns how many bytes it consumed.
inline std::size_t append_valid_utf8(std::string& out, std::string_view bytes, bool finish) {
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    std::size_t ascii_end = offset;
    while (ascii_end < bytes.size() && static_cast<unsigned char>(bytes[ascii_end]) < 0x80) {
      ++ascii_end;
    }
    out.append(bytes.substr(offset, ascii_end - offset));
    offset = ascii_end;
    if (offset == bytes.size()) break;
    const SequenceScan scan = scan_sequence(bytes, offset);
    if (scan.status == SequenceStatus::incomplete && !finish) break;
    if (scan.status == SequenceStatus::valid) {
      out.append(bytes.substr(offset, scan.length));
    } else {
      append_utf8(out, kReplacementCharacter);
    }
    offset += scan.length;
  }
  return offset;
}

// Rust's String::from_utf8_lossy.
inline std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_valid_utf8(out, bytes, /*finish=*/true);
  return out;
}

}  // namespace minimind::unicode
