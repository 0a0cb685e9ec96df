// ggml: a GGUF file's quantized matrix held as stored, its blocks read in place in the loaded
// file (no copy): any of the types of ggml_quants.hpp and ggml_kquants.hpp, one type per matrix
// (a file mixes them tensor by tensor). Decode multiplies the blocks with the activations
// quantized as for q4 (int8 in blocks of 32 with a float scale and the block's integer sum,
// q4.hpp; Q8_0 as for q8, kInt16Input below), which line up with every type's blocks and sub-blocks: per block of 32 an integer dot
// product of the codes (unsigned bytes times the int8 activations, vpmaddubsw or vpdpbusd),
// scaled by the weight's and the activation's scales, less the code offset or the minimum times
// the activations' sum. Why int8 and not int16 activations: next to weights of 4 to 6 bits their
// rounding is lost in the weights' (q4.hpp measured it), llama.cpp rounds them as coarsely (Q8_0,
// or Q8_K over 256 values for the K types), and a byte-wise multiply needs no widening of the
// codes. The GEMM multiplies Q4_0, Q5_0, Q4_K and Q6_K rows in int8 too (gemm_int8.hpp: the
// rows unpacked to a byte per code, kInt8Codes below), the other types' rows widened to float.
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_GGML_HPP
#define MINIMIND_DETAIL_KERNELS_GGML_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/gemm_int8.hpp"
#include "minimind/detail/kernels/ggml_kquants.hpp"
#include "minimind/detail/kernels/ggml_quants.hpp"
#include "minimind/detail/kernels/q4.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/error.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace minimind::kernels::ggml {

// A matrix [rows, cols] of one type: row r's cols / Q::kValues blocks at data + r * row_bytes.
// `grouped` (Q4_0 only): its whole groups of four rows relaid by group_rows, the rows past them as stored.
struct View {
  const std::byte* data = nullptr;
  uint32_t type = 0;
  Index rows = 0, cols = 0, row_bytes = 0;
  bool grouped = false;
};

template <class Q>
const typename Q::Block* blocks_of(const View& w, Index r) {
  return reinterpret_cast<const typename Q::Block*>(w.data + r * w.row_bytes);
}

// Q4_0 in q4's groups: the 4 x blocks blocks of rows [r, r + 4) as q4 holds a group (q4.hpp),
// block b of row r + i's nibbles at 16 (4 b + i), then its scale at element 4 b + i of the scales
// after them. Q4_0's blocks are q4's (the same nibble order, float16 scale, code offset 8), so
// q4's group kernels multiply them: one 64-byte run of four rows' codes a step and one load of 16
// scales every four, where the stored order needs four loads of 16 bytes and four of 2. The
// loader relays the rows in place in the loaded file (the group's bytes are the same bytes, so
// no memory is added), where the active kernels are x86's (ggml_groups_rows in targets.hpp).
static_assert(sizeof(Q4_0::Block) == 2 + q4::kBlockBytes && q4::kBlock == 32);
inline bool in_group(const View& w, Index r) { return w.grouped && r < w.rows / q4::kGroup * q4::kGroup; }
// The group whose first row is r, as a q4 matrix of four rows.
inline q4::View group_view(const View& w, Index r) {
  const std::byte* start = w.data + r * w.row_bytes;
  const Index blocks = w.cols / 32;
  return {reinterpret_cast<const uint8_t*>(start), reinterpret_cast<const uint16_t*>(start + q4::kGroup * blocks * q4::kBlockBytes),
          q4::kGroup, w.cols, blocks};
}
// Block b of row r of a Q4_0 matrix, in its stored form whichever order it is held in.
inline Q4_0::Block q4_0_block(const View& w, Index r, Index b) {
  if (!in_group(w, r)) return blocks_of<Q4_0>(w, r)[b];
  const q4::View g = group_view(w, r - r % q4::kGroup);
  const Index at = q4::kGroup * b + r % q4::kGroup;
  Q4_0::Block block;
  std::memcpy(block.qs, g.q + at * q4::kBlockBytes, q4::kBlockBytes);
  std::memcpy(&block.d, g.d + at, sizeof block.d);
  return block;
}
// Relays the whole groups of four rows of a Q4_0 matrix [rows, cols] at data (as stored) into
// group_view's order, in place.
inline void group_rows(std::byte* data, Index rows, Index cols) {
  const Index blocks = cols / 32;
  const View stored{data, Q4_0::kType, rows, cols, blocks * static_cast<Index>(sizeof(Q4_0::Block))};
  std::vector<Q4_0::Block> group(static_cast<size_t>(q4::kGroup * blocks));
  for (Index r = 0; r + q4::kGroup <= rows; r += q4::kGroup) {
    std::memcpy(group.data(), blocks_of<Q4_0>(stored, r), group.size() * sizeof(Q4_0::Block));
    std::byte* codes = data + r * stored.row_bytes;
    std::byte* scales = codes + q4::kGroup * blocks * q4::kBlockBytes;
    for (Index i = 0; i < q4::kGroup; ++i) {
      for (Index b = 0; b < blocks; ++b) {
        const Q4_0::Block& block = group[static_cast<size_t>(i * blocks + b)];
        const Index at = q4::kGroup * b + i;
        std::memcpy(codes + at * q4::kBlockBytes, block.qs, q4::kBlockBytes);
        std::memcpy(scales + at * static_cast<Index>(sizeof block.d), &block.d, sizeof block.d);
      }
    }
  }
}

