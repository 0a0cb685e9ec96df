#pragma once
// bf16: 2 bytes per weight, the top 16 bits of a float32, so widening is a 16-bit shift and the
// products are ordinary float32 FMAs. Half the bytes of f32 per token; rounding to bf16 keeps 8
// bits of mantissa (relative error below 2^-9). Viewed in place when the checkpoint stores BF16.
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
  Index i = 0;
#if MINIMIND_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Avx512::load(in + i));
#endif
#if MINIMIND_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Avx2::load(in + i));
#endif
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

// The plain reference: y[r] = sum_c float(W[r, c]) x[c] for r in [begin, end).
inline void matvec_reference(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(to_float(w[r * cols + c])) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

// y[r] = Dot(float(W[r, :]), x) for r in [begin, end), row after row as f32::matvec (from DRAM:
// 11.7 GB/s, against 7-8 for four rows side by side).
template <float (*Dot)(const uint16_t*, const float*, Index)>
inline void matvec_rows(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = Dot(w + r * cols, x, cols);
}

namespace scalar {
inline float dot(const uint16_t* w, const float* x, Index cols) {
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}
}  // namespace scalar

// The dot product on vector target S (simd.hpp); the 128-bit targets take 8 weights a step.
template <class S>
inline float dot(const uint16_t* w, const float* x, Index cols) {
  return kernels::dot<S, S::kLanes == 4 ? 2 : 1, 1024>(w, x, cols, [](uint16_t v) { return to_float(v); });
}

// The best target this build has (kernels::name()).
inline void matvec(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
#ifdef MINIMIND_SIMD
  matvec_rows<dot<Simd>>(w, cols, x, y, begin, end);
#else
  matvec_rows<scalar::dot>(w, cols, x, y, begin, end);
#endif
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
  static void matvec(const View& w, const DecodeInput& in, float* y, Index begin, Index end) {
    bf16::matvec(w.data, w.cols, in.x, y, begin, end);
  }
  // Rows [r, r + mr), columns [k0, k0 + kc) widened into buf [mr, kc].
  static const float* block(const View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
    for (Index i = 0; i < mr; ++i) to_float(w.data + (r + i) * w.cols + k0, buf + i * kc, kc);
    stride = kc;
    return buf;
  }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    return dense_lines(w.data, 2, w.cols, r, mr, k0, kc);
  }
};

}  // namespace minimind::kernels::bf16
