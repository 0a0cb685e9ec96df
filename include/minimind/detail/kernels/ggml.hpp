// ggml: a GGUF file's quantized matrix held as stored, its blocks read in place in the loaded
// file (no copy): any of the types of ggml_quants.hpp and ggml_kquants.hpp, one type per matrix
// (a file mixes them tensor by tensor). Decode multiplies the blocks with the activations
// quantized as for q8 (int16 in blocks of 32 with a float scale, q8.hpp), which line up with
// every type's blocks and sub-blocks: per block of 32 an integer dot product of the codes, scaled
// by the weight's and the activation's scales (minus the minimum times the activations' sum for
// the types with one). The GEMM widens a block of rows through the scalar dequantizers.
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_GGML_HPP
#define MINIMIND_DETAIL_KERNELS_GGML_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/ggml_kquants.hpp"
#include "minimind/detail/kernels/ggml_quants.hpp"
#include "minimind/detail/kernels/q8.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/error.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace minimind::kernels::ggml {

// A matrix [rows, cols] of one type: row r's cols / Q::kValues blocks at data + r * row_bytes.
struct View {
  const std::byte* data = nullptr;
  uint32_t type = 0;
  Index rows = 0, cols = 0, row_bytes = 0;
};

template <class Q>
const typename Q::Block* blocks_of(const View& w, Index r) {
  return reinterpret_cast<const typename Q::Block*>(w.data + r * w.row_bytes);
}

// Row r widened to float: out [cols].
inline void dequantize_row(const View& w, Index r, float* out) {
  with_type(w.type, [&]<class Q>() { dequantize_blocks<Q>(w.data + r * w.row_bytes, static_cast<uint64_t>(w.cols / Q::kValues), out); });
}

// The plain reference: y[r] = sum_c W[r, c] * (xd[c / 32] * xq[c]) in double, W as dequantized.
inline void matvec_reference(const View& w, const int16_t* xq, const float* xd, float* y, Index begin, Index end) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (Index r = begin; r < end; ++r) {
    dequantize_row(w, r, row.data());
    double sum = 0;
    for (Index c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * (static_cast<double>(xd[c / 32]) * xq[c]);
    y[r] = static_cast<float>(sum);
  }
}

// ggml in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::Ggml;
  static constexpr const char* name = "ggml";
  static constexpr bool kQuantizedInput = true;
  static constexpr bool kInt8Input = false;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = false;
  using View = ggml::View;

  static size_t bytes(const View& w) { return static_cast<size_t>(w.rows * w.row_bytes); }
  // Only a GGUF file's tensors are held in it: there is no one ggml type to round f32 values to.
  static View convert(const float*, Index, Index, WeightArena&, std::shared_ptr<const void>&) {
    throw Error("weight format ggml holds a GGUF file's quantized tensors as stored; other weights cannot be converted to it");
  }
  static void row_to(const View& w, Index r, float* out) { dequantize_row(w, r, out); }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    Index block_values = 0, block_bytes = 0;
    with_type(w.type, [&]<class Q>() { block_values = Q::kValues, block_bytes = sizeof(typename Q::Block); });
    const Index first = k0 / block_values * block_bytes, run = (kc + block_values - 1) / block_values * block_bytes;
    return {reinterpret_cast<const char*>(w.data) + r * w.row_bytes + first, w.row_bytes, mr, (run + 63) / 64 + 1};
  }
};

}  // namespace minimind::kernels::ggml

#endif  // MINIMIND_DETAIL_KERNELS_GGML_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::ggml::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

// One row's blocks of type Q times the quantized activations: any type, on any target, through
// the scalar dequantizer, 32 values (one activation block) at a time.
template <class Q>
float dot_widened(const typename Q::Block* b, Index cols, const int16_t* xq, const float* xd) {
  float values[Q::kValues];
  float sum = 0;
  for (Index i = 0; i < cols / Q::kValues; ++i) {
    Q::dequantize(b[i], values);
    for (int g = 0; g < Q::kValues / 32; ++g) {
      const Index a = i * (Q::kValues / 32) + g;  // the activation block
      float part = 0;
      for (int j = 0; j < 32; ++j) part += values[32 * g + j] * static_cast<float>(xq[32 * a + j]);
      sum += part * xd[a];
    }
  }
  return sum;
}