// Row r widened to float: out [cols].
inline void dequantize_row(const View& w, Index r, float* out) {
  if (in_group(w, r)) {
    for (Index b = 0; b < w.cols / 32; ++b) Q4_0::dequantize(q4_0_block(w, r, b), out + 32 * b);
    return;
  }
  with_type(w.type, [&]<class Q>() { dequantize_blocks<Q>(w.data + r * w.row_bytes, static_cast<uint64_t>(w.cols / Q::kValues), out); });
}

// Which activations type Q's products multiply: int16 for Q8_0, as q8 does (beside 8-bit weights
// int8 activations cost about as much accuracy as the weights: a committed Q8_0 file's logits
// left their stated bound, 0.362 against 0.35), int8 for the rest.
template <class Q>
inline constexpr bool kInt16Input = std::is_same_v<Q, Q8_0>;

// How the int8 GEMM takes type Q's codes (gemm_int8.hpp's Codes), for the types it multiplies:
// the unsigned codes, their groups of 32 or 16 columns, and the code of value 0 or a minimum.
template <class Q>
struct Int8Codes {};
template <>
struct Int8Codes<Q4_0> {
  using type = int8_gemm::Codes<1, 8, 15>;
};
template <>
struct Int8Codes<Q5_0> {
  using type = int8_gemm::Codes<1, 16, 31>;
};
template <>
struct Int8Codes<Q4_K> {
  using type = int8_gemm::Codes<1, 0, 15>;
};
template <>
struct Int8Codes<Q6_K> {
  using type = int8_gemm::Codes<2, 32, 63>;
};
template <class Q>
inline constexpr bool kInt8Gemm = requires { typename Int8Codes<Q>::type; };

