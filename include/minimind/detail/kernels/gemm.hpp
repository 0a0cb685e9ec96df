// Matrix-matrix products for prefill: Y [n, rows] = X [n, cols] W^T with W held in any format.
//
// The prompt's activations X are packed once per product into panels of P positions, k-major
// (Xp[panel][k][P]): the one transposition is of the small operand. A micro-kernel then computes
// an R-weight-row x P-position tile in registers: per k it broadcasts one weight of each of the R
// rows and multiplies two vectors of Xp. With AVX-512 the tile is 12 x 32 (24 zmm accumulators),
// with AVX2 6 x 16 (12 ymm). f32 weights are read in place; bf16, q8 and q4 rows are widened, R rows
// x KC columns at a time, into a small per-thread buffer that stays in L1 (block(), in each
// format's target section). The result is accumulated in a per-thread transposed tile buffer
// (rows x positions, so tile stores are whole vectors) over blocks of KC columns, and transposed
// into Y at the end. Matrices of ggml's integer types (Q4_0, Q5_0, Q4_K, Q6_K) go to the int8
// GEMM instead (gemm_int8.hpp): X quantized once to int8 panels, the same tiles' rows and threads.
// Weight rows are split across the thread pool in chunks of 48 to 96 that the threads take as
// they finish, so every weight is read from memory once; while a block of R rows is multiplied with the
// panels, the next block's f32 or bf16 lines are prefetched. gemm_each does several products
// of one X (q, k, v) with one pack and one dispatch.
//
// WebAssembly SIMD128 has the same structure with a 4 x 8 tile and no prefetches.
// All of it is the target section at the end, compiled once per target (simd.hpp); the other
// targets (scalar, NEON) fall back to Eigen's GEMM on widened panels.
#ifndef MINIMIND_DETAIL_KERNELS_GEMM_HPP
#define MINIMIND_DETAIL_KERNELS_GEMM_HPP
#include "minimind/detail/kernels/formats.hpp"
#include "minimind/detail/kernels/gemm_int8.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/kernels/thread_pool.hpp"
#include "minimind/detail/kernels/weight.hpp"
#include "minimind/detail/line_aligned.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <new>
#include <span>
#include <vector>

