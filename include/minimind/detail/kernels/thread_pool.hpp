#pragma once
// A small persistent thread pool for splitting one operation's rows across cores. The calling
// thread is worker 0 and takes part; the others wait for work by spinning briefly (a decode step
// dispatches some forty operations a few microseconds apart), then yield the core for a while
// (on a loaded machine the thread it waits for may need this very core), then sleep on a
// condition variable. The caller waits for the others the same way: a short spin, then yields. Dispatching allocates nothing: the task is passed as a pointer to the caller's lambda.
//
// One operation runs at a time. A call made while the pool is busy (another session on another
// thread, or a nested call from inside a task) runs the whole range on the calling thread, so
// sharing one model between threads is safe, just not parallel.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define MINIMIND_CPU_RELAX() _mm_pause()
#else
#define MINIMIND_CPU_RELAX() std::this_thread::yield()
#endif

namespace minimind::kernels {

class ThreadPool {
 public:
  // `threads` in total, the caller included; 0 means one per core.
  explicit ThreadPool(int threads = 0) {
    if (threads <= 0) threads = default_threads();
    size_ = threads;
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  static int default_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }
  int size() const { return size_; }

  // Calls task(t, n) for t in [0, n) with n = size(), each on its own thread, and returns when
  // all are done. `task` must not throw.
  template <class Task>
  void run(Task&& task) {
    if (size_ == 1 || busy_.exchange(true, std::memory_order_acquire)) {
      for (int t = 0; t < size_; ++t) task(t, size_);
      return;
    }
    using Fn = std::remove_reference_t<Task>;
    context_ = const_cast<void*>(static_cast<const void*>(&task));
    call_ = [](void* ctx, int t, int n) { (*static_cast<Fn*>(ctx))(t, n); };
    pending_.store(size_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      cv_.notify_all();
    }
    task(0, size_);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kCallerSpins) MINIMIND_CPU_RELAX();
      else std::this_thread::yield();
    }
    busy_.store(false, std::memory_order_release);
  }

  // Splits [0, count) into one contiguous range per thread, each a multiple of `grain` (but the
  // last), and calls body(begin, end) for the non-empty ones.
  template <class Body>
  void parallel_for(int64_t count, int64_t grain, Body&& body) {
    parallel_for_indexed(count, grain, [&](int64_t begin, int64_t end, int) { body(begin, end); });
  }
  // The same, also telling the body which thread (0 .. size()-1) runs it, for per-thread scratch.
  template <class Body>
  void parallel_for_indexed(int64_t count, int64_t grain, Body&& body) {
    if (count <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t chunks = (count + grain - 1) / grain;
    if (size_ == 1 || chunks == 1) {
      body(int64_t{0}, count, 0);
      return;
    }
    run([&](int t, int n) {
      const int64_t begin = std::min(count, chunks * t / n * grain);
      const int64_t end = std::min(count, chunks * (t + 1) / n * grain);
      if (begin < end) body(begin, end, t);
    });
  }
  // Splits [0, count) into chunks of `chunk` that the threads take one after another as they
  // finish: on this kind of machine one core is often slower for a while (a neighbour's load),
  // and a static split would leave the other waiting. body(begin, end, thread). With one thread
  // (or count <= chunk) it is one call for the whole range.
  template <class Body>
  void parallel_for_dynamic(int64_t count, int64_t chunk, Body&& body) {
    if (count <= 0) return;
    chunk = std::max<int64_t>(chunk, 1);
    if (size_ == 1 || count <= chunk) {
      body(int64_t{0}, count, 0);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int t, int) {
      for (int64_t begin; (begin = next.fetch_add(chunk, std::memory_order_relaxed)) < count;) {
        body(begin, std::min(count, begin + chunk), t);
      }
    });
  }

 private:
  void work(int t) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t now = generation_.load(std::memory_order_acquire);
      for (int spin = 0; now == seen && spin < kSpins + kYields; ++spin) {
        if (spin < kSpins) MINIMIND_CPU_RELAX();
        else std::this_thread::yield();
        now = generation_.load(std::memory_order_acquire);
      }
      if (now == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        now = generation_.load(std::memory_order_acquire);
      }
      seen = now;
      if (stop_) return;
      call_(context_, t, size_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  static constexpr int kSpins = 4096;        // pauses (some tens of microseconds) before yielding
  static constexpr int kYields = 2048;       // then yields before sleeping
  static constexpr int kCallerSpins = 2048;  // the caller's pauses before it yields

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  void* context_ = nullptr;
  void (*call_)(void*, int, int) = nullptr;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace minimind::kernels
