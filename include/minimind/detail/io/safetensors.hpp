#pragma once
// The safetensors format: u64 little-endian header length N, N bytes of JSON mapping each tensor
// name to {dtype, shape, data_offsets}, then the data. Every number in the header is checked
// against the file before any byte is read through it, because the header comes from strangers.
#include "minimind/error.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/io/loaded_file.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace minimind::io {

// GGML: a GGUF file's quantized blocks (TensorRef::ggml_type, kernels/ggml.hpp), read as bytes.
enum class Dtype { F32, F16, BF16, GGML };

inline size_t dtype_size(Dtype dtype) { return dtype == Dtype::F32 ? 4 : dtype == Dtype::GGML ? 1 : 2; }
inline const char* dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::F32: return "F32";
    case Dtype::F16: return "F16";
    case Dtype::BF16: return "BF16";
    case Dtype::GGML: return "GGML";
  }
  return "?";
}

// Exact widening of one stored element to float.
inline float widen(Dtype dtype, const std::byte* p) {
  switch (dtype) {
    case Dtype::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case Dtype::F16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
    }
    case Dtype::BF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
    }
    case Dtype::GGML: break;  // blocks, not elements: WeightLoader::load widens them whole
  }
  return 0.0f;
}

// One tensor of a checkpoint: where its bytes are and what they mean. The bytes live in a mapped
// file owned by the TensorTable.
struct TensorRef {
  std::string name;
  Dtype dtype = Dtype::F32;
  uint32_t ggml_type = 0;  // Dtype::GGML: the ggml type of the blocks
  std::vector<int64_t> shape;
  std::span<std::byte> bytes;
  std::string file;
  std::shared_ptr<const void> owner;  // keeps the loaded file alive while a weight views `bytes`

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_string() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

// The JSON header's length: the file's first 8 bytes, little-endian (the caller checks there are 8).
inline uint64_t safetensors_header_length(std::span<const std::byte> file) {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(file[static_cast<size_t>(i)]);
  return header_len;
}

// Parses a safetensors image already in memory; `source` names it in errors.
inline std::vector<TensorRef> parse_safetensors(std::span<std::byte> file, const std::string& source) {
  if (file.size() < 8) {
    throw Error(source + ": file is " + std::to_string(file.size()) +
                " bytes, too short for a safetensors header length");
  }
  const uint64_t header_len = safetensors_header_length(file);
  if (header_len > file.size() - 8) {
    throw Error(source + ": header length " + std::to_string(header_len) + " exceeds the file size " +
                std::to_string(file.size()));
  }
  std::string_view header_text(reinterpret_cast<const char*>(file.data() + 8), header_len);
  Json header = parse_json(header_text, source + " (safetensors header)");
  if (!header.is_object()) throw Error(source + ": safetensors header is not a JSON object");

  std::span<std::byte> data = file.subspan(8 + header_len);
  std::vector<TensorRef> tensors;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = source + ": tensor \"" + name + "\"";
    if (!entry.is_object()) throw Error(where + ": entry is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) throw Error(where + ": missing or non-string \"dtype\"");
    if (shape_it == entry.end() || !shape_it->is_array()) throw Error(where + ": missing or non-array \"shape\"");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      throw Error(where + ": \"data_offsets\" must be an array of two integers");
    }
    TensorRef t;
    t.name = name;
    t.file = source;
    const std::string dtype = dtype_it->get<std::string>();
    static const std::set<std::string> known_unsupported = {"F64", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16",
                                                             "I8",  "U64",     "U32",     "U16", "U8",  "BOOL"};
    if (dtype == "F32") t.dtype = Dtype::F32;
    else if (dtype == "F16") t.dtype = Dtype::F16;
    else if (dtype == "BF16") t.dtype = Dtype::BF16;
    else if (known_unsupported.count(dtype)) throw Error(where + ": unsupported dtype " + dtype + " (need F32, F16 or BF16)");
    else throw Error(where + ": unknown dtype \"" + dtype + "\"");

    // The element count is bounded by the data size before it is multiplied further, so no
    // product can overflow.
    uint64_t numel = 1;
    for (const auto& d : *shape_it) {
      if (!d.is_number_unsigned()) throw Error(where + ": shape entries must be non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      // After a zero the product stays zero and bounds nothing, but each dimension must still
      // fit the int64 it is stored as.
      if (dim > static_cast<uint64_t>(INT64_MAX)) {
        throw Error(where + ": dimension " + std::to_string(dim) + " does not fit a signed 64-bit integer");
      }
      if (dim != 0 && numel > data.size() / dim) {
        throw Error(where + ": shape is larger than the file's " + std::to_string(data.size()) + " data bytes");
      }
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& begin_json = (*offsets_it)[0];
    const auto& end_json = (*offsets_it)[1];
    if (!begin_json.is_number_unsigned() || !end_json.is_number_unsigned()) {
      throw Error(where + ": data_offsets must be non-negative integers");
    }
    uint64_t begin = begin_json.get<uint64_t>(), end = end_json.get<uint64_t>();
    if (begin > end || end > data.size()) {
      throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  "] lie outside the " + std::to_string(data.size()) + " data bytes");
    }
    uint64_t expected = numel * dtype_size(t.dtype);
    if (end - begin != expected) {
      throw Error(where + ": shape " + t.shape_string() + " of " + dtype + " needs " + std::to_string(expected) +
                  " bytes but data_offsets span " + std::to_string(end - begin));
    }
    t.bytes = data.subspan(begin, end - begin);
    tensors.push_back(std::move(t));
  }

