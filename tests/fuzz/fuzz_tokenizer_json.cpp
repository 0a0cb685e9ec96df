// Tokenizer::from_json_text on arbitrary bytes: a tokenizer.json is refused with a minimind::Error
// or loads into a tokenizer whose every operation keeps its contract. A loaded tokenizer encodes
// fixed probes and its own JSON text, decodes every id, and streams them; ids stay in range and
// the streamed text equals decode's.
#include "fuzz_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace minimind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<Tokenizer> loaded;
  if (fuzz::refused([&] { loaded.emplace(Tokenizer::from_json_text(text, "tokenizer.json")); })) return 0;
  const Tokenizer& tokenizer = *loaded;
  const std::int32_t vocab = tokenizer.vocab_size();

  std::vector<std::int32_t> all;
  for (const std::string_view probe : {std::string_view("Hello, world! 12 345"), std::string_view("中文 テスト 😀"),
                                       std::string_view("<|im_start|>user\n hi<|im_end|>"), std::string_view("  \n\t x"),
                                       text}) {
    std::vector<std::int32_t> ids;
    // Only ill-formed UTF-8 may be refused, and the probes are well formed; the JSON text is too
    // (nlohmann checks the UTF-8 of strings, and everything outside them is ASCII syntax).
    fuzz::require(!fuzz::refused([&] { ids = tokenizer.encode(probe); }), "encode refused well-formed text");
    for (const std::int32_t id : ids) fuzz::require(id >= 0 && id < vocab, "encode gave an id out of range");
    all.insert(all.end(), ids.begin(), ids.end());
  }

  // Every id, a bounded number of them, each way the API offers.
  const std::int32_t probed = std::min<std::int32_t>(vocab, 4096);
  for (std::int32_t id = 0; id < probed; ++id) {
    all.push_back(id);
    fuzz::require(tokenizer.token_to_id(tokenizer.id_to_token(id)) == id, "a token's spelling does not give back its id");
    (void)tokenizer.token_to_piece(id);
    (void)tokenizer.is_special(id);
  }
  for (const bool skip : {false, true}) {
    const std::string decoded = tokenizer.decode(all, skip);
    StreamingDecoder stream(tokenizer, skip);
    std::string joined;
    for (const std::int32_t id : all) joined += stream.push(id);
    joined += stream.flush();
    fuzz::require(joined == decoded, "the streamed pieces join to decode's text");
  }
  fuzz::require(fuzz::refused([&] { tokenizer.decode(std::vector<std::int32_t>{vocab}); }), "decode took id vocab_size");
  fuzz::require(fuzz::refused([&] { tokenizer.decode(std::vector<std::int32_t>{-1}); }), "decode took id -1");
  return 0;
}