#if MINIMIND_AVX2
// F16C, not Eigen's conversion (which is in software unless the whole build has F16C).
inline float half(uint16_t h) { return _cvtsh_ss(h); }
inline __m256i load16(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i widen_u8(__m128i v) { return _mm256_cvtepu8_epi16(v); }
// 32 int16 codes (w0: values 0-15, w1: 16-31) times the activation block at xq: 8 int32 lanes.
inline __m256i block_dot(__m256i w0, __m256i w1, const int16_t* xq) {
  return _mm256_add_epi32(_mm256_madd_epi16(w0, load16(xq)), _mm256_madd_epi16(w1, load16(xq + 16)));
}
inline __m256 to_float(__m256i v) { return _mm256_cvtepi32_ps(v); }

// Q4_0: codes - 8; Q8_0: the bytes; IQ4_NL: not here (dot_widened).
inline float dot(const Q4_0::Block* b, Index cols, const int16_t* xq, const float* xd) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi16(8);
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 32; ++i) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m256i w0 = _mm256_sub_epi16(widen_u8(_mm_and_si128(q, low)), eight);
    const __m256i w1 = _mm256_sub_epi16(widen_u8(_mm_and_si128(_mm_srli_epi16(q, 4), low)), eight);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(b[i].d) * xd[i]), to_float(block_dot(w0, w1, xq + 32 * i)), acc);
  }
  return simd::hsum(acc);
}
inline float dot(const Q8_0::Block* b, Index cols, const int16_t* xq, const float* xd) {
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 32; ++i) {
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(b[i].d) * xd[i]), to_float(block_dot(w0, w1, xq + 32 * i)), acc);
  }
  return simd::hsum(acc);
}
// Q5_0: the nibble plus 16 where bit j of qh is set, minus 16.
inline float dot(const Q5_0::Block* b, Index cols, const int16_t* xq, const float* xd) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, -32768);
  const __m256i sixteen = _mm256_set1_epi16(16);
  auto fifth = [&](uint32_t bits16) {  // 16 where the lane's bit is set
    const __m256i set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(bits16)), bit), bit);
    return _mm256_and_si256(set, sixteen);
  };
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 32; ++i) {
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m256i w0 = _mm256_sub_epi16(_mm256_or_si256(widen_u8(_mm_and_si128(q, low)), fifth(qh & 0xFFFF)), sixteen);
    const __m256i w1 =
        _mm256_sub_epi16(_mm256_or_si256(widen_u8(_mm_and_si128(_mm_srli_epi16(q, 4), low)), fifth(qh >> 16)), sixteen);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(b[i].d) * xd[i]), to_float(block_dot(w0, w1, xq + 32 * i)), acc);
  }
  return simd::hsum(acc);
}
// Q4_K: per sub-block s of 32 (activation block 8 i + s), (d sc_s xd) sum q x - (dmin m_s xd) sum x.
inline float dot(const Q4_K::Block* b, Index cols, const int16_t* xq, const float* xd) {
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 256; ++i) {
    const float d = half(b[i].d), dmin = half(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load16(b[i].qs + 32 * c);
      const __m256i nibbles[2] = {_mm256_and_si256(q, low), _mm256_and_si256(_mm256_srli_epi16(q, 4), low)};
      for (int n = 0; n < 2; ++n) {
        const int s = 2 * c + n;
        const Index a = 8 * i + s;
        const __m256i w0 = widen_u8(_mm256_castsi256_si128(nibbles[n])), w1 = widen_u8(_mm256_extracti128_si256(nibbles[n], 1));
        const __m256i x0 = load16(xq + 32 * a), x1 = load16(xq + 32 * a + 16);
        const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
        const __m256i xsum = _mm256_add_epi32(_mm256_madd_epi16(x0, ones), _mm256_madd_epi16(x1, ones));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(k_scale(b[i].scales, s)) * xd[a]), to_float(dot), acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * static_cast<float>(k_min(b[i].scales, s)) * xd[a]), to_float(xsum), acc);
      }
    }
  }
  return simd::hsum(acc);
}
// Q6_K: per activation block t of 32, two sub-blocks of 16 with their own scales.
inline float dot(const Q6_K::Block* b, Index cols, const int16_t* xq, const float* xd) {
  const __m256i low = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  const __m256i offset = _mm256_set1_epi16(32);
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 256; ++i) {
    const float d = half(b[i].d);
    for (int t = 0; t < 8; ++t) {
      const int h = t / 4, k = t % 4;
      const __m256i ql = _mm256_and_si256(_mm256_srl_epi16(load16(b[i].ql + 64 * h + 32 * (k % 2)), _mm_cvtsi32_si128(4 * (k / 2))), low);
      const __m256i qh = _mm256_and_si256(_mm256_srl_epi16(load16(b[i].qh + 32 * h), _mm_cvtsi32_si128(2 * k)), two);
      const __m256i q = _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));  // 6-bit codes, no carry across bytes
      const __m256i w0 = _mm256_sub_epi16(widen_u8(_mm256_castsi256_si128(q)), offset);
      const __m256i w1 = _mm256_sub_epi16(widen_u8(_mm256_extracti128_si256(q, 1)), offset);
      const Index a = 8 * i + t;
      const __m256i s0 = _mm256_madd_epi16(w0, load16(xq + 32 * a)), s1 = _mm256_madd_epi16(w1, load16(xq + 32 * a + 16));
      const float dx = d * xd[a];
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * static_cast<float>(b[i].scales[2 * t])), to_float(s0), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * static_cast<float>(b[i].scales[2 * t + 1])), to_float(s1), acc);
    }
  }
  return simd::hsum(acc);
}
#endif

