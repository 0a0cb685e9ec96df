#pragma once
// Shared by the libFuzzer targets: what counts as a finding, and the tokenizer the text targets
// run. A target must return normally for every input; only a minimind::Error is an acceptable way
// to refuse one. Anything else (another exception, a broken property) aborts, which libFuzzer
// reports as a crash with the input saved.
#include <minimind/error.hpp>
#include <minimind/tokenizer.hpp>
#include <minimind/detail/tokenizer/byte_level.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace minimind::fuzz {

// A broken property: print it and abort, so libFuzzer keeps the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

inline void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// Runs `body`; a minimind::Error is a clean refusal, any other exception a finding.
template <class Body>
bool refused(Body&& body) {
  try {
    body();
    return false;
  } catch (const Error&) {
    return true;
  } catch (const std::exception& e) {
    fail(std::string("exception other than minimind::Error: ") + e.what());
  }
}

// A byte-level tokenizer.json like MiniMind's, small enough to build in the target: the 256 byte
// tokens, a few merges (ASCII and a split CJK character), and added tokens of every flavour, so
// encode meets special tokens, lstrip/rstrip and single_word without ../shared.
inline nlohmann::json builtin_tokenizer_json() {
  using Json = nlohmann::json;
  Json vocab = Json::object();
  const auto spelled = [](unsigned byte) { return byte_level::to_byte_level(std::string(1, static_cast<char>(byte))); };
  for (unsigned byte = 0; byte < 256; ++byte) vocab[spelled(byte)] = byte;
  Json merges = Json::array();
  for (const auto& [left, right] : std::initializer_list<std::pair<std::string, std::string>>{
           {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"ä", "¸"}, {"ä¸", "Ń"}, {"Ġ", "Ġ"}}) {
    vocab[left + right] = vocab.size();
    merges.push_back(Json::array({left, right}));
  }
  Json added = Json::array();
  const auto add = [&](const char* content, bool special, bool lstrip, bool rstrip, bool single_word, bool normalized) {
    added.push_back({{"id", vocab.size() + added.size()}, {"content", content}, {"special", special}, {"lstrip", lstrip},
                     {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}});
  };
  add("<|im_start|>", true, false, false, false, false);
  add("<|im_end|>", true, false, false, false, false);
  add("<think>", false, false, false, false, false);
  add("<mask>", true, true, true, false, true);
  add("word", false, false, false, true, true);
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

// minimind-3's real tokenizer when ../shared is beside the checkout (it has the most added
// tokens), else the built-in one.
inline const Tokenizer& fuzz_tokenizer() {
  static const Tokenizer tokenizer = [] {
    const std::filesystem::path real = std::filesystem::path(MINIMIND_SHARED_DIR) / "minimind" / "minimind-3";
    if (std::filesystem::exists(real / "tokenizer.json")) {
      std::fprintf(stderr, "fuzz: tokenizer %s\n", real.c_str());
      return Tokenizer::from_pretrained(real);
    }
    std::fprintf(stderr, "fuzz: built-in tokenizer (%s not found)\n", real.c_str());
    return Tokenizer::from_json_text(builtin_tokenizer_json().dump(), "built-in tokenizer.json");
  }();
  return tokenizer;
}

}  // namespace minimind::fuzz
