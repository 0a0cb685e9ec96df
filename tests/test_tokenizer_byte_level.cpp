// minimind/detail/tokenizer/byte_level.hpp: GPT-2's byte map, split pattern and decoding rule.
#include "minimind/detail/tokenizer/byte_level.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

namespace byte_level = minimind::byte_level;

namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> words;
  byte_level::split_words(text, [&](std::string_view word) { words.emplace_back(word); });
  return words;
}

using Words = std::vector<std::string>;

}  // namespace

TEST_CASE("the byte map is GPT-2's bytes_to_unicode") {
  std::set<char32_t> characters;
  for (unsigned byte = 0; byte < 256; ++byte) {
    const char32_t character = byte_level::byte_to_code_point()[byte];
    characters.insert(character);
    CHECK(byte_level::code_point_to_byte(character) == byte);
  }
  CHECK(characters.size() == 256);
  CHECK(byte_level::byte_to_code_point()[' '] == U'Ġ');
  CHECK(byte_level::byte_to_code_point()['\n'] == U'Ċ');
  CHECK(byte_level::byte_to_code_point()[0] == U'Ā');
  CHECK(byte_level::byte_to_code_point()['a'] == U'a');
  CHECK(byte_level::byte_to_code_point()[0xAD] == U'Ń');  // soft hyphen is remapped
  CHECK(byte_level::byte_to_code_point()[0xE4] == U'ä');
  CHECK_FALSE(byte_level::code_point_to_byte(U' ').has_value());
  CHECK_FALSE(byte_level::code_point_to_byte(U'中').has_value());
  CHECK(byte_level::to_byte_level(" hello\n") == "ĠhelloĊ");
  CHECK(byte_level::to_byte_level("中") == "ä¸Ń");
}

TEST_CASE("token_bytes maps byte-level tokens back, and leaves other tokens as they are") {
  CHECK(byte_level::token_bytes("Ġhello") == " hello");
  CHECK(byte_level::token_bytes("ä¸") == "\xE4\xB8");  // half a character
  CHECK(byte_level::token_bytes("<|im_start|>") == "<|im_start|>");
  CHECK(byte_level::token_bytes("你好") == "你好");  // not byte-level characters: kept whole
  CHECK(byte_level::token_bytes("a b") == "a b");  // ' ' itself is outside the map
  CHECK(byte_level::token_bytes("") == "");
}

TEST_CASE("split_words follows the GPT-2 pattern (Hugging Face's own examples)") {
  CHECK(split("Hello my friend, how is your day going?") ==
        Words{"Hello", " my", " friend", ",", " how", " is", " your", " day", " going", "?"});
  CHECK(split("Hello there\nHello there") == Words{"Hello", " there", "\n", "Hello", " there"});
  CHECK(split("Hello there       dear") == Words{"Hello", " there", "      ", " dear"});
  CHECK(split("i⭢j") == Words{"i", "⭢", "j"});
  CHECK(split("") == Words{});
}

TEST_CASE("split_words: a whitespace run leaves its last character to the next word") {
  CHECK(split("a  b") == Words{"a", " ", " b"});
  CHECK(split("a\t\tb") == Words{"a", "\t", "\t", "b"});  // only ' ' joins a word
  CHECK(split(" \ta") == Words{" ", "\t", "a"});
  CHECK(split("a \n b") == Words{"a", " \n", " b"});
  CHECK(split("end   ") == Words{"end", "   "});  // at the end the run stays whole
  CHECK(split("  ") == Words{"  "});
  CHECK(split(" ") == Words{" "});
  CHECK(split("\r\n") == Words{"\r\n"});
  CHECK(split("a\u3000b") == Words{"a", "\u3000", "b"});  // U+3000 is \s
  CHECK(split("a  \u0085") == Words{"a", "  \u0085"});  // so is U+0085
}

TEST_CASE("split_words: contractions are lowercase only and taken before punctuation") {
  CHECK(split("I'm don't we'll they're I've he'd it's") ==
        Words{"I", "'m", " don", "'t", " we", "'ll", " they", "'re", " I", "'ve", " he", "'d",
              " it", "'s"});
  CHECK(split("I'M WE'LL") == Words{"I", "'", "M", " WE", "'", "LL"});
  CHECK(split("'sa") == Words{"'s", "a"});
  CHECK(split("'x") == Words{"'", "x"});
  CHECK(split(" 's") == Words{" '", "s"});  // " ?[^\s\p{L}\p{N}]+" comes first at the space
  CHECK(split("?'s") == Words{"?'", "s"});
  CHECK(split("\u0085'll") == Words{"\u0085", "'ll"});
  CHECK(split("\ufeff's") == Words{"\ufeff'", "s"});  // U+FEFF is not \s: it joins the quote
}

TEST_CASE("split_words: letters, numbers and other characters by Unicode class") {
  CHECK(split("abc123 456x") == Words{"abc", "123", " 456", "x"});
  CHECK(split("你好，世界！") == Words{"你好", "，", "世界", "！"});
  CHECK(split("e\u0301") == Words{"e", "\u0301"});  // a combining mark is not \p{L}
  CHECK(split("٣٤ Ⅻ") == Words{"٣٤", " Ⅻ"});
  CHECK(split("a 😀😀 b") == Words{"a", " 😀😀", " b"});
  CHECK(split("x = f(y);") == Words{"x", " =", " f", "(", "y", ");"});
  CHECK(split(std::string("a\0b", 3)) == Words{"a", std::string("\0", 1), "b"});
}
