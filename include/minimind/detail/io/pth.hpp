#pragma once
// PyTorch .pth state dicts as torch.save writes them (PyTorch >= 1.6): a zip archive (zip.hpp)
// with <archive>/data.pkl, the pickled {name: tensor} (pickle.hpp), and one entry
// <archive>/data/<key> per storage, raw little-endian elements. A tensor that is a contiguous
// row-major run of its storage is viewed in place in the loaded file; any other strided view is
// copied into an owned buffer. Float, Half and BFloat16 storages are supported.
#include "minimind/error.hpp"
#include "minimind/detail/io/loaded_file.hpp"
#include "minimind/detail/io/pickle.hpp"
#include "minimind/detail/io/safetensors.hpp"
#include "minimind/detail/io/zip.hpp"
#include "minimind/detail/line_aligned.hpp"

#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace minimind::io {

namespace pth_detail {

inline bool storage_dtype(const std::string& type, Dtype& dtype) {
  if (type == "FloatStorage") dtype = Dtype::F32;
  else if (type == "HalfStorage") dtype = Dtype::F16;
  else if (type == "BFloat16Storage") dtype = Dtype::BF16;
  else return false;
  return true;
}

// The archive's root folder: torch names it after the file, so it is found, not assumed.
inline std::string archive_prefix(const zip::Archive& archive) {
  std::string prefix;
  int found = 0;
  for (const auto& e : archive.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      prefix = e.name.substr(0, slash + 1);
      ++found;
    }
  }
  if (found != 1) {
    throw Error(archive.source() + ": " + (found ? "several" : "no") +
                " <archive>/data.pkl entries; not a state dict saved by torch.save");
  }
  return prefix;
}

// The tensor's bytes: a view when it is a contiguous row-major run of the storage, else a copy
// gathered element by element. The furthest element the view reaches is checked against the
// storage first, with every product bounded so nothing overflows.
inline void place_tensor(TensorRef& t, const pickle::TensorRecord& rec, std::span<std::byte> storage,
                         const std::string& where) {
  const size_t es = dtype_size(t.dtype);
  const auto storage_numel = static_cast<uint64_t>(rec.storage.numel);
  const auto offset = static_cast<uint64_t>(rec.storage_offset);
  const auto beyond = [&] {
    return Error(where + ": shape " + t.shape_string() + " at storage offset " + std::to_string(offset) +
                 " reaches beyond its storage of " + std::to_string(storage_numel) + " elements");
  };
  for (int64_t size : rec.size) {
    if (size == 0) {
      t.bytes = storage.subspan(0, 0);
      return;
    }
  }
  uint64_t numel = 1, last = offset;  // last: the highest element index the view reads
  bool contiguous = true;
  for (size_t d = rec.size.size(); d-- > 0;) {
    const auto size = static_cast<uint64_t>(rec.size[d]), stride = static_cast<uint64_t>(rec.stride[d]);
    if (size != 1 && stride != numel) contiguous = false;
    if (size > storage_numel / numel) {
      throw Error(where + ": shape " + t.shape_string() + " has more elements than its storage of " +
                  std::to_string(storage_numel) + " (broadcast views are not supported)");
    }
    numel *= size;
    if (size > 1 && stride > storage_numel / (size - 1)) throw beyond();
    last += (size - 1) * stride;
    if (last >= storage_numel) throw beyond();
  }
  if (last >= storage_numel) throw beyond();
  if (contiguous) {
    t.bytes = storage.subspan(static_cast<size_t>(offset * es), static_cast<size_t>(numel * es));
    return;
  }
  auto buffer = std::make_shared<LineVector<std::byte>>(static_cast<size_t>(numel * es));
  std::vector<int64_t> index(rec.size.size(), 0);
  for (uint64_t i = 0; i < numel; ++i) {
    int64_t src = rec.storage_offset;
    for (size_t d = 0; d < index.size(); ++d) src += index[d] * rec.stride[d];
    std::memcpy(buffer->data() + i * es, storage.data() + static_cast<size_t>(src) * es, es);
    for (size_t d = index.size(); d-- > 0;) {  // row-major odometer
      if (++index[d] < rec.size[d]) break;
      index[d] = 0;
    }
  }
  t.bytes = std::span<std::byte>(*buffer);
  t.owner = buffer;
}

