// ggml's "K" quantizations, 256 weights per block in sub-blocks of 16 or 32 that carry their own
// small integer scale (and minimum) under the block's float16 ones: Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, and IQ4_XS (IQ4_NL's levels with Q4_K-like sub-block scales). Each type is its block
// layout as stored in a GGUF file and a scalar dequantizer that gives what llama.cpp's gguf-py
// (`gguf.quants.dequantize`) gives, bit for bit: a sub-block's scale d * sc first, then times the
// code, then minus d_min * m, as gguf-py orders them. Every product is exact in float32 (the
// float16 scale's 11 significant bits times at most 12 bits of sub-block scale and code).
#ifndef MINIMIND_DETAIL_KERNELS_GGML_KQUANTS_HPP
#define MINIMIND_DETAIL_KERNELS_GGML_KQUANTS_HPP
#include "minimind/detail/kernels/ggml_quants.hpp"

#include <cstdint>

namespace minimind::kernels::ggml {

inline constexpr int kSuperBlock = 256;

// Q2_K: 16 sub-blocks of 16; scales[s] holds sub-block s's scale (low nibble) and minimum (high).
// Value i = 128 h + 32 k + l (h < 2, k < 4, l < 32) is bits 2k..2k+1 of qs[32 h + l];
// x = (d * scale) * q - dmin * min.
struct Q2_K {
  static constexpr uint32_t kType = 10;
  static constexpr const char* kName = "Q2_K";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
  };
  static bool finite(const Block& b) { return half_is_finite(b.d) && half_is_finite(b.dmin); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
    for (int i = 0; i < kSuperBlock; ++i) {
      const int s = i / 16, q = (b.qs[32 * (i / 128) + i % 32] >> (2 * (i / 32 % 4))) & 3;
      const float scale = d * static_cast<float>(b.scales[s] & 0x0F), min = dmin * static_cast<float>(b.scales[s] >> 4);
      x[i] = scale * static_cast<float>(q) - min;
    }
  }
};

// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (offset 32): the low 4 bits of scale s in
// nibble s / 8 of scales[s % 8], the high 2 bits in bits 2 (s / 4)..+1 of scales[8 + s % 4].
// Value i = 128 h + 32 k + l has the 2 low bits of its code at bits 2k of qs[32 h + l] and a
// third bit, bit i / 32 of hmask[l], that when clear subtracts 4: q in [-4, 3].
struct Q3_K {
  static constexpr uint32_t kType = 11;
  static constexpr const char* kName = "Q3_K";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static int scale(const Block& b, int s) {
    const int low = (b.scales[s % 8] >> (4 * (s / 8))) & 0x0F, high = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (low | high << 4) - 32;
  }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    for (int i = 0; i < kSuperBlock; ++i) {
      const int l = i % 32, low = (b.qs[32 * (i / 128) + l] >> (2 * (i / 32 % 4))) & 3;
      const int q = low - (((b.hmask[l] >> (i / 32)) & 1) ? 0 : 4);
      x[i] = (d * static_cast<float>(scale(b, i / 16))) * static_cast<float>(q);
    }
  }
};

// Q4_K's and Q5_K's eight 6-bit scales and minima in 12 bytes: for s < 4 the low 6 bits of
// bytes s (scale) and 4 + s (min); for s >= 4 a nibble of byte 4 + s (scale low, min high) and
// the top 2 bits of bytes s - 4 (scale) and s (min).
inline int k_scale(const uint8_t (&p)[12], int s) { return s < 4 ? p[s] & 63 : (p[s + 4] & 0x0F) | ((p[s - 4] >> 6) << 4); }
inline int k_min(const uint8_t (&p)[12], int s) { return s < 4 ? p[s + 4] & 63 : (p[s + 4] >> 4) | ((p[s] >> 6) << 4); }

// Q4_K's and Q5_K's values: x[32 s + l] = (d * scale_s) * code(s, l) - dmin * min_s.
template <class Block, class Code>
void k_sub_blocks(const Block& b, float* x, Code&& code) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int s = 0; s < 8; ++s) {
    const float scale = d * static_cast<float>(k_scale(b.scales, s)), min = dmin * static_cast<float>(k_min(b.scales, s));
    for (int l = 0; l < 32; ++l) x[32 * s + l] = scale * static_cast<float>(code(s, l)) - min;
  }
}
// Value l of sub-block s = 2c + n: nibble n of qs[32 c + l].
template <class Block>
int low_nibbles(const Block& b, int s, int l) {
  return (b.qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0F;
}

// Q4_K: 8 sub-blocks of 32; sub-block s = 2c + n is nibble n (low, high) of qs[32 c .. 32 c + 31];
// x = (d * scale) * q - dmin * min.
struct Q4_K {
  static constexpr uint32_t kType = 12;
  static constexpr const char* kName = "Q4_K";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d) && half_is_finite(b.dmin); }
  static void dequantize(const Block& b, float* x) {
    k_sub_blocks(b, x, [&](int s, int l) { return low_nibbles(b, s, l); });
  }
};