// The plain reference: y[r] = sum_c W[r, c] * (xd[c / 32] * xq[c]) in double, W as dequantized
// and x quantized as type Q takes it (int8: q4's quantize_activations, int16: q8's).
template <class X>
void matvec_reference(const View& w, const X* xq, const float* xd, float* y, Index begin, Index end) {
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
  static constexpr bool kQuantizedInput = true;  // both: per type, kInt16Input
  static constexpr bool kInt8Input = true;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = false;
  using View = ggml::View;

  static size_t bytes(const View& w) { return static_cast<size_t>(w.rows * w.row_bytes); }
  // Only a GGUF file's tensors are held in it: there is no one ggml type to round f32 values to.
  static View convert(const float*, Index, Index, WeightArena&, std::shared_ptr<const void>&) {
    throw Error("weight format ggml holds a GGUF file's quantized tensors as stored; other weights cannot be converted to it");
  }
  static void row_to(const View& w, Index r, float* out) { dequantize_row(w, r, out); }
  // Whether w's products multiply int16 activations (else int8): the GEMM rounds its input so.
  static bool int16_input(const View& w) {
    bool int16 = false;
    with_type(w.type, [&]<class Q>() { int16 = kInt16Input<Q>; });
    return int16;
  }
  // Whether the int8 GEMM multiplies w's rows (on the targets that have it).
  static bool int8_gemm(const View& w) {
    bool int8 = false;
    with_type(w.type, [&]<class Q>() { int8 = kInt8Gemm<Q>; });
    return int8;
  }
  // Grouped rows are left to the hardware.
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    if (w.grouped) return {};
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

// One row's blocks of type Q times the quantized activations (int8 or int16): any type, on any
// target, through the scalar dequantizer, 32 values (one activation block) at a time.
template <class Q, class X>
float dot_widened(const typename Q::Block* b, Index cols, const X* xq, const float* xd) {
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
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256 to_float(__m256i v) { return _mm256_cvtepi32_ps(v); }
// 32 unsigned codes of at most 7 bits times 32 int8 activations: 8 int32 lanes of four products each (vpmaddubsw's pairs stay below int16's limit).
inline __m256i udot(__m256i u, __m256i x) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)); }
// A 32-value block's 16 bytes of nibbles (byte j: value j low, value j + 16 high) as 32 codes in order.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i q = load16(qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// Q4_0 and Q5_0: codes with an offset (8, 16), which comes back as the offset times the block's
// activation sum: sum_b d_b xd_b (sum_j q_j x_j - offset xs_b).
inline float dot(const Q4_0::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t* xs) {
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (Index i = 0; i < cols / 32; ++i) {
    const float scale = half(b[i].d) * xd[i];
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), to_float(udot(nibbles(b[i].qs), load32(xq + 32 * i))), acc);
    offsets += scale * static_cast<float>(xs[i]);
  }
  return simd::hsum(acc) - 8 * offsets;
}
// Q5_0's codes (0-31): the nibbles plus 16 where bit j of qh is set, qh's byte j / 8 spread over
// the 8 bytes of its values and each byte's own bit picked out.
inline __m256i codes(const Q5_0::Block& b) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
                                          3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  int32_t qh;
  std::memcpy(&qh, b.qh, 4);
  const __m256i bits = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread), bit);
  return _mm256_or_si256(nibbles(b.qs), _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit), _mm256_set1_epi8(16)));
}
inline float dot(const Q5_0::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t* xs) {
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (Index i = 0; i < cols / 32; ++i) {
    const float scale = half(b[i].d) * xd[i];
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), to_float(udot(codes(b[i]), load32(xq + 32 * i))), acc);
    offsets += scale * static_cast<float>(xs[i]);
  }
  return simd::hsum(acc) - 16 * offsets;
}
// Q8_0 times int16 activations: the codes widened to int16, vpmaddwd.
inline float dot(const Q8_0::Block* b, Index cols, const int16_t* xq, const float* xd) {
  __m256 acc = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 32; ++i) {
    const __m256i w0 = _mm256_cvtepi8_epi16(load16(b[i].qs)), w1 = _mm256_cvtepi8_epi16(load16(b[i].qs + 16));
    const __m256i sums = _mm256_add_epi32(_mm256_madd_epi16(w0, load32(xq + 32 * i)), _mm256_madd_epi16(w1, load32(xq + 32 * i + 16)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(b[i].d) * xd[i]), to_float(sums), acc);
  }
  return simd::hsum(acc);
}
#if !MINIMIND_AVX512
// Q4_K: per sub-block s of 32 (activation block 8 i + s), the integer products times the 6-bit
// scale in the same vpmaddwd, then (d xd) in float; less (dmin m_s xd xs) summed apart.
inline float dot(const Q4_K::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t* xs) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float mins = 0;
  for (Index i = 0; i < cols / 256; ++i) {
    const float d = half(b[i].d), dmin = half(b[i].dmin);
    const int8_t* x = xq + 256 * i;
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(b[i].qs + 32 * c);
      const int s = 2 * c;
      const Index a = 8 * i + s;
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(q, low), load32(x + 64 * c));
      const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), load32(x + 64 * c + 32));
      const __m256i s0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(static_cast<int16_t>(k_scale(b[i].scales, s))));
      const __m256i s1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(static_cast<int16_t>(k_scale(b[i].scales, s + 1))));
      acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d * xd[a]), to_float(s0), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d * xd[a + 1]), to_float(s1), acc1);
      mins += dmin * (static_cast<float>(k_min(b[i].scales, s)) * xd[a] * static_cast<float>(xs[a]) +
                      static_cast<float>(k_min(b[i].scales, s + 1)) * xd[a + 1] * static_cast<float>(xs[a + 1]));
    }
  }
  return simd::hsum(_mm256_add_ps(acc0, acc1)) - mins;
}
#endif
#if !MINIMIND_AVX512
// Q6_K: per activation block t of 32, the 6-bit codes q (offset 32) in order; (q - 32) x in int16
// pairs as q x less 32 x (both vpmaddubsw, at most 16002 and 8128 apart), times the two
// sub-blocks' signed scales in the same vpmaddwd, then (d xd) in float.
inline float dot(const Q6_K::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t*) {
  const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30), offset = _mm256_set1_epi8(32);
  const __m128i halves = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (Index i = 0; i < cols / 256; ++i) {
    const float d = half(b[i].d);
    const __m128i scales = load16(b[i].scales);
    // Activation block t: its codes from ql's nibbles (low 4 bits) and qh's bits 2k (moved to 4, 5).
    auto block = [&](int t, __m256i ql, __m256i qh, __m256& acc) {
      const Index a = 8 * i + t;
      const __m256i x = load32(xq + 32 * a);
      const __m256i q = _mm256_or_si256(_mm256_and_si256(ql, low), _mm256_and_si256(qh, high));
      const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, x), _mm256_maddubs_epi16(offset, x));
      const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, _mm_add_epi8(halves, _mm_set1_epi8(static_cast<char>(2 * t)))));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * xd[a]), to_float(_mm256_madd_epi16(pairs, sc)), acc);
    };
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load32(b[i].ql + 64 * h), ql1 = load32(b[i].ql + 64 * h + 32), qh = load32(b[i].qh + 32 * h);
      block(4 * h, ql0, _mm256_slli_epi16(qh, 4), acc0);
      block(4 * h + 1, ql1, _mm256_slli_epi16(qh, 2), acc1);
      block(4 * h + 2, _mm256_srli_epi16(ql0, 4), qh, acc0);
      block(4 * h + 3, _mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2), acc1);
    }
  }
  return simd::hsum(_mm256_add_ps(acc0, acc1));
}
#endif
#endif

