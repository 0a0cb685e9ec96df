#pragma once
// The GGUF container (llama.cpp / ggml, versions 2 and 3, little-endian): a header, typed
// metadata key/value pairs, tensor infos (name, dims innermost first, ggml type, offset), then the
// tensor data, each tensor at a multiple of general.alignment. Every count and length is checked
// against the bytes left before anything is allocated or read, because the file comes from
// strangers. What the tensors mean for MiniMind is gguf_model.hpp's business; this is the format.
#include "minimind/error.hpp"
#include "minimind/detail/io/byte_reader.hpp"
#include "minimind/detail/io/loaded_file.hpp"
#include "minimind/detail/kernels/ggml_kquants.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minimind::io::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

inline const char* value_type_name(ValueType t) {
  static const char* const names[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32",  "float32",
                                      "bool",  "string", "array",  "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}
inline size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;  // STRING, ARRAY: variable
  }
}
inline bool is_integer(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::INT8 || t == ValueType::UINT16 || t == ValueType::INT16 ||
         t == ValueType::UINT32 || t == ValueType::INT32 || t == ValueType::UINT64 || t == ValueType::INT64;
}

// One metadata value. Arrays of fixed-size elements stay as their bytes in the file (a huge array
// costs nothing until read); strings are views into the file.
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t bits = 0;        // integer, bool and float scalars: the raw little-endian bits, widened
  std::string_view string;  // STRING
  ValueType element_type = ValueType::UINT8;  // ARRAY
  uint64_t count = 0;                         // ARRAY
  std::span<const std::byte> raw;             // ARRAY of fixed-size elements
  std::vector<std::string_view> strings;      // ARRAY of STRING
  std::vector<Value> arrays;                  // ARRAY of ARRAY

  // Integer element/scalar decoding from raw bits of type t; nullopt when it does not fit int64.
  static std::optional<int64_t> to_int(ValueType t, uint64_t bits) {
    switch (t) {
      case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32: return static_cast<int64_t>(bits);
      case ValueType::UINT64:
        if (bits > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<int64_t>(bits);
      case ValueType::INT8: return static_cast<int8_t>(bits);
      case ValueType::INT16: return static_cast<int16_t>(bits);
      case ValueType::INT32: return static_cast<int32_t>(bits);
      case ValueType::INT64: return static_cast<int64_t>(bits);
      default: return std::nullopt;
    }
  }
  static double to_double(ValueType t, uint64_t bits) {
    if (t == ValueType::FLOAT32) {
      float f;
      const auto narrow = static_cast<uint32_t>(bits);
      std::memcpy(&f, &narrow, 4);
      return f;
    }
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  // The raw bits of element i of a fixed-size array.
  uint64_t element_bits(size_t i) const {
    const size_t n = value_type_size(element_type);
    uint64_t b = 0;
    for (size_t k = 0; k < n; ++k) b |= std::to_integer<uint64_t>(raw[i * n + k]) << (8 * k);
    return b;
  }
};

// ggml tensor types: block size (elements) and bytes per block. The ones MiniMind can use are
// F32, F16, BF16 and the quantized types of kernels/ggml_kquants.hpp's list; the others are known so a
// file holding them parses and the tensor is then refused by name.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, BF16 = 30 };

struct TypeTraits {
  const char* name = nullptr;
  uint32_t block = 0, bytes = 0;
};
inline TypeTraits type_traits(uint32_t type) {
  switch (type) {
    case 0: return {"F32", 1, 4};        case 1: return {"F16", 1, 2};        case 2: return {"Q4_0", 32, 18};
    case 3: return {"Q4_1", 32, 20};     case 6: return {"Q5_0", 32, 22};     case 7: return {"Q5_1", 32, 24};
    case 8: return {"Q8_0", 32, 34};     case 9: return {"Q8_1", 32, 40};     case 10: return {"Q2_K", 256, 84};
    case 11: return {"Q3_K", 256, 110};  case 12: return {"Q4_K", 256, 144};  case 13: return {"Q5_K", 256, 176};
    case 14: return {"Q6_K", 256, 210};  case 15: return {"Q8_K", 256, 292};  case 16: return {"IQ2_XXS", 256, 66};
    case 17: return {"IQ2_XS", 256, 74}; case 18: return {"IQ3_XXS", 256, 98}; case 19: return {"IQ1_S", 256, 50};
    case 20: return {"IQ4_NL", 32, 18};  case 21: return {"IQ3_S", 256, 110}; case 22: return {"IQ2_S", 256, 82};
    case 23: return {"IQ4_XS", 256, 136}; case 24: return {"I8", 1, 1};       case 25: return {"I16", 1, 2};
    case 26: return {"I32", 1, 4};       case 27: return {"I64", 1, 8};       case 28: return {"F64", 1, 8};
    case 29: return {"IQ1_M", 256, 56};  case 30: return {"BF16", 1, 2};      case 34: return {"TQ1_0", 256, 54};
    case 35: return {"TQ2_0", 256, 66};  case 39: return {"MXFP4", 32, 17};
    default: return {};
  }
}

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the innermost (a row's length)
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  size_t info_offset = 0;  // where its info starts in the file, for errors

  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    return n;
  }
  const char* type_name() const { return type_traits(type).name; }
};

