#pragma once
// Bounds-checked little-endian reads over a file image, for the binary containers (.pth's zip,
// GGUF). Every read says what it was reading, so a file that ends early or lies about a length
// is refused with the file, the field and the byte offset, never read past.
#include "minimind/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace minimind::io {

class ByteReader {
 public:
  ByteReader(std::span<const std::byte> data, std::string source, size_t offset = 0)
      : data_(data), source_(std::move(source)), offset_(offset) {
    if (offset > data.size()) fail(offset, "offset is beyond the end of the " + std::to_string(data.size()) + "-byte file");
  }

  size_t offset() const { return offset_; }
  size_t size() const { return data_.size(); }
  size_t remaining() const { return data_.size() - offset_; }
  const std::string& source() const { return source_; }
  std::span<const std::byte> data() const { return data_; }

  void seek(uint64_t offset, std::string_view what) {
    if (offset > data_.size()) {
      fail(offset_, std::string(what) + " at byte " + std::to_string(offset) + " lies beyond the end of the " +
                        std::to_string(data_.size()) + "-byte file");
    }
    offset_ = static_cast<size_t>(offset);
  }

  // An unsigned or signed integer, or a float/double, stored little-endian.
  template <class T>
  T read(std::string_view what) {
    static_assert(std::is_arithmetic_v<T>);
    require(sizeof(T), what);
    uint64_t bits = 0;
    for (size_t i = 0; i < sizeof(T); ++i) bits |= std::to_integer<uint64_t>(data_[offset_ + i]) << (8 * i);
    offset_ += sizeof(T);
    T value;
    if constexpr (sizeof(T) == 1) {
      value = static_cast<T>(bits);
    } else {
      using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
      const U narrow = static_cast<U>(bits);
      std::memcpy(&value, &narrow, sizeof(T));
    }
    return value;
  }

  std::span<const std::byte> bytes(uint64_t n, std::string_view what) {
    require(n, what);
    auto out = data_.subspan(offset_, static_cast<size_t>(n));
    offset_ += static_cast<size_t>(n);
    return out;
  }
  std::string_view chars(uint64_t n, std::string_view what) {
    auto b = bytes(n, what);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  void skip(uint64_t n, std::string_view what) { bytes(n, what); }

  // Fails unless n more bytes exist; names what needed them.
  void require(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail(offset_, std::string(what) + " needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining()) +
                        " remain in the " + std::to_string(data_.size()) + "-byte file");
    }
  }

  [[noreturn]] void fail(uint64_t at, const std::string& message) const {
    throw Error(source_ + ": at byte " + std::to_string(at) + ": " + message);
  }
  [[noreturn]] void fail(const std::string& message) const { fail(offset_, message); }

 private:
  std::span<const std::byte> data_;
  std::string source_;
  size_t offset_ = 0;
};

}  // namespace minimind::io
