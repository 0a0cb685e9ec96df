#pragma once
// ARM aarch64 NEON versions of the decode dot products, for the neon target (simd.hpp includes this
// when the build has it, MINIMIND_HAS_NEON; the target sections use Ops, q8_dot and q4_dot).
// NEON is part of every aarch64 CPU, so no flag is needed. Prefill stays on Eigen's GEMM, which
// has its own NEON kernels.
//
// q8 without the `dotprod` extension (sdot, __ARM_FEATURE_DOTPROD): sdot multiplies int8 by
// int8, and our activations are int16 (q8.hpp says why). Splitting each int16 into two bytes
// would take two sdot per 16 products and a second activation layout, and 32767 splits into a
// high byte of 128, outside int8: the activation range and so the reference results would change.
// Widening multiplies (vmull/vmlal) of the int8 weights by the int16 activations keep the format.
// q4 multiplies int8 activations (q4.hpp says why): sdot where the CPU has it, else the same widening
// multiplies on bytes.
#include "minimind/tensor.hpp"

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace minimind::kernels::neon {

// The float vector operations for the decode dot loop (dot, simd.hpp). bf16 is the top half of a
// float32: widening is a shift left by 16 (vshll).
struct Ops {
  using V = float32x4_t;
  static constexpr Index kLanes = 4;
  static constexpr bool kMasked = false;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V set1(float v) { return vdupq_n_f32(v); }
  static V load(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static V madd(V acc, V a, V b) { return vfmaq_f32(acc, a, b); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static float sum(V v) { return vaddvq_f32(v); }
  static void prefetch(const void*, uintptr_t) {}
};

// The 32 products of one q8 block, int8 weights by int16 activations, as 4 int32 partial sums
// (exact: q8.hpp bounds a block's sum below 2^27).
inline int32x4_t q8_block_dot(const int8_t* wq, const int16_t* xq) {
  const int8x16_t w0 = vld1q_s8(wq), w1 = vld1q_s8(wq + 16);
  const int16x8_t w00 = vmovl_s8(vget_low_s8(w0)), w01 = vmovl_high_s8(w0);
  const int16x8_t w10 = vmovl_s8(vget_low_s8(w1)), w11 = vmovl_high_s8(w1);
  const int16x8_t x00 = vld1q_s16(xq), x01 = vld1q_s16(xq + 8), x10 = vld1q_s16(xq + 16), x11 = vld1q_s16(xq + 24);
  int32x4_t s0 = vmull_s16(vget_low_s16(w00), vget_low_s16(x00));
  int32x4_t s1 = vmull_high_s16(w00, x00);
  s0 = vmlal_s16(s0, vget_low_s16(w01), vget_low_s16(x01));
  s1 = vmlal_high_s16(s1, w01, x01);
  s0 = vmlal_s16(s0, vget_low_s16(w10), vget_low_s16(x10));
  s1 = vmlal_high_s16(s1, w10, x10);
  s0 = vmlal_s16(s0, vget_low_s16(w11), vget_low_s16(x11));
  s1 = vmlal_high_s16(s1, w11, x11);
  return vaddq_s32(s0, s1);
}

// One q8 row: sum_b d[b] xd[b] (block b of q . block b of xq), the row's blocks `stride` bytes
// apart in q (q8.hpp interleaves rows in groups). Four blocks at a time: their int32 sums in the
// four lanes of one vector, scaled by four float16 weight scales times four activation scales.
inline float q8_dot(const int8_t* q, Index stride, const uint16_t* d, const int16_t* xq, const float* xd, Index blocks) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  Index b = 0;
  for (; b + 4 <= blocks; b += 4) {
    const int32x4_t s0 = q8_block_dot(q + b * stride, xq + b * 32);
    const int32x4_t s1 = q8_block_dot(q + (b + 1) * stride, xq + (b + 1) * 32);
    const int32x4_t s2 = q8_block_dot(q + (b + 2) * stride, xq + (b + 2) * 32);
    const int32x4_t s3 = q8_block_dot(q + (b + 3) * stride, xq + (b + 3) * 32);
    const int32x4_t sums = vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));  // [s0, s1, s2, s3]
    const float32x4_t scales = vmulq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(d + b))), vld1q_f32(xd + b));
    acc = vfmaq_f32(acc, scales, vcvtq_f32_s32(sums));
  }
  float sum = vaddvq_f32(acc);
  for (; b < blocks; ++b) {
    const float scale = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(d[b]))), 0);
    sum += scale * xd[b] * static_cast<float>(vaddvq_s32(q8_block_dot(q + b * stride, xq + b * 32)));
  }
  return sum;
}