#if MINIMIND_AVX2
// The GEMM's widening of whole blocks: the scalar dequantizers' values bit for bit (each is one
// exact product less an exact minimum, so one rounding either way). 32 signed codes q to
// out[j] = scale * q[j] - min, `first` the scale of values 0-15, `second` of 16-31.
inline void widen32(__m256i q, __m256 first, __m256 second, __m256 min, float* out) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m256i v[4] = {_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)), _mm256_cvtepi8_epi32(hi),
                        _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))};
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, _mm256_fmsub_ps(k < 2 ? first : second, _mm256_cvtepi32_ps(v[k]), min));
}
inline void widen(const Q4_0::Block& b, float* out) {
  const __m256 d = _mm256_set1_ps(half(b.d));
  widen32(_mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)), d, d, _mm256_setzero_ps(), out);
}
inline void widen(const Q5_0::Block& b, float* out) {
  const __m256 d = _mm256_set1_ps(half(b.d));
  widen32(_mm256_sub_epi8(codes(b), _mm256_set1_epi8(16)), d, d, _mm256_setzero_ps(), out);
}
inline void widen(const Q8_0::Block& b, float* out) {
  const __m256 d = _mm256_set1_ps(half(b.d));
  widen32(load32(b.qs), d, d, _mm256_setzero_ps(), out);
}
inline void widen(const Q4_K::Block& b, float* out) {
  const float d = half(b.d), dmin = half(b.dmin);
  for (int s = 0; s < 8; ++s) {
    const __m256i q = load32(b.qs + 32 * (s / 2));
    const __m256i codes = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    const __m256 scale = _mm256_set1_ps(d * static_cast<float>(k_scale(b.scales, s)));
    widen32(codes, scale, scale, _mm256_set1_ps(dmin * static_cast<float>(k_min(b.scales, s))), out + 32 * s);
  }
}
inline void widen(const Q6_K::Block& b, float* out) {
  const float d = half(b.d);
  for (int t = 0; t < 8; ++t) {
    const int h = t / 4, k = t % 4;
    const __m256i ql = _mm256_srl_epi16(load32(b.ql + 64 * h + 32 * (k % 2)), _mm_cvtsi32_si128(4 * (k / 2)));
    const __m256i qh = _mm256_srl_epi16(load32(b.qh + 32 * h), _mm_cvtsi32_si128(2 * k));
    const __m256i q = _mm256_or_si256(_mm256_and_si256(ql, _mm256_set1_epi8(0x0F)), _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4));
    widen32(_mm256_sub_epi8(q, _mm256_set1_epi8(32)), _mm256_set1_ps(d * static_cast<float>(b.scales[2 * t])),
            _mm256_set1_ps(d * static_cast<float>(b.scales[2 * t + 1])), _mm256_setzero_ps(), out + 32 * t);
  }
}
#endif

#if MINIMIND_AVX2
// The int8 GEMM's rows (gemm_int8.hpp): rows [r, r + rows) of w into `panel`, each block's codes
// as Int8Codes<Q> reads them (unsigned, in column order) with its groups' scales (and minima).
inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
template <class Q>
void unpack_rows(const View& w, Index r, Index rows, const int8_gemm::RowPanel& panel) {
  for (Index i = 0; i < rows; ++i) {
    const auto* b = blocks_of<Q>(w, r + i);
    for (Index k = 0; k < w.cols / Q::kValues; ++k) {
      if constexpr (std::is_same_v<Q, Q4_0>) {
        const Q4_0::Block block = q4_0_block(w, r + i, k);
        store32(panel.codes_of(i, k), nibbles(block.qs));
        panel.scales[panel.scale_index(i, k)] = half(block.d);
      } else if constexpr (std::is_same_v<Q, Q5_0>) {
        store32(panel.codes_of(i, k), codes(b[k]));
        panel.scales[panel.scale_index(i, k)] = half(b[k].d);
      } else if constexpr (std::is_same_v<Q, Q4_K>) {
        const float d = half(b[k].d), dmin = half(b[k].dmin);
        for (int s = 0; s < 8; ++s) {
          const __m256i q = load32(b[k].qs + 32 * (s / 2));
          store32(panel.codes_of(i, 8 * k + s), _mm256_and_si256(s % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F)));
          const Index at = panel.scale_index(i, 8 * k + s);
          panel.scales[at] = d * static_cast<float>(k_scale(b[k].scales, s));
          panel.mins[at] = dmin * static_cast<float>(k_min(b[k].scales, s));
        }
      } else {
        static_assert(std::is_same_v<Q, Q6_K>);
        const float d = half(b[k].d);
        for (int t = 0; t < 8; ++t) {  // as widen's codes, without the offset
          const int h = t / 4, j = t % 4;
          const __m256i ql = _mm256_srl_epi16(load32(b[k].ql + 64 * h + 32 * (j % 2)), _mm_cvtsi32_si128(4 * (j / 2)));
          const __m256i qh = _mm256_srl_epi16(load32(b[k].qh + 32 * h), _mm_cvtsi32_si128(2 * j));
          store32(panel.codes_of(i, 8 * k + t), _mm256_or_si256(_mm256_and_si256(ql, _mm256_set1_epi8(0x0F)),
                                                               _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4)));
          const Index at = panel.scale_index(i, 8 * k + t);
          panel.scales[at] = d * static_cast<float>(b[k].scales[2 * t]);
          panel.scales[at + 1] = d * static_cast<float>(b[k].scales[2 * t + 1]);
        }
      }
    }
  }
}

// Rows [r0, r1) of w times every panel of x8 into ct (int8_gemm::products, vpdpbusd if with_vnni),
// if the int8 GEMM takes w's type; false if not.
inline bool int8_products(const View& w, const int8_gemm::Int8Panels& x8, Index r0, Index r1, float* buffer, float* ct,
                          Index ct_stride, bool with_vnni) {
  bool done = false;
  with_type(w.type, [&]<class Q>() {
    if constexpr (kInt8Gemm<Q>) {
      int8_gemm::MINIMIND_TARGET::products<typename Int8Codes<Q>::type>(
          x8, w.cols / int8_gemm::kBlock, r0, r1, buffer, ct, ct_stride, with_vnni,
          [&](Index r, Index rows, const int8_gemm::RowPanel& panel) { unpack_rows<Q>(w, r, rows, panel); });
      done = true;
    }
  });
  return done;
}
#endif