namespace minimind::kernels {

// The tiles load and store whole aligned vectors.
using AlignedFloats = LineVector<float>;

struct GemmScratch {
  AlignedFloats xp;                 // X packed in panels of kPanel positions
  std::vector<AlignedFloats> ct;    // per thread: its rows of Y^T [rows, positions rounded up to kPanel]
  std::vector<AlignedFloats> wbuf;  // per thread: kRows widened weight rows x KC
  AlignedFloats rounded;            // q8, q4: the activations after their rounding [n, cols]
  std::vector<int16_t> xq;          // q8: one row of activations quantized
  std::vector<int8_t> x8;           // q4: the same in int8
  std::vector<float> xd;            // their scales
  std::vector<int32_t> x8_sum;      // q4: the sums of its blocks
  int8_gemm::Int8Panels x8_panels;  // the int8 GEMM's activations (gemm_int8.hpp)
};

// One product of a shared input: y [n, w.rows()] = X W^T, rows y_stride apart.
struct GemmProduct {
  const Weight<float>* w;
  float* y;
  Index y_stride;
};

namespace gemm_detail {

inline constexpr Index kKc = 256;    // columns per block
// Weight rows a thread takes at a time: kChunkRows, or twice that while every thread still gets
// at least four chunks of the step's products: each chunk starts on weights that were not asked
// for ahead, so fewer, longer chunks measured faster (commit 93995ee). Both
// are multiples of kRows and of f32_panels' 16 rows, so a chunk is whole panels.
inline constexpr Index kChunkRows = 48;

inline void ensure(AlignedFloats& v, Index n) {
  if (static_cast<Index>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace gemm_detail
}  // namespace minimind::kernels

#endif  // MINIMIND_DETAIL_KERNELS_GEMM_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::gemm_detail::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

#if MINIMIND_AVX512
// 32 zmm registers: a tile of 12 rows x 32 positions is 24 accumulators, two vectors of Xp and a
// broadcast weight.
inline constexpr Index kPanel = 32;  // positions per panel
inline constexpr Index kRows = 12;   // weight rows per micro-kernel
#elif MINIMIND_AVX2
inline constexpr Index kPanel = 16;
inline constexpr Index kRows = 6;
#elif MINIMIND_WASM_SIMD
// The engine has x86's 16 xmm registers, and SIMD128 no FMA: each product needs a register of its
// own before it is added. 4 rows x 8 positions is 8 accumulators, two vectors of Xp, a broadcast
// weight and that product.
inline constexpr Index kPanel = 8;
inline constexpr Index kRows = 4;
#endif

#if MINIMIND_AVX2
// The cache lines of a block of weight rows, asked for a few at a time. Their addresses are
// listed once per block, so that asking for one inside the micro-kernel is a load and a
// prefetch (counting rows and lines there took some 15 integer operations per line, a share of
// them on the FMAs' ports). The last line of the last row may lie past the matrix: they are
// addresses, not pointers, and a prefetch never faults.
struct NextBlock {
  static constexpr Index kMaxLines = kRows * (kKc * 4 / 64 + 1);  // f32's, the widest weights
  uintptr_t line[kMaxLines];
  Index count = 0, asked = 0;
  Index budget = 0;  // AVX-512, f32: how many the micro-kernel asks for, one every other k
  void set(const BlockLines& b) {
    const auto first = reinterpret_cast<uintptr_t>(b.first);
    count = asked = 0;
    for (Index r = 0; r < b.rows; ++r)
      for (Index l = 0; l < b.lines_per_row; ++l) line[count++] = first + static_cast<uintptr_t>(r * b.row_bytes + l * 64);
  }
  Index lines() const { return count; }
  static void prefetch(uintptr_t address) { simd::prefetch_ahead(reinterpret_cast<const void*>(address), 0); }
  void ask(Index n) {
    for (; n > 0 && asked < count; --n) prefetch(line[asked++]);
  }
};
#endif

#if MINIMIND_AVX512
// A tile of R rows x W positions: ct[i][0..W) (+)= sum_k w[i][k] * xp[k][0..W) for i < R, with
// W = 32 (two zmm per row), 16 (one zmm) or 8 (one ymm). The narrow tiles serve a panel's valid
// positions when it has few (a decode step of a small batch, the last panel of a prompt): with
// only the full tile, 8 sequences cost as much as 32. On CPUs that issue ymm FMAs twice as often
// as zmm ones, 8 positions in ymm take half the time of 16 in zmm. The loops over i have constant
// bounds and are unrolled, so the accumulators stay in registers.
template <int W>
struct TileVector {
  using type = __m512;
};
template <>
struct TileVector<8> {
  using type = __m256;
};

// With Ask, it also asks for next's lines, one every other k, up to next->budget of them.
// Not inlined: inlined into the bf16/q8 paths, GCC kept one of the 24 accumulators on the stack
// (its registers held values of the widening code around it), a store and reload every k that
// took half the kernel's samples (commit b347210).
template <int R, int W, bool Ask>
[[gnu::noinline]] inline void micro_kernel_rows(Index kc, const float* w, Index ws, const float* xp, float* ct, Index cs, bool accumulate,
                              NextBlock* next) {
  using V = typename TileVector<W>::type;
  auto zero = [] { if constexpr (W == 8) return _mm256_setzero_ps(); else return _mm512_setzero_ps(); };
  auto load = [](const float* p) { if constexpr (W == 8) return _mm256_loadu_ps(p); else return _mm512_loadu_ps(p); };
  auto store = [](float* p, V v) { if constexpr (W == 8) _mm256_storeu_ps(p, v); else _mm512_storeu_ps(p, v); };
  auto add = [](V a, V b) { if constexpr (W == 8) return _mm256_add_ps(a, b); else return _mm512_add_ps(a, b); };
  auto fmadd = [](float b, V x, V acc) {
    if constexpr (W == 8) return _mm256_fmadd_ps(_mm256_set1_ps(b), x, acc);
    else return _mm512_fmadd_ps(_mm512_set1_ps(b), x, acc);
  };
  constexpr int kVectors = W == 32 ? 2 : 1;
  V acc[R][kVectors];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) acc[i][j] = zero();
  // Row i's weight at k is base[kBase[i]] + kTimes[i] * s: four bases that move with k and one
  // stride cover the 12 rows in x86's base + index * {1, 2, 4, 8} addresses. Twelve row pointers
  // did not fit in the integer registers, and the spills to vector registers (vmovq) took the
  // port of the FMAs (commit 4ad2c78).
  const Index s = ws * static_cast<Index>(sizeof(float));
  constexpr int kBase[12] = {0, 0, 0, 1, 0, 1, 2, 1, 0, 3, 2, 1};
  constexpr int kTimes[12] = {0, 1, 2, 0, 4, 2, 0, 4, 8, 0, 4, 8};
  const char* base[4] = {reinterpret_cast<const char*>(w)};
  for (int b = 1; b < 4; ++b) base[b] = R > 3 * b ? base[0] + 3 * b * s : base[0];
  // Locals, so the loop keeps them in registers.
  Index budget = Ask ? next->budget : 0;
  const uintptr_t* ask = Ask ? next->line + next->asked : nullptr;
  // With one panel (a decode step of 17 to 32 sequences) the whole next block is asked for during
  // this one, more lines than every other k has: then one every k, not the rest in a burst after
  // the kernel, which stalled on the full miss buffers (commit 8e335c2).
  const bool every_k = budget > kc / 2;
  for (Index k = 0; k < kc; ++k, xp += kPanel) {
    if constexpr (Ask) {
      if ((every_k || (k & 1)) && budget > 0) {
        NextBlock::prefetch(*ask++);
        --budget;
      }
    }
    V x[kVectors];
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) x[j] = load(xp + 16 * j);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const float b = *reinterpret_cast<const float*>(base[kBase[i]] + kTimes[i] * s);
#pragma GCC unroll 2
      for (int j = 0; j < kVectors; ++j) acc[i][j] = fmadd(b, x[j], acc[i][j]);
    }
#pragma GCC unroll 4
    for (auto& b : base) b += sizeof(float);
  }
  if constexpr (Ask) {
    next->budget = budget;
    next->asked = ask - next->line;
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* c = ct + i * cs;
#pragma GCC unroll 2
    for (int j = 0; j < kVectors; ++j) {
      if (accumulate) acc[i][j] = add(acc[i][j], load(c + 16 * j));
      store(c + 16 * j, acc[i][j]);
    }
  }
}

