#pragma once
// The model compiled once per project. A header-only library compiles the forward pass (and its
// kernels for every instruction set) in each translation unit that runs it, which makes a project
// of several such units slow to build. Include this header instead of <minimind/minimind.hpp>: the
// common instantiations below are then only declared, and exactly one source file of the project
// compiles them by writing `namespace minimind { MINIMIND_INSTANCES() }` after including it.
#include "minimind/minimind.hpp"

#include <cstdint>
#include <filesystem>
#include <span>

// EXTERN is `extern` for the declarations, empty for the definitions.
#define MINIMIND_INSTANCES(EXTERN)                                                                                   \
  EXTERN template class MiniMindForCausalLM<float>;                                                                  \
  EXTERN template class MiniMindForCausalLM<double>;                                                                 \
  EXTERN template GenerationResult generate<float>(const MiniMindForCausalLM<float>&, Session<float>&,               \
                                                   std::span<const int32_t>, const GenerationConfig&,                \
                                                   const TokenCallback&);                                            \
  EXTERN template GenerationResult generate_text<float>(const MiniMindForCausalLM<float>&, const Tokenizer&,         \
                                                        Session<float>&, std::span<const int32_t>,                   \
                                                        const GenerationConfig&, const TextCallback&);               \
  EXTERN template Trace trace<float>(const MiniMindForCausalLM<float>&, std::span<const int32_t>, const Tokenizer*,  \
                                     const TraceOptions&);                                                           \
  EXTERN template Pretrained<float> load_pretrained<float>(const std::filesystem::path&, const LoadOptions&,         \
                                                           const CheckpointOptions&);

namespace minimind {
MINIMIND_INSTANCES(extern)
}  // namespace minimind
