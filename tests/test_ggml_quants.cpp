// ggml's quantized blocks (kernels/ggml_quants.hpp, ggml_kquants.hpp): every type llama-quantize's
// presets write dequantizes bit for bit as llama.cpp's gguf-py does, on random blocks and on the
// edge cases tools/make_ggml_blocks.py forces in (zero, negative, subnormal and largest scales;
// every code at every position). The oracle's output is in tests/data/ggml_blocks/.
#include <doctest/doctest.h>
#include <minimind/detail/kernels/ggml_kquants.hpp>
#include <minimind/detail/kernels/ggml_quants.hpp>

#include "test_support.hpp"

#include <bit>
#include <cctype>
#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace minimind;
using namespace minimind::testing;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Dequantizes the committed blocks of type Q and compares every value's bits with gguf-py's.
template <class Q>
void check_against_gguf_py() {
  const std::string type = Q::kName;
  CAPTURE(type);
  const auto dir = data_dir() / "ggml_blocks";
  const std::string blocks = read_file(dir / (lower(Q::kName) + ".blocks"));
  const std::string expected = read_file(dir / (lower(Q::kName) + ".f32"));
  using Block = typename Q::Block;
  REQUIRE(!blocks.empty());
  REQUIRE(blocks.size() % sizeof(Block) == 0);
  const size_t n = blocks.size() / sizeof(Block);
  REQUIRE(expected.size() == n * Q::kValues * sizeof(float));
  std::vector<float> got(n * Q::kValues);
  size_t mismatches = 0, first = 0;
  std::set<uint32_t> scale_classes;  // the d scales' exponent classes: zero, subnormal, normal
  for (size_t i = 0; i < n; ++i) {
    const Block b = kernels::ggml::block_at<Block>(reinterpret_cast<const std::byte*>(blocks.data()), i);
    REQUIRE(Q::finite(b));
    Q::dequantize(b, got.data() + i * Q::kValues);
    uint16_t d;
    std::memcpy(&d, &b.d, 2);
    scale_classes.insert((d & 0x7C00) == 0 ? ((d & 0x3FF) == 0 ? 0 : 1) : 2);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t want;
    std::memcpy(&want, expected.data() + i * 4, 4);
    if (std::bit_cast<uint32_t>(got[i]) != want && mismatches++ == 0) first = i;
  }
  if (mismatches) {
    float want;
    std::memcpy(&want, expected.data() + first * 4, 4);
    MESSAGE(mismatches << " values differ; first: value " << first << " (block " << first / Q::kValues << "): " << got[first]
                       << " vs gguf-py's " << want);
  }
  CHECK(mismatches == 0);
  CHECK(scale_classes == std::set<uint32_t>{0, 1, 2});
}

}  // namespace

TEST_CASE("every quantized ggml type dequantizes bit for bit as gguf-py does") {
  size_t types = 0;
  kernels::ggml::each_type([&]<class Q>() {
    check_against_gguf_py<Q>();
    ++types;
  });
  CHECK(types == 12);
}

TEST_CASE("a non-finite scale is found in every scale field") {
  // Q4_1's m and the K types' dmin are scales too: an infinity or NaN in either is refused.
  using namespace kernels::ggml;
  Q4_1::Block a{};
  CHECK(Q4_1::finite(a));
  a.m = 0x7C00;  // +inf
  CHECK_FALSE(Q4_1::finite(a));
  Q4_K::Block k{};
  k.dmin = 0xFE00;  // NaN
  CHECK_FALSE(Q4_K::finite(k));
  k.dmin = 0x7BFF;  // the largest finite float16
  CHECK(Q4_K::finite(k));
  Q6_K::Block six{};
  six.d = 0xFC00;  // -inf
  CHECK_FALSE(Q6_K::finite(six));
}