template <int W>
inline void micro_kernel_width(Index mr, Index kc, const float* w, Index w_stride, const float* xp, float* ct,
                               Index ct_stride, bool accumulate, NextBlock* next) {
  // The last rows of a range in tiles of 8, 4, 2 and 1 (a small share of the work).
  while (mr > 0) {
    const Index step = mr >= kRows ? kRows : mr >= 8 ? 8 : mr >= 4 ? 4 : mr >= 2 ? 2 : 1;
    if (step == kRows && next) micro_kernel_rows<kRows, W, true>(kc, w, w_stride, xp, ct, ct_stride, accumulate, next);
    else if (step == kRows) micro_kernel_rows<kRows, W, false>(kc, w, w_stride, xp, ct, ct_stride, accumulate, nullptr);
    else if (step == 8) micro_kernel_rows<8, W, false>(kc, w, w_stride, xp, ct, ct_stride, accumulate, nullptr);
    else if (step == 4) micro_kernel_rows<4, W, false>(kc, w, w_stride, xp, ct, ct_stride, accumulate, nullptr);
    else if (step == 2) micro_kernel_rows<2, W, false>(kc, w, w_stride, xp, ct, ct_stride, accumulate, nullptr);
    else micro_kernel_rows<1, W, false>(kc, w, w_stride, xp, ct, ct_stride, accumulate, nullptr);
    mr -= step;
    w += step * w_stride;
    ct += step * ct_stride;
  }
}

// A tile over the first `positions` (1..32) of a panel; the rest of its columns in ct are not written.
inline void micro_kernel(Index mr, Index kc, const float* w, Index w_stride, const float* xp, float* ct,
                         Index ct_stride, bool accumulate, Index positions, NextBlock* next) {
  if (positions > 16) micro_kernel_width<32>(mr, kc, w, w_stride, xp, ct, ct_stride, accumulate, next);
  else if (positions > 8) micro_kernel_width<16>(mr, kc, w, w_stride, xp, ct, ct_stride, accumulate, next);
  else micro_kernel_width<8>(mr, kc, w, w_stride, xp, ct, ct_stride, accumulate, next);
}
#elif MINIMIND_AVX2
// Unaligned: attention's tiles are rows of its scores and outputs (ops.hpp).
inline void store_tile_row(float* c, __m256 lo, __m256 hi, bool accumulate) {
  if (accumulate) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(c));
    hi = _mm256_add_ps(hi, _mm256_loadu_ps(c + 8));
  }
  _mm256_storeu_ps(c, lo);
  _mm256_storeu_ps(c + 8, hi);
}