#if MINIMIND_AVX512
// Q4_K's eight 6-bit scales and minima (k_scale, k_min) unpacked from its 12 bytes at once, as
// the bytes of two words: scales = sub-blocks 0-7's scales, mins = their minima.
inline void k_scales_and_mins(const uint8_t (&p)[12], uint64_t& scales, uint64_t& mins) {
  uint32_t w[3];
  std::memcpy(w, p, 12);
  const uint32_t six = 0x3F3F3F3Fu, four = 0x0F0F0F0Fu, two = 0x03030303u;
  scales = (w[0] & six) | uint64_t{(w[2] & four) | ((w[0] >> 6 & two) << 4)} << 32;
  mins = (w[1] & six) | uint64_t{(w[2] >> 4 & four) | ((w[1] >> 6 & two) << 4)} << 32;
}

// Q4_K with 64 bytes of codes at a time: qs[64 j .. 64 j + 63] holds sub-blocks [4j | 4j + 2] in
// its low nibbles and [4j + 1 | 4j + 3] in its high ones; the activations are put in that order
// by a shuffle of 128-bit lanes. Per sub-block the 6-bit scale multiplies in vpmaddwd, (d xd) in
// float; the minima's term (dmin m_s xd xs) is one product of 8 lanes per block.
inline float dot(const Q4_K::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t* xs) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  // Int16 lanes 0-15 take sub-block `first`, 16-31 `first + 2`.
  const __m512i pair = _mm512_maskz_set1_epi16(0xFFFF0000u, 2);
  // Float lanes 0-7 take activation block `first`, 8-15 `first + 2`.
  const __m512i pair_f = _mm512_maskz_set1_epi32(0xFF00, 2);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  __m256 minima = _mm256_setzero_ps();
  for (Index i = 0; i < cols / 256; ++i) {
    uint64_t scale_bytes, min_bytes;
    k_scales_and_mins(b[i].scales, scale_bytes, min_bytes);
    const __m512i scales = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(scale_bytes))));
    const __m256 xd8 = _mm256_loadu_ps(xd + 8 * i);
    const __m512 dx = _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_set1_ps(half(b[i].d)), xd8));
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(min_bytes))));
    const __m256 xsum = _mm256_mul_ps(xd8, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 8 * i))));
    minima = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(half(b[i].dmin)), mins), xsum, minima);
    for (int j = 0; j < 2; ++j) {
      const __m512i q = _mm512_loadu_si512(b[i].qs + 64 * j);
      const __m512i x0 = _mm512_loadu_si512(xq + 256 * i + 128 * j), x1 = _mm512_loadu_si512(xq + 256 * i + 128 * j + 64);
      const __m512i x_lo = _mm512_shuffle_i64x2(x0, x1, 0x44), x_hi = _mm512_shuffle_i64x2(x0, x1, 0xEE);
      const __m512i p_lo = _mm512_maddubs_epi16(_mm512_and_si512(q, low), x_lo);
      const __m512i p_hi = _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(q, 4), low), x_hi);
      const __m512i first = _mm512_set1_epi16(static_cast<int16_t>(4 * j));
      const __m512i sc_lo = _mm512_permutexvar_epi16(_mm512_add_epi16(pair, first), scales);
      const __m512i sc_hi = _mm512_permutexvar_epi16(_mm512_add_epi16(pair, _mm512_add_epi16(first, _mm512_set1_epi16(1))), scales);
      const __m512i first_f = _mm512_set1_epi32(4 * j);
      const __m512 dx_lo = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_add_epi32(pair_f, first_f), dx);
      const __m512 dx_hi = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_add_epi32(pair_f, _mm512_add_epi32(first_f, _mm512_set1_epi32(1))), dx);
      acc0 = _mm512_fmadd_ps(dx_lo, _mm512_cvtepi32_ps(_mm512_madd_epi16(p_lo, sc_lo)), acc0);
      acc1 = _mm512_fmadd_ps(dx_hi, _mm512_cvtepi32_ps(_mm512_madd_epi16(p_hi, sc_hi)), acc1);
    }
  }
  return simd::hsum(_mm512_add_ps(acc0, acc1)) - simd::hsum(minima);
}

// Q6_K with 64 bytes at a time: per half h of a block, ql's 64 bytes hold activation blocks
// 4h + k (k < 4) as [k = 0 | 1] in their low nibbles and [2 | 3] in their high ones, in the order
// of the activations; qh's 32 bytes, in both 256-bit halves, give the top two bits (bits 2k
// moved to 4, 5 by a shift per half). Otherwise as the AVX2 kernel.
inline float dot(const Q6_K::Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t*) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(0x30), offset = _mm512_set1_epi8(32);
  const __m512i shift01 = _mm512_mask_set1_epi16(_mm512_set1_epi16(4), 0xFFFF0000u, 2);
  const __m512i shift23 = _mm512_maskz_set1_epi16(0x0000FFFFu, 2);
  // Which of the 4 sub-blocks of 16 in a register of 64 codes an int16 pair lane (2 codes) is in.
  const __m512i quarter = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i half01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i half23 = _mm512_add_epi32(half01, _mm512_set1_epi32(2));
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  for (Index i = 0; i < cols / 256; ++i) {
    const __m512i scales = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(load16(b[i].scales)));
    const __m512 d = _mm512_set1_ps(half(b[i].d));
    for (int h = 0; h < 2; ++h) {
      const int8_t* x = xq + 256 * i + 128 * h;
      const __m512i ql = _mm512_loadu_si512(b[i].ql + 64 * h);
      const __m512i qh = _mm512_maskz_broadcast_i64x4(0xFF, load32(b[i].qh + 32 * h));
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, low), _mm512_and_si512(_mm512_sllv_epi16(qh, shift01), high));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low),
                                          _mm512_and_si512(_mm512_sllv_epi16(_mm512_srli_epi16(qh, 2), shift23), high));
      const __m512i x01 = _mm512_loadu_si512(x), x23 = _mm512_loadu_si512(x + 64);
      const __m512i p01 = _mm512_sub_epi16(_mm512_maddubs_epi16(q01, x01), _mm512_maddubs_epi16(offset, x01));
      const __m512i p23 = _mm512_sub_epi16(_mm512_maddubs_epi16(q23, x23), _mm512_maddubs_epi16(offset, x23));
      const __m512i base = _mm512_set1_epi16(static_cast<int16_t>(8 * h));
      const __m512i sc01 = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, base), scales);
      const __m512i sc23 = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_add_epi16(base, _mm512_set1_epi16(4))), scales);
      const __m512 dx = _mm512_mul_ps(d, _mm512_zextps128_ps512(_mm_loadu_ps(xd + 8 * i + 4 * h)));
      acc0 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, half01, dx), _mm512_cvtepi32_ps(_mm512_madd_epi16(p01, sc01)), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, half23, dx), _mm512_cvtepi32_ps(_mm512_madd_epi16(p23, sc23)), acc1);
    }
  }
  return simd::hsum(_mm512_add_ps(acc0, acc1));
}
#endif