  std::vector<const TensorRef*> by_offset;
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto a, auto b) { return a->bytes.data() < b->bytes.data(); });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorRef& prev = *by_offset[i - 1];
    const TensorRef& cur = *by_offset[i];
    if (!cur.bytes.empty() && cur.bytes.data() < prev.bytes.data() + prev.bytes.size()) {
      throw Error(source + ": tensors \"" + prev.name + "\" and \"" + cur.name + "\" overlap in the data");
    }
  }
  return tensors;
}

// Every tensor of a checkpoint, from one file or from the shards of an index, with the mapped
// files kept alive as long as the table (and any weight that views into it).
class TensorTable {
 public:
  void add_file(std::shared_ptr<LoadedFile> file) {
    // The tensor data onto a cache line (LoadedFile::align_at), before the spans are taken.
    if (file->size() >= 8) file->align_at(8 + safetensors_header_length(file->bytes()));
    for (auto& t : parse_safetensors(file->bytes(), file->path().string())) {
      std::string name = t.name;
      t.owner = file;
      if (tensors_.count(name)) throw Error(file->path().string() + ": tensor \"" + name + "\" appears in two shards");
      tensors_.emplace(name, std::move(t));
    }
    files_.push_back(std::move(file));
  }

  // Adds a tensor read from another container (a .pth or .gguf file); its `owner` keeps the bytes
  // alive. `source` names the container in describe() when no safetensors file was added.
  void add(TensorRef tensor, const std::string& source) {
    if (tensors_.count(tensor.name)) throw Error(source + ": tensor \"" + tensor.name + "\" appears twice");
    if (source_.empty()) source_ = source;
    std::string name = tensor.name;
    tensors_.emplace(std::move(name), std::move(tensor));
  }

  const TensorRef* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const TensorRef& require(const std::string& name) const {
    if (const TensorRef* t = find(name)) return *t;
    throw Error(describe() + ": missing tensor \"" + name + "\"");
  }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, TensorRef>& tensors() const { return tensors_; }
  const std::vector<std::shared_ptr<LoadedFile>>& files() const { return files_; }
  std::string describe() const {
    if (files_.size() == 1) return files_[0]->path().string();
    if (files_.empty()) return source_.empty() ? "(no weight files)" : source_;
    return files_[0]->path().parent_path().string() + " (" + std::to_string(files_.size()) + " safetensors shards)";
  }

 private:
  std::map<std::string, TensorRef> tensors_;
  std::vector<std::shared_ptr<LoadedFile>> files_;
  std::string source_;  // the .pth / .gguf file the tensors came from
};

inline TensorTable read_safetensors(const std::filesystem::path& path) {
  TensorTable table;
  table.add_file(LoadedFile::open(path));
  return table;
}

// model.safetensors, or the shards named by model.safetensors.index.json.
inline TensorTable read_safetensors_checkpoint(const std::filesystem::path& dir) {
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) return read_safetensors(single);
  if (!std::filesystem::exists(index)) {
    throw Error(dir.string() + ": no model.safetensors or model.safetensors.index.json");
  }
  Json json = read_json_file(index);
  auto map_it = json.find("weight_map");
  if (map_it == json.end() || !map_it->is_object()) throw Error(index.string() + ": missing \"weight_map\" object");
  std::set<std::string> shard_names;
  for (auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) throw Error(index.string() + ": weight_map entry \"" + tensor + "\" is not a file name");
    const std::string name = shard.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "..") {
      throw Error(index.string() + ": shard name \"" + name + "\" must be a file in the checkpoint directory");
    }
    shard_names.insert(name);
  }
  TensorTable table;
  for (const auto& name : shard_names) table.add_file(LoadedFile::open(dir / name));
  for (auto& [tensor, shard] : map_it->items()) {
    const TensorRef* t = table.find(tensor);
    if (t == nullptr || std::filesystem::path(t->file).filename() != shard.get<std::string>()) {
      throw Error(index.string() + ": tensor \"" + tensor + "\" is not in shard " + shard.get<std::string>());
    }
  }
  return table;
}

}  // namespace minimind::io