// The full tile, written out so that all 12 accumulators stay in registers:
// ct[i][0..16) (+)= sum_k w[i][k] * xp[k][0..16) for i < 6.
inline void micro_kernel_6(Index kc, const float* w, Index ws, const float* xp, float* ct, Index cs, bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *w0 = w, *w1 = w + ws, *w2 = w + 2 * ws, *w3 = w + 3 * ws, *w4 = w + 4 * ws, *w5 = w + 5 * ws;
  for (Index k = 0; k < kc; ++k, xp += kPanel) {
    const __m256 x0 = _mm256_load_ps(xp), x1 = _mm256_load_ps(xp + 8);
    __m256 b = _mm256_broadcast_ss(w0 + k);
    c00 = _mm256_fmadd_ps(b, x0, c00);
    c01 = _mm256_fmadd_ps(b, x1, c01);
    b = _mm256_broadcast_ss(w1 + k);
    c10 = _mm256_fmadd_ps(b, x0, c10);
    c11 = _mm256_fmadd_ps(b, x1, c11);
    b = _mm256_broadcast_ss(w2 + k);
    c20 = _mm256_fmadd_ps(b, x0, c20);
    c21 = _mm256_fmadd_ps(b, x1, c21);
    b = _mm256_broadcast_ss(w3 + k);
    c30 = _mm256_fmadd_ps(b, x0, c30);
    c31 = _mm256_fmadd_ps(b, x1, c31);
    b = _mm256_broadcast_ss(w4 + k);
    c40 = _mm256_fmadd_ps(b, x0, c40);
    c41 = _mm256_fmadd_ps(b, x1, c41);
    b = _mm256_broadcast_ss(w5 + k);
    c50 = _mm256_fmadd_ps(b, x0, c50);
    c51 = _mm256_fmadd_ps(b, x1, c51);
  }
  store_tile_row(ct, c00, c01, accumulate);
  store_tile_row(ct + cs, c10, c11, accumulate);
  store_tile_row(ct + 2 * cs, c20, c21, accumulate);
  store_tile_row(ct + 3 * cs, c30, c31, accumulate);
  store_tile_row(ct + 4 * cs, c40, c41, accumulate);
  store_tile_row(ct + 5 * cs, c50, c51, accumulate);
}

// The same for the last 1..5 rows of a range, one row at a time (a small share of the work).
inline void micro_kernel_1(Index kc, const float* w, const float* xp, float* ct, bool accumulate) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  Index k = 0;
  for (; k + 2 <= kc; k += 2) {
    const __m256 u = _mm256_broadcast_ss(w + k), v = _mm256_broadcast_ss(w + k + 1);
    a0 = _mm256_fmadd_ps(u, _mm256_load_ps(xp + k * kPanel), a0);
    a1 = _mm256_fmadd_ps(u, _mm256_load_ps(xp + k * kPanel + 8), a1);
    b0 = _mm256_fmadd_ps(v, _mm256_load_ps(xp + (k + 1) * kPanel), b0);
    b1 = _mm256_fmadd_ps(v, _mm256_load_ps(xp + (k + 1) * kPanel + 8), b1);
  }
  for (; k < kc; ++k) {
    const __m256 u = _mm256_broadcast_ss(w + k);
    a0 = _mm256_fmadd_ps(u, _mm256_load_ps(xp + k * kPanel), a0);
    a1 = _mm256_fmadd_ps(u, _mm256_load_ps(xp + k * kPanel + 8), a1);
  }
  store_tile_row(ct, _mm256_add_ps(a0, b0), _mm256_add_ps(a1, b1), accumulate);
}

// The AVX2 tile is always 16 positions wide (`positions` is not used).
inline void micro_kernel(Index mr, Index kc, const float* w, Index w_stride, const float* xp, float* ct,
                         Index ct_stride, bool accumulate, Index /*positions*/, NextBlock*) {
  if (mr == kRows) {
    micro_kernel_6(kc, w, w_stride, xp, ct, ct_stride, accumulate);
    return;
  }
  for (Index i = 0; i < mr; ++i) micro_kernel_1(kc, w + i * w_stride, xp, ct + i * ct_stride, accumulate);
}
#elif MINIMIND_WASM_SIMD
// A tile of R rows x 8 positions: ct[i][0..8) (+)= sum_k w[i][k] * xp[k][0..8) for i < R, the
// weight broadcast as it loads (v128.load32_splat). The loops over i have constant bounds and are
// unrolled, so the accumulators stay in registers.
template <int R>
inline void micro_kernel_rows(Index kc, const float* w, Index ws, const float* xp, float* ct, Index cs, bool accumulate) {
  v128_t acc[R][2];
#pragma clang loop unroll(full)
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = wasm_f32x4_splat(0.0f);
  for (Index k = 0; k < kc; ++k, xp += kPanel) {
    const v128_t x0 = wasm_v128_load(xp), x1 = wasm_v128_load(xp + 4);
#pragma clang loop unroll(full)
    for (int i = 0; i < R; ++i) {
      const v128_t b = wasm_v128_load32_splat(w + i * ws + k);
      acc[i][0] = wasm_f32x4_add(acc[i][0], wasm_f32x4_mul(b, x0));
      acc[i][1] = wasm_f32x4_add(acc[i][1], wasm_f32x4_mul(b, x1));
    }
  }
#pragma clang loop unroll(full)
  for (int i = 0; i < R; ++i) {
    float* c = ct + i * cs;
    if (accumulate) {
      acc[i][0] = wasm_f32x4_add(acc[i][0], wasm_v128_load(c));
      acc[i][1] = wasm_f32x4_add(acc[i][1], wasm_v128_load(c + 4));
    }
    wasm_v128_store(c, acc[i][0]);
    wasm_v128_store(c + 4, acc[i][1]);
  }
}

