#pragma once
// The model's templates as the tests use them, instantiated once in the minimind_test_model
// library (model_instances.cpp) and declared `extern template` here, so that a test translation
// unit does not compile the whole forward pass and its kernels again. Every test sees this header
// through the tests' precompiled header (tests/CMakeLists.txt).
#include <minimind/minimind.hpp>

#include <cstdint>
#include <filesystem>
#include <span>

// EXTERN is `extern` for the declarations, empty for the definitions.
#define MINIMIND_TEST_INSTANCES(EXTERN)                                                                              \
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
MINIMIND_TEST_INSTANCES(extern)
}  // namespace minimind
