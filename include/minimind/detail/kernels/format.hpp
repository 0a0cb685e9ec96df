#pragma once
// The formats a weight matrix can be held in, chosen when a model is loaded, and what every
// format's operations share. Each format is one file (f32.hpp, bf16.hpp, q8.hpp, f32_panels.hpp, q4.hpp, ggml.hpp)
// that ends in its `Format` traits: its name, bytes, conversion from f32, row widening (embedding
// lookup), the decode matrix-vector product, and the GEMM's block of widened rows and their cache
// lines (or, f32_panels, products of its own that the GEMM calls).
// formats.hpp lists them; linear, gemm, Weight and the loader go through that list only.
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <span>

namespace minimind {

// One value per format in formats.hpp's list, in the same order.
enum class WeightFormat { F32, BF16, Q8, F32Panels, Q4, Ggml };

namespace kernels {

// The activations of one position for a decode product: x, and what the formats in the product
// read besides: x quantized in q8 blocks (Format::kQuantizedInput), x quantized to int8 in q4's blocks
// with their scales and sums (Format::kInt8Input, q4.hpp), x in bf16's pair order
// (Format::kPairedInput, bf16::to_pair_order), x in k-major groups of positions (Format::kKMajorInput,
// f32_panels.hpp: this position's lane in its group).
struct DecodeInput {
  const float* x = nullptr;
  const int16_t* xq = nullptr;
  const float* xd = nullptr;
  const int8_t* x8 = nullptr;
  const float* x8_scale = nullptr;
  const int32_t* x8_sum = nullptr;
  const float* x_pairs = nullptr;
  const float* xk = nullptr;
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

// The loops around a decode kernel that reads each weight row once for several positions (f32's
// and bf16's register tiles, f32's dot_positions): the positions in passes of kPass, the last
// one of up to kLast; with more than one pass, the rows in chunks of 64, each chunk for every
// pass, so the passes after the first read it from cache. rows(b, e, x, out, count) does rows
// [b, e) for the `count` positions from x, their outputs at out.
template <size_t kPass, size_t kLast, class Rows>
void in_passes(std::span<const DecodeInput> in, float* y, Index y_stride, Index begin, Index end, Rows&& rows) {
  static_assert(kLast >= kPass);
  const Index chunk = in.size() > kLast ? 64 : end - begin;
  for (Index b = begin; b < end; b += chunk) {
    const Index e = std::min(end, b + chunk);
    for (size_t i0 = 0, count; i0 < in.size(); i0 += count) {
      count = in.size() - i0 <= kLast ? in.size() - i0 : kPass;
      rows(b, e, in.data() + i0, y + static_cast<Index>(i0) * y_stride, count);
    }
  }
}

// Rows [b, e) in tiles of R, then one at a time: tile.template operator()<R>(r), then <1>.
template <int R, class Tile>
void in_tiles(Index b, Index e, Tile&& tile) {
  Index r = b;
  for (; r + R <= e; r += R) tile.template operator()<R>(r);
  for (; r < e; ++r) tile.template operator()<1>(r);
}

}  // namespace kernels
}  // namespace minimind