// DDP ("module.") and torch.compile ("_orig_mod.") prefix every key of the model they wrap.
inline void strip_wrapper_prefixes(std::vector<std::pair<std::string, pickle::TensorRecord>>& entries) {
  for (const std::string prefix : {"module.", "_orig_mod."}) {
    bool all = !entries.empty();
    for (const auto& e : entries) all = all && e.first.rfind(prefix, 0) == 0;
    if (!all) continue;
    for (auto& e : entries) e.first.erase(0, prefix.size());
  }
}

}  // namespace pth_detail

// Parses a .pth image already in memory; the TensorRefs view `file` and hold `owner` (which must
// keep `file` alive; may be null when the caller does). `source` names it in errors.
inline TensorTable parse_pth(std::span<std::byte> file, const std::string& source, std::shared_ptr<const void> owner) {
  // Before PyTorch 1.6, torch.save wrote a bare pickle stream, starting with the magic number.
  if (file.size() >= 2 && std::to_integer<uint8_t>(file[0]) == 0x80 && std::to_integer<uint8_t>(file[1]) == 0x02) {
    throw Error(source + ": the legacy (pre-1.6) torch.save format is not supported; re-save it with a newer PyTorch");
  }
  const zip::Archive archive = zip::Archive::parse(file, source);
  const std::string prefix = pth_detail::archive_prefix(archive);
  if (const zip::Entry* order = archive.find(prefix + "byteorder")) {
    auto text = archive.data(*order);
    const std::string value(reinterpret_cast<const char*>(text.data()), text.size());
    if (value != "little") throw Error(source + ": byte order \"" + value + "\" is not supported (only little)");
  }
  const zip::Entry& pkl = *archive.find(prefix + "data.pkl");
  archive.verify_crc(pkl);
  auto entries = pickle::parse_state_dict(archive.data(pkl), source + " (" + pkl.name + ")");
  pth_detail::strip_wrapper_prefixes(entries);

  TensorTable table;
  for (const auto& [name, rec] : entries) {
    const std::string where = source + ": tensor \"" + name + "\"";
    TensorRef t;
    t.name = name;
    t.file = source;
    t.owner = owner;
    if (!pth_detail::storage_dtype(rec.storage.type, t.dtype)) {
      throw Error(where + ": storage type torch." + rec.storage.type + " is not supported (need Float, Half or BFloat16)");
    }
    for (int64_t d : rec.size) t.shape.push_back(d);
    const zip::Entry* data = archive.find(prefix + "data/" + rec.storage.key);
    if (data == nullptr) throw Error(where + ": its storage entry " + prefix + "data/" + rec.storage.key + " is missing");
    const uint64_t es = dtype_size(t.dtype);
    if (static_cast<uint64_t>(rec.storage.numel) > data->size / es || data->size != static_cast<uint64_t>(rec.storage.numel) * es) {
      throw Error(where + ": storage " + data->name + " holds " + std::to_string(data->size) + " bytes, not the " +
                  std::to_string(rec.storage.numel) + " x " + std::to_string(es) + " its record states");
    }
    pth_detail::place_tensor(t, rec, file.subspan(static_cast<size_t>(data->data_offset), static_cast<size_t>(data->size)),
                             where);
    table.add(std::move(t), source);
  }
  return table;
}

inline TensorTable read_pth(const std::filesystem::path& path) {
  auto file = LoadedFile::open(path);
  return parse_pth(file->bytes(), path.string(), file);
}

}  // namespace minimind::io
