// gguf_writer.hpp and io/gguf_quantize.hpp: every block type's bytes are those of llama.cpp's
// gguf-py for the same floats (tests/data/quants), the K types' those of llama-quantize
// (tests/data/kquants); what the writer writes, our reader reads back
// key for key and byte for byte; what it must not write it refuses, naming the key or tensor.
#include <doctest/doctest.h>
#include <minimind/detail/io/gguf.hpp>
#include <minimind/detail/kernels/ggml_kquants.hpp>
#include <minimind/gguf_writer.hpp>

#include "format_files.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace minimind;
using namespace minimind::testing;

namespace {

std::vector<float> floats_of(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::string encoded(uint32_t type, std::span<const float> values) {
  std::string out(io::gguf::quantized_size(type, values.size(), "test"), '\0');
  io::gguf::quantize(type, values, reinterpret_cast<std::byte*>(out.data()), "test");
  return out;
}

}  // namespace

TEST_CASE("each type's blocks are gguf-py's, bit for bit, on the edge cases") {
  const auto dir = data_dir() / "quants";
  const std::vector<float> input = floats_of(read_file(dir / "input.f32"));
  const std::string finite = read_file(dir / "finite_rows.u8");
  REQUIRE(input.size() == finite.size() * 32);
  std::vector<float> finite_rows;
  for (size_t r = 0; r < finite.size(); ++r)
    if (finite[r]) finite_rows.insert(finite_rows.end(), input.begin() + 32 * r, input.begin() + 32 * (r + 1));
  const std::pair<const char*, GgufType> types[] = {{"f16", GgufType::F16},   {"bf16", GgufType::BF16}, {"q8_0", GgufType::Q8_0},
                                                    {"q4_0", GgufType::Q4_0}, {"q4_1", GgufType::Q4_1}, {"q5_0", GgufType::Q5_0},
                                                    {"q5_1", GgufType::Q5_1}};
  for (const auto& [name, type] : types) {
    const std::string type_name = name;
    CAPTURE(type_name);
    const bool all_rows = type == GgufType::F16 || type == GgufType::BF16;
    const std::string expected = read_file(dir / (std::string(name) + ".bin"));
    const std::string ours = encoded(static_cast<uint32_t>(type), all_rows ? input : finite_rows);
    REQUIRE(ours.size() == expected.size());
    size_t first_difference = 0;
    while (first_difference < ours.size() && ours[first_difference] == expected[first_difference]) ++first_difference;
    CHECK_MESSAGE(first_difference == ours.size(), "first different byte " << first_difference);
  }
  CHECK(encoded(0, input) == read_file(dir / "input.f32"));  // F32 is the bytes themselves
}

TEST_CASE("Q4_K and Q6_K blocks are llama-quantize's, bit for bit, on the edge cases") {
  const auto dir = data_dir() / "kquants";
  const std::vector<float> input = floats_of(read_file(dir / "input.f32"));
  REQUIRE(input.size() % 256 == 0);
  for (const auto& [name, type] : {std::pair{"q4_k", GgufType::Q4_K}, std::pair{"q6_k", GgufType::Q6_K}}) {
    const std::string type_name = name;
    const std::string expected = read_file(dir / (type_name + ".bin")), ours = encoded(static_cast<uint32_t>(type), input);
    REQUIRE(ours.size() == expected.size());
    const size_t block = ours.size() / (input.size() / 256);
    for (size_t row = 0; row < input.size() / 256; ++row) {
      CAPTURE(type_name);
      CAPTURE(row);
      size_t first_difference = row * block;
      while (first_difference < (row + 1) * block && ours[first_difference] == expected[first_difference]) ++first_difference;
      CHECK_MESSAGE(first_difference == (row + 1) * block, "first different byte " << first_difference - row * block << " of the block");
    }
  }
}

TEST_CASE("Q8_0 and Q4_0 read back within one quantization step") {
  std::vector<float> x(4096);
  uint32_t state = 47;
  for (auto& v : x) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
  for (const uint32_t type : {8u, 2u}) {
    CAPTURE(type);
    std::string bytes = encoded(type, x);
    std::vector<float> back(x.size());
    auto* blocks = reinterpret_cast<const std::byte*>(bytes.data());
    if (type == 8) kernels::ggml::dequantize_blocks<kernels::ggml::Q8_0>(blocks, x.size() / 32, back.data());
    else kernels::ggml::dequantize_blocks<kernels::ggml::Q4_0>(blocks, x.size() / 32, back.data());
    const size_t block_bytes = type == 8 ? 34 : 18;
    for (size_t b = 0; b < x.size() / 32; ++b) {
      uint16_t bits;
      std::memcpy(&bits, blocks + b * block_bytes, 2);  // each block starts with its float16 scale
      const float d = std::fabs(kernels::ggml::half_to_float(bits));
      // Q8_0 rounds to the nearest level; Q4_0's far end may clip by a whole step.
      const float steps = type == 8 ? 0.5f + 127.0f / 2048 : 1.0f + 8.0f / 2048;
      for (size_t j = 32 * b; j < 32 * (b + 1); ++j) REQUIRE(std::fabs(x[j] - back[j]) <= steps * d * 1.0001f);
    }
  }
}

TEST_CASE("what the writer writes, the reader reads back") {
  GgufWriter w(64);
  const std::vector<float> matrix = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                     -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16,
                                     0.5f, 0.25f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.125f};
  w.add_string("general.architecture", "llama")
      .add_u32("a.u32", 7)
      .add_i32("a.i32", -7)
      .add_u64("a.u64", uint64_t{1} << 40)
      .add_f32("a.f32", 0.5f)
      .add_bool("a.bool", true)
      .add_u8("a.u8", 200)
      .add_strings("a.strings", {"x", "", "中文"})
      .add_i32s("a.i32s", {1, -2, 3});
  w.add_tensor("norm", {3}, GgufType::F32, std::vector<float>{1, 2, 3})
      .add_tensor("m.f16", {2, 32}, GgufType::F16, matrix)
      .add_tensor("m.q8_0", {2, 32}, GgufType::Q8_0, matrix)
      .add_tensor_bytes("raw", {1, 32}, 2, std::vector<std::byte>(18, std::byte{0x11}));
  std::string image = w.image();
  const auto f = io::gguf::File::parse(as_bytes(image), "written.gguf", nullptr);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.get_int("general.alignment") == 64);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_int("a.u32") == 7);
  CHECK(f.find("a.u32")->type == io::gguf::ValueType::UINT32);
  CHECK(f.get_int("a.i32") == -7);
  CHECK(f.find("a.i32")->type == io::gguf::ValueType::INT32);
  CHECK(f.get_int("a.u64") == int64_t{1} << 40);
  CHECK(f.get_float("a.f32") == 0.5);
  CHECK(f.find("a.f32")->type == io::gguf::ValueType::FLOAT32);
  CHECK(f.get_bool("a.bool") == true);
  CHECK(f.get_int("a.u8") == 200);
  CHECK(*f.get_strings("a.strings") == std::vector<std::string_view>{"x", "", "中文"});
  CHECK(f.get_ints("a.i32s") == std::vector<int64_t>{1, -2, 3});
  CHECK(f.find("a.i32s")->element_type == io::gguf::ValueType::INT32);
  REQUIRE(f.tensors().size() == 4);
  const auto* norm = f.find_tensor("norm");
  CHECK(norm->dims == std::vector<uint64_t>{3});
  CHECK(floats_of(std::string(reinterpret_cast<const char*>(f.tensor_data(*norm).data()), 12)) == std::vector<float>{1, 2, 3});
  const auto* q8 = f.find_tensor("m.q8_0");
  CHECK(q8->dims == std::vector<uint64_t>{32, 2});  // innermost first
  CHECK(q8->type == 8);
  const std::string q8_bytes(reinterpret_cast<const char*>(f.tensor_data(*q8).data()), 68);
  CHECK(q8_bytes == encoded(8, matrix));
  CHECK(f.find_tensor("m.f16")->nbytes == 128);
  for (const auto& t : f.tensors()) CHECK(t.offset % 64 == 0);
  CHECK(f.tensor_data(*f.find_tensor("raw"))[17] == std::byte{0x11});
  // The file is the image.
  const auto path = scratch_dir("gguf_writer") / "w.gguf";
  w.write(path);
  CHECK(read_file(path) == image);
  // Erasing.
  w.erase("a.u32").erase_tensor("raw");
  std::string smaller = w.image();
  const auto g = io::gguf::File::parse(as_bytes(smaller), "smaller.gguf", nullptr);
  CHECK(g.find("a.u32") == nullptr);
  CHECK(g.tensors().size() == 3);
}

