#pragma once
// WebAssembly SIMD128 versions of the decode dot products, for the wasm_simd128 target (simd.hpp
// includes this when the build has it, MINIMIND_HAS_WASM_SIMD: compile with -msimd128). SIMD128
// has no fused multiply-add (that is the later relaxed-simd proposal), so products and sums are
// two instructions. Prefill's products have their own SIMD128 micro-kernel in gemm.hpp (Eigen 3.4's
// GEMM has no WebAssembly path, and ran at a sixth of native one-thread prefill).
#include "minimind/tensor.hpp"

#include <wasm_simd128.h>

#include <cstdint>

namespace minimind::kernels::wasm_simd128 {

// The float vector operations for the decode dot loop (dot, simd.hpp). bf16 widened to float32 by a
// zero-extending load to 32 bits, then the 16-bit shift.
struct Ops {
  using V = v128_t;
  static constexpr Index kLanes = 4;
  static constexpr bool kMasked = false;
  static V zero() { return wasm_f32x4_splat(0.0f); }
  static V load(const float* p) { return wasm_v128_load(p); }
  static void store(float* p, V v) { wasm_v128_store(p, v); }
  static V set1(float v) { return wasm_f32x4_splat(v); }
  static V load(const uint16_t* p) { return wasm_i32x4_shl(wasm_u32x4_load16x4(p), 16); }
  static V madd(V acc, V a, V b) { return wasm_f32x4_add(acc, wasm_f32x4_mul(a, b)); }
  static V add(V a, V b) { return wasm_f32x4_add(a, b); }
  static float sum(V v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
           (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
  }
  static void prefetch(const void*, uintptr_t) {}
};

// The 32 products of one q8 block as 4 int32 partial sums: the int8 weights sign-extended to
// int16 as they load, then i32x4.dot_i16x8 (pairs of int16 products, exact in int32).
inline v128_t q8_block_dot(const int8_t* wq, const int16_t* xq) {
  v128_t s = wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(wq), wasm_v128_load(xq));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(wq + 8), wasm_v128_load(xq + 8)));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(wq + 16), wasm_v128_load(xq + 16)));
  return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_load8x8(wq + 24), wasm_v128_load(xq + 24)));
}

// One q8 row: sum_b d[b] xd[b] (block b of q . block b of xq), the row's blocks `stride` bytes
// apart in q. Each block's int32 sum goes to float whole (as the scalar path does), then scaled.
inline float q8_dot(const int8_t* q, Index stride, const uint16_t* d, const int16_t* xq, const float* xd, Index blocks) {
  float sum = 0;
  for (Index b = 0; b < blocks; ++b) {
    const v128_t s = q8_block_dot(q + b * stride, xq + b * 32);
    const int32_t block = (wasm_i32x4_extract_lane(s, 0) + wasm_i32x4_extract_lane(s, 1)) +
                          (wasm_i32x4_extract_lane(s, 2) + wasm_i32x4_extract_lane(s, 3));
    const float scale = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(d[b]));
    sum += scale * xd[b] * static_cast<float>(block);
  }
  return sum;
}

// The 32 products of one q4 block, its nibbles less 8 by int8 activations, as 4 int32 partial sums:
// both sides widened to int16, then i32x4.dot_i16x8.
inline v128_t q4_block_dot(const uint8_t* q, const int8_t* x) {
  const v128_t v = wasm_v128_load(q), eight = wasm_i8x16_splat(8);
  const v128_t lo = wasm_i8x16_sub(wasm_v128_and(v, wasm_i8x16_splat(0x0F)), eight);
  const v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(v, 4), eight);
  const v128_t x0 = wasm_v128_load(x), x1 = wasm_v128_load(x + 16);
  v128_t s = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(lo), wasm_i16x8_extend_low_i8x16(x0));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(lo), wasm_i16x8_extend_high_i8x16(x0)));
  s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(hi), wasm_i16x8_extend_low_i8x16(x1)));
  return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(hi), wasm_i16x8_extend_high_i8x16(x1)));
}

// One q4 row: sum_b d[b] xd[b] (block b's levels less 8 . block b of xq), block b's 16 bytes at
// q + 16 b stride and its scale at d[b stride].
inline float q4_dot(const uint8_t* q, const uint16_t* d, Index stride, const int8_t* xq, const float* xd, Index blocks) {
  float sum = 0;
  for (Index b = 0; b < blocks; ++b) {
    const v128_t s = q4_block_dot(q + b * stride * 16, xq + b * 32);
    const int32_t block = (wasm_i32x4_extract_lane(s, 0) + wasm_i32x4_extract_lane(s, 1)) +
                          (wasm_i32x4_extract_lane(s, 2) + wasm_i32x4_extract_lane(s, 3));
    const float scale = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(d[b * stride]));
    sum += scale * xd[b] * static_cast<float>(block);
  }
  return sum;
}

// Byte vectors for ggml's decode products and widening (ggml.hpp's NEON and WASM section; as
// neon.hpp's Bytes): products of 16 signed codes with int8 activations, both widened to int16,
// by i32x4.dot_i16x8.
struct Bytes {
  using B = v128_t;
  using I = v128_t;
  static B load(const void* p) { return wasm_v128_load(p); }
  static B splat4(const void* p) { return wasm_v128_load32_splat(p); }  // 4 bytes, repeated
  static B set1(int v) { return wasm_i8x16_splat(static_cast<int8_t>(v)); }
  static B bit_and(B a, B b) { return wasm_v128_and(a, b); }
  static B bit_or(B a, B b) { return wasm_v128_or(a, b); }
  static B sub(B a, B b) { return wasm_i8x16_sub(a, b); }
  static B shr(B a, int n) { return wasm_u8x16_shr(a, static_cast<uint32_t>(n)); }
  static B shl(B a, int n) { return wasm_i8x16_shl(a, static_cast<uint32_t>(n)); }
  static B lookup(B table, B index) { return wasm_i8x16_swizzle(table, index); }  // index < 16
  static B any_bits(B a, B mask) { return wasm_i8x16_ne(wasm_v128_and(a, mask), wasm_i8x16_splat(0)); }
  static I zero() { return wasm_i32x4_splat(0); }
  static I add(I a, I b) { return wasm_i32x4_add(a, b); }
  static I scaled(I a, int s) { return wasm_i32x4_mul(a, wasm_i32x4_splat(s)); }
  static v128_t to_float(I a) { return wasm_f32x4_convert_i32x4(a); }
  static I dot(I acc, B q, const int8_t* x) {
    const v128_t xv = wasm_v128_load(x);
    acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(q), wasm_i16x8_extend_low_i8x16(xv)));
    return wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(q), wasm_i16x8_extend_high_i8x16(xv)));
  }
  // out[j] = scale * q[j] - min for the 16 codes.
  static void widen(B q, float scale, float min, float* out) {
    const v128_t h[2] = {wasm_i16x8_extend_low_i8x16(q), wasm_i16x8_extend_high_i8x16(q)};
    for (int k = 0; k < 4; ++k) {
      const v128_t v = k % 2 ? wasm_i32x4_extend_high_i16x8(h[k / 2]) : wasm_i32x4_extend_low_i16x8(h[k / 2]);
      wasm_v128_store(out + 4 * k, wasm_f32x4_sub(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(v), wasm_f32x4_splat(scale)), wasm_f32x4_splat(min)));
    }
  }
};

}  // namespace minimind::kernels::wasm_simd128