#if MINIMIND_NEON || MINIMIND_WASM_SIMD
// NEON and WASM SIMD128: every type through one description of its blocks, group() below: a
// group of 32 values (one activation block) as 32 signed int8 codes, q[0] (values 0-15) and q[1]
// (16-31), with each half's integer sub-block scale and minimum, so that value j of half h is
// (d * sc[h]) * q[h][j] - dmin * m[h] (d and dmin the block's, minimum_scale()), as the scalar
// dequantizers order it. Decode multiplies the codes with the int8 activations (Bytes::dot:
// sdot with `dotprod`), the GEMM's block widens them to float (bit for bit the dequantizers').
using Bytes = simd::Bytes;
using B = Bytes::B;
struct Group {
  B q[2];
  int sc[2] = {1, 1};
  int m[2] = {0, 0};
};

// The ggml type whose blocks are Block (the kernels below take a row's blocks, as the x86 ones).
template <class Block, class Q, class... Qs>
auto type_of_block(TypeList<Q, Qs...>) {
  if constexpr (std::is_same_v<typename Q::Block, Block>) return std::type_identity<Q>{};
  else return type_of_block<Block>(TypeList<Qs...>{});
}
template <class Block>
using TypeOf = typename decltype(type_of_block<Block>(Types{}))::type;

// The block's dmin: the K types' own, minus Q4_1's and Q5_1's m (x = d q + m), else none.
template <class Block>
float minimum_scale(const Block& b) {
  if constexpr (requires { b.dmin; }) return half_to_float(b.dmin);
  else if constexpr (requires { b.m; }) return -half_to_float(b.m);
  else return 0.0f;
}

