// The safetensors reader (io/safetensors.hpp): a valid file parses; every kind of broken header is
// refused with an Error that names the file and the tensor, before any byte is read through it.
#include <doctest/doctest.h>
#include <minimind/detail/io/safetensors.hpp>

#include "checkpoint_writer.hpp"

#include <atomic>
#include <cstdlib>
#include <new>
#include <set>
#include <string>

#if defined(__GNUC__) && !defined(__clang__)
// The replacement operator new below allocates with malloc, so free is the matching release.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// The largest single operator new request, so a test can show that a header's claims were
// refused before anything of their size was allocated.
namespace {
std::atomic<std::size_t> largest_allocation{0};
}  // namespace
void* operator new(std::size_t size) {
  std::size_t seen = largest_allocation.load(std::memory_order_relaxed);
  while (size > seen && !largest_allocation.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace minimind;
using namespace minimind::testing;

namespace {

std::vector<io::TensorRef> parse(std::string image) {
  static std::vector<std::string> keep;  // parse_safetensors returns views into the image
  keep.push_back(std::move(image));
  auto& bytes = keep.back();
  return io::parse_safetensors({reinterpret_cast<std::byte*>(bytes.data()), bytes.size()}, "test.safetensors");
}

std::string header_with(const std::string& tensor_json) { return "{\"t\": " + tensor_json + "}"; }

}  // namespace

TEST_CASE("a valid file parses into named, shaped views") {
  auto tensors = parse(safetensors_image({{"a", {2, 3}}, {"b", {4}, "F16", std::string(8, '\1')}}));
  REQUIRE(tensors.size() == 2);
  const auto& a = tensors[0].name == "a" ? tensors[0] : tensors[1];
  const auto& b = tensors[0].name == "a" ? tensors[1] : tensors[0];
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.bytes.size() == 24);
  CHECK(b.dtype == io::Dtype::F16);
  CHECK(b.numel() == 4);
}

TEST_CASE("a file's tensor data is moved onto a cache line, whatever the header's length, and keeps its bytes") {
  const auto dir = scratch_dir("safetensors_alignment");
  const std::string values = f32_bytes({1.5f, -2.0f, 3.25f, 0.125f});
  std::set<size_t> starts;
  for (size_t name_length = 1; name_length <= 64; ++name_length) {  // header lengths at every multiple of 8 modulo 64
    CAPTURE(name_length);
    const std::string image = safetensors_image({{std::string(name_length, 'w'), {4}, "F32", values}});
    starts.insert((image.size() - values.size()) % 64);
    write_file(dir / "model.safetensors", image);
    const io::TensorTable table = io::read_safetensors(dir / "model.safetensors");
    const auto& t = table.require(std::string(name_length, 'w'));
    CHECK(reinterpret_cast<uintptr_t>(t.bytes.data()) % 64 == 0);
    CHECK(std::string(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()) == values);
  }
  CHECK(starts.size() == 8);
}

TEST_CASE("zero-sized tensors are allowed") {
  auto tensors = parse(safetensors_image({{"empty", {0, 8}}, {"a", {1}}}));
  CHECK(tensors.size() == 2);
}

TEST_CASE("a file too short for the header length") {
  CHECK_THROWS_WITH_AS(parse("abc"), doctest::Contains("too short"), Error);
}

TEST_CASE("a header length beyond the file") {
  std::string image = safetensors_image("{}", "");
  image[6] = '\x7f';  // about 2^55
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("exceeds the file size"), Error);
  std::string huge(8, '\xff');  // 2^64 - 1: no overflow in the check
  CHECK_THROWS_WITH_AS(parse(huge), doctest::Contains("exceeds the file size"), Error);
}

TEST_CASE("a header length of 2^63 is refused without arithmetic overflow") {
  std::string image = safetensors_image("{}", "");
  image.replace(0, 8, std::string("\0\0\0\0\0\0\0\x80", 8));  // little-endian 2^63
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("header length 9223372036854775808 exceeds the file size 16"), Error);
}

TEST_CASE("a tensor claiming 10^12 elements fails fast, before anything of that size is allocated") {
  auto image = safetensors_image(
      header_with(R"({"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]})"), std::string(64, '\0'));
  largest_allocation = 0;
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("tensor \"t\": shape is larger than the file's 64 data bytes"), Error);
  CHECK(largest_allocation.load() < (1u << 16));  // the header's own strings, nothing sized by the claim
}

TEST_CASE("zero-sized tensors must still lie inside the data, and every dimension fit int64") {
  const std::string data(16, '\0');
  auto image = safetensors_image(header_with(R"({"dtype":"F32","shape":[0],"data_offsets":[16,16]})"), data);
  CHECK(parse(image).at(0).bytes.empty());  // at the very end: allowed
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[0],"data_offsets":[17,17]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("data_offsets [17, 17] lie outside the 16 data bytes"), Error);
  // After a zero the element count cannot grow, so only the int64 check stands between this
  // dimension and a negative shape.
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("dimension 9223372036854775808 does not fit a signed 64-bit integer"), Error);
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]})"), data);
  CHECK(parse(image).at(0).shape == std::vector<int64_t>{0, INT64_MAX});
}

