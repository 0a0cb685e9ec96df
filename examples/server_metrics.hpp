#pragma once
// minimind-server's GET /metrics: what Prometheus scrapes, in its text exposition format (version
// 0.0.4). The server counts requests and tokens and times replies here; the Engine reports its
// steps (EngineOptions::on_step) and, at each scrape, its queue and busy slots (Engine::status).
// Everything is recorded from many threads at once and read by the scrape's; nothing here needs
// HTTP, so the exposition is tested without sockets.
#include "openai_protocol.hpp"

#include <minimind/engine.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace server_metrics {

inline constexpr const char* kContentType = "text/plain; version=0.0.4";

// A number as the format writes it: Go's float syntax, the shortest form that reads back the same
// (fixed unless the exponent is below -4, so 0.0005 rather than 5e-04), +Inf for infinity.
inline std::string format_number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value, std::chars_format::general).ptr;
  return std::string(text, end);
}

// A label value between its quotes: backslash, double quote and newline escaped.
inline std::string escape_label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `# HELP` and `# TYPE` lines of a metric family.
inline void write_family_header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

using Labels = std::vector<std::pair<std::string, std::string>>;

inline void write_sample(std::string& out, std::string_view name, const Labels& labels, std::string_view value) {
  out.append(name);
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      out.append(labels[i].first).append("=\"").append(escape_label_value(labels[i].second)).append("\"");
    }
    out += '}';
  }
  out.append(" ").append(value).append("\n");
}

// A histogram with fixed upper bounds (ascending; +Inf is added): an observation v is counted in
// the first bucket whose bound is >= v, and written cumulatively, as the format has it.
class Histogram {
 public:
  Histogram(std::string name, std::string help, std::vector<double> bounds)
      : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double value) {
    const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_[bucket];
    sum_ += value;
  }

  void write(std::string& out) const {
    std::vector<uint64_t> counts;
    double sum;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counts = counts_;
      sum = sum_;
    }
    write_family_header(out, name_, "histogram", help_);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      cumulative += counts[i];
      const double bound = i < bounds_.size() ? bounds_[i] : INFINITY;
      write_sample(out, name_ + "_bucket", {{"le", format_number(bound)}}, std::to_string(cumulative));
    }
    write_sample(out, name_ + "_sum", {}, format_number(sum));
    write_sample(out, name_ + "_count", {}, std::to_string(cumulative));
  }

 private:
  const std::string name_, help_;
  const std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is (largest bound, +Inf)
  double sum_ = 0;
};

// The label a request's path is counted under: the route it matched, so that the label takes a
// few values whatever paths clients send.
inline std::string endpoint_label(std::string_view path) {
  static const std::array<std::string_view, 8> routes = {"/", "/health", "/metrics", "/v1/models", "/v1/chat/completions",
                                                         "/v1/completions", "/v1/inspect", "/lora-adapters"};
  for (std::string_view route : routes)
    if (path == route) return std::string(route);
  if (path.starts_with("/v1/models/") && path.size() > std::string_view("/v1/models/").size()) return "/v1/models/{id}";
  return "other";
}

inline std::string method_label(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "OPTIONS"})
    if (method == known) return std::string(method);
  return "other";
}

using Clock = std::chrono::steady_clock;

class Metrics {
 public:
  // A request answered (any path, any status: refused, failed and streamed ones too; a streamed
  // reply counts its status, 200, once its last event is written).
  void request(std::string_view method, std::string_view path, int status) {
    const auto key = std::make_tuple(endpoint_label(path), method_label(method), status);
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[key];
  }

  // A generation that ran (its reply whole, cut short or unread): its tokens as its usage reports
  // them, and its latencies from `arrived` (when its handler started) and the engine's times.
  void generation(const openai::Outcome& outcome, Clock::time_point arrived) {
    prompt_tokens_ += static_cast<uint64_t>(outcome.prompt_tokens);
    cached_prompt_tokens_ += static_cast<uint64_t>(outcome.cached_tokens);
    generated_tokens_ += static_cast<uint64_t>(outcome.completion_tokens);
    const auto& engine = outcome.engine;
    if (!engine.first_token_at) return;
    time_to_first_token_.observe(std::chrono::duration<double>(*engine.first_token_at - arrived).count());
    if (engine.generated_tokens >= 2) {
      const double span = std::chrono::duration<double>(*engine.last_token_at - *engine.first_token_at).count();
      time_per_token_.observe(span / static_cast<double>(engine.generated_tokens - 1));
    }
  }

  // EngineOptions::on_step.
  void step(const minimind::EngineStep& step) {
    step_seconds_.observe(step.seconds);
    step_batch_size_.observe(static_cast<double>(step.sequences));
  }

  // The whole exposition, with the engine's gauges as they are now.
  std::string render(const minimind::EngineStatus& engine) const {
    std::string out;
    write_family_header(out, "minimind_requests_total", "counter", "HTTP requests answered, by endpoint (the route matched), method and status.");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [key, count] : requests_) {
        const auto& [endpoint, method, status] = key;
        write_sample(out, "minimind_requests_total", {{"endpoint", endpoint}, {"method", method}, {"status", std::to_string(status)}},
                     std::to_string(count));
      }
    }
    auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& value) {
      write_family_header(out, name, "counter", help);
      write_sample(out, name, {}, std::to_string(value.load()));
    };
    counter("minimind_prompt_tokens_total", "Prompt tokens of the generations run (usage.prompt_tokens summed).", prompt_tokens_);
    counter("minimind_prompt_tokens_cached_total", "Prompt tokens taken from the prompt cache rather than prefilled.", cached_prompt_tokens_);
    counter("minimind_generated_tokens_total", "Tokens generated and read into replies (usage.completion_tokens summed).", generated_tokens_);
    auto gauge = [&](const char* name, const char* help, size_t value) {
      write_family_header(out, name, "gauge", help);
      write_sample(out, name, {}, std::to_string(value));
    };
    gauge("minimind_slots", "Slots: requests that can be generated at once (--slots).", engine.slots);
    gauge("minimind_slots_busy", "Slots held by a running request or an inspection.", engine.slots - engine.idle);
    gauge("minimind_queue_length", "Requests waiting for a slot.", engine.queued);
    for (const Histogram* h : {&step_seconds_, &step_batch_size_, &time_to_first_token_, &time_per_token_}) h->write(out);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;  // (endpoint, method, status)
  std::atomic<uint64_t> prompt_tokens_{0}, cached_prompt_tokens_{0}, generated_tokens_{0};
  Histogram step_seconds_{"minimind_step_seconds", "Time of one scheduler step: one forward pass over every running request, and sampling.",
                          {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram step_batch_size_{"minimind_step_batch_size", "Requests advanced by one scheduler step.",
                             {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}};
  Histogram time_to_first_token_{"minimind_time_to_first_token_seconds",
                                 "From a generating request's arrival (its body read) to the step that sampled its first token.",
                                 {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram time_per_token_{"minimind_time_per_output_token_seconds",
                            "Per generation of two or more tokens: the time from its first token to its last over the tokens after the first.",
                            {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

}  // namespace server_metrics
