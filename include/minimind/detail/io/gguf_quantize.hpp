#pragma once
// Floats to the bytes of a ggml tensor type: F32, F16, BF16, the 32-value block types Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1, and the 256-value K types Q4_K and Q6_K, written into the block layouts of
// kernels/ggml_quants.hpp and ggml_kquants.hpp that read them back.
//   - The 32-value blocks are bit for bit what llama.cpp's gguf-py (`gguf.quants.quantize`) makes
//     from the same floats, which is also what llama.cpp's C reference quantizers make: the scale
//     is computed in float32, its reciprocal multiplies (no division per value), and the scale is
//     stored as the nearest float16. tests/data/quants holds gguf-py's output for edge cases (zero
//     blocks, ties, negative extremes, subnormals) that test_gguf_writer compares.
//   - gguf-py has no K quantizers; Q4_K and Q6_K are bit for bit what llama-quantize writes without
//     an importance matrix (its reference quantizers), checked against its output in
//     tests/data/kquants. Q4_K fits each sub-block of 32 an affine grid (scale and minimum) by a
//     weighted least-squares search over 21 candidate scales; Q6_K fits each sub-block of 16 a
//     symmetric grid by a least-squares search over 19 (weights x^2). The sub-block scales are then
//     themselves quantized against the block's float16 scale (6 bits for Q4_K, 8 for Q6_K) and every
//     value is re-rounded against its sub-block's final scale.
#include "minimind/error.hpp"
#include "minimind/detail/io/gguf.hpp"
#include "minimind/detail/kernels/bf16.hpp"
#include "minimind/detail/kernels/ggml_kquants.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace minimind::io::gguf {

// The ggml type ids the writer produces (the numbering of ggml.h's enum ggml_type).
enum class QuantType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30 };

inline bool can_quantize(uint32_t type) {
  switch (type) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 12: case 14: case 30: return true;
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

namespace gg = kernels::ggml;

inline uint16_t half_bits(float v) { return Eigen::numext::bit_cast<uint16_t>(Eigen::half(v)); }
template <class Block>
void put_block(const Block& b, std::byte* out) {
  std::memcpy(out, &b, sizeof(Block));
}

// v rounded to float where it stands. A compiler allowed to contract (-ffp-contract=fast, GCC's
// default in GNU mode, with FMA targets; clang within one expression) would otherwise fuse a
// product into the add that follows it, one rounding instead of two, and move a value at a level
// boundary to the other level or a search to another candidate. The empty asm costs nothing.
inline float rounded(float v) {
#if defined(__GNUC__) && defined(__SSE2__)
  __asm__("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(v));
#else
  volatile float kept = v;
  v = kept;
#endif
  return v;
}

// The nearest integer, ties to even (the rounding of ggml's K quantizers, for |v| < 2^22).
inline int nearest(float v) { return static_cast<int>(std::nearbyint(v)); }

// The value of largest magnitude, with its sign; the first of equal magnitudes.
inline float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  return max;
}
inline float inverse_or_zero(float d) { return d == 0 ? 0.0f : 1.0f / d; }
// A level from its scaled value. Where 1 / d overflows (a block of values below about 1e-37) the
// scaled values are inf or NaN: level 0, which is what gguf-py's numpy casts give on x86 (the C
// reference's casts are undefined there); d then rounds to 0 in f16, so any level decodes the same.
inline uint8_t level(float scaled, int top) { return std::isfinite(scaled) ? static_cast<uint8_t>(std::min<float>(top, scaled)) : 0; }

// 32 levels as 16 bytes: level j in the low nibble of byte j, level j + 16 in its high nibble.
inline void to_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}
// The fifth bits of 32 levels, bit j of the little-endian 4 bytes for level j.
inline void to_fifth_bits(const uint8_t* q, uint8_t (&qh)[4]) {
  uint32_t high = 0;
  for (int j = 0; j < 32; ++j) high |= static_cast<uint32_t>(q[j] >> 4) << j;
  std::memcpy(qh, &high, 4);
}

// Q8_0: d = absmax / 127, q = round half away from zero (x / d).
inline void q8_0(const float* x, std::byte* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127, id = inverse_or_zero(d);
  gg::Q8_0::Block b;
  b.d = half_bits(d);
  for (int j = 0; j < 32; ++j) {
    const float q = std::round(x[j] * id);
    b.qs[j] = std::isfinite(q) ? static_cast<int8_t>(q) : 0;
  }
  put_block(b, out);
}

