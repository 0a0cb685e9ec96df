#pragma once
// Writes torch.save-style .pth images in memory for the bad-input tests: a zip archive of stored
// entries (optionally compressed, zip64, or lying about sizes) and a state-dict pickle with the
// opcodes torch.save emits, to be broken on purpose.
#include <minimind/detail/io/zip.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace minimind::testing {

struct ZipEntry {
  ZipEntry(std::string name_, std::string data_, uint16_t method_ = 0, std::optional<uint32_t> crc_ = std::nullopt,
           std::optional<uint64_t> size_ = std::nullopt, std::optional<uint64_t> local_offset_ = std::nullopt,
           bool zip64_ = false)
      : name(std::move(name_)), data(std::move(data_)), method(method_), crc(crc_), size(size_),
        local_offset(local_offset_), zip64(zip64_) {}
  std::string name;
  std::string data;
  uint16_t method = 0;                       // 0 stored, 8 deflate (the bytes are not really deflated)
  std::optional<uint32_t> crc;               // default: the real CRC-32
  std::optional<uint64_t> size;              // default: data.size()
  std::optional<uint64_t> local_offset;      // default: where the local header really is
  bool zip64 = false;                        // sizes and offset in a zip64 extra field
};

inline std::string le(uint64_t v, int bytes) {
  std::string s(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// Local headers padded so that every entry's data starts at a multiple of 64, as torch does, then
// the central directory, the zip64 end record and locator (torch always writes them), the end record.
inline std::string zip_image(const std::vector<ZipEntry>& entries) {
  std::string out, central;
  for (const auto& e : entries) {
    const uint64_t local = out.size();
    const size_t pad = (64 - (local + 30 + e.name.size() + 4) % 64) % 64;
    const std::string extra = le(0x4246, 2) + le(pad, 2) + std::string(pad, 'Z');  // "FB" padding, like torch
    out += le(0x04034b50, 4) + le(20, 2) + le(0x0808, 2) + le(e.method, 2) + le(0, 4) + le(0, 4) + le(0, 4) + le(0, 4) +
           le(e.name.size(), 2) + le(extra.size(), 2) + e.name + extra + e.data;
    const uint32_t crc = e.crc.value_or(io::zip::crc32({reinterpret_cast<const std::byte*>(e.data.data()), e.data.size()}));
    const uint64_t size = e.size.value_or(e.data.size());
    const uint64_t offset = e.local_offset.value_or(local);
    std::string cextra;
    if (e.zip64) cextra = le(1, 2) + le(24, 2) + le(size, 8) + le(size, 8) + le(offset, 8);
    const uint64_t field_size = e.zip64 ? 0xFFFFFFFFu : size, field_offset = e.zip64 ? 0xFFFFFFFFu : offset;
    central += le(0x02014b50, 4) + le(45, 2) + le(45, 2) + le(0x0808, 2) + le(e.method, 2) + le(0, 4) + le(crc, 4) +
               le(field_size, 4) + le(field_size, 4) + le(e.name.size(), 2) + le(cextra.size(), 2) + le(0, 2) + le(0, 2) +
               le(0, 2) + le(0, 4) + le(field_offset, 4) + e.name + cextra;
  }
  const uint64_t dir_offset = out.size();
  out += central;
  const uint64_t end64 = out.size();
  out += le(0x06064b50, 4) + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) + le(entries.size(), 8) +
         le(entries.size(), 8) + le(central.size(), 8) + le(dir_offset, 8);
  out += le(0x07064b50, 4) + le(0, 4) + le(end64, 8) + le(1, 4);
  out += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(entries.size(), 2) + le(entries.size(), 2) + le(central.size(), 4) +
         le(dir_offset, 4) + le(0, 2);
  return out;
}

// A protocol-2 pickle of {name: tensor} as torch.save writes a state dict.
class StateDictPickle {
 public:
  struct Tensor {
    std::string name;
    std::string storage_type = "FloatStorage";
    std::string key = "0";
    int64_t numel = 0;
    int64_t offset = 0;
    std::vector<int64_t> size, stride;
  };

  static std::string unicode(const std::string& s) { return "X" + le(s.size(), 4) + s; }
  static std::string integer(int64_t v) {
    if (v >= 0 && v < 256) return "K" + le(static_cast<uint64_t>(v), 1);
    if (v >= 0 && v < 65536) return "M" + le(static_cast<uint64_t>(v), 2);
    return "\x8a\x08" + le(static_cast<uint64_t>(v), 8);  // LONG1
  }
  static std::string tuple(const std::vector<int64_t>& v) {
    std::string s = "(";
    for (int64_t x : v) s += integer(x);
    return s + "t";
  }
  static std::string tensor(const Tensor& t) {
    return "ctorch._utils\n_rebuild_tensor_v2\n((" + unicode("storage") + "ctorch\n" + t.storage_type + "\n" +
           unicode(t.key) + unicode("cpu") + integer(t.numel) + "tQ" + integer(t.offset) + tuple(t.size) +
           tuple(t.stride) + "\x89" + "ccollections\nOrderedDict\n)R" + "tR";
  }
  static std::string state_dict(const std::vector<Tensor>& tensors) {
    std::string s = std::string("\x80\x02}q", 4) + '\0' + "(";  // PROTO 2, EMPTY_DICT, BINPUT 0, MARK
    for (const auto& t : tensors) s += unicode(t.name) + tensor(t);
    return s + "u.";
  }
};

// A .pth image: the pickle as <archive>/data.pkl, storages as <archive>/data/<key>.
inline std::string pth_image(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages,
                             const std::string& archive = "archive") {
  std::vector<ZipEntry> entries = {{archive + "/data.pkl", pickle}};
  for (const auto& [key, bytes] : storages) entries.push_back({archive + "/data/" + key, bytes});
  entries.push_back({archive + "/version", "3\n"});
  return zip_image(entries);
}

}  // namespace minimind::testing