// 16 bytes of nibbles as the 32 codes of a 32-value group (byte j: value j low, j + 16 high).
inline Group nibbles(const uint8_t* qs) {
  const B v = Bytes::load(qs);
  return {{Bytes::bit_and(v, Bytes::set1(0x0F)), Bytes::shr(v, 4)}};
}
// Bits [shift, shift + width) of the 32 bytes at p, in the low bits of each.
inline Group bit_field(const uint8_t* p, int shift, int width) {
  const B mask = Bytes::set1((1 << width) - 1);
  return {{Bytes::bit_and(Bytes::shr(Bytes::load(p), shift), mask), Bytes::bit_and(Bytes::shr(Bytes::load(p + 16), shift), mask)}};
}
// The codes with their top bits, stored apart, put above bit `shift`; less `offset`.
inline Group with_high(Group g, const Group& high, int shift, int offset) {
  for (int h = 0; h < 2; ++h) g.q[h] = Bytes::sub(Bytes::bit_or(g.q[h], Bytes::shl(high.q[h], shift)), Bytes::set1(offset));
  return g;
}
// Q5_0's and Q5_1's fifth bits, bit j of the little-endian qh for value j: qh's byte j / 8 spread
// over the 8 bytes of its values and each byte's own bit tested (1 where set).
inline Group fifth_bits(const uint8_t (&qh)[4]) {
  static constexpr int8_t spread[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
  static constexpr uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  Group g;
  for (int h = 0; h < 2; ++h)
    g.q[h] = Bytes::bit_and(Bytes::any_bits(Bytes::lookup(Bytes::splat4(qh), Bytes::load(spread[h])), Bytes::load(bit)), Bytes::set1(1));
  return g;
}
inline Group iq4_levels(Group g) {
  const B levels = Bytes::load(kIq4Levels);
  for (B& q : g.q) q = Bytes::lookup(levels, q);
  return g;
}

inline Group group(const Q4_0::Block& b, int) {
  Group g = nibbles(b.qs);
  for (B& q : g.q) q = Bytes::sub(q, Bytes::set1(8));
  return g;
}
inline Group group(const Q4_1::Block& b, int) {
  Group g = nibbles(b.qs);
  g.m[0] = g.m[1] = 1;
  return g;
}
inline Group group(const Q5_0::Block& b, int) { return with_high(nibbles(b.qs), fifth_bits(b.qh), 4, 16); }
inline Group group(const Q5_1::Block& b, int) {
  Group g = with_high(nibbles(b.qs), fifth_bits(b.qh), 4, 0);
  g.m[0] = g.m[1] = 1;
  return g;
}
inline Group group(const Q8_0::Block& b, int) { return {{Bytes::load(b.qs), Bytes::load(b.qs + 16)}}; }
inline Group group(const IQ4_NL::Block& b, int) { return iq4_levels(nibbles(b.qs)); }
// Q2_K, Q3_K, Q6_K: group t = 4 h + k is bits 2k of qs[32 h + l] (l < 32), sub-blocks 2t, 2t + 1.
inline Group group(const Q2_K::Block& b, int t) {
  Group g = bit_field(b.qs + 32 * (t / 4), 2 * (t % 4), 2);
  for (int h = 0; h < 2; ++h) g.sc[h] = b.scales[2 * t + h] & 0x0F, g.m[h] = b.scales[2 * t + h] >> 4;
  return g;
}
inline Group group(const Q3_K::Block& b, int t) {  // the third bit, bit t of hmask[l], clear: less 4
  Group g = with_high(bit_field(b.qs + 32 * (t / 4), 2 * (t % 4), 2), bit_field(b.hmask, t, 1), 2, 4);
  for (int h = 0; h < 2; ++h) g.sc[h] = Q3_K::scale(b, 2 * t + h);
  return g;
}
inline Group group(const Q6_K::Block& b, int t) {
  const int h = t / 4, k = t % 4;
  Group g = with_high(bit_field(b.ql + 64 * h + 32 * (k % 2), 4 * (k / 2), 4), bit_field(b.qh + 32 * h, 2 * k, 2), 4, 32);
  for (int s = 0; s < 2; ++s) g.sc[s] = b.scales[2 * t + s];
  return g;
}
// Q4_K, Q5_K: group t is nibble t % 2 of qs[32 (t / 2) + l], (Q5_K) plus 16 where bit t of qh[l].
inline Group k_group(const uint8_t (&scales)[12], const uint8_t* qs, int t) {
  Group g = bit_field(qs + 32 * (t / 2), 4 * (t % 2), 4);
  g.sc[0] = g.sc[1] = k_scale(scales, t), g.m[0] = g.m[1] = k_min(scales, t);
  return g;
}
inline Group group(const Q4_K::Block& b, int t) { return k_group(b.scales, b.qs, t); }
inline Group group(const Q5_K::Block& b, int t) { return with_high(k_group(b.scales, b.qs, t), bit_field(b.qh, t, 1), 4, 0); }
inline Group group(const IQ4_XS::Block& b, int t) {
  Group g = iq4_levels(nibbles(b.qs + 16 * t));
  g.sc[0] = g.sc[1] = (((b.scales_l[t / 2] >> (4 * (t % 2))) & 0x0F) | (((b.scales_h >> (2 * t)) & 3) << 4)) - 32;
  return g;
}

// A row's blocks times int8 activations: per group, (d xd) times the integer products scaled by
// the halves' sub-block scales, less (dmin xd) times the minima times the activations' sums
// (the block's sum xs where both halves share one minimum, else the halves' own, as products).
template <class Block, class Q = TypeOf<Block>>
  requires(!kInt16Input<Q>)
float dot(const Block* b, Index cols, const int8_t* xq, const float* xd, const int32_t* xs) {
  using Ops = simd::Ops;
  Ops::V acc = Ops::zero(), minima = Ops::zero();
  float mins = 0;
  for (Index i = 0; i < cols / Q::kValues; ++i) {
    const float d = half_to_float(b[i].d), dmin = minimum_scale(b[i]);
    // Unrolled, so that each group's shifts are by constants: in a loop clang made the shift
    // counts a vector that counts along with t, and SIMD128 then shifted byte by byte.
#pragma GCC unroll 8
    for (int t = 0; t < Q::kValues / 32; ++t) {
      const Index a = i * (Q::kValues / 32) + t;
      const int8_t* x = xq + 32 * a;
      const Group g = group(b[i], t);
      const Bytes::I lo = Bytes::dot(Bytes::zero(), g.q[0], x), hi = Bytes::dot(Bytes::zero(), g.q[1], x + 16);
      acc = Ops::madd(acc, Ops::set1(d * xd[a]), Bytes::to_float(Bytes::add(Bytes::scaled(lo, g.sc[0]), Bytes::scaled(hi, g.sc[1]))));
      if (g.m[0] == g.m[1]) {
        mins += dmin * static_cast<float>(g.m[0]) * xd[a] * static_cast<float>(xs[a]);
      } else {
        const Bytes::I m = Bytes::dot(Bytes::dot(Bytes::zero(), Bytes::set1(g.m[0]), x), Bytes::set1(g.m[1]), x + 16);
        minima = Ops::madd(minima, Ops::set1(dmin * xd[a]), Bytes::to_float(m));
      }
    }
  }
  return Ops::sum(acc) - Ops::sum(minima) - mins;
}
// Q8_0 times int16 activations: q8's block products (neon.hpp, wasm_simd128.hpp).
inline float dot(const Q8_0::Block* b, Index cols, const int16_t* xq, const float* xd) {
  using Ops = simd::Ops;
  Ops::V acc = Ops::zero();
  for (Index i = 0; i < cols / 32; ++i)
    acc = Ops::madd(acc, Ops::set1(half_to_float(b[i].d) * xd[i]), Bytes::to_float(simd::q8_block_dot(b[i].qs, xq + 32 * i)));
  return Ops::sum(acc);
}

// The GEMM's widening of a whole block.
template <class Block, class Q = TypeOf<Block>>
void widen(const Block& b, float* out) {
  const float d = half_to_float(b.d), dmin = minimum_scale(b);
#pragma GCC unroll 8  // as in dot
  for (int t = 0; t < Q::kValues / 32; ++t) {
    const Group g = group(b, t);
    for (int h = 0; h < 2; ++h)
      Bytes::widen(g.q[h], d * static_cast<float>(g.sc[h]), dmin * static_cast<float>(g.m[h]), out + 32 * t + 16 * h);
  }
}
#endif

// Blocks b of type Q ([cols / Q::kValues]) times the quantized activations: the type's own
// kernel where this target has one, else through the dequantizer.
template <class Q>
float blocks_dot(const typename Q::Block* b, Index cols, const DecodeInput& in) {
  if constexpr (kInt16Input<Q>) {
    if constexpr (requires { dot(b, cols, in.xq, in.xd); }) return dot(b, cols, in.xq, in.xd);
    else return dot_widened<Q>(b, cols, in.xq, in.xd);
  } else {
    if constexpr (requires { dot(b, cols, in.x8, in.x8_scale, in.x8_sum); }) return dot(b, cols, in.x8, in.x8_scale, in.x8_sum);
    else return dot_widened<Q>(b, cols, in.x8, in.x8_scale);
  }
}
template <class Q>
float row_dot(const View& w, Index r, const DecodeInput& in) {
  return blocks_dot<Q>(blocks_of<Q>(w, r), w.cols, in);
}

// A row of grouped Q4_0 outside a whole group of [begin, end) (a thread's share may start or end
// inside one): its blocks copied back to the stored form, a chunk at a time.
inline float grouped_row_dot(const View& w, Index r, const DecodeInput& in) {
  constexpr Index kChunk = 16;
  Q4_0::Block chunk[kChunk];
  float sum = 0;
  for (Index b0 = 0; b0 < w.cols / 32; b0 += kChunk) {
    const Index n = std::min(kChunk, w.cols / 32 - b0);
    for (Index b = 0; b < n; ++b) chunk[b] = q4_0_block(w, r, b0 + b);
    DecodeInput part = in;
    part.x8 += 32 * b0, part.x8_scale += b0, part.x8_sum += b0;
    sum += blocks_dot<Q4_0>(chunk, 32 * n, part);
  }
  return sum;
}

// y[r] for r in [begin, end): grouped Q4_0 by q4's group kernel a group at a time, every other
// row by row_dot.
template <class Q>
void matvec(const View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  Index r = begin;
  if constexpr (std::is_same_v<Q, Q4_0>) {
    if (w.grouped) {
      const Index whole = std::min(end, w.rows / q4::kGroup * q4::kGroup);
      for (; r < whole && r % q4::kGroup != 0; ++r) y[r] = grouped_row_dot(w, r, in);
      const uintptr_t ahead = simd::decode_ahead(1024);
      for (; r + q4::kGroup <= whole; r += q4::kGroup) {
        q4::MINIMIND_TARGET::group(group_view(w, r), 0, in.x8, in.x8_scale, in.x8_sum, y + r, ahead);
      }
      for (; r < whole; ++r) y[r] = grouped_row_dot(w, r, in);
    }
  }
  for (; r < end; ++r) y[r] = row_dot<Q>(w, r, in);
}

// Rows [r, r + mr), columns [k0, k0 + kc) widened into out [mr, kc], whole blocks by the type's
// own widen() where this target has one; k0 is a multiple of the GEMM's 256 columns, so a block
// never straddles two calls.
inline void widen_block(const View& w, Index r, Index mr, Index k0, Index kc, float* out) {
  with_type(w.type, [&]<class Q>() {
    float values[Q::kValues];
    for (Index i = 0; i < mr; ++i) {
      const auto* b = blocks_of<Q>(w, r + i);
      for (Index c = 0; c < kc; c += Q::kValues) {
        const Index n = std::min<Index>(Q::kValues, kc - c);
        const Index k = (k0 + c) / Q::kValues;
        const typename Q::Block block = [&] {
          if constexpr (std::is_same_v<Q, Q4_0>) return q4_0_block(w, r + i, k);
          else return b[k];
        }();
        if (n == Q::kValues) {
          if constexpr (requires { widen(block, out); }) widen(block, out + i * kc + c);
          else Q::dequantize(block, out + i * kc + c);
        } else {
          Q::dequantize(block, values);
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
  ggml::with_type(w.type, [&]<class Q>() { ggml::MINIMIND_TARGET::matvec<Q>(w, in, y, begin, end); });
}

inline const float* block(const ggml::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  ggml::MINIMIND_TARGET::widen_block(w, r, mr, k0, kc, buf);
  stride = kc;
  return buf;
}

#if MINIMIND_AVX2
inline bool int8_products(const ggml::View& w, const int8_gemm::Int8Panels& x8, Index r0, Index r1, float* buffer, float* ct,
                          Index ct_stride) {
  return ggml::MINIMIND_TARGET::int8_products(w, x8, r0, r1, buffer, ct, ct_stride, int8_gemm::MINIMIND_TARGET::vnni());
}
#endif

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
