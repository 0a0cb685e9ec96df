#pragma once
// Writes GGUF files (version 3, little-endian), the container llama.cpp, ollama and LM Studio
// load: a header, typed metadata in the order it was added, tensor infos, then each tensor's
// bytes at a multiple of the alignment. Shapes are given outermost first, as everywhere in this
// library (a weight [out, in]); the file stores them innermost first, as ggml does. Tensor data is
// given as floats and encoded here (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: the blocks of
// llama.cpp's gguf-py; Q4_K, Q6_K: llama-quantize's; see detail/io/gguf_quantize.hpp), or as
// bytes already encoded.
//
//   minimind::GgufWriter w;
//   w.add_string("general.architecture", "llama").add_u32("llama.block_count", 8);
//   w.add_tensor("token_embd.weight", {6400, 512}, minimind::GgufType::Q8_0, values);
//   w.write("model.gguf");
#include "minimind/error.hpp"
#include "minimind/detail/io/gguf.hpp"
#include "minimind/detail/io/gguf_quantize.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minimind {

using GgufType = io::gguf::QuantType;

class GgufWriter {
 public:
  // An alignment other than 32 (a power of two) is recorded as general.alignment.
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      throw Error("GGUF writer: alignment " + std::to_string(alignment) + " is not a power of two");
    }
    if (alignment != 32) add_u32("general.alignment", alignment);
  }

  // ---- metadata; a key given twice is an Error (readers refuse such files) ----
  GgufWriter& add_u8(std::string_view key, uint8_t v) { return scalar(key, io::gguf::ValueType::UINT8, &v, 1); }
  GgufWriter& add_u32(std::string_view key, uint32_t v) { return scalar(key, io::gguf::ValueType::UINT32, &v, 4); }
  GgufWriter& add_i32(std::string_view key, int32_t v) { return scalar(key, io::gguf::ValueType::INT32, &v, 4); }
  GgufWriter& add_u64(std::string_view key, uint64_t v) { return scalar(key, io::gguf::ValueType::UINT64, &v, 8); }
  GgufWriter& add_f32(std::string_view key, float v) { return scalar(key, io::gguf::ValueType::FLOAT32, &v, 4); }
  GgufWriter& add_bool(std::string_view key, bool v) {
    const uint8_t b = v ? 1 : 0;
    return scalar(key, io::gguf::ValueType::BOOL, &b, 1);
  }
  GgufWriter& add_string(std::string_view key, std::string_view v) {
    std::string record = begin_record(key, io::gguf::ValueType::STRING);
    append_string(record, v);
    return finish_record(key, std::move(record));
  }
  GgufWriter& add_strings(std::string_view key, const std::vector<std::string>& v) {
    std::string record = begin_array(key, io::gguf::ValueType::STRING, v.size());
    for (const auto& s : v) append_string(record, s);
    return finish_record(key, std::move(record));
  }
  GgufWriter& add_i32s(std::string_view key, const std::vector<int32_t>& v) {
    std::string record = begin_array(key, io::gguf::ValueType::INT32, v.size());
    record.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    return finish_record(key, std::move(record));
  }
  bool has(std::string_view key) const {
    for (const auto& m : metadata_)
      if (m.key == key) return true;
    return false;
  }
  // Removes `key` (nothing when absent).
  GgufWriter& erase(std::string_view key) {
    std::erase_if(metadata_, [&](const Record& m) { return m.key == key; });
    return *this;
  }

  // ---- tensors, in the order added ----
  // Bytes already encoded as `type` (ggml type id); their size must be what the shape takes.
  GgufWriter& add_tensor_bytes(std::string_view name, std::vector<int64_t> shape, uint32_t type, std::vector<std::byte> data) {
    const std::string what = "GGUF writer: tensor \"" + std::string(name) + "\"";
    if (find_tensor(name)) throw Error(what + " is added twice");
    if (shape.empty() || shape.size() > 4) throw Error(what + ": " + std::to_string(shape.size()) + " dimensions (1 to 4)");
    uint64_t n = 1;
    for (int64_t d : shape) {
      if (d <= 0) throw Error(what + ": dimension " + std::to_string(d) + " is not positive");
      n *= static_cast<uint64_t>(d);
    }
    const io::gguf::TypeTraits traits = io::gguf::type_traits(type);
    if (traits.name && static_cast<uint64_t>(shape.back()) % traits.block != 0) {
      throw Error(what + ": row length " + std::to_string(shape.back()) + " is not a multiple of the " + traits.name +
                  " block size " + std::to_string(traits.block));
    }
    const size_t expected = io::gguf::quantized_size(type, n, what);
    if (data.size() != expected) {
      throw Error(what + ": " + std::to_string(data.size()) + " bytes given, the shape takes " + std::to_string(expected) + " in " +
                  traits.name);
    }
    tensors_.push_back({std::string(name), std::move(shape), type, std::move(data)});
    return *this;
  }
  // Float values, encoded as `type`.
  GgufWriter& add_tensor(std::string_view name, std::vector<int64_t> shape, GgufType type, std::span<const float> values) {
    const std::string what = "GGUF writer: tensor \"" + std::string(name) + "\"";
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    if (values.size() != n) throw Error(what + ": " + std::to_string(values.size()) + " values for " + std::to_string(n) + " elements");
    std::vector<std::byte> data(io::gguf::quantized_size(static_cast<uint32_t>(type), n, what));
    io::gguf::quantize(static_cast<uint32_t>(type), values, data.data(), what);
    return add_tensor_bytes(name, std::move(shape), static_cast<uint32_t>(type), std::move(data));
  }
  GgufWriter& erase_tensor(std::string_view name) {
    std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
    return *this;
  }

  // The whole file in memory.
  std::string image() const {
    std::string out = header();
    for (const auto& t : tensors_) {
      out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
      out.resize(out.size() + padding(t.data.size()), '\0');
    }
    return out;
  }

  // Writes the file (replacing one that exists); an Error names the path when that fails.
  void write(const std::filesystem::path& path) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path.string() + ": cannot open for writing");
    const std::string head = header();
    f.write(head.data(), static_cast<std::streamsize>(head.size()));
    for (const auto& t : tensors_) {
      f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
      const std::string zeros(padding(t.data.size()), '\0');
      f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }
    f.flush();
    if (!f) throw Error(path.string() + ": write failed (disk full?)");
  }

 private:
  struct Record {
    std::string key, bytes;  // bytes: the whole encoded key/type/value record
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type = 0;
    std::vector<std::byte> data;
  };

  static void append_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
  static void append_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  static void append_string(std::string& s, std::string_view v) {
    append_u64(s, v.size());
    s.append(v);
  }
  std::string begin_record(std::string_view key, io::gguf::ValueType type) const {
    if (has(key)) throw Error("GGUF writer: metadata \"" + std::string(key) + "\" is added twice");
    std::string record;
    append_string(record, key);
    append_u32(record, static_cast<uint32_t>(type));
    return record;
  }
  std::string begin_array(std::string_view key, io::gguf::ValueType element, size_t count) const {
    std::string record = begin_record(key, io::gguf::ValueType::ARRAY);
    append_u32(record, static_cast<uint32_t>(element));
    append_u64(record, count);
    return record;
  }
  GgufWriter& finish_record(std::string_view key, std::string record) {
    metadata_.push_back({std::string(key), std::move(record)});
    return *this;
  }
  GgufWriter& scalar(std::string_view key, io::gguf::ValueType type, const void* v, size_t n) {
    std::string record = begin_record(key, type);
    record.append(static_cast<const char*>(v), n);
    return finish_record(key, std::move(record));
  }

  uint64_t padding(uint64_t size) const { return (alignment_ - size % alignment_) % alignment_; }

  // Everything before the tensor data, padded to the alignment.
  std::string header() const {
    std::string out = "GGUF";
    append_u32(out, 3);
    append_u64(out, tensors_.size());
    append_u64(out, metadata_.size());
    for (const auto& m : metadata_) out += m.bytes;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      append_string(out, t.name);
      append_u32(out, static_cast<uint32_t>(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) append_u64(out, static_cast<uint64_t>(*d));
      append_u32(out, t.type);
      append_u64(out, offset);
      offset += t.data.size() + padding(t.data.size());
    }
    out.resize(out.size() + padding(out.size()), '\0');
    return out;
  }
  const Tensor* find_tensor(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }

  uint32_t alignment_;
  std::vector<Record> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace minimind
