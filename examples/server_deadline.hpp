#pragma once
// minimind-server's limit on a whole request (--timeout): from the moment its headers are read
// until its reply is written, a request has at most that long; past it, its connection is shut
// down. A client that trickles its body, or reads its reply too slowly to finish, then sees the
// connection close, and the server's own code sees what it sees for any client that left: the
// body read fails, or the next write of the reply does and the generation's slot is freed.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

namespace server_deadline {

// httplib serves each connection on one thread, one request after another, so a request is known
// by its thread between begin() (in the pre-routing handler) and end() (in the logger, which runs
// once the reply is written, or has failed to be).
class RequestDeadlines {
 public:
  explicit RequestDeadlines(std::chrono::seconds limit) : limit_(limit), thread_([this] { watch(); }) {}
  RequestDeadlines(const RequestDeadlines&) = delete;
  RequestDeadlines& operator=(const RequestDeadlines&) = delete;
  ~RequestDeadlines() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      exiting_ = true;
    }
    changed_.notify_all();
    thread_.join();
    for (auto& entry : running_) ::close(entry.second.socket);
  }

  // The calling thread's request, on connection `socket` (-1: not found, not limited), starts now.
  // The socket is duplicated, so the watcher shuts down this connection even if the request's own
  // descriptor is closed and its number reused meanwhile.
  void begin(int socket) {
    const int own = socket < 0 ? -1 : ::dup(socket);
    std::lock_guard<std::mutex> lock(mutex_);
    forget(std::this_thread::get_id());  // a request whose end() was never called: its connection has closed
    if (own < 0) return;
    running_[std::this_thread::get_id()] = {own, std::chrono::steady_clock::now() + limit_};
    changed_.notify_all();
  }

  // The calling thread's request is done.
  void end() {
    std::lock_guard<std::mutex> lock(mutex_);
    forget(std::this_thread::get_id());
  }

 private:
  struct Running {
    int socket;
    std::chrono::steady_clock::time_point deadline;
  };

  void forget(std::thread::id id) {
    if (auto it = running_.find(id); it != running_.end()) {
      ::close(it->second.socket);
      running_.erase(it);
    }
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!exiting_) {
      auto next = std::chrono::steady_clock::time_point::max();
      const auto now = std::chrono::steady_clock::now();
      for (auto it = running_.begin(); it != running_.end();) {
        if (it->second.deadline <= now) {
          std::fprintf(stderr, "minimind-server: a request ran past --timeout %lld s: its connection is closed\n",
                       static_cast<long long>(limit_.count()));
          ::shutdown(it->second.socket, SHUT_RDWR);
          ::close(it->second.socket);
          it = running_.erase(it);
        } else {
          next = std::min(next, it->second.deadline);
          ++it;
        }
      }
      if (next == std::chrono::steady_clock::time_point::max()) changed_.wait(lock);
      else changed_.wait_until(lock, next);
    }
  }

  const std::chrono::seconds limit_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::thread::id, Running> running_;
  bool exiting_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace server_deadline
