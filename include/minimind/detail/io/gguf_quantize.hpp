#pragma once
// Floats to the bytes of a ggml tensor type: F32, F16, BF16 and the 32-value block types Q8_0,
// Q4_0, Q4_1, Q5_0 and Q5_1. Each block is bit for bit what llama.cpp's gguf-py
// (`gguf.quants.quantize`) makes from the same floats, which is also what llama.cpp's C reference
// quantizers make: the scale is computed in float32, its reciprocal multiplies (no division per
// value), and the scale is stored as the nearest float16. tests/data/quants holds gguf-py's output
// for edge cases (zero blocks, ties, negative extremes, subnormals) that test_gguf_writer compares.
#include "minimind/error.hpp"
#include "minimind/detail/io/gguf.hpp"
#include "minimind/detail/kernels/bf16.hpp"

#include <Eigen/Core>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace minimind::io::gguf {

// The ggml type ids the writer produces (the numbering of ggml.h's enum ggml_type).
enum class QuantType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, BF16 = 30 };

inline bool can_quantize(uint32_t type) {
  switch (type) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 30: return true;
    default: return false;
  }
}

// Bytes that `n` values take in `type`; an Error when n is not a whole number of its blocks.
inline size_t quantized_size(uint32_t type, uint64_t n, const std::string& what) {
  const TypeTraits t = type_traits(type);
  if (!t.name) throw Error(what + ": unknown ggml type " + std::to_string(type));
  if (n % t.block != 0) {
    throw Error(what + ": " + std::to_string(n) + " values are not a whole number of " + t.name + " blocks of " +
                std::to_string(t.block));
  }
  return static_cast<size_t>(n / t.block * t.bytes);
}

namespace quantize_detail {

inline void put_u16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void put_half(std::byte* p, float v) { put_u16(p, Eigen::numext::bit_cast<uint16_t>(Eigen::half(v))); }

// The value of largest magnitude, with its sign; the first of equal magnitudes.
inline float signed_absmax(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  return max;
}
inline float inverse_or_zero(float d) { return d == 0 ? 0.0f : 1.0f / d; }
// A level from its scaled value. Where 1 / d overflows (a block of values below about 1e-37) the
// scaled values are inf or NaN: level 0, which is what gguf-py's numpy casts give on x86 (the C
// reference's casts are undefined there); d then rounds to 0 in f16, so any level decodes the same.
inline uint8_t level(float scaled, int top) { return std::isfinite(scaled) ? static_cast<uint8_t>(std::min<float>(top, scaled)) : 0; }
// a * b rounded to float before anything is added to it: a compiler allowed to contract
// (-ffp-contract=fast, GCC's default in GNU mode, with FMA targets) would otherwise fuse the add
// into one rounding and move a value at a level boundary to the other level.
inline float product(float a, float b) {
  volatile float p = a * b;
  return p;
}

// Q8_0: [d f16][32 x int8], d = absmax / 127, q = round half away from zero (x / d).
inline void q8_0(const float* x, std::byte* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127, id = inverse_or_zero(d);
  put_half(out, d);
  for (int j = 0; j < 32; ++j) {
    const float q = std::round(x[j] * id);
    out[2 + j] = static_cast<std::byte>(std::isfinite(q) ? static_cast<int8_t>(q) : 0);
  }
}

// Q4_0 / Q5_0: d = (signed extreme) / -2^(bits-1), so the extreme maps to level 0 exactly and the
// other end may clip; q = trunc(x / d + 2^(bits-1) + 0.5) clipped to the top level.
template <int Bits>
void symmetric(const float* x, std::byte* out) {
  constexpr int half = 1 << (Bits - 1), top = (1 << Bits) - 1;
  const float d = signed_absmax(x) / -static_cast<float>(half), id = inverse_or_zero(d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = level(std::trunc(product(x[j], id) + (half + 0.5f)), top);
  put_half(out, d);
  out += 2;
  if constexpr (Bits == 5) {
    uint32_t high = 0;  // bit j: the fifth bit of q[j]
    for (int j = 0; j < 32; ++j) high |= static_cast<uint32_t>(q[j] >> 4) << j;
    std::memcpy(out, &high, 4);
    out += 4;
  }
  for (int j = 0; j < 16; ++j) out[j] = static_cast<std::byte>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Q4_1 / Q5_1: [d f16][m f16], m = min, d = (max - min) / top, q = trunc((x - m) / d + 0.5).
template <int Bits>
void affine(const float* x, std::byte* out) {
  constexpr int top = (1 << Bits) - 1;
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / static_cast<float>(top), id = inverse_or_zero(d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = level(std::trunc(product(x[j] - lo, id) + 0.5f), top);
  put_half(out, d);
  put_half(out + 2, lo);
  out += 4;
  if constexpr (Bits == 5) {
    uint32_t high = 0;
    for (int j = 0; j < 32; ++j) high |= static_cast<uint32_t>(q[j] >> 4) << j;
    std::memcpy(out, &high, 4);
    out += 4;
  }
  for (int j = 0; j < 16; ++j) out[j] = static_cast<std::byte>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

}  // namespace quantize_detail

// Encodes `values` as `type` into `out` (quantized_size bytes). `what` names the tensor in errors.
inline void quantize(uint32_t type, std::span<const float> values, std::byte* out, const std::string& what) {
  namespace qd = quantize_detail;
  const size_t n = values.size();
  quantized_size(type, n, what);  // (checks the whole blocks)
  const float* x = values.data();
  switch (static_cast<QuantType>(type)) {
    case QuantType::F32: std::memcpy(out, x, n * 4); return;
    case QuantType::F16: for (size_t i = 0; i < n; ++i) qd::put_half(out + 2 * i, x[i]); return;
    case QuantType::BF16: for (size_t i = 0; i < n; ++i) qd::put_u16(out + 2 * i, kernels::bf16::from_float(x[i])); return;
    case QuantType::Q8_0: for (size_t b = 0; b < n / 32; ++b) qd::q8_0(x + 32 * b, out + 34 * b); return;
    case QuantType::Q4_0: for (size_t b = 0; b < n / 32; ++b) qd::symmetric<4>(x + 32 * b, out + 18 * b); return;
    case QuantType::Q5_0: for (size_t b = 0; b < n / 32; ++b) qd::symmetric<5>(x + 32 * b, out + 22 * b); return;
    case QuantType::Q4_1: for (size_t b = 0; b < n / 32; ++b) qd::affine<4>(x + 32 * b, out + 20 * b); return;
    case QuantType::Q5_1: for (size_t b = 0; b < n / 32; ++b) qd::affine<5>(x + 32 * b, out + 24 * b); return;
  }
  throw Error(what + ": no quantizer for ggml type " + std::string(type_traits(type).name ? type_traits(type).name : "?") +
              " (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 are written)");
}

}  // namespace minimind::io::gguf