// The tile is always 8 positions wide (`positions` is not used); the last 1..3 rows of a range in
// tiles of their own.
inline void micro_kernel(Index mr, Index kc, const float* w, Index w_stride, const float* xp, float* ct,
                         Index ct_stride, bool accumulate, Index /*positions*/) {
  for (; mr >= kRows; mr -= kRows, w += kRows * w_stride, ct += kRows * ct_stride) {
    micro_kernel_rows<kRows>(kc, w, w_stride, xp, ct, ct_stride, accumulate);
  }
  if (mr == 3) micro_kernel_rows<3>(kc, w, w_stride, xp, ct, ct_stride, accumulate);
  else if (mr == 2) micro_kernel_rows<2>(kc, w, w_stride, xp, ct, ct_stride, accumulate);
  else if (mr == 1) micro_kernel_rows<1>(kc, w, w_stride, xp, ct, ct_stride, accumulate);
}
#endif

#if MINIMIND_AVX2
// The side of the squares pack_panel and unpack transpose in registers.
inline constexpr Index kSquare = 8;
// 8x8 transpose of rows src[i * src_stride + 0..8) into dst[j * dst_stride + 0..8).
inline void transpose_square(const float* src, Index src_stride, float* dst, Index dst_stride) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#elif MINIMIND_WASM_SIMD
inline constexpr Index kSquare = 4;
// 4x4 transpose of rows src[i * src_stride + 0..4) into dst[j * dst_stride + 0..4).
inline void transpose_square(const float* src, Index src_stride, float* dst, Index dst_stride) {
  const v128_t r0 = wasm_v128_load(src), r1 = wasm_v128_load(src + src_stride);
  const v128_t r2 = wasm_v128_load(src + 2 * src_stride), r3 = wasm_v128_load(src + 3 * src_stride);
  const v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), t1 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);
  const v128_t t2 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5), t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
  wasm_v128_store(dst, wasm_i32x4_shuffle(t0, t2, 0, 1, 4, 5));
  wasm_v128_store(dst + dst_stride, wasm_i32x4_shuffle(t0, t2, 2, 3, 6, 7));
  wasm_v128_store(dst + 2 * dst_stride, wasm_i32x4_shuffle(t1, t3, 0, 1, 4, 5));
  wasm_v128_store(dst + 3 * dst_stride, wasm_i32x4_shuffle(t1, t3, 2, 3, 6, 7));
}
#endif

#if MINIMIND_AVX2 || MINIMIND_WASM_SIMD
// Packs positions [p * kPanel, (p + 1) * kPanel) of x (rows of `cols`, zero beyond n) into xp panel p.
inline void pack_panel(const float* x, Index x_stride, Index n, Index cols, Index p, float* xp) {
  float* dst = xp + p * cols * kPanel;
  const Index first = p * kPanel;
  // Whole squares of positions by transposition (a batch's decode step often fills part of a
  // panel), the rest one value at a time, zero past n.
  const Index whole = std::clamp<Index>((n - first) / kSquare * kSquare, 0, kPanel);
  Index k = 0;
  for (; k + kSquare <= cols; k += kSquare) {
    for (Index j = 0; j < whole; j += kSquare) {
      transpose_square(x + (first + j) * x_stride + k, x_stride, dst + k * kPanel + j, kPanel);
    }
  }
  const Index valid = std::clamp<Index>(n - first, 0, kPanel);
  for (Index c = 0; c < cols; ++c) {
    float* to = dst + c * kPanel;
    for (Index j = c < k ? whole : 0; j < valid; ++j) to[j] = x[(first + j) * x_stride + c];
    std::fill(to + valid, to + kPanel, 0.0f);
  }
}