TEST_CASE("a malformed JSON header") {
  CHECK_THROWS_WITH_AS(parse(safetensors_image("{\"t\": [", "")), doctest::Contains("malformed JSON"), Error);
  CHECK_THROWS_WITH_AS(parse(safetensors_image("[1, 2]", "")), doctest::Contains("not a JSON object"), Error);
}

TEST_CASE("data_offsets outside the data") {
  const std::string data(16, '\0');
  auto image = safetensors_image(header_with(R"({"dtype":"F32","shape":[8],"data_offsets":[0,32]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("tensor \"t\": data_offsets [0, 32] lie outside the 16 data bytes"), Error);
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("lie outside"), Error);
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("non-negative"), Error);
}

TEST_CASE("offsets that overflow when added, and shapes whose product overflows") {
  const std::string data(16, '\0');
  auto image = safetensors_image(
      header_with(R"({"dtype":"F32","shape":[4],"data_offsets":[18446744073709551612,18446744073709551615]})"), data);
  CHECK_THROWS_AS(parse(image), Error);
  // begin + size would wrap past 2^64 to land inside the data; the span must be checked, not the sum.
  image = safetensors_image(
      header_with(R"({"dtype":"F32","shape":[4],"data_offsets":[18446744073709551608,8]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("lie outside"), Error);
  image = safetensors_image(
      header_with(R"({"dtype":"F32","shape":[4],"data_offsets":[9223372036854775808,9223372036854775824]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("lie outside the 16 data bytes"), Error);
  image = safetensors_image(
      header_with(R"({"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]})"), data);
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("larger than the file"), Error);
}

TEST_CASE("a size that disagrees with shape and dtype") {
  auto image = safetensors_image(header_with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), std::string(8, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("shape [3] of F32 needs 12 bytes but data_offsets span 8"), Error);
}

TEST_CASE("overlapping tensors") {
  auto image = safetensors_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                     "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 std::string(12, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("overlap"), Error);
}

TEST_CASE("unknown and unsupported dtypes") {
  auto image = safetensors_image(header_with(R"({"dtype":"Q9","shape":[1],"data_offsets":[0,4]})"), std::string(4, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("tensor \"t\": unknown dtype \"Q9\""), Error);
  image = safetensors_image(header_with(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})"), std::string(8, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("unsupported dtype I64"), Error);
}

TEST_CASE("entries of the wrong shape") {
  auto image = safetensors_image(header_with(R"({"dtype":"F32","shape":"4","data_offsets":[0,16]})"), std::string(16, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("\"shape\""), Error);
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[4]})"), std::string(16, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("data_offsets"), Error);
  image = safetensors_image(header_with(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), std::string(4, '\0'));
  CHECK_THROWS_WITH_AS(parse(image), doctest::Contains("non-negative"), Error);
}

TEST_CASE("a truncated file at every eighth of its length fails cleanly") {
  const std::string image = safetensors_image(tiny_tensors());
  for (int eighth = 0; eighth < 8; ++eighth) {
    CAPTURE(eighth);
    CHECK_THROWS_AS(parse(image.substr(0, image.size() * eighth / 8)), Error);
  }
}

TEST_CASE("a sharded checkpoint is read through its index") {
  const auto dir = scratch_dir("shards");
  auto tensors = tiny_tensors();
  std::vector<TensorBytes> first(tensors.begin(), tensors.begin() + 5), second(tensors.begin() + 5, tensors.end());
  write_file(dir / "model-00001-of-00002.safetensors", safetensors_image(first));
  write_file(dir / "model-00002-of-00002.safetensors", safetensors_image(second));
  io::Json index = {{"metadata", io::Json::object()}, {"weight_map", io::Json::object()}};
  for (const auto& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : second) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  const auto table = io::read_safetensors_checkpoint(dir);
  CHECK(table.tensors().size() == tensors.size());
  CHECK(table.files().size() == 2);

  index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  CHECK_THROWS_WITH_AS(io::read_safetensors_checkpoint(dir), doctest::Contains("must be a file in the checkpoint directory"), Error);
}

TEST_CASE("a missing file names its path") {
  CHECK_THROWS_WITH_AS(io::read_safetensors("/nonexistent/model.safetensors"), doctest::Contains("/nonexistent/model.safetensors"), Error);
  const auto dir = scratch_dir("no_weights");
  CHECK_THROWS_WITH_AS(io::read_safetensors_checkpoint(dir), doctest::Contains("no model.safetensors"), Error);
}
