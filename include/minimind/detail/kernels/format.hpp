#pragma once
// The formats a weight matrix can be held in, chosen when a model is loaded.
//   f32   4 bytes per weight; viewed in place in the checkpoint when it is stored as F32.
//   bf16  2 bytes per weight (the top half of a float32); widened with one shift and multiplied
//         in float32. Viewed in place when the checkpoint stores BF16.
//   q8    int8 in blocks of 32 along each row with one float16 scale per block (like ggml's
//         Q8_0): 34 bytes per 32 weights. Products are integer dot products against activations
//         quantized the same way, scaled back to float per block.
#include "minimind/error.hpp"

#include <string>
#include <string_view>

namespace minimind {

enum class WeightFormat { F32, BF16, Q8 };

inline const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Q8: return "q8";
  }
  return "?";
}

inline WeightFormat parse_format(std::string_view name) {
  if (name == "f32") return WeightFormat::F32;
  if (name == "bf16") return WeightFormat::BF16;
  if (name == "q8") return WeightFormat::Q8;
  throw Error("unknown weight format \"" + std::string(name) + "\" (use f32, bf16 or q8)");
}

}  // namespace minimind