// y[i][r] = ct[r][i] for r < rows, i < n, a square of positions at a time: each of their rows of
// y is written whole before the next square. Going a square of rows at a time over all positions
// wrote 32 bytes into each of n rows of y per step, and waited on those stores (commit 4ad2c78).
inline void unpack(const float* ct, Index ct_stride, Index rows, Index n, float* y, Index y_stride) {
  Index i = 0;
  for (; i + kSquare <= n; i += kSquare) {
    Index r = 0;
    for (; r + kSquare <= rows; r += kSquare) {
      transpose_square(ct + r * ct_stride + i, ct_stride, y + i * y_stride + r, y_stride);
    }
    for (; r < rows; ++r)
      for (Index j = 0; j < kSquare; ++j) y[(i + j) * y_stride + r] = ct[r * ct_stride + i + j];
  }
  for (; i < n; ++i)
    for (Index r = 0; r < rows; ++r) y[i * y_stride + r] = ct[r * ct_stride + i];
}
#endif

}  // namespace minimind::kernels::gemm_detail::MINIMIND_TARGET

namespace minimind::kernels::MINIMIND_TARGET {

// y_i [n, w_i.rows()] = X W_i^T for several products of the same X [n, cols] (q, k and v; gate
// and up), the same results as one call per product: X is packed once, and the weight rows of
// all the products are handed out in one dispatch, so the threads meet once per set instead of
// twice per weight.
inline void gemm_each(const float* x, Index x_stride, Index n, std::span<const GemmProduct> products,
                      GemmScratch& scratch, ThreadPool* pool) {
  using namespace gemm_detail;
  using namespace gemm_detail::MINIMIND_TARGET;
  if (products.empty() || n <= 0) return;
  const Index cols = products.front().w->cols();
  // How a product's activations are rounded first: as its decode product quantizes them (q8's
  // int16 or q4's int8 blocks), so that prefill and decode compute the same function.
  enum class Rounding { None, Int16, Int8 };
  auto rounding = [](const GemmProduct& product) {
    return with_format(product.w->format(), [&]<class F>() {
      if constexpr (F::kQuantizedInput && F::kInt8Input) {  // which, matrix by matrix (ggml: by type)
        return F::int16_input(product.w->template format_view<F>()) ? Rounding::Int16 : Rounding::Int8;
      } else {
        return F::kQuantizedInput ? Rounding::Int16 : F::kInt8Input ? Rounding::Int8 : Rounding::None;
      }
    });
  };
  const Rounding round = rounding(products.front());
  for (const GemmProduct& product : products) {
    if (rounding(product) != round) {  // they want different inputs
      for (const GemmProduct& one : products) gemm_each(x, x_stride, n, {&one, 1}, scratch, pool);
      return;
    }
  }
  const int threads = pool ? pool->size() : 1;
  // Which products run on the int8 GEMM (gemm_int8.hpp): the matrices whose codes it multiplies,
  // on the targets that have it. The others go to the float tiles over x rounded as their decode
  // products round it.
  auto on_int8 = [&](const GemmProduct& product) {
#if MINIMIND_AVX2
    return round == Rounding::Int8 && with_format(product.w->format(), [&]<class F>() {
             if constexpr (requires(const typename F::View& v) { F::int8_gemm(v); }) {
               return F::int8_gemm(product.w->template format_view<F>());
             } else {
               return false;
             }
           });
#else
    (void)product;
    return false;
#endif
  };
  [[maybe_unused]] bool any_int8 = false;  // read on the targets with the int8 GEMM only
  bool any_float = false;
  for (const GemmProduct& product : products) (on_int8(product) ? any_int8 : any_float) = true;
  [[maybe_unused]] const float* const x_in = x;  // the int8 GEMM quantizes x itself
  [[maybe_unused]] const Index x_in_stride = x_stride;

  if (round != Rounding::None && any_float) {
    static_assert(q4::kBlock == q8::kBlock);
    const Index blocks = q8::blocks_for(cols);
    scratch.xq.resize(static_cast<size_t>(blocks * q8::kBlock));
    scratch.x8.resize(static_cast<size_t>(blocks * q4::kBlock));
    scratch.xd.resize(static_cast<size_t>(blocks));
    scratch.x8_sum.resize(static_cast<size_t>(blocks));
    ensure(scratch.rounded, n * cols);
    float* rounded = scratch.rounded.data();
    for (Index i = 0; i < n; ++i) {
      if (round == Rounding::Int16) {
        q8::MINIMIND_TARGET::quantize_activations(x + i * x_stride, cols, scratch.xq.data(), scratch.xd.data());
      } else {
        q4::MINIMIND_TARGET::quantize_activations(x + i * x_stride, cols, scratch.x8.data(), scratch.xd.data(),
                                                  scratch.x8_sum.data());
      }
      float* row = rounded + i * cols;
      for (Index b = 0; b < blocks; ++b) {  // block by block, so the loop vectorizes
        const float d = scratch.xd[static_cast<size_t>(b)];
        const Index width = std::min(q8::kBlock, cols - b * q8::kBlock);
        if (round == Rounding::Int16) {
          const int16_t* q = scratch.xq.data() + b * q8::kBlock;
          for (Index c = 0; c < width; ++c) row[b * q8::kBlock + c] = d * q[c];
        } else {
          const int8_t* q = scratch.x8.data() + b * q4::kBlock;
          for (Index c = 0; c < width; ++c) row[b * q4::kBlock + c] = d * q[c];
        }
      }
    }
    x = rounded;
    x_stride = cols;
  }

#if MINIMIND_AVX2 || MINIMIND_WASM_SIMD
#if MINIMIND_AVX2
  static_assert(int8_gemm::MINIMIND_TARGET::kPanel == kPanel);
#endif
  const Index panels = (n + kPanel - 1) / kPanel, npad = panels * kPanel;
  if (any_float) ensure(scratch.xp, panels * cols * kPanel);
  float* xp = scratch.xp.data();
#if MINIMIND_AVX2
  if (any_int8) int8_gemm::MINIMIND_TARGET::reserve(scratch.x8_panels, n, cols);
#endif
  if (static_cast<int>(scratch.ct.size()) < threads) scratch.ct.resize(static_cast<size_t>(threads));
  if (static_cast<int>(scratch.wbuf.size()) < threads) scratch.wbuf.resize(static_cast<size_t>(threads));

  auto pack = [&](Index begin, Index end) {
    if (any_float) {
      for (Index p = begin; p < end; ++p) pack_panel(x, x_stride, n, cols, p, xp);
    }
#if MINIMIND_AVX2
    if (any_int8) int8_gemm::MINIMIND_TARGET::pack(x_in, x_in_stride, n, cols, begin, end, scratch.x8_panels);
#endif
  };
  // Rows [r0, r1) of one product, on thread t.
  auto compute = [&](const GemmProduct& product, Index r0, Index r1, int t) {
    with_format(product.w->format(), [&]<class F>() {
      const typename F::View w = product.w->template format_view<F>();
      if constexpr (std::is_same_v<F, f32_panels::Format>) {  // its own products, on the packed positions
        f32_panels::MINIMIND_TARGET::products(w, {xp, kPanel, cols * kPanel, n}, product.y, product.y_stride, r0, r1);
      } else {
        AlignedFloats& ct = scratch.ct[static_cast<size_t>(t)];
        ensure(ct, (r1 - r0) * npad);
#if MINIMIND_AVX2
        if constexpr (requires { int8_products(w, scratch.x8_panels, r0, r1, xp, xp, npad); }) {
          if (on_int8(product)) {
            AlignedFloats& buffer = scratch.wbuf[static_cast<size_t>(t)];
            ensure(buffer, int8_gemm::RowPanel::floats(int8_gemm::MINIMIND_TARGET::kRows, cols / int8_gemm::kBlock));
            int8_products(w, scratch.x8_panels, r0, r1, buffer.data(), ct.data(), npad);
            unpack(ct.data(), npad, r1 - r0, n, product.y + r0, product.y_stride);
            return;
          }
        }
#endif
        ensure(scratch.wbuf[static_cast<size_t>(t)], kRows * kKc);
        float* wbuf = scratch.wbuf[static_cast<size_t>(t)].data();
        // kRows rows at a time, each over all its columns in blocks of KC: the rows are read front
        // to back, which measured faster than all rows of one block of columns, then the next.
        for (Index r = r0; r < r1; r += kRows) {
          const Index mr = std::min(kRows, r1 - r);
          for (Index k0 = 0; k0 < cols; k0 += kKc) {
            const Index kc = std::min(kKc, cols - k0);
            Index ws;
            const float* wp = block(w, r, mr, k0, kc, wbuf, ws);
            float* c = ct.data() + (r - r0) * npad;
#if MINIMIND_WASM_SIMD
            // WebAssembly has no prefetch instruction: the engine's loads are all there is.
            for (Index p = 0; p < panels; ++p) {
              micro_kernel(mr, kc, wp, ws, xp + p * cols * kPanel + k0 * kPanel, c + p * kPanel, npad, k0 > 0,
                           std::min(kPanel, n - p * kPanel));
            }
#else
            // The weights come from DRAM in pieces of kRows rows x KC columns, too short for the
            // hardware prefetcher to learn: ask for the next piece (the same rows' next columns, or
            // the next rows' first), a share of its lines per panel.
            // f32 read in place on AVX-512: the 12-row micro-kernel asks for its share one line
            // every other k (a burst of some 50 before the panel filled the L1 miss buffers and
            // stalled there: commit 6d5cf98); the widened formats read their block before the
            // kernel and keep the burst.
            NextBlock next;
            if (k0 + kKc < cols) next.set(F::lines(w, r, mr, k0 + kKc, std::min(kKc, cols - k0 - kKc)));
            else if (r + kRows < r1) next.set(F::lines(w, r + kRows, std::min(kRows, r1 - r - kRows), 0, std::min(kKc, cols)));
            const Index share = (next.lines() + panels - 1) / panels;
#if MINIMIND_AVX512
            const bool spread = wp != wbuf;
#else
            constexpr bool spread = false;
#endif
            for (Index p = 0; p < panels; ++p) {
              if (spread) next.budget = std::min(next.lines(), share * (p + 1)) - next.asked;
              else next.ask(share);
              micro_kernel(mr, kc, wp, ws, xp + p * cols * kPanel + k0 * kPanel, c + p * kPanel, npad, k0 > 0,
                           std::min(kPanel, n - p * kPanel), spread ? &next : nullptr);
              next.ask(next.budget);  // those the micro-kernel had no steps left for
              next.budget = 0;
            }
#endif
          }
        }
        unpack(ct.data(), npad, r1 - r0, n, product.y + r0, product.y_stride);
      }
    });
  };
  if (!pool || threads == 1) {
    pack(0, panels);
    for (const GemmProduct& product : products) compute(product, 0, product.w->rows(), 0);
    return;
  }
  pool->parallel_for(panels, 1, pack);
  // Chunk c of the concatenated rows: the products' chunks of chunk_rows rows, one after another.
  Index rows = 0;
  for (const GemmProduct& product : products) rows += product.w->rows();
  const Index chunk_rows = std::clamp(rows / (4 * threads) / kChunkRows * kChunkRows, kChunkRows, 2 * kChunkRows);
  auto chunks_of = [&](const GemmProduct& product) { return (product.w->rows() + chunk_rows - 1) / chunk_rows; };
  Index chunks = 0;
  for (const GemmProduct& product : products) chunks += chunks_of(product);
  pool->parallel_for_dynamic(chunks, 1, [&](Index begin, Index end, int t) {
    for (Index c = begin; c < end; ++c) {
      size_t j = 0;
      Index local = c;
      for (; local >= chunks_of(products[j]); ++j) local -= chunks_of(products[j]);
      const Index r0 = local * chunk_rows;
      compute(products[j], r0, std::min(r0 + chunk_rows, products[j].w->rows()), t);
    }
  });
#else
  // Portable fallback: Eigen's GEMM on widened rows.
  (void)threads;
  using ConstStrided = Eigen::Map<const MatrixRM<float>, 0, Eigen::OuterStride<>>;
  using Strided = Eigen::Map<MatrixRM<float>, 0, Eigen::OuterStride<>>;
  const ConstStrided X(x, n, cols, Eigen::OuterStride<>(x_stride));
  for (const GemmProduct& product : products) {
    const Weight<float>& w = *product.w;
    const Index rows = w.rows();
    Strided Y(product.y, n, rows, Eigen::OuterStride<>(product.y_stride));
    if (w.format() == WeightFormat::F32) {  // in place
      Y.noalias() = X * w.matrix().transpose();
      continue;
    }
    MatrixRM<float> panel(std::min<Index>(rows, 64), cols);
    for (Index r = 0; r < rows; r += panel.rows()) {
      const Index h = std::min(panel.rows(), rows - r);
      for (Index i = 0; i < h; ++i) w.row_to(r + i, panel.row(i).data());
      Y.middleCols(r, h).noalias() = X * panel.topRows(h).transpose();
    }
  }
#endif
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