// Whether q4's products use sdot (the `dotprod` extension: -march=armv8.2-a+dotprod or later).
#if defined(__ARM_FEATURE_DOTPROD)
inline constexpr bool kQ4Sdot = true;
#else
inline constexpr bool kQ4Sdot = false;
#endif

// The 32 products of one q4 block, its nibbles less 8 (int8 in [-8, 7]) by int8 activations, as 4
// int32 partial sums. Without sdot each int16 lane adds four products of at most 8 x 127.
inline int32x4_t q4_block_dot(const uint8_t* q, const int8_t* x) {
  const uint8x16_t v = vld1q_u8(q);
  const int8x16_t eight = vdupq_n_s8(8);
  const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), eight);
  const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
  const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0), hi, x1);
#else
  int16x8_t p = vmull_s8(vget_low_s8(lo), vget_low_s8(x0));
  p = vmlal_high_s8(p, lo, x0);
  p = vmlal_s8(p, vget_low_s8(hi), vget_low_s8(x1));
  p = vmlal_high_s8(p, hi, x1);
  return vpaddlq_s16(p);
#endif
}

// One q4 row: sum_b d[b] xd[b] (block b's levels less 8 . block b of xq), block b's 16 bytes at
// q + 16 b stride and its scale at d[b stride] (q4.hpp interleaves rows in groups).
inline float q4_dot(const uint8_t* q, const uint16_t* d, Index stride, const int8_t* xq, const float* xd, Index blocks) {
  float sum = 0;
  for (Index b = 0; b < blocks; ++b) {
    const float scale = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(d[b * stride]))), 0);
    sum += scale * xd[b] * static_cast<float>(vaddvq_s32(q4_block_dot(q + b * stride * 16, xq + b * 32)));
  }
  return sum;
}

// Byte vectors for ggml's decode products and widening (ggml.hpp's NEON and WASM section, which
// wasm_simd128.hpp's Bytes serves too): 16 signed codes, their products with int8 activations
// in 4 int32 lanes (sdot where the CPU has `dotprod`, else widening multiplies: a product of two
// int8 fits int16), and the codes widened to float.
struct Bytes {
  using B = int8x16_t;
  using I = int32x4_t;
  static B load(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
  static B splat4(const void* p) {  // 4 bytes, repeated
    uint32_t v;
    std::memcpy(&v, p, 4);
    return vreinterpretq_s8_u32(vdupq_n_u32(v));
  }
  static B set1(int v) { return vdupq_n_s8(static_cast<int8_t>(v)); }
  static B bit_and(B a, B b) { return vandq_s8(a, b); }
  static B bit_or(B a, B b) { return vorrq_s8(a, b); }
  static B sub(B a, B b) { return vsubq_s8(a, b); }
  static B shr(B a, int n) { return vreinterpretq_s8_u8(vshlq_u8(vreinterpretq_u8_s8(a), vdupq_n_s8(static_cast<int8_t>(-n)))); }
  static B shl(B a, int n) { return vshlq_s8(a, vdupq_n_s8(static_cast<int8_t>(n))); }
  static B lookup(B table, B index) { return vqtbl1q_s8(table, vreinterpretq_u8_s8(index)); }  // index < 16
  static B any_bits(B a, B mask) { return vreinterpretq_s8_u8(vtstq_s8(a, mask)); }  // all ones where a & mask
  static I zero() { return vdupq_n_s32(0); }
  static I add(I a, I b) { return vaddq_s32(a, b); }
  static I scaled(I a, int s) { return vmulq_n_s32(a, s); }
  static float32x4_t to_float(I a) { return vcvtq_f32_s32(a); }
  static I dot(I acc, B q, const int8_t* x) {
    const int8x16_t xv = vld1q_s8(x);
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, q, xv);
#else
    return vpadalq_s16(vpadalq_s16(acc, vmull_s8(vget_low_s8(q), vget_low_s8(xv))), vmull_high_s8(q, xv));
#endif
  }
  // out[j] = scale * q[j] - min for the 16 codes.
  static void widen(B q, float scale, float min, float* out) {
    const int16x8_t h[2] = {vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q)};
    for (int k = 0; k < 4; ++k) {
      const int32x4_t v = k % 2 ? vmovl_high_s16(h[k / 2]) : vmovl_s16(vget_low_s16(h[k / 2]));
      vst1q_f32(out + 4 * k, vsubq_f32(vmulq_n_f32(vcvtq_f32_s32(v), scale), vdupq_n_f32(min)));
    }
  }
};

}  // namespace minimind::kernels::neon
