// minimind/detail/tokenizer/unicode.hpp: the generated class tables and UTF-8 handling.
#include "minimind/detail/tokenizer/unicode.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

using minimind::Error;
using minimind::unicode::CodePointClass;
using minimind::unicode::code_point_class;
using minimind::unicode::is_word_character;

TEST_CASE("code point classes cover CJK, emoji, marks and every kind of space") {
  CHECK(code_point_class(U'a') == CodePointClass::letter);
  CHECK(code_point_class(U'中') == CodePointClass::letter);
  CHECK(code_point_class(0x20000) == CodePointClass::letter);  // CJK Extension B, a UCD range
  CHECK(code_point_class(U'ß') == CodePointClass::letter);
  CHECK(code_point_class(U'7') == CodePointClass::number);
  CHECK(code_point_class(U'７') == CodePointClass::number);  // full-width digit
  CHECK(code_point_class(U'Ⅻ') == CodePointClass::number);  // Nl
  CHECK(code_point_class(U'½') == CodePointClass::number);  // No
  CHECK(code_point_class(U' ') == CodePointClass::whitespace);
  CHECK(code_point_class(U'\t') == CodePointClass::whitespace);
  CHECK(code_point_class(0x3000) == CodePointClass::whitespace);  // ideographic space
  CHECK(code_point_class(0x0085) == CodePointClass::whitespace);  // NEL: Oniguruma's \s has it
  CHECK(code_point_class(0x00A0) == CodePointClass::whitespace);
  CHECK(code_point_class(0x2028) == CodePointClass::whitespace);
  CHECK(code_point_class(0xFEFF) == CodePointClass::other);  // BOM is not White_Space
  CHECK(code_point_class(0x200B) == CodePointClass::other);  // nor is ZERO WIDTH SPACE
  CHECK(code_point_class(0x0301) == CodePointClass::other);  // a combining mark is not \p{L}
  CHECK(code_point_class(U'😀') == CodePointClass::other);
  CHECK(code_point_class(U'，') == CodePointClass::other);
  CHECK(code_point_class(0x10FFFF) == CodePointClass::other);
  CHECK(code_point_class(0x110000) == CodePointClass::other);  // beyond Unicode: no table read

  CHECK(is_word_character(U'a'));
  CHECK(is_word_character(U'_'));
  CHECK(is_word_character(U'中'));
  CHECK(is_word_character(0x0301));  // marks are \w in Rust's regex
  CHECK(is_word_character(0x200D));  // Join_Control
  CHECK_FALSE(is_word_character(U'-'));
  CHECK_FALSE(is_word_character(U' '));
  CHECK_FALSE(is_word_character(U'😀'));
}

namespace {

// General category of every code point, read the way the generator reads UnicodeData.txt.
std::vector<std::string> read_categories(const std::filesystem::path& file) {
  std::vector<std::string> categories(0x110000, "Cn");
  std::ifstream in(file);
  std::string line;
  std::uint32_t range_start = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ';');) fields.push_back(field);
    const auto code_point = static_cast<std::uint32_t>(std::stoul(fields[0], nullptr, 16));
    if (fields[1].ends_with(", First>")) {
      range_start = code_point;
      continue;
    }
    const std::uint32_t first = fields[1].ends_with(", Last>") ? range_start : code_point;
    for (std::uint32_t cp = first; cp <= code_point; ++cp) categories[cp] = fields[2];
  }
  return categories;
}

// Code points with the White_Space property in PropList.txt ("0009..000D ; White_Space # ...").
std::vector<bool> read_white_space(const std::filesystem::path& file) {
  std::vector<bool> white_space(0x110000, false);
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("; White_Space") == std::string::npos) continue;
    const std::size_t dots = line.find("..");
    const auto first = static_cast<std::uint32_t>(std::stoul(line, nullptr, 16));
    const auto last = dots < line.find(';')
                          ? static_cast<std::uint32_t>(std::stoul(line.substr(dots + 2), nullptr, 16))
                          : first;
    for (std::uint32_t cp = first; cp <= last; ++cp) white_space[cp] = true;
  }
  return white_space;
}

}  // namespace

