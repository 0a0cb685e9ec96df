// Tokenizer::decode and StreamingDecoder on arbitrary ids, in range or not. The input is read as
// a flag byte, then ids: two bytes each, spread over [-8, vocab + 8), or, after a 0xFF marker,
// four raw bytes (any int32, INT32_MIN and INT32_MAX included). Properties: an id out of range
// is refused with a minimind::Error by both; otherwise decode's text is valid UTF-8, and every
// piece the streaming decoder returns (each push, and the flush) is valid UTF-8 on its own and
// together they join to exactly decode's text.
#include "fuzz_support.hpp"

#include <minimind/detail/tokenizer/unicode.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace minimind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Tokenizer& tokenizer = fuzz::fuzz_tokenizer();
  if (size == 0) return 0;
  const bool skip_special = data[0] & 1;
  std::vector<std::int32_t> ids;
  bool any_out_of_range = false;
  for (std::size_t i = 1; i + 1 < size;) {
    std::int32_t id;
    if (data[i] == 0xFF && i + 5 <= size) {
      std::memcpy(&id, data + i + 1, 4);
      i += 5;
    } else {
      const int spread = tokenizer.vocab_size() + 16;
      id = static_cast<std::int32_t>((data[i] << 8 | data[i + 1]) % spread) - 8;
      i += 2;
    }
    any_out_of_range |= id < 0 || id >= tokenizer.vocab_size();
    ids.push_back(id);
  }

  std::string text;
  const bool decode_refused = fuzz::refused([&] { text = tokenizer.decode(ids, skip_special); });
  fuzz::require(decode_refused == any_out_of_range, "decode refuses exactly the ids out of range");
  if (!decode_refused) {
    fuzz::require(!fuzz::refused([&] { unicode::validate_utf8(text, "decoded"); }), "decode gives valid UTF-8");
  }

  StreamingDecoder stream(tokenizer, skip_special);
  std::string joined;
  bool stream_refused = false;
  const auto require_valid = [](const std::string& piece, const char* what) {
    fuzz::require(!fuzz::refused([&] { unicode::validate_utf8(piece, "piece"); }), what);
  };
  for (const std::int32_t id : ids) {
    std::string piece;
    if (fuzz::refused([&] { piece = stream.push(id); })) {
      fuzz::require(id < 0 || id >= tokenizer.vocab_size(), "the streaming decoder refused an id in range");
      stream_refused = true;
      break;
    }
    require_valid(piece, "a streamed piece is not valid UTF-8 on its own");
    joined += piece;
  }
  fuzz::require(stream_refused == any_out_of_range, "the streaming decoder refuses exactly the ids out of range");
  if (!stream_refused) {
    const std::string rest = stream.flush();
    require_valid(rest, "the streaming decoder's flush is not valid UTF-8");
    joined += rest;
    fuzz::require(joined == text, "the streamed pieces join to decode's text");
  }
  return 0;
}