// Q4_0 / Q5_0: d = (signed extreme) / -2^(bits-1), so the extreme maps to level 0 exactly and the
// other end may clip; q = trunc(x / d + 2^(bits-1) + 0.5) clipped to the top level.
template <class Q, int Bits>
void symmetric(const float* x, std::byte* out) {
  constexpr int half = 1 << (Bits - 1), top = (1 << Bits) - 1;
  const float d = signed_absmax(x, 32) / -static_cast<float>(half), id = inverse_or_zero(d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = level(std::trunc(rounded(x[j] * id) + (half + 0.5f)), top);
  typename Q::Block b;
  b.d = half_bits(d);
  if constexpr (Bits == 5) to_fifth_bits(q, b.qh);
  to_nibbles(q, b.qs);
  put_block(b, out);
}

// Q4_1 / Q5_1: m = min, d = (max - min) / top, q = trunc((x - m) / d + 0.5).
template <class Q, int Bits>
void affine(const float* x, std::byte* out) {
  constexpr int top = (1 << Bits) - 1;
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / static_cast<float>(top), id = inverse_or_zero(d);
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = level(std::trunc(rounded((x[j] - lo) * id) + 0.5f), top);
  typename Q::Block b;
  b.d = half_bits(d);
  b.m = half_bits(lo);
  if constexpr (Bits == 5) to_fifth_bits(q, b.qh);
  to_nibbles(q, b.qs);
  put_block(b, out);
}

// Q4_K's sub-block fit: levels L in [0, top] (scratch: as many more) and the scale and minimum
// with x ~ scale * L - min, min >= 0, minimising sum w (scale * L - min - x)^2. The first
// candidate spans [min(x, 0), max(x)] with `top` steps; then, for top - 1, -0.9, ... top + 1
// steps over the same span, the levels are rounded and the least-squares scale and minimum for
// them are solved (the minimum clipped at 0), keeping the candidate of least weighted error.
inline float fit_affine(const float* x, const float* w, int n, int top, uint8_t* L, uint8_t* scratch, float& min_out) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += rounded(w[i] * x[i]);
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, 0);
    min_out = -lo;
    return 0;
  }
  float iscale = static_cast<float>(top) / (hi - lo), scale = 1 / iscale, best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest(iscale * (x[i] - lo)), 0, top));
    const float diff = rounded(scale * L[i]) + lo - x[i];
    best_error += rounded(w[i] * (diff * diff));
  }
  for (int step = 0; step <= 20; ++step) {
    iscale = (rounded(0.1f * static_cast<float>(step)) + -1.0f + static_cast<float>(top)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, top);
      scratch[i] = static_cast<uint8_t>(l);
      const float wl = rounded(w[i] * static_cast<float>(l));
      sum_l += wl;
      sum_l2 += rounded(wl * static_cast<float>(l));
      sum_xl += rounded(wl * x[i]);
    }
    const float det = rounded(sum_w * sum_l2) - rounded(sum_l * sum_l);
    if (!(det > 0)) continue;
    float this_scale = (rounded(sum_w * sum_xl) - rounded(sum_x * sum_l)) / det;
    float this_min = (rounded(sum_l2 * sum_x) - rounded(sum_l * sum_xl)) / det;
    if (this_min > 0) this_min = 0, this_scale = sum_xl / sum_l2;
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = rounded(this_scale * scratch[i]) + this_min - x[i];
      error += rounded(w[i] * (diff * diff));
    }
    if (error < best_error) {
      std::copy(scratch, scratch + n, L);
      best_error = error, scale = this_scale, lo = this_min;
    }
  }
  min_out = -lo;
  return scale;
}

// Q4_K: each sub-block of 32 fitted with weights rms(sub-block) + |x|; the 8 scales and minima
// quantized to 6 bits against d = max scale / 63 and dmin = max minimum / 63; every value then
// re-rounded against its sub-block's final (scale, minimum). A sub-block whose scale became 0
// keeps the levels of its fit.
inline void q4_k(const float* x, std::byte* out) {
  uint8_t L[256], scratch[32];
  float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += rounded(xs[l] * xs[l]);
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
    scales[s] = fit_affine(xs, w, 32, 15, L + 32 * s, scratch, mins[s]);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  const float inv_scale = max_scale > 0 ? 63 / max_scale : 0, inv_min = max_min > 0 ? 63 / max_min : 0;
  gg::Q4_K::Block b{};
  for (int s = 0; s < 8; ++s) {
    // (a negative scale wraps through uint8 to above 63, as the reference's conversion does)
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest(inv_scale * scales[s])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest(inv_min * mins[s])));
    if (s < 4) {  // the layout gg::k_scale and gg::k_min read
      b.scales[s] = ls, b.scales[s + 4] = lm;
    } else {
      b.scales[s + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      b.scales[s - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      b.scales[s] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  b.d = half_bits(max_scale / 63), b.dmin = half_bits(max_min / 63);
  for (int s = 0; s < 8; ++s) {
    const float d = gg::half_to_float(b.d) * static_cast<float>(gg::k_scale(b.scales, s));
    if (d == 0) continue;
    const float dm = rounded(gg::half_to_float(b.dmin) * static_cast<float>(gg::k_min(b.scales, s)));
    for (int l = 0; l < 32; ++l) L[32 * s + l] = static_cast<uint8_t>(std::clamp(nearest((x[32 * s + l] + dm) / d), 0, 15));
  }
  for (int c = 0; c < 4; ++c)  // sub-blocks 2c and 2c + 1 share bytes 32c.., low and high nibble
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  put_block(b, out);
}

// Q6_K's sub-block fit: levels L in [0, 63] for codes L - 32 and the scale with x ~ scale * code,
// weights x^2. The extreme value maps to code -32 exactly; then 18 nearby scales (the extreme to
// -32 -/+ 0.1 .. 0.9) are tried, keeping the one with the largest (sum w x l)^2 / sum w l^2
// (least-squares scale for those codes). An all-zero sub-block is levels 0, scale 0.
inline float fit_symmetric(const float* x, int n, int8_t* L) {
  constexpr int half = 32;
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0;
  }
  auto sums = [&](float iscale, float& sum_xl, float& sum_l2) {
    sum_xl = 0, sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(std::clamp(nearest(iscale * x[i]), -half, half - 1)), w = x[i] * x[i];
      sum_xl += rounded(w * x[i] * l);
      sum_l2 += rounded(w * l * l);
    }
  };
  auto levels = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(half + std::clamp(nearest(iscale * x[i]), -half, half - 1));
  };
  float iscale = -static_cast<float>(half) / max, sum_xl, sum_l2;
  levels(iscale);
  sums(iscale, sum_xl, sum_l2);
  float scale = sum_l2 != 0 ? sum_xl / sum_l2 : 0, best = scale * sum_xl;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(half) + rounded(0.1f * static_cast<float>(step))) / max;
    sums(iscale, sum_xl, sum_l2);
    if (sum_l2 > 0 && sum_xl * sum_xl > best * sum_l2) {
      levels(iscale);
      scale = sum_xl / sum_l2, best = scale * sum_xl;
    }
  }
  return scale;
}

