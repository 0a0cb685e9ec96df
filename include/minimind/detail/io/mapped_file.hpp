#pragma once
// A whole file mapped into memory, private and copy-on-write: weights stored in the compute dtype
// are used in place (zero copy), and nothing we do can ever write back to the user's file.
#include "minimind/error.hpp"

#include <fcntl.h>
#include <sys/mman.h>
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

class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path.string() + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(path.string() + ": not a regular file");
    }
    auto file = std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<size_t>(st.st_size)));
    if (file->size_ > 0) {
      void* addr = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (addr == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        throw Error(path.string() + ": cannot map: " + std::strerror(err));
      }
      file->data_ = static_cast<std::byte*>(addr);
    }
    ::close(fd);
    return file;
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }

  std::span<std::byte> bytes() { return {data_, size_}; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, size_t size) : path_(std::move(path)), size_(size) {}
  std::filesystem::path path_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace minimind::io
