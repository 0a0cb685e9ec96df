#pragma once
// GPT-2's byte-level layer, as Hugging Face's ByteLevel pre-tokenizer and decoder implement it:
// the reversible byte <-> printable-character map that byte-level vocabularies are written in,
// the split pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (hand-compiled below, with Oniguruma's Unicode classes), and the per-token decoding rule.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "minimind/detail/tokenizer/unicode.hpp"

namespace minimind::byte_level {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, 0x7F-0xA0, 0xAD) take U+0100 upwards in byte order, so 0x20 is 'Ġ' (U+0120).
inline const std::array<char32_t, 256>& byte_to_code_point() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> map{};
    const auto stands_for_itself = [](unsigned byte) {
      return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
    };
    char32_t next_substitute = 0x100;
    for (unsigned byte = 0; byte < 256; ++byte) {
      map[byte] = stands_for_itself(byte) ? byte : next_substitute++;
    }
    return map;
  }();
  return table;
}

// The byte a character of the map stands for, or nullopt for characters outside the map.
inline std::optional<std::uint8_t> code_point_to_byte(char32_t code_point) {
  // Every mapped character is below U+0144 (0x100 + 68 substitutes).
  static const std::array<std::int16_t, 0x144> table = [] {
    std::array<std::int16_t, 0x144> reverse{};
    reverse.fill(-1);
    for (unsigned byte = 0; byte < 256; ++byte) {
      reverse[byte_to_code_point()[byte]] = static_cast<std::int16_t>(byte);
    }
    return reverse;
  }();
  if (code_point >= table.size() || table[code_point] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(table[code_point]);
}

// Appends the byte-level form of raw bytes (the spelling vocabularies use) to `out`.
inline void append_byte_level(std::string& out, std::string_view raw) {
  struct Spelling {
    char bytes[2];
    std::uint8_t length;
  };
  // Every mapped character is below U+0800, so one or two UTF-8 bytes.
  static const std::array<Spelling, 256> spelled = [] {
    std::array<Spelling, 256> table{};
    for (unsigned byte = 0; byte < 256; ++byte) {
      std::string utf8;
      unicode::append_utf8(utf8, byte_to_code_point()[byte]);
      table[byte].length = static_cast<std::uint8_t>(utf8.size());
      utf8.copy(table[byte].bytes, utf8.size());
    }
    return table;
  }();
  std::size_t end = out.size();
  out.resize(end + raw.size() * 2);
  for (const char byte : raw) {
    const Spelling& spelling = spelled[static_cast<unsigned char>(byte)];
    out[end] = spelling.bytes[0];
    out[end + 1] = spelling.bytes[1];
    end += spelling.length;
  }
  out.resize(end);
}

inline std::string to_byte_level(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  append_byte_level(out, raw);
  return out;
}

// The ByteLevel decoder's rule for one token: when every character of the token is in the map,
// the bytes they stand for; otherwise (an added token such as "你好" or one holding a space) the
// token's own UTF-8, unchanged. The result may be part of a multi-byte character.
inline std::string token_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  std::size_t offset = 0;
  while (offset < token.size()) {
    const unicode::SequenceScan scan = unicode::scan_sequence(token, offset);
    const std::optional<std::uint8_t> byte =
        scan.status == unicode::SequenceStatus::valid ? code_point_to_byte(scan.code_point)
                                                      : std::nullopt;
    if (!byte) return std::string(token);
    bytes += static_cast<char>(*byte);
    offset += scan.length;
  }
  return bytes;
}

namespace detail {

using unicode::CodePointClass;

// ASCII is most of the input; its classes are looked up without touching the big tables.
inline CodePointClass class_at(std::string_view text, std::size_t offset, std::size_t& length) {
  const auto lead = static_cast<unsigned char>(text[offset]);
  if (lead < 0x80) {
    length = 1;
    static const std::array<CodePointClass, 128> ascii = [] {
      std::array<CodePointClass, 128> classes{};
      for (char32_t c = 0; c < 128; ++c) classes[c] = unicode::code_point_class(c);
      return classes;
    }();
    return ascii[lead];
  }
  return unicode::code_point_class(unicode::decode_valid(text, offset, length));
}

// End of the run of characters of class `wanted` that starts at `offset`.
inline std::size_t run_end(std::string_view text, std::size_t offset, CodePointClass wanted) {
  std::size_t length = 0;
  while (offset < text.size() && class_at(text, offset, length) == wanted) offset += length;
  return offset;
}

// 's 't 're 've 'm 'll 'd, lowercase only as in the pattern. Returns the match length or 0.
inline std::size_t contraction_length(std::string_view text, std::size_t offset) {
  const std::string_view rest = text.substr(offset + 1);
  for (const std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    if (rest.starts_with(suffix)) return 1 + suffix.size();
  }
  return 0;
}

// Length of the pattern's match at `offset`: its alternatives tried in order, as a backtracking
// engine does, each reduced to what it can match here.
inline std::size_t match_length(std::string_view text, std::size_t offset) {
  if (text[offset] == '\'') {
    if (const std::size_t length = contraction_length(text, offset)) return length;
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space, then one class's run.
  std::size_t length = 0;
  const std::size_t body = text[offset] == ' ' && offset + 1 < text.size() ? offset + 1 : offset;
  const CodePointClass body_class = class_at(text, body, length);
  if (body_class != CodePointClass::whitespace) {
    return run_end(text, body, body_class) - offset;
  }
  // "\s+(?!\S)" backs off one character so the last space can lead the next word; when the run
  // is a single character followed by a non-space, "\s+" takes it alone.
  std::size_t last_start = offset;
  std::size_t end = offset;
  while (end < text.size() && class_at(text, end, length) == CodePointClass::whitespace) {
    last_start = end;
    end += length;
  }
  if (end == text.size() || last_start == offset) return end - offset;
  return last_start - offset;
}

}  // namespace detail

// Splits valid UTF-8 text the way the GPT-2 pattern does, calling on_word(std::string_view) for
// each piece in order; the pieces cover the text exactly.
template <class OnWord>
void split_words(std::string_view text, OnWord&& on_word) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    const std::size_t length = detail::match_length(text, offset);
    on_word(text.substr(offset, length));
    offset += length;
  }
}

}  // namespace minimind::byte_level