// Q6_K: each sub-block of 16 fitted; the 16 scales quantized to int8 against d = -(scale of
// largest magnitude) / 128; every value re-rounded against its sub-block's final scale (a
// sub-block whose scale became 0 keeps the levels of its fit). A block of (near) zeros is all 0.
inline void q6_k(const float* x, std::byte* out) {
  int8_t L[256];
  float scales[16], max_scale = 0, max_abs_scale = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = fit_symmetric(x + 16 * s, 16, L + 16 * s);
    if (std::fabs(scales[s]) > max_abs_scale) max_abs_scale = std::fabs(scales[s]), max_scale = scales[s];
  }
  gg::Q6_K::Block b{};
  if (max_abs_scale < 1e-15f) {
    put_block(b, out);
    return;
  }
  const float iscale = -128 / max_scale;
  b.d = half_bits(1 / iscale);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(std::min(127, nearest(iscale * scales[s])));
  for (int s = 0; s < 16; ++s) {
    const float d = gg::half_to_float(b.d) * static_cast<float>(b.scales[s]);
    if (d == 0) continue;
    for (int l = 0; l < 16; ++l) L[16 * s + l] = static_cast<int8_t>(32 + std::clamp(nearest(x[16 * s + l] / d), -32, 31));
  }
  // Value i = 128 h + 32 k + l: low nibble into ql (see gg::Q6_K), high 2 bits at bits 2k of qh.
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = i / 32 % 4, l = i % 32, q = L[i];
    b.ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 0x0F) << (4 * (k / 2)));
    b.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
  put_block(b, out);
}

template <class Q, class Encode>
void blocks(const float* x, size_t n, std::byte* out, Encode encode) {
  for (size_t i = 0; i < n / Q::kValues; ++i) encode(x + i * Q::kValues, out + i * sizeof(typename Q::Block));
}

}  // namespace quantize_detail

// Encodes `values` as `type` into `out` (quantized_size bytes). `what` names the tensor in errors.
inline void quantize(uint32_t type, std::span<const float> values, std::byte* out, const std::string& what) {
  namespace qd = quantize_detail;
  namespace gg = kernels::ggml;
  const size_t n = values.size();
  quantized_size(type, n, what);  // (checks the whole blocks)
  const float* x = values.data();
  switch (static_cast<QuantType>(type)) {
    case QuantType::F32: std::memcpy(out, x, n * 4); return;
    case QuantType::F16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = qd::half_bits(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case QuantType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = kernels::bf16::from_float(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case QuantType::Q8_0: qd::blocks<gg::Q8_0>(x, n, out, qd::q8_0); return;
    case QuantType::Q4_0: qd::blocks<gg::Q4_0>(x, n, out, qd::symmetric<gg::Q4_0, 4>); return;
    case QuantType::Q5_0: qd::blocks<gg::Q5_0>(x, n, out, qd::symmetric<gg::Q5_0, 5>); return;
    case QuantType::Q4_1: qd::blocks<gg::Q4_1>(x, n, out, qd::affine<gg::Q4_1, 4>); return;
    case QuantType::Q5_1: qd::blocks<gg::Q5_1>(x, n, out, qd::affine<gg::Q5_1, 5>); return;
    case QuantType::Q4_K: qd::blocks<gg::Q4_K>(x, n, out, qd::q4_k); return;
    case QuantType::Q6_K: qd::blocks<gg::Q6_K>(x, n, out, qd::q6_k); return;
  }
  throw Error(what + ": no quantizer for ggml type " + std::string(type_traits(type).name ? type_traits(type).name : "?") +
              " (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K and Q6_K are written)");
}

}  // namespace minimind::io::gguf