TEST_CASE("the writer refuses what a reader would refuse, naming it") {
  GgufWriter w;
  w.add_u32("k", 1);
  CHECK_THROWS_WITH_AS(w.add_string("k", "x"), doctest::Contains("metadata \"k\" is added twice"), Error);
  w.add_tensor("t", {2, 32}, GgufType::F32, std::vector<float>(64));
  CHECK_THROWS_WITH_AS(w.add_tensor("t", {32}, GgufType::F32, std::vector<float>(32)), doctest::Contains("tensor \"t\" is added twice"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor("u", {2, 16}, GgufType::Q8_0, std::vector<float>(32)),
                       doctest::Contains("tensor \"u\": row length 16 is not a multiple of the Q8_0 block size 32"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor("u", {2, 32}, GgufType::F16, std::vector<float>(63)),
                       doctest::Contains("tensor \"u\": 63 values for 64 elements"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor_bytes("u", {32}, 8, std::vector<std::byte>(33)),
                       doctest::Contains("tensor \"u\": 33 bytes given, the shape takes 34 in Q8_0"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor_bytes("u", {1, 1, 1, 1, 1}, 0, std::vector<std::byte>(4)),
                       doctest::Contains("tensor \"u\": 5 dimensions (1 to 4)"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor_bytes("u", {0, 4}, 0, {}), doctest::Contains("tensor \"u\": dimension 0 is not positive"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor_bytes("u", {4}, 99, std::vector<std::byte>(4)), doctest::Contains("unknown ggml type 99"), Error);
  CHECK_THROWS_WITH_AS(w.add_tensor("u", {256}, static_cast<GgufType>(13), std::vector<float>(256)),
                       doctest::Contains("no quantizer for ggml type Q5_K"), Error);
  CHECK_THROWS_WITH_AS(w.write("/nonexistent-dir/x.gguf"), doctest::Contains("/nonexistent-dir/x.gguf: cannot open for writing"), Error);
  CHECK_THROWS_WITH_AS(GgufWriter{0}, doctest::Contains("alignment 0 is not a power of two"), Error);
}
