// examples/server_metrics.hpp without a server: what /metrics writes after known requests,
// generations and steps, read back by a checker of the text exposition format's grammar
// (prometheus_text.hpp), which is itself shown to refuse texts that break the format.
#include "../examples/server_metrics.hpp"

#include <doctest/doctest.h>

#include "prometheus_text.hpp"

#include <chrono>
#include <string>

namespace prometheus = minimind::testing::prometheus;
using namespace std::chrono_literals;

namespace {

// An outcome as the server makes one: usage counts and the engine's timestamps, relative to `arrived`.
openai::Outcome generation(int64_t prompt, int64_t completion, int64_t sampled, server_metrics::Clock::time_point arrived,
                           std::chrono::microseconds first, std::chrono::microseconds last) {
  openai::Outcome o;
  o.prompt_tokens = prompt;
  o.completion_tokens = completion;
  o.engine.prompt_tokens = prompt;
  o.engine.generated_tokens = sampled;
  if (sampled > 0) {
    o.engine.first_token_at = arrived + first;
    o.engine.last_token_at = arrived + last;
  }
  return o;
}

}  // namespace

TEST_CASE("numbers and label values are written as the format has them") {
  CHECK(server_metrics::format_number(0.0005) == "0.0005");
  CHECK(server_metrics::format_number(1) == "1");
  CHECK(server_metrics::format_number(2.5) == "2.5");
  CHECK(server_metrics::format_number(1e-5) == "1e-05");
  CHECK(server_metrics::format_number(INFINITY) == "+Inf");
  CHECK(server_metrics::format_number(-INFINITY) == "-Inf");
  CHECK(server_metrics::escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  std::string out;
  server_metrics::write_family_header(out, "x_total", "counter", "Things.");
  server_metrics::write_sample(out, "x_total", {{"path", "a\\b\"c\nd"}, {"n", "1"}}, "3");
  const auto parsed = prometheus::parse(out);
  CHECK(parsed.value("x_total", {{"path", "a\\b\"c\nd"}, {"n", "1"}}) == 3);
}

TEST_CASE("requests are counted by the route they matched, its method and status") {
  CHECK(server_metrics::endpoint_label("/v1/completions") == "/v1/completions");
  CHECK(server_metrics::endpoint_label("/v1/models/demo") == "/v1/models/{id}");
  CHECK(server_metrics::endpoint_label("/v1/models/") == "other");
  CHECK(server_metrics::endpoint_label("/v1/completions/x") == "other");
  CHECK(server_metrics::endpoint_label("") == "other");
  CHECK(server_metrics::method_label("PATCH") == "other");

  server_metrics::Metrics metrics;
  metrics.request("POST", "/v1/completions", 200);
  metrics.request("POST", "/v1/completions", 200);
  metrics.request("POST", "/v1/completions", 400);
  metrics.request("GET", "/v1/models/demo", 200);
  metrics.request("GET", "/v1/models/gpt-4", 404);
  metrics.request("GET", "/etc/passwd", 404);
  metrics.request("BREW", "/", 400);
  const auto m = prometheus::parse(metrics.render({4, 4, 0}));
  CHECK(m.types.at("minimind_requests_total") == "counter");
  auto count = [&](const char* endpoint, const char* method, const char* status) {
    return m.value("minimind_requests_total", {{"endpoint", endpoint}, {"method", method}, {"status", status}});
  };
  CHECK(count("/v1/completions", "POST", "200") == 2);
  CHECK(count("/v1/completions", "POST", "400") == 1);
  CHECK(count("/v1/models/{id}", "GET", "200") == 1);
  CHECK(count("/v1/models/{id}", "GET", "404") == 1);
  CHECK(count("other", "GET", "404") == 1);
  CHECK(count("/", "other", "400") == 1);
  size_t samples = 0;
  for (const auto& s : m.samples) samples += s.name == "minimind_requests_total";
  CHECK(samples == 6);
}

TEST_CASE("tokens, gauges and histograms after known generations and steps") {
  server_metrics::Metrics metrics;
  const auto arrived = server_metrics::Clock::now();
  // First token 0.2 s after arrival; 4 ids over 0.12 s: 0.04 s a token after the first.
  metrics.generation(generation(5, 3, 4, arrived, 200ms, 320ms), arrived);
  // One id only: a time to first token (0.03 s), no per-token latency.
  metrics.generation(generation(7, 1, 1, arrived, 30ms, 30ms), arrived);
  // Nothing sampled (cut short before its first step): tokens counted, no latencies.
  metrics.generation(generation(11, 0, 0, arrived, 0ms, 0ms), arrived);
  for (const auto& step : {minimind::EngineStep{1, 0.0005}, minimind::EngineStep{3, 0.003}, minimind::EngineStep{4, 7.0},
                           minimind::EngineStep{1000, 0.2}})
    metrics.step(step);

  const std::string text = metrics.render({4, 1, 2});
  INFO(text);
  const auto m = prometheus::parse(text);
  CHECK(m.value("minimind_prompt_tokens_total") == 23);
  CHECK(m.value("minimind_generated_tokens_total") == 4);
  CHECK(m.value("minimind_prompt_tokens_cached_total") == 0);
  CHECK(m.value("minimind_slots") == 4);
  CHECK(m.value("minimind_slots_busy") == 3);
  CHECK(m.value("minimind_queue_length") == 2);
  for (const char* counter : {"minimind_prompt_tokens_total", "minimind_prompt_tokens_cached_total", "minimind_generated_tokens_total"})
    CHECK(m.types.at(counter) == "counter");
  for (const char* gauge : {"minimind_slots", "minimind_slots_busy", "minimind_queue_length"}) CHECK(m.types.at(gauge) == "gauge");

  // Each observation in the first bucket whose bound is >= it (a value on a bound in that bucket).
  auto bucket = [&](const char* name, const char* le) { return m.value(std::string(name) + "_bucket", {{"le", le}}); };
  const char* step = "minimind_step_seconds";
  CHECK(m.types.at(step) == "histogram");
  CHECK(bucket(step, "0.0005") == 1);
  CHECK(bucket(step, "0.001") == 1);
  CHECK(bucket(step, "0.0025") == 1);
  CHECK(bucket(step, "0.005") == 2);
  CHECK(bucket(step, "0.25") == 3);
  CHECK(bucket(step, "2.5") == 3);
  CHECK(bucket(step, "+Inf") == 4);
  CHECK(m.value("minimind_step_seconds_count") == 4);
  CHECK(m.value("minimind_step_seconds_sum") == doctest::Approx(7.2035));
  const char* batch = "minimind_step_batch_size";
  CHECK(bucket(batch, "1") == 1);
  CHECK(bucket(batch, "2") == 1);
  CHECK(bucket(batch, "4") == 3);
  CHECK(bucket(batch, "512") == 3);
  CHECK(bucket(batch, "1024") == 4);
  CHECK(m.value("minimind_step_batch_size_sum") == 1008);
  const auto ttft = m.histogram("minimind_time_to_first_token_seconds");
  CHECK(ttft.count == 2);
  CHECK(ttft.sum == doctest::Approx(0.23));
  CHECK(bucket("minimind_time_to_first_token_seconds", "0.025") == 0);
  CHECK(bucket("minimind_time_to_first_token_seconds", "0.05") == 1);
  CHECK(bucket("minimind_time_to_first_token_seconds", "0.1") == 1);
  CHECK(bucket("minimind_time_to_first_token_seconds", "0.25") == 2);
  const auto per_token = m.histogram("minimind_time_per_output_token_seconds");
  CHECK(per_token.count == 1);
  CHECK(per_token.sum == doctest::Approx(0.04));
  CHECK(bucket("minimind_time_per_output_token_seconds", "0.025") == 0);
  CHECK(bucket("minimind_time_per_output_token_seconds", "0.05") == 1);
  // Every family has HELP and TYPE lines, and every name the prefix.
  for (const auto& family_type : m.types) {
    const std::string& family = family_type.first;  // not a structured binding: clang 14 cannot capture one
    CHECK(family.starts_with("minimind_"));
    CHECK(text.find("# HELP " + family + " ") != std::string::npos);
  }
  CHECK(m.types.size() == 11);
}

TEST_CASE("the format checker refuses what breaks the format") {
  const std::string good =
      "# HELP h Seconds.\n# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.25\nh_count 2\n"
      "# TYPE c_total counter\nc_total{a=\"x\\\"y\",b=\"\\\\\"} 3 1700000000000\n";
  const auto parsed = prometheus::parse(good);
  CHECK(parsed.value("c_total", {{"a", "x\"y"}, {"b", "\\"}}) == 3);
  CHECK(parsed.histogram("h").count == 2);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  for (const auto& what_bad : std::vector<std::pair<std::string, std::string>>{
           {"no last line feed", good.substr(0, good.size() - 1)},
           {"buckets not cumulative", replaced("le=\"0.5\"} 1", "le=\"0.5\"} 3")},
           {"count differs from +Inf", replaced("h_count 2", "h_count 3")},
           {"no +Inf bucket", replaced("le=\"+Inf\"", "le=\"1\"")},
           {"le out of order", replaced("h_bucket{le=\"+Inf\"}", "h_bucket{le=\"0.25\"} 1\nh_bucket{le=\"+Inf\"}")},
           {"no _sum", replaced("h_sum 1.25\n", "")},
           {"bad escape", replaced("x\\\"y", "x\\ty")},
           {"unquoted label value", replaced("\"x\\\"y\"", "x")},
           {"bad value", replaced("h_sum 1.25", "h_sum 1,25")},
           {"bad metric name", replaced("c_total{", "c-total{")},
           {"TYPE after samples", good + "# TYPE h_count gauge\n"},
           {"a second TYPE", replaced("# TYPE c_total counter\n", "# TYPE c_total counter\n# TYPE c_total counter\n")},
           {"unknown type", replaced("counter", "count")},
           {"groups interleaved", good + "h_bucket{le=\"1\",x=\"y\"} 1\n"},
           {"a sample twice", good + "c_total{a=\"x\\\"y\",b=\"\\\\\"} 3\n"},
           {"a negative counter", replaced("} 3 ", "} -3 ")},
           {"a reserved label name", replaced("{a=", "{__a=")},
           {"text after the value", replaced("h_sum 1.25", "h_sum 1.25 7 8")}}) {
    const std::string& what = what_bad.first;  // not a structured binding: clang 14 cannot capture one
    CAPTURE(what);
    CHECK_THROWS_AS(prometheus::parse(what_bad.second), std::runtime_error);
  }
}
