#pragma once
// A checkpoint ready to run: its model, its tokenizer when it has one, and its generation
// defaults, from any path load_checkpoint reads (a directory, or a .safetensors/.pth/.gguf file).
// What the example programs load; above the model, the tokenizer and generation, which do not
// depend on each other through it.
#include "minimind/checkpoint.hpp"
#include "minimind/error.hpp"
#include "minimind/generate.hpp"
#include "minimind/model.hpp"
#include "minimind/tokenizer.hpp"

#include <filesystem>
#include <optional>

namespace minimind {

// The GGUF's own tokenizer, else tokenizer.json (+ tokenizer_config.json) in the checkpoint's
// directory; nullopt when there is neither.
inline std::optional<Tokenizer> load_tokenizer(const Checkpoint& checkpoint) {
  if (checkpoint.tokenizer_json) {
    return Tokenizer::from_json(*checkpoint.tokenizer_json, checkpoint.path.string() + " (tokenizer metadata)",
                                checkpoint.tokenizer_config_json ? &*checkpoint.tokenizer_config_json : nullptr);
  }
  if (std::filesystem::exists(checkpoint.directory() / "tokenizer.json")) {
    return Tokenizer::from_pretrained(checkpoint.directory());
  }
  return std::nullopt;
}

template <class T>
struct Pretrained {
  std::filesystem::path path;  // as given
  MiniMindForCausalLM<T> model;
  std::optional<Tokenizer> tokenizer;
  GenerationConfig generation;  // generation_config.json beside the weights, else upstream's defaults

  const Tokenizer& require_tokenizer() const {
    if (!tokenizer) {
      throw Error(path.string() +
                  ": no tokenizer (no tokenizer.json, no GGUF tokenizer metadata), so text prompts are not possible (use --ids)");
    }
    return *tokenizer;
  }
};

template <class T>
Pretrained<T> load_pretrained(const std::filesystem::path& path, const LoadOptions& options = {},
                              const CheckpointOptions& checkpoint_options = {}) {
  const Checkpoint checkpoint = load_checkpoint(path, checkpoint_options);
  Pretrained<T> p{path, MiniMindForCausalLM<T>::from_tensors(checkpoint.config, checkpoint.tensors, options),
                  load_tokenizer(checkpoint), {}};
  p.generation = GenerationConfig::from_pretrained(checkpoint.directory(), p.model.config(), p.tokenizer ? &*p.tokenizer : nullptr);
  return p;
}

}  // namespace minimind
