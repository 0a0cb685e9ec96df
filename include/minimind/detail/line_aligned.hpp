#pragma once
// Storage that starts on a cache line (64 bytes, also a zmm vector) whatever the build's flags.
// A vector load that straddles two lines costs two (the register tiles ran at half speed on
// inputs 16 bytes off a line: commit b4a3511), and the allocators the build would use align
// less: malloc and Eigen to 16 bytes for plain x86-64, below an AVX2 or AVX-512 target's vectors.
#include <cstddef>
#include <new>
#include <vector>

namespace minimind {

inline constexpr size_t kCacheLine = 64;

template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{kCacheLine};
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  friend bool operator==(const LineAligned&, const LineAligned&) { return true; }
};

template <class T>
using LineVector = std::vector<T, LineAligned<T>>;

}  // namespace minimind