class File {
 public:
  // Parses a GGUF image in memory; `owner` keeps `data` alive (may be null when the caller does).
  // The image is the reader's to change: tensor_table (gguf_model.hpp) reorders rows in place.
  static File parse(std::span<std::byte> data, const std::string& source, std::shared_ptr<const void> owner) {
    File f;
    f.data_ = data;
    f.source_ = source;
    f.owner_ = std::move(owner);
    ByteReader r(data, source);
    if (r.size() < 4 || r.chars(4, "magic") != "GGUF") r.fail(0, "not a GGUF file (the magic bytes are not \"GGUF\")");
    f.version_ = r.read<uint32_t>("version");
    if (f.version_ != 2 && f.version_ != 3) {
      if (f.version_ == 0x03000000 || f.version_ == 0x02000000) r.fail(4, "big-endian GGUF files are not supported");
      r.fail(4, "GGUF version " + std::to_string(f.version_) + " is not supported (only 2 and 3)");
    }
    const uint64_t n_tensors = r.read<uint64_t>("tensor count");
    const uint64_t n_kv = r.read<uint64_t>("metadata count");
    // Each key/value needs at least 8 + 4 + 1 bytes, each tensor info 8 + 4 + 4 + 8.
    if (n_kv > r.remaining() / 13) r.fail(16, "metadata count " + std::to_string(n_kv) + " is more than the file can hold");
    if (n_tensors > r.remaining() / 24) r.fail(8, "tensor count " + std::to_string(n_tensors) + " is more than the file can hold");
    for (uint64_t i = 0; i < n_kv; ++i) {
      const size_t at = r.offset();
      std::string key(read_string(r, "metadata key " + std::to_string(i)));
      const std::string what = "metadata \"" + key + "\"";
      const auto type = static_cast<ValueType>(r.read<uint32_t>(what + " type"));
      Value v = read_value(r, type, what, 0);
      if (f.index_.count(key)) r.fail(at, what + " appears twice");
      f.index_.emplace(key, f.metadata_.size());
      f.metadata_.emplace_back(std::move(key), std::move(v));
    }
    f.alignment_ = 32;
    if (const Value* a = f.find("general.alignment")) {
      if (a->type != ValueType::UINT32) f.fail_key("general.alignment", "must be a uint32, not " + std::string(value_type_name(a->type)));
      if (a->bits == 0 || (a->bits & (a->bits - 1)) != 0) f.fail_key("general.alignment", std::to_string(a->bits) + " is not a power of two");
      f.alignment_ = a->bits;
    }
    std::map<std::string, bool> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo t = read_tensor_info(r, i);
      if (names.count(t.name)) r.fail(t.info_offset, "tensor \"" + t.name + "\" appears twice");
      names[t.name] = true;
      f.tensors_.push_back(std::move(t));
    }
    const uint64_t header_end = r.offset();
    f.data_offset_ = header_end + (f.alignment_ - header_end % f.alignment_) % f.alignment_;
    if (!f.tensors_.empty() && f.data_offset_ > data.size()) {
      r.fail(header_end, "the data section (at byte " + std::to_string(f.data_offset_) + ") starts beyond the end of the file");
    }
    f.check_tensor_data();
    return f;
  }

  static File open(const std::filesystem::path& path) {
    auto file = LoadedFile::open(path);
    File f = parse(file->bytes(), path.string(), file);
    // Parsed again if the tensor data moved onto a cache line: the spans point into the bytes.
    if (file->align_at(f.data_offset_)) f = parse(file->bytes(), path.string(), file);
    return f;
  }

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& source() const { return source_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::span<std::byte> tensor_data(const TensorInfo& t) const {
    return data_.subspan(static_cast<size_t>(data_offset_ + t.offset), static_cast<size_t>(t.nbytes));
  }
  // Runs `change` on the image at most once, however many copies of this File ask: the copies
  // share the bytes, so a change a reader makes in place (llama's q/k row order, gguf_model.hpp)
  // must not be made twice.
  template <class Change>
  void change_once(Change&& change) const {
    std::call_once(*changed_, std::forward<Change>(change));
  }

  const Value* find(std::string_view key) const {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &metadata_[it->second].second;
  }
  // Typed getters: nullopt when absent; an Error naming the key when present with another type.
  std::optional<int64_t> get_int(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer(v->type)) fail_key(key, "must be an integer, not " + std::string(value_type_name(v->type)));
    auto i = Value::to_int(v->type, v->bits);
    if (!i) fail_key(key, "value " + std::to_string(v->bits) + " is too large");
    return i;
  }
  std::optional<double> get_float(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type == ValueType::FLOAT32 || v->type == ValueType::FLOAT64) return Value::to_double(v->type, v->bits);
    if (is_integer(v->type)) return static_cast<double>(*get_int(key));
    fail_key(key, "must be a number, not " + std::string(value_type_name(v->type)));
  }
  std::optional<bool> get_bool(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != ValueType::BOOL) fail_key(key, "must be a bool, not " + std::string(value_type_name(v->type)));
    return v->bits != 0;
  }
  std::optional<std::string> get_string(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != ValueType::STRING) fail_key(key, "must be a string, not " + std::string(value_type_name(v->type)));
    return std::string(v->string);
  }
  // An array of strings / of integers; nullopt when absent.
  const std::vector<std::string_view>* get_strings(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return nullptr;
    if (v->type != ValueType::ARRAY || v->element_type != ValueType::STRING) fail_key(key, "must be an array of strings");
    return &v->strings;
  }
  std::optional<std::vector<int64_t>> get_ints(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != ValueType::ARRAY || !is_integer(v->element_type)) fail_key(key, "must be an array of integers");
    std::vector<int64_t> out(static_cast<size_t>(v->count));
    for (size_t i = 0; i < out.size(); ++i) {
      auto x = Value::to_int(v->element_type, v->element_bits(i));
      if (!x) fail_key(key, "element " + std::to_string(i) + " is too large");
      out[i] = *x;
    }
    return out;
  }

  [[noreturn]] void fail_key(std::string_view key, const std::string& message) const {
    throw Error(source_ + ": metadata \"" + std::string(key) + "\": " + message);
  }

 private:
  static constexpr int kMaxArrayDepth = 4;
  static constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

  static std::string_view read_string(ByteReader& r, const std::string& what) {
    const uint64_t n = r.read<uint64_t>(what + " length");
    if (n > r.remaining()) {
      r.fail(r.offset() - 8, what + ": string length " + std::to_string(n) + " exceeds the " + std::to_string(r.remaining()) +
                                 " bytes left in the file");
    }
    return r.chars(n, what);
  }

  static Value read_value(ByteReader& r, ValueType type, const std::string& what, int depth) {
    Value v;
    v.type = type;
    if (const size_t n = value_type_size(type)) {
      auto b = r.bytes(n, what);
      for (size_t k = 0; k < n; ++k) v.bits |= std::to_integer<uint64_t>(b[k]) << (8 * k);
      if (type == ValueType::BOOL && v.bits > 1) r.fail(r.offset() - 1, what + ": bool value " + std::to_string(v.bits) + " is not 0 or 1");
      return v;
    }
    if (type == ValueType::STRING) {
      v.string = read_string(r, what);
      return v;
    }
    if (type != ValueType::ARRAY) {
      r.fail(r.offset() - 4, what + ": unknown metadata value type " + std::to_string(static_cast<uint32_t>(type)));
    }
    const size_t at = r.offset();
    v.element_type = static_cast<ValueType>(r.read<uint32_t>(what + " element type"));
    v.count = r.read<uint64_t>(what + " element count");
    const size_t fixed = value_type_size(v.element_type);
    const uint64_t min_size = fixed ? fixed : v.element_type == ValueType::STRING ? 8 : 12;
    if (!fixed && v.element_type != ValueType::STRING && v.element_type != ValueType::ARRAY) {
      r.fail(at, what + ": unknown array element type " + std::to_string(static_cast<uint32_t>(v.element_type)));
    }
    if (v.count > r.remaining() / min_size) {
      r.fail(at + 4, what + ": array of " + std::to_string(v.count) + " " + value_type_name(v.element_type) +
                         " elements is larger than the " + std::to_string(r.remaining()) + " bytes left in the file");
    }
    if (fixed) {
      v.raw = r.bytes(v.count * fixed, what);
      if (v.element_type == ValueType::BOOL) {
        for (std::byte b : v.raw)
          if (std::to_integer<uint8_t>(b) > 1) r.fail(at, what + ": a bool element is not 0 or 1");
      }
    } else if (v.element_type == ValueType::STRING) {
      v.strings.reserve(static_cast<size_t>(v.count));
      for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(read_string(r, what + "[" + std::to_string(i) + "]"));
    } else {
      if (depth + 1 >= kMaxArrayDepth) r.fail(at, what + ": arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
      for (uint64_t i = 0; i < v.count; ++i) {
        v.arrays.push_back(read_value(r, ValueType::ARRAY, what + "[" + std::to_string(i) + "]", depth + 1));
      }
    }
    return v;
  }

  static TensorInfo read_tensor_info(ByteReader& r, uint64_t index) {
    TensorInfo t;
    t.info_offset = r.offset();
    t.name = std::string(read_string(r, "tensor " + std::to_string(index) + " name"));
    const std::string what = "tensor \"" + t.name + "\"";
    const uint32_t n_dims = r.read<uint32_t>(what + " dimension count");
    if (n_dims > kMaxDims) r.fail(t.info_offset, what + ": " + std::to_string(n_dims) + " dimensions (at most 4)");
    for (uint32_t d = 0; d < n_dims; ++d) t.dims.push_back(r.read<uint64_t>(what + " dimension"));
    t.type = r.read<uint32_t>(what + " type");
    t.offset = r.read<uint64_t>(what + " offset");
    const TypeTraits traits = type_traits(t.type);
    if (!traits.name) r.fail(t.info_offset, what + ": unknown ggml type " + std::to_string(t.type));
    // The element count is bounded by the file size before it is multiplied further.
    uint64_t numel = 1;
    for (uint64_t dim : t.dims) {
      if (dim == 0) r.fail(t.info_offset, what + ": a dimension is 0");
      if (numel > r.size() / dim) r.fail(t.info_offset, what + ": shape is larger than the file");
      numel *= dim;
    }
    if (!t.dims.empty() && t.dims[0] % traits.block != 0) {
      r.fail(t.info_offset, what + ": row length " + std::to_string(t.dims[0]) + " is not a multiple of the " + traits.name +
                                " block size " + std::to_string(traits.block));
    }
    t.nbytes = numel / traits.block * traits.bytes;
    return t;
  }

  // Offsets must be aligned, inside the file, and not overlap.
  void check_tensor_data() const {
    const uint64_t available = data_.size() > data_offset_ ? data_.size() - data_offset_ : 0;
    std::vector<const TensorInfo*> by_offset;
    for (const auto& t : tensors_) {
      const std::string what = "tensor \"" + t.name + "\"";
      if (t.offset % alignment_ != 0) {
        throw Error(source_ + ": " + what + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                    std::to_string(alignment_));
      }
      if (t.offset > available || t.nbytes > available - t.offset) {
        throw Error(source_ + ": at byte " + std::to_string(data_offset_ + t.offset) + ": " + what + ": data [" +
                    std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) + ") lies outside the " + std::to_string(available) +
                    " bytes of tensor data");
      }
      by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](auto a, auto b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->nbytes) {
        throw Error(source_ + ": tensors \"" + by_offset[i - 1]->name + "\" and \"" + by_offset[i]->name + "\" overlap in the data");
      }
    }
  }

  std::span<std::byte> data_;
  std::string source_;
  std::shared_ptr<const void> owner_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t> index_;
  std::vector<TensorInfo> tensors_;
  std::shared_ptr<std::once_flag> changed_ = std::make_shared<std::once_flag>();
};

