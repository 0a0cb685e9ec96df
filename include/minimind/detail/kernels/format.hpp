#pragma once
// The formats a weight matrix can be held in, chosen when a model is loaded, and what every
// format's operations share. Each format is one file (f32.hpp, bf16.hpp, q8.hpp) that ends in its
// `Format` traits: its name, bytes, conversion from f32, row widening (embedding lookup), the
// decode matrix-vector product, and the GEMM's block of widened rows and their cache lines.
// formats.hpp lists them; linear, gemm, Weight and the loader go through that list only.
#include "minimind/tensor.hpp"

#include <cstdint>

namespace minimind {

// One value per format in formats.hpp's list, in the same order.
enum class WeightFormat { F32, BF16, Q8 };

namespace kernels {

// The activations of one position for a decode product: x, and what the formats in the product
// read besides: x quantized in q8 blocks (Format::kQuantizedInput), x in bf16's pair order
// (Format::kPairedInput, bf16::to_pair_order).
struct DecodeInput {
  const float* x = nullptr;
  const int16_t* xq = nullptr;
  const float* xd = nullptr;
  const float* x_pairs = nullptr;
};

// Where the bytes of a block of weight rows lie, for the GEMM to ask for them ahead: `rows` runs
// of `lines_per_row` cache lines from `first`, `row_bytes` apart. Empty: left to the hardware.
struct BlockLines {
  const char* first = nullptr;
  Index row_bytes = 0, rows = 0, lines_per_row = 0;
};

// Rows [r, r + mr), columns [k0, k0 + kc) of a row-major matrix of `size`-byte elements; one line
// more per row for a row that does not start on a line.
inline BlockLines dense_lines(const void* data, Index size, Index cols, Index r, Index mr, Index k0, Index kc) {
  return {static_cast<const char*>(data) + (r * cols + k0) * size, cols * size, mr, (kc * size + 63) / 64 + 1};
}

}  // namespace kernels
}  // namespace minimind
