// ggml's quantizations of 32 weights per block, as llama.cpp's GGUF files store them: Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0 and IQ4_NL. Each type is its block layout (the bytes of one block in the file,
// little-endian, float16 scales) and a scalar dequantizer that gives what llama.cpp's gguf-py
// (`gguf.quants.dequantize`) gives, bit for bit. A float16 scale times a code of a few bits is
// exact in float32, so a compiler fusing d * q + m into one multiply-add cannot change a value.
// ggml_kquants.hpp holds the 256-weight "K" family.
#ifndef MINIMIND_DETAIL_KERNELS_GGML_QUANTS_HPP
#define MINIMIND_DETAIL_KERNELS_GGML_QUANTS_HPP
#include <Eigen/Core>

#include <cstdint>
#include <cstring>

namespace minimind::kernels::ggml {

inline float half_to_float(uint16_t h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h)); }
inline bool half_is_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }

// Block i of a tensor's bytes; memcpy because the file promises only 32-byte tensor alignment.
template <class Block>
Block block_at(const std::byte* blocks, uint64_t i) {
  Block b;
  std::memcpy(&b, blocks + i * sizeof(Block), sizeof(Block));
  return b;
}

// 32 values from 16 bytes of 4-bit codes, the layout of every 32-value group here and in IQ4_XS:
// x[j] = value(low nibble of qs[j], j), x[j + 16] = value(high nibble of qs[j], j + 16).
template <class Value>
void from_nibbles(const uint8_t* qs, float* x, Value&& value) {
  for (int j = 0; j < 16; ++j) {
    x[j] = value(qs[j] & 0x0F, j);
    x[j + 16] = value(qs[j] >> 4, j + 16);
  }
}

// Q4_0: x[j] = d * (low nibble of qs[j] - 8), x[j + 16] = d * (high nibble - 8).
struct Q4_0 {
  static constexpr uint32_t kType = 2;
  static constexpr const char* kName = "Q4_0";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d;
    uint8_t qs[16];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    from_nibbles(b.qs, x, [&](int q, int) { return d * static_cast<float>(q - 8); });
  }
};

// Q4_1: x = d * q + m, q the nibbles of Q4_0 without the offset.
struct Q4_1 {
  static constexpr uint32_t kType = 3;
  static constexpr const char* kName = "Q4_1";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d, m;
    uint8_t qs[16];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d) && half_is_finite(b.m); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    from_nibbles(b.qs, x, [&](int q, int) { return d * static_cast<float>(q) + m; });
  }
};

// Q5_0 / Q5_1: the Q4 nibbles plus a fifth bit, bit j of the little-endian qh for value j.
inline int fifth_bit(const uint8_t (&qh)[4], int j) { return ((qh[j / 8] >> (j % 8)) & 1) << 4; }

// Q5_0: x = d * (q - 16).
struct Q5_0 {
  static constexpr uint32_t kType = 6;
  static constexpr const char* kName = "Q5_0";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    from_nibbles(b.qs, x, [&](int q, int j) { return d * static_cast<float>((q | fifth_bit(b.qh, j)) - 16); });
  }
};

// Q5_1: x = d * q + m.
struct Q5_1 {
  static constexpr uint32_t kType = 7;
  static constexpr const char* kName = "Q5_1";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d) && half_is_finite(b.m); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    from_nibbles(b.qs, x, [&](int q, int j) { return d * static_cast<float>(q | fifth_bit(b.qh, j)) + m; });
  }
};

// Q8_0: x = d * q, q a signed byte.
struct Q8_0 {
  static constexpr uint32_t kType = 8;
  static constexpr const char* kName = "Q8_0";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d;
    int8_t qs[32];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    for (int j = 0; j < 32; ++j) x[j] = d * static_cast<float>(b.qs[j]);
  }
};

// IQ4_NL's 16 levels, spaced to fit normally distributed weights better than a uniform grid.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL: Q4_0's nibbles as indices into kIq4Levels, x = d * level.
struct IQ4_NL {
  static constexpr uint32_t kType = 20;
  static constexpr const char* kName = "IQ4_NL";
  static constexpr int kValues = 32;
  struct Block {
    uint16_t d;
    uint8_t qs[16];
  };
  static bool finite(const Block& b) { return half_is_finite(b.d); }
  static void dequantize(const Block& b, float* x) {
    const float d = half_to_float(b.d);
    from_nibbles(b.qs, x, [&](int q, int) { return d * static_cast<float>(kIq4Levels[q]); });
  }
};

static_assert(sizeof(Q4_0::Block) == 18 && sizeof(Q4_1::Block) == 20 && sizeof(Q5_0::Block) == 22 &&
              sizeof(Q5_1::Block) == 24 && sizeof(Q8_0::Block) == 34 && sizeof(IQ4_NL::Block) == 18);

}  // namespace minimind::kernels::ggml

#endif
