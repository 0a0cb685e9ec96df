#pragma once
// Memory for the weights a model owns (converted to bf16 or q8, widened from f16, or made at
// random): large blocks handed out in 64-byte aligned pieces, each block 2 MiB aligned and
// marked for transparent huge pages (madvise). Decode streams every weight from DRAM once per
// token, and on 4 KiB pages that stream also walks the page tables (docs/performance.md,
// "Design choices"). A single matrix is mostly far smaller than 2 MiB, hence one arena for all of them
// rather than one mapping each.
// The kernel may decline huge pages (THP disabled): the memory is then ordinary pages. Under
// AddressSanitizer each piece is a separate allocation instead, so reads past a weight's end are
// caught rather than landing in its neighbour. Under emscripten the blocks come from the heap.
#include "minimind/detail/line_aligned.hpp"
#include "minimind/error.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#define MINIMIND_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINIMIND_ASAN 1
#endif
#endif
#ifndef MINIMIND_ASAN
#define MINIMIND_ASAN 0
#endif

namespace minimind {

inline constexpr size_t kHugePage = size_t{2} << 20;

// `size` bytes of zeroed memory starting on a 2 MiB boundary, marked for transparent huge pages:
// an anonymous mapping 2 MiB larger, with the unaligned head and the tail unmapped.
inline std::shared_ptr<void> huge_page_block(size_t size) {
#if defined(__EMSCRIPTEN__)
  // WebAssembly has one linear memory and no pages to advise; emscripten's mmap cannot unmap
  // part of a mapping (the alignment trim below), so the block is a zeroed heap allocation.
  void* block = ::operator new[](size, std::align_val_t{kCacheLine});
  std::memset(block, 0, size);
  return std::shared_ptr<void>(block, [](void* p) { ::operator delete[](p, std::align_val_t{kCacheLine}); });
#else
  const size_t mapped = size + kHugePage;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    throw Error("cannot allocate " + std::to_string(size >> 20) + " MiB: " + std::strerror(errno));
  }
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(raw, aligned - start);
  if (const uintptr_t tail = start + mapped - (aligned + size); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  }
  void* block = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(block, size, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
  return std::shared_ptr<void>(block, [size](void* p) { ::munmap(p, size); });
#endif
}

class WeightArena {
 public:
  static constexpr size_t kBlock = size_t{32} << 20;  // most models need a few blocks
  static constexpr size_t kAlign = kCacheLine;

  // `bytes` of zeroed memory, alive while the returned owner (or a copy) is; distinct calls
  // never share bytes. The owner keeps the whole block alive, not just the piece.
  std::shared_ptr<void> allocate(size_t bytes) {
#if MINIMIND_ASAN
    void* piece = ::operator new[](std::max<size_t>(bytes, 1), std::align_val_t{kAlign});
    std::memset(piece, 0, bytes);
    return std::shared_ptr<void>(piece, [](void* p) { ::operator delete[](p, std::align_val_t{kAlign}); });
#else
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    if (!block_ || block_size_ - used_ < bytes) {
      block_size_ = bytes > kBlock ? (bytes + kHugePage - 1) / kHugePage * kHugePage : kBlock;
      block_ = huge_page_block(block_size_);
      used_ = 0;
    }
    void* piece = static_cast<std::byte*>(block_.get()) + used_;
    used_ += bytes;
    return std::shared_ptr<void>(block_, piece);  // aliasing: shares the block's ownership
#endif
  }

 private:
  // Unused under AddressSanitizer (one allocation per piece there).
  std::shared_ptr<void> block_;
  [[maybe_unused]] size_t block_size_ = 0, used_ = 0;
};

}  // namespace minimind
