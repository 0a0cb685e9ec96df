#pragma once
// A whole file read into private memory on 2 MiB pages: weights stored in the compute dtype are
// used in place there (no copy per tensor), and nothing we do can ever write back to the user's
// file. Read rather than mapped: a mapping of the file sits on the page cache's 4 KiB pages, and
// decode streams every weight once per token, which runs faster on 2 MiB pages (docs/performance.md,
// "Design choices"). The container's tensor data is then moved onto a cache line (align_at): a
// GGUF aligns it to 32 bytes, safetensors to 8, and a 64-byte vector load that straddles two lines
// costs two (commit 884d20d).
#include "minimind/detail/weight_arena.hpp"
#include "minimind/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace minimind::io {

class LoadedFile {
 public:
  static std::shared_ptr<LoadedFile> open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
    const struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path.string() + ": not a regular file");
    auto file = std::shared_ptr<LoadedFile>(new LoadedFile(path, static_cast<size_t>(st.st_size)));
    if (file->size_ > 0) {
      try {
        file->block_ = huge_page_block(file->size_ + kCacheLine);
      } catch (const Error& e) {
        throw Error(path.string() + ": " + e.what());
      }
      file->data_ = static_cast<std::byte*>(file->block_.get());
      for (size_t done = 0; done < file->size_;) {
        const ssize_t n = ::pread(fd, file->data_ + done, file->size_ - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const int err = n < 0 ? errno : EIO;
          throw Error(path.string() + ": cannot read at byte " + std::to_string(done) + ": " + std::strerror(err));
        }
        done += static_cast<size_t>(n);
      }
    }
    return file;
  }

  LoadedFile(const LoadedFile&) = delete;
  LoadedFile& operator=(const LoadedFile&) = delete;

  // Moves the bytes so that byte `offset` of the file starts a cache line; returns whether they
  // moved (spans taken before then point at the old place).
  bool align_at(size_t offset) {
    auto* const line_start = static_cast<std::byte*>(block_.get()) + (kCacheLine - offset % kCacheLine) % kCacheLine;
    if (size_ == 0 || data_ == line_start) return false;
    std::memmove(line_start, data_, size_);
    data_ = line_start;
    return true;
  }

  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  LoadedFile(std::filesystem::path path, size_t size) : path_(std::move(path)), size_(size) {}
  std::filesystem::path path_;
  std::shared_ptr<void> block_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace minimind::io
