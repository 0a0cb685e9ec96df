// Tokenizer::encode on arbitrary bytes. Ill-formed UTF-8 must be refused with a minimind::Error
// (exactly when validate_utf8 refuses it); well-formed text must give in-range ids that decode
// back to the same text (byte-level BPE loses nothing), and encoding again (now through the word
// cache) must give the same ids.
#include "fuzz_support.hpp"

#include <minimind/detail/tokenizer/unicode.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

using namespace minimind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Tokenizer& tokenizer = fuzz::fuzz_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = !fuzz::refused([&] { unicode::validate_utf8(text, "input"); });
  std::vector<std::int32_t> ids;
  const bool encode_refused = fuzz::refused([&] { ids = tokenizer.encode(text); });
  fuzz::require(encode_refused == !valid, "encode refuses exactly the ill-formed UTF-8");
  if (!valid) return 0;
  for (const std::int32_t id : ids) fuzz::require(id >= 0 && id < tokenizer.vocab_size(), "encode gave an id out of range");
  fuzz::require(tokenizer.decode(ids) == text, "decode(encode(text)) == text");
  fuzz::require(tokenizer.encode(text) == ids, "a second encode (through the word cache) gives the same ids");
  return 0;
}