// Q5_K: Q4_K with a fifth bit, bit s of qh[l] for value l of sub-block s.
struct Q5_K {
  static constexpr uint32_t kType = 13;
  static constexpr const char* kName = "Q5_K";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d) && half_is_finite(b.dmin); }
  static void dequantize(const Block& b, float* x) {
    k_sub_blocks(b, x, [&](int s, int l) { return low_nibbles(b, s, l) | (((b.qh[l] >> s) & 1) << 4); });
  }
};

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales. Value i = 128 h + 32 k + l (h < 2, k < 4,
// l < 32) has its low 4 bits in nibble k / 2 of ql[64 h + 32 (k % 2) + l] and its high 2 bits at
// bits 2k of qh[32 h + l]; x = (d * scale) * (q - 32).
struct Q6_K {
  static constexpr uint32_t kType = 14;
  static constexpr const char* kName = "Q6_K";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    for (int i = 0; i < kSuperBlock; ++i) {
      const int h = i / 128, k = i / 32 % 4, l = i % 32;
      const int low = (b.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F, high = (b.qh[32 * h + l] >> (2 * k)) & 3;
      x[i] = (d * static_cast<float>(b.scales[i / 16])) * static_cast<float>((low | high << 4) - 32);
    }
  }
};

// IQ4_XS: 8 sub-blocks of 32 with 6-bit signed scales (offset 32): low 4 bits in nibble s % 2 of
// scales_l[s / 2], high 2 bits at bits 2s of scales_h. Sub-block s's 32 codes are laid out as an
// IQ4_NL block's (qs[16 s + j]: value j low nibble, value j + 16 high); x = (d * scale) * level.
struct IQ4_XS {
  static constexpr uint32_t kType = 23;
  static constexpr const char* kName = "IQ4_XS";
  static constexpr int kValues = kSuperBlock;
  struct Block {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    for (int s = 0; s < 8; ++s) {
      const int sc = (((b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((b.scales_h >> (2 * s)) & 3) << 4)) - 32;
      const float scale = d * static_cast<float>(sc);
      from_nibbles(b.qs + 16 * s, x + 32 * s, [&](int q, int) { return scale * static_cast<float>(kIq4Levels[q]); });
    }
  }
};

static_assert(sizeof(Q2_K::Block) == 84 && sizeof(Q3_K::Block) == 110 && sizeof(Q4_K::Block) == 144 &&
              sizeof(Q5_K::Block) == 176 && sizeof(Q6_K::Block) == 210 && sizeof(IQ4_XS::Block) == 136);

template <class... Qs>
struct TypeList {};
// Every ggml quantization read here: what llama-quantize's standard presets write.
using Types = TypeList<Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS>;

template <class... Qs, class Fn>
bool with_type_of(TypeList<Qs...>, uint32_t type, Fn& fn) {
  return ((type == Qs::kType && (fn.template operator()<Qs>(), true)) || ...);
}
// fn.template operator()<Q>() for the traits Q of ggml type `type`; false when it is none of Types.
template <class Fn>
bool with_type(uint32_t type, Fn&& fn) {
  return with_type_of(Types{}, type, fn);
}
template <class... Qs, class Fn>
void each_of(TypeList<Qs...>, Fn& fn) {
  (fn.template operator()<Qs>(), ...);
}
// fn.template operator()<Q>() for every type of Types, in order.
template <class Fn>
void each_type(Fn&& fn) {
  each_of(Types{}, fn);
}

// The index of the first of `count` blocks of type Q whose scale is not finite; count if none.
template <class Q>
uint64_t first_non_finite(const std::byte* blocks, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i)
    if (!Q::finite(block_at<typename Q::Block>(blocks, i))) return i;
  return count;
}
// `count` blocks of type Q widened to float at out [count * Q::kValues].
template <class Q>
void dequantize_blocks(const std::byte* blocks, uint64_t count, float* out) {
  for (uint64_t i = 0; i < count; ++i) Q::dequantize(block_at<typename Q::Block>(blocks, i), out + i * Q::kValues);
}

}  // namespace minimind::kernels::ggml

#endif