// What an unsupported tensor type's error lists.
inline std::string supported_types() {
  std::string names = "F32, F16, BF16";
  kernels::ggml::each_type([&]<class Q>() { names += std::string(", ") + Q::kName; });
  return names;
}

// Refuses a block of quantized tensor `t` whose scale is not finite (gguf-py would widen it to
// infinities or NaNs), naming the tensor, the block and its byte in the file.
inline void check_scales(const File& f, const TensorInfo& t) {
  const std::byte* blocks = f.tensor_data(t).data();
  kernels::ggml::with_type(t.type, [&]<class Q>() {
    const uint64_t count = t.numel() / Q::kValues, bad = kernels::ggml::first_non_finite<Q>(blocks, count);
    if (bad == count) return;
    throw Error(f.source() + ": tensor \"" + t.name + "\": " + Q::kName + " block " + std::to_string(bad) + " (at byte " +
                std::to_string(f.data_offset() + t.offset + bad * sizeof(typename Q::Block)) + ") has a scale that is not finite");
  });
}

// Tensor `t` of a quantized type widened to float32 at `out` [numel], its scales checked first.
inline void dequantize(const File& f, const TensorInfo& t, float* out) {
  check_scales(f, t);
  const bool known = kernels::ggml::with_type(t.type, [&]<class Q>() {
    kernels::ggml::dequantize_blocks<Q>(f.tensor_data(t).data(), t.numel() / Q::kValues, out);
  });
  if (!known) throw Error(f.source() + ": tensor \"" + t.name + "\": ggml type " + t.type_name() + " is not a quantized type");
}

}  // namespace minimind::io::gguf
