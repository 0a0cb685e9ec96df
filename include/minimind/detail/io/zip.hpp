#pragma once
// The zip container torch.save writes (PKWARE APPNOTE): a central directory at the end listing
// each entry, every entry stored uncompressed, so a tensor's bytes can be viewed in place inside
// the loaded file. torch always writes the zip64 end records, so those are read too. Compressed
// or encrypted entries, multi-disk archives and entries reaching past the file are refused.
#include "minimind/error.hpp"
#include "minimind/detail/io/byte_reader.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minimind::io::zip {

inline uint32_t crc32(std::span<const std::byte> data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (std::byte b : data) c = table[(c ^ std::to_integer<uint32_t>(b)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

struct Entry {
  std::string name;
  uint64_t data_offset = 0;  // of the first data byte, from the start of the file
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

class Archive {
 public:
  // Reads the directory of a zip image; `source` names it in errors.
  static Archive parse(std::span<const std::byte> file, const std::string& source) {
    Archive archive;
    archive.file_ = file;
    archive.source_ = source;
    ByteReader r(file, source);
    const Directory dir = find_directory(r);
    r.seek(dir.offset, "the central directory");
    const size_t dir_end = static_cast<size_t>(dir.offset + dir.size);
    for (uint64_t i = 0; i < dir.entries; ++i) {
      const size_t at = r.offset();
      if (at + kCentralHeaderSize > dir_end) {
        r.fail("central directory entry " + std::to_string(i) + " of " + std::to_string(dir.entries) +
               " lies beyond the directory's " + std::to_string(dir.size) + " bytes");
      }
      Entry entry = read_central_entry(r, i);
      if (archive.index_.count(entry.name)) r.fail(at, "entry \"" + entry.name + "\" appears twice");
      archive.index_.emplace(entry.name, archive.entries_.size());
      archive.entries_.push_back(std::move(entry));
    }
    return archive;
  }

  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &entries_[it->second];
  }
  // The stored bytes of an entry (checked to lie inside the file when the directory was read).
  std::span<const std::byte> data(const Entry& entry) const {
    return file_.subspan(static_cast<size_t>(entry.data_offset), static_cast<size_t>(entry.size));
  }
  // Fails unless the entry's bytes match the CRC-32 the directory records.
  void verify_crc(const Entry& entry) const {
    const uint32_t actual = crc32(data(entry));
    if (actual != entry.crc32) {
      throw Error(source_ + ": entry \"" + entry.name + "\" is corrupt: CRC-32 " + hex(actual) + " but the directory says " +
                  hex(entry.crc32));
    }
  }
  const std::string& source() const { return source_; }

 private:
  static constexpr uint32_t kEndSignature = 0x06054b50, kEnd64Signature = 0x06064b50, kLocatorSignature = 0x07064b50;
  static constexpr uint32_t kCentralSignature = 0x02014b50, kLocalSignature = 0x04034b50;
  static constexpr size_t kEndSize = 22, kLocatorSize = 20, kCentralHeaderSize = 46, kLocalHeaderSize = 30;

  struct Directory {
    uint64_t entries = 0, size = 0, offset = 0;
  };

  static std::string hex(uint32_t v) {
    static const char* digits = "0123456789abcdef";
    std::string s = "0x00000000";
    for (int i = 0; i < 8; ++i) s[9 - i] = digits[(v >> (4 * i)) & 0xF];
    return s;
  }

  // The end-of-central-directory record is the last thing in the file, followed only by a
  // comment of the length it states; torch's archives have no comment.
  static Directory find_directory(ByteReader& r) {
    const size_t size = r.size();
    if (size < kEndSize) r.fail(0, "too short for a zip archive (" + std::to_string(size) + " bytes); not a torch.save file");
    const size_t lowest = size > kEndSize + 0xFFFF ? size - kEndSize - 0xFFFF : 0;
    for (size_t pos = size - kEndSize + 1; pos-- > lowest;) {
      r.seek(pos, "end record");
      if (r.read<uint32_t>("signature") != kEndSignature) continue;
      r.seek(pos + 20, "comment length");
      if (r.read<uint16_t>("comment length") != size - pos - kEndSize) continue;
      return read_end_record(r, pos);
    }
    r.fail(0, "no zip end-of-central-directory record: not a zip archive (torch.save writes one), or truncated");
  }

  static Directory read_end_record(ByteReader& r, size_t pos) {
    r.seek(pos + 4, "end record");
    const uint16_t disk = r.read<uint16_t>("disk number"), dir_disk = r.read<uint16_t>("directory disk");
    const uint16_t disk_entries = r.read<uint16_t>("entries on this disk"), entries = r.read<uint16_t>("entry count");
    Directory dir{entries, r.read<uint32_t>("directory size"), r.read<uint32_t>("directory offset")};
    if (disk != 0 || dir_disk != 0 || disk_entries != entries) r.fail(pos, "multi-disk zip archives are not supported");
    // torch writes a zip64 end record (and its locator just before the end record) always.
    if (pos >= kLocatorSize) {
      r.seek(pos - kLocatorSize, "zip64 locator");
      if (r.read<uint32_t>("zip64 locator signature") == kLocatorSignature) dir = read_end64_record(r, pos - kLocatorSize);
    }
    if (dir.offset > r.size() || dir.size > r.size() - dir.offset) {
      r.fail(pos, "central directory [" + std::to_string(dir.offset) + ", +" + std::to_string(dir.size) +
                      ") lies beyond the end of the " + std::to_string(r.size()) + "-byte file");
    }
    if (dir.entries > dir.size / kCentralHeaderSize) {
      r.fail(pos, "entry count " + std::to_string(dir.entries) + " is more than a " + std::to_string(dir.size) +
                      "-byte central directory can hold");
    }
    return dir;
  }

  static Directory read_end64_record(ByteReader& r, size_t locator) {
    r.read<uint32_t>("zip64 locator disk");
    const uint64_t record = r.read<uint64_t>("zip64 end record offset");
    if (r.read<uint32_t>("zip64 disk count") > 1) r.fail(locator, "multi-disk zip archives are not supported");
    r.seek(record, "zip64 end record");
    if (r.read<uint32_t>("zip64 end record signature") != kEnd64Signature) {
      r.fail(record, "the zip64 locator points at no zip64 end record");
    }
    r.skip(8 + 2 + 2, "zip64 end record");  // record size, versions
    const uint32_t disk = r.read<uint32_t>("zip64 disk number"), dir_disk = r.read<uint32_t>("zip64 directory disk");
    const uint64_t disk_entries = r.read<uint64_t>("zip64 entries on this disk");
    Directory dir;
    dir.entries = r.read<uint64_t>("zip64 entry count");
    dir.size = r.read<uint64_t>("zip64 directory size");
    dir.offset = r.read<uint64_t>("zip64 directory offset");
    if (disk != 0 || dir_disk != 0 || disk_entries != dir.entries) r.fail(record, "multi-disk zip archives are not supported");
    return dir;
  }

  static Entry read_central_entry(ByteReader& r, uint64_t index) {
    const size_t at = r.offset();
    if (r.read<uint32_t>("central directory signature") != kCentralSignature) {
      r.fail(at, "central directory entry " + std::to_string(index) + " has a bad signature");
    }
    r.skip(4, "versions");
    const uint16_t flags = r.read<uint16_t>("flags"), method = r.read<uint16_t>("compression method");
    r.skip(4, "time and date");
    Entry entry;
    entry.crc32 = r.read<uint32_t>("CRC-32");
    uint64_t compressed = r.read<uint32_t>("compressed size"), size = r.read<uint32_t>("size");
    const uint16_t name_len = r.read<uint16_t>("name length"), extra_len = r.read<uint16_t>("extra length");
    const uint16_t comment_len = r.read<uint16_t>("comment length");
    const uint16_t disk = r.read<uint16_t>("disk number");
    r.skip(6, "attributes");
    uint64_t local = r.read<uint32_t>("local header offset");
    entry.name = std::string(r.chars(name_len, "entry name"));
    const std::string where = "entry \"" + entry.name + "\"";
    ByteReader extra(r.bytes(extra_len, where + " extra field"), r.source());
    r.skip(comment_len, where + " comment");
    read_zip64_extra(extra, size, compressed, local, where);

    if (disk != 0) r.fail(at, where + " is on another disk (multi-disk archives are not supported)");
    if (flags & 0x1) r.fail(at, where + " is encrypted");
    if (method != 0) {
      r.fail(at, where + " is compressed (method " + std::to_string(method) + (method == 8 ? ", deflate" : "") +
                     "); only stored entries are supported, as torch.save writes them");
    }
    if (compressed != size) {
      r.fail(at, where + " is stored but its compressed size " + std::to_string(compressed) + " differs from its size " +
                     std::to_string(size));
    }
    entry.size = size;
    entry.data_offset = read_local_header(r, local, entry, where);
    return entry;
  }

  // Sizes and offsets that do not fit 32 bits are 0xFFFFFFFF, the real value in the zip64 extra
  // field (id 1), in this order, only for the fields that overflowed.
  static void read_zip64_extra(ByteReader& extra, uint64_t& size, uint64_t& compressed, uint64_t& local,
                               const std::string& where) {
    constexpr uint64_t kMax32 = 0xFFFFFFFFu;
    while (extra.remaining() >= 4) {
      const uint16_t id = extra.read<uint16_t>(where + " extra id");
      const uint16_t len = extra.read<uint16_t>(where + " extra length");
      ByteReader field(extra.bytes(len, where + " extra field"), extra.source());
      if (id != 1) continue;
      for (uint64_t* value : {&size, &compressed, &local}) {
        if (*value == kMax32) *value = field.read<uint64_t>(where + " zip64 extra field");
      }
    }
    if (size == kMax32 || compressed == kMax32 || local == kMax32) {
      extra.fail(where + " has 32-bit fields marked zip64 but no zip64 extra field");
    }
  }

  // The local header repeats the name and has its own extra field (torch pads it so the data is
  // 64-byte aligned); the data follows it. Sizes are taken from the central directory, because
  // torch writes them after the data (flag bit 3) and leaves the local fields 0.
  static uint64_t read_local_header(const ByteReader& central, uint64_t local, const Entry& entry,
                                    const std::string& where) {
    ByteReader r(central.data(), central.source());
    r.seek(local, where + " local header");
    if (r.remaining() < kLocalHeaderSize || r.read<uint32_t>(where + " local header") != kLocalSignature) {
      r.fail(local, where + ": no local header at its recorded offset");
    }
    r.skip(22, where + " local header");
    const uint16_t name_len = r.read<uint16_t>(where + " local name length");
    const uint16_t extra_len = r.read<uint16_t>(where + " local extra length");
    if (r.chars(name_len, where + " local name") != entry.name) r.fail(local, where + ": local header names another entry");
    r.skip(extra_len, where + " local extra field");
    const uint64_t data = r.offset();
    if (entry.size > r.size() - data) {
      r.fail(data, where + ": data [" + std::to_string(data) + ", +" + std::to_string(entry.size) +
                       ") lies beyond the end of the " + std::to_string(r.size()) + "-byte file");
    }
    return data;
  }

  std::span<const std::byte> file_;
  std::string source_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
};

}  // namespace minimind::io::zip