// The committed header must agree with the Unicode data installed here; if Debian's package moves
// on, this says to run tools/gen_unicode_tables.py again.
TEST_CASE("the generated tables match UnicodeData.txt and PropList.txt for every code point") {
  const std::filesystem::path ucd = "/usr/share/unicode";
  if (!std::filesystem::exists(ucd / "UnicodeData.txt")) {
    minimind::testing::skip_test(ucd.string() + "/UnicodeData.txt not found (Debian package unicode-data)");
    return;
  }
  const std::vector<std::string> categories = read_categories(ucd / "UnicodeData.txt");
  const std::vector<bool> white_space = read_white_space(ucd / "PropList.txt");
  std::size_t mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    const CodePointClass got = code_point_class(cp);
    const char major = categories[cp][0];
    const CodePointClass want = white_space[cp] ? CodePointClass::whitespace
                                : major == 'L'  ? CodePointClass::letter
                                : major == 'N'  ? CodePointClass::number
                                                : CodePointClass::other;
    if (got != want && ++mismatches <= 5) {
      MESSAGE("U+" << std::hex << static_cast<std::uint32_t>(cp) << " is " << categories[cp]);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("validate_utf8 names the byte offset of the first ill-formed sequence") {
  using minimind::unicode::validate_utf8;
  CHECK_NOTHROW(validate_utf8("", "text"));
  CHECK_NOTHROW(validate_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF", "text"));
  const auto offset_of_error = [](const std::string& bytes) -> std::string {
    try {
      validate_utf8(bytes, "text");
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  CHECK(offset_of_error("ab\x80") == "text: invalid UTF-8 at byte offset 2");  // lone continuation
  CHECK(offset_of_error("a\xC0\x80") == "text: invalid UTF-8 at byte offset 1");  // overlong NUL
  CHECK(offset_of_error("\xE0\x80\x80") == "text: invalid UTF-8 at byte offset 0");  // overlong
  CHECK(offset_of_error("xy\xED\xA0\x80") == "text: invalid UTF-8 at byte offset 2");  // surrogate
  CHECK(offset_of_error("\xF4\x90\x80\x80") == "text: invalid UTF-8 at byte offset 0");  // > 10FFFF
  CHECK(offset_of_error("\xF5\x80\x80\x80") == "text: invalid UTF-8 at byte offset 0");
  CHECK(offset_of_error("\xFF") == "text: invalid UTF-8 at byte offset 0");
  CHECK(offset_of_error("ok\xE4\xB8") ==
        "text: invalid UTF-8 at byte offset 2 (truncated sequence at the end)");
}

TEST_CASE("to_valid_utf8 replaces each maximal ill-formed subpart with one U+FFFD") {
  using minimind::unicode::to_valid_utf8;
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(to_valid_utf8("plain 中文") == "plain 中文");
  CHECK(to_valid_utf8("\xF0\x90\x80" "a") == fffd + "a");  // one subpart of three bytes
  CHECK(to_valid_utf8("\xE0\x80") == fffd + fffd);  // 80 cannot follow E0: two subparts
  CHECK(to_valid_utf8("\xED\xA0\x80") == fffd + fffd + fffd);  // a surrogate: three
  CHECK(to_valid_utf8("\x80\x80") == fffd + fffd);
  CHECK(to_valid_utf8("a\xE4\xB8") == "a" + fffd);  // truncated at the end: one
  CHECK(to_valid_utf8(std::string("\0", 1)) == std::string("\0", 1));
}

TEST_CASE("append_valid_utf8 holds back only a tail that may still complete") {
  using minimind::unicode::append_valid_utf8;
  std::string out;
  CHECK(append_valid_utf8(out, "ab\xE4\xB8", false) == 2);
  CHECK(out == "ab");
  out.clear();
  // 0xE4 0x41 can never complete: it is rendered now, not held back.
  CHECK(append_valid_utf8(out, "\xE4" "A\xF0\x9F", false) == 2);
  CHECK(out == "\xEF\xBF\xBD" "A");
  out.clear();
  CHECK(append_valid_utf8(out, "\xE4\xB8", true) == 2);
  CHECK(out == "\xEF\xBF\xBD");
}

TEST_CASE("append_utf8 and decode_valid round-trip every code point length") {
  for (const char32_t cp : {char32_t{0}, char32_t{0x7F}, char32_t{0x80}, char32_t{0x7FF},
                            char32_t{0x800}, char32_t{0xFFFF}, char32_t{0x10000}, char32_t{0x10FFFF}}) {
    std::string bytes;
    minimind::unicode::append_utf8(bytes, cp);
    CHECK_NOTHROW(minimind::unicode::validate_utf8(bytes, "encoded"));
    std::size_t length = 0;
    CHECK(minimind::unicode::decode_valid(bytes, 0, length) == cp);
    CHECK(length == bytes.size());
  }
}