// Row r of w (type Q) times the quantized activations: the type's own kernel where this target
// has one, else through the dequantizer.
template <class Q>
float row_dot(const View& w, Index r, const int16_t* xq, const float* xd) {
  const auto* b = blocks_of<Q>(w, r);
  if constexpr (requires { dot(b, w.cols, xq, xd); }) return dot(b, w.cols, xq, xd);
  else return dot_widened<Q>(b, w.cols, xq, xd);
}

// Rows [r, r + mr), columns [k0, k0 + kc) widened into out [mr, kc]; k0 is a multiple of the
// GEMM's 256 columns, so a block never straddles two calls.
inline void widen_block(const View& w, Index r, Index mr, Index k0, Index kc, float* out) {
  with_type(w.type, [&]<class Q>() {
    float values[Q::kValues];
    for (Index i = 0; i < mr; ++i) {
      const auto* b = blocks_of<Q>(w, r + i);
      for (Index c = 0; c < kc; c += Q::kValues) {
        const Index n = std::min<Index>(Q::kValues, kc - c);
        if (n == Q::kValues) {
          Q::dequantize(b[(k0 + c) / Q::kValues], out + i * kc + c);
        } else {
          Q::dequantize(b[(k0 + c) / Q::kValues], values);
          std::copy_n(values, n, out + i * kc + c);
        }
      }
    }
  });
}

}  // namespace minimind::kernels::ggml::MINIMIND_TARGET

// The format's entry points on this target (as f32.hpp's).
namespace minimind::kernels::MINIMIND_TARGET {

inline void matvec(const ggml::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  ggml::with_type(w.type, [&]<class Q>() {
    for (Index r = begin; r < end; ++r) y[r] = ggml::MINIMIND_TARGET::row_dot<Q>(w, r, in.xq, in.xd);
  });
}

inline const float* block(const ggml::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  ggml::MINIMIND_TARGET::widen_block(w, r, mr, k0, kc, buf);
  stride = kc;
  return buf;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
