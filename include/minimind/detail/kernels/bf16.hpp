// bf16: 2 bytes per weight, the top 16 bits of a float32, so widening is a 16-bit shift and the
// products are ordinary float32 FMAs. Half the bytes of f32 per token; rounding to bf16 keeps 8
// bits of mantissa (relative error below 2^-9). Viewed in place when the checkpoint stores BF16.
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_BF16_HPP
#define MINIMIND_DETAIL_KERNELS_BF16_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/tensor.hpp"

#include <cstdint>
#include <cstring>
#include <memory>

namespace minimind::kernels::bf16 {

// Round to nearest even (NaN stays NaN).
inline uint16_t from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Widens `n` values.
inline void to_float(const uint16_t* in, float* out, Index n) {
  for (Index i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// The plain reference: y[r] = sum_c float(W[r, c]) x[c] for r in [begin, end).
inline void matvec_reference(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(to_float(w[r * cols + c])) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

struct View {
  const uint16_t* data = nullptr;
  Index rows = 0, cols = 0;
};

// bf16 in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::BF16;
  static constexpr const char* name = "bf16";
  static constexpr bool kQuantizedInput = false;
  using View = bf16::View;

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(rows * cols) * 2; }
  static View convert(const float* data, Index rows, Index cols, WeightArena& arena, std::shared_ptr<const void>& owner) {
    auto storage = arena.allocate(bytes(rows, cols));
    auto* out = static_cast<uint16_t*>(storage.get());
    for (Index i = 0; i < rows * cols; ++i) out[i] = from_float(data[i]);
    owner = std::move(storage);
    return {out, rows, cols};
  }
  static void row_to(const View& w, Index r, float* out) { to_float(w.data + r * w.cols, out, w.cols); }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    return dense_lines(w.data, 2, w.cols, r, mr, k0, kc);
  }
};

}  // namespace minimind::kernels::bf16

#endif  // MINIMIND_DETAIL_KERNELS_BF16_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::bf16::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

// Widens `n` values (the GEMM's blocks).
inline void widen(const uint16_t* in, float* out, Index n) {
  Index i = 0;
#if MINIMIND_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, simd::Avx512::load(in + i));
#endif
#if MINIMIND_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, simd::Avx2::load(in + i));
#endif
  to_float(in + i, out + i, n - i);
}

// sum_c float(w[c]) x[c]; the 128-bit targets take 8 weights a step.
inline float dot(const uint16_t* w, const float* x, Index cols) {
#if MINIMIND_SIMD
  return simd::dot<simd::Ops, simd::Ops::kLanes == 4 ? 2 : 1, 1024>(w, x, cols, [](uint16_t v) { return to_float(v); });
#else
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
#endif
}

}  // namespace minimind::kernels::bf16::MINIMIND_TARGET

// The format's entry points on this target (as f32.hpp's).
namespace minimind::kernels::MINIMIND_TARGET {

// y[r] = float(W[r, :]) x for r in [begin, end), row after row as for f32 (from DRAM: 11.7 GB/s,
// against 7-8 for four rows side by side).
inline void matvec(const bf16::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = bf16::MINIMIND_TARGET::dot(w.data + r * w.cols, in.x, w.cols);
}

// Rows [r, r + mr), columns [k0, k0 + kc) widened into buf [mr, kc].
inline const float* block(const bf16::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  for (Index i = 0; i < mr; ++i) bf16::MINIMIND_TARGET::widen(w.data + (r + i) * w.cols + k0, buf + i * kc, kc);
  stride = kc;
  return buf;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
