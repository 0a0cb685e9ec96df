// minimind-bench: tokens per second of prefill (pp) and decode (tg), in the manner of llama-bench.
// pp<P>: one forward pass over a P-token prompt from an empty cache (logits of the last position
// only). tg<N>: N single-token forward passes from an empty cache, each with its logits, the next
// id drawn at random as llama-bench does. Each test runs once to warm up, then -r times; the table
// gives the min / median / max tokens per second over those runs.
// -b N: batched decode, like llama.cpp's batched-bench: N sequences, each first given a short
// prompt (untimed), then -n steps that each advance all N by one token in one forward pass
// (Batch); the rate is the aggregate, N x n tokens over the steps' time.
// --json-schema FILE (or "object") with --tokenizer FILE: the cost of the JSON constraint instead.
// -n decode steps at temperature 1, each a forward pass and a draw, the constraint's mask and
// accept timed apart from the forward pass; a document that ends starts the next from a fresh
// session. Gives the mean, 99th percentile and largest time of the mask per step (mask and
// accept), and the mean as a share of the forward pass's.
// --lora / --lora-scaled: LoRA adapters, merged into the weights at load; with --lora-unmerged the
// base model stays as loaded and every sequence runs them per step instead, and with --lora-spread
// (batched) sequence i runs only adapter i mod count, so one step mixes them.
#include <minimind/minimind.hpp>

#include "cli.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Model = minimind::MiniMindForCausalLM<float>;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  if (out.empty()) throw cli::UsageError("empty list \"" + text + "\"");
  return out;
}

// Resident memory of this process in MiB (VmRSS of /proc/self/status), or -1 where unknown.
double resident_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

struct Stats {
  double min = 0, median = 0, max = 0;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.back()};
}

// Deterministic token ids in [0, vocab).
struct Tokens {
  uint64_t state = 42;
  int32_t next(int64_t vocab) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
};

double run_pp(const Model& model, minimind::Session<float>& session, const std::vector<int32_t>& prompt) {
  session.reset();
  const auto start = Clock::now();
  model.forward(session, prompt, false);
  return static_cast<double>(prompt.size()) / seconds_since(start);
}

double run_tg(const Model& model, minimind::Session<float>& session, int64_t n, Tokens& tokens) {
  const int64_t vocab = model.config().vocab_size;
  session.reset();
  int32_t id = static_cast<int32_t>(model.config().bos_token_id);
  const auto start = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    model.forward(session, std::span<const int32_t>(&id, 1), false);
    id = tokens.next(vocab);
  }
  return static_cast<double>(n) / seconds_since(start);
}

// Untimed prompt of each batched sequence.
constexpr int64_t kBatchPromptLength = 16;

// Aggregate tokens per second of `n` steps that each advance every session by one token.
double run_batched_tg(const Model& model, std::vector<minimind::Session<float>>& sessions, int64_t n, Tokens& tokens) {
  const int64_t vocab = model.config().vocab_size;
  minimind::Batch<float> batch(model);
  std::vector<std::vector<int32_t>> prompts(sessions.size(), std::vector<int32_t>(kBatchPromptLength));
  for (size_t i = 0; i < sessions.size(); ++i) {
    sessions[i].reset();
    for (auto& id : prompts[i]) id = tokens.next(vocab);
    batch.add(sessions[i], prompts[i]);
  }
  batch.step();
  std::vector<int32_t> next(sessions.size());
  const auto start = Clock::now();
  for (int64_t step = 0; step < n; ++step) {
    for (size_t i = 0; i < sessions.size(); ++i) {
      next[i] = tokens.next(vocab);
      batch.add(sessions[i], std::span<const int32_t>(&next[i], 1));
    }
    batch.step();
  }
  return static_cast<double>(n) * static_cast<double>(sessions.size()) / seconds_since(start);
}

// The -b rows: aggregate decode tokens/s of each batch size (tokens per second over all sequences).
// Unmerged adapters: every sequence runs them all, or with `spread` sequence i runs adapter i mod count.
void bench_batches(const Model& model, const std::string& shape, minimind::WeightFormat format, int threads,
                   const std::vector<int64_t>& batch_sizes, int64_t n, int64_t reps, bool json, Tokens& tokens,
                   const std::vector<minimind::LoraUse>& unmerged, bool spread, const std::string& lora) {
  for (const int64_t size : batch_sizes) {
    std::vector<minimind::Session<float>> sessions;
    for (int64_t i = 0; i < size; ++i) {
      sessions.push_back(model.new_session(kBatchPromptLength + n));
      if (spread) sessions.back().set_adapters({unmerged[static_cast<size_t>(i) % unmerged.size()]});
      else sessions.back().set_adapters(unmerged);
    }
    std::vector<double> rates;
    for (int64_t r = 0; r <= reps; ++r) {  // run 0 warms up
      const double rate = run_batched_tg(model, sessions, n, tokens);
      if (r > 0) rates.push_back(rate);
    }
    const Stats s = stats(rates);
    const std::string name = "tg" + std::to_string(n);
    if (json) {
      const nlohmann::json row = {{"shape", shape},
                                  {"dtype", minimind::format_name(format)},
                                  {"threads", threads},
                                  {"batch", size},
                                  {"lora", lora},
                                  {"kernels", minimind::kernels::name()},
                                  {"test", name},
                                  {"prompt_tokens_each", kBatchPromptLength},
                                  {"tokens_per_s_min", s.min},
                                  {"tokens_per_s_median", s.median},
                                  {"tokens_per_s_max", s.max},
                                  {"repetitions", reps},
                                  {"resident_mib", resident_mib()}};
      std::printf("%s\n", row.dump().c_str());
    } else {
      std::printf("| %-15s | %-5s | %7d | %5lld | %6s | %10.2f | %10.2f | %10.2f |\n", shape.c_str(), minimind::format_name(format),
                  threads, static_cast<long long>(size), name.c_str(), s.min, s.median, s.max);
    }
    std::fflush(stdout);
  }
}

// The mask rows: the JSON constraint's cost per decode step beside the forward pass's.
void bench_json_mask(const Model& model, const std::shared_ptr<const minimind::JsonGrammar>& grammar, const std::string& shape,
                     minimind::WeightFormat format, int threads, int64_t n, int64_t reps, bool json) {
  constexpr int64_t kMaxTokens = 256;
  const std::vector<int32_t> eos = {2};
  auto session = model.new_session(kMaxTokens + 1);
  minimind::SamplingParams params;
  params.temperature = 1;
  minimind::Sampler sampler(params, model.config().vocab_size);
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  std::vector<double> mask_seconds, forward_seconds;
  int64_t documents = 0;
  for (int64_t r = 0; r <= reps; ++r) {  // run 0 warms up
    std::optional<minimind::JsonConstraint> constraint;
    int32_t id = 0;
    for (int64_t step = 0; step < n; ++step) {
      if (!constraint) {
        session.reset();
        constraint.emplace(grammar, kMaxTokens, eos);
        id = static_cast<int32_t>(model.config().bos_token_id);
      }
      const auto forward_start = Clock::now();
      const float* out = model.forward(session, std::span<const int32_t>(&id, 1), false).data();
      const double forward = seconds_since(forward_start);
      std::copy(out, out + logits.size(), logits.begin());
      const auto mask_start = Clock::now();
      constraint->apply(logits);
      const double masked = seconds_since(mask_start);
      id = sampler.sample(logits, {});
      const auto accept_start = Clock::now();
      constraint->accept(id);
      const double accepted = seconds_since(accept_start);
      if (r > 0) {
        mask_seconds.push_back(masked + accepted);
        forward_seconds.push_back(forward);
      }
      if (constraint->finished()) {
        constraint.reset();
        documents += r > 0;
      }
    }
  }
  double mask_total = 0, forward_total = 0;
  for (const double t : mask_seconds) mask_total += t;
  for (const double t : forward_seconds) forward_total += t;
  const double steps = static_cast<double>(mask_seconds.size());
  std::sort(mask_seconds.begin(), mask_seconds.end());
  const double p99 = mask_seconds[static_cast<size_t>(0.99 * (steps - 1))], worst = mask_seconds.back();
  const double share = mask_total / forward_total;
  if (json) {
    const nlohmann::json row = {{"shape", shape},        {"dtype", minimind::format_name(format)},
                                {"threads", threads},    {"kernels", minimind::kernels::name()},
                                {"test", "json" + std::to_string(n)}, {"steps", mask_seconds.size()},
                                {"documents", documents}, {"forward_ms_mean", forward_total / steps * 1e3},
                                {"mask_us_mean", mask_total / steps * 1e6}, {"mask_us_p99", p99 * 1e6}, {"mask_us_max", worst * 1e6},
                                {"mask_share_of_forward", share}};
    std::printf("%s\n", row.dump().c_str());
  } else {
    std::printf("| %-15s | %-5s | %7d | %8s | %9lld | %15.3f | %12.1f | %11.1f | %11.1f | %8.2f%% |\n", shape.c_str(),
                minimind::format_name(format), threads, ("json" + std::to_string(n)).c_str(), static_cast<long long>(documents),
                forward_total / steps * 1e3, mask_total / steps * 1e6, p99 * 1e6, worst * 1e6, share * 100);
  }
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  cli::Args args("minimind-bench", "tokens per second of prefill and decode, like llama-bench");
  args.value("--model", "checkpoint to load: directory, or .safetensors/.pth/.gguf file")
      .value("--shape", "random weights of a published shape instead: minimind2-small or minimind-3")
      .value("--dtype", "weight format(s) held in memory: f32, bf16, q8, q4, or a list such as f32,q4 (default f32)")
      .value("-p", "prompt length of the prefill test, 0 to skip (default 128)")
      .value("-n", "tokens of the decode test, 0 to skip (default 128)")
      .value("-t", "thread count(s), e.g. 1,2 (default: one per core)")
      .value("--threads", "same as -t")
      .value("-r", "repetitions of each test (default 5)")
      .value("-b", "batched decode instead: N sequences advanced together, aggregate tokens/s; a list such as 1,8,32")
      .value("--json-schema", "FILE, or \"object\": time the JSON constraint's mask per decode step instead (needs --tokenizer)")
      .value("--tokenizer", "tokenizer.json for --json-schema")
      .toggle("--json", "print one JSON object per row instead of the table");
  cli::lora_flags(args)
      .toggle("--lora-unmerged", "run the adapters per sequence over the unchanged base model instead of merging them")
      .toggle("--lora-spread", "with -b and --lora-unmerged: sequence i runs only adapter i mod the adapter count");
  if (!args.parse(argc, argv)) return 0;
  const std::vector<minimind::LoraUse> adapters = cli::lora_adapters(args);
  const bool unmerged = args.has("--lora-unmerged"), spread = args.has("--lora-spread");
  if (unmerged && adapters.empty()) throw cli::UsageError("--lora-unmerged needs --lora or --lora-scaled");
  if (spread && !(unmerged && args.has("-b"))) throw cli::UsageError("--lora-spread needs -b and --lora-unmerged");
  const std::string lora = adapters.empty() ? "none"
                           : !unmerged      ? "merged " + std::to_string(adapters.size())
                           : spread         ? "spread over " + std::to_string(adapters.size())
                                            : "unmerged " + std::to_string(adapters.size());

  if (args.has("--model") == args.has("--shape")) throw cli::UsageError("give exactly one of --model DIR or --shape NAME");
  const int64_t p = args.int_or("-p", 128), n = args.int_or("-n", 128), reps = args.int_or("-r", 5);
  if (p < 0 || n < 0) throw cli::UsageError("-p and -n must not be negative");
  if (reps < 1) throw cli::UsageError("-r must be at least 1");
  std::vector<int> thread_counts;
  const auto threads_text = args.get("-t") ? args.get("-t") : args.get("--threads");
  for (const auto& t : split(threads_text.value_or(std::to_string(minimind::kernels::ThreadPool::default_threads())))) {
    const int64_t v = cli::parse_int(t, "-t");
    if (v < 1 || v > Model::kMaxThreads) {
      throw cli::UsageError("-t: thread count " + t + " must be in [1, " + std::to_string(Model::kMaxThreads) + "]");
    }
    thread_counts.push_back(static_cast<int>(v));
  }
  std::vector<int64_t> batch_sizes;
  if (auto b = args.get("-b")) {
    for (const auto& text : split(*b)) {
      const int64_t v = cli::parse_int(text, "-b");
      if (v < 1 || v > 1024) throw cli::UsageError("-b: batch size " + text + " must be in [1, 1024]");
      batch_sizes.push_back(v);
    }
    if (n == 0) throw cli::UsageError("-b needs decode steps: -n must be at least 1");
  }
  std::shared_ptr<const minimind::JsonGrammar> grammar;
  if (auto schema = args.get("--json-schema")) {
    if (!args.has("--tokenizer")) throw cli::UsageError("--json-schema needs --tokenizer FILE");
    if (!batch_sizes.empty()) throw cli::UsageError("give at most one of -b and --json-schema");
    if (n == 0) throw cli::UsageError("--json-schema needs decode steps: -n must be at least 1");
    const auto tokenizer = minimind::Tokenizer::from_file(*args.get("--tokenizer"));
    if (*schema == "object") {
      grammar = minimind::JsonGrammar::any_object(tokenizer);
    } else {
      const minimind::io::Json schema_json = minimind::io::read_json_file(*schema);
      try {
        grammar = minimind::JsonGrammar::from_schema(schema_json, tokenizer);
      } catch (const minimind::Error& e) {
        throw minimind::Error(*schema + ": " + e.what());
      }
    }
  } else if (args.has("--tokenizer")) {
    throw cli::UsageError("--tokenizer is for --json-schema");
  }
  std::vector<minimind::WeightFormat> formats;
  for (const auto& f : split(args.get_or("--dtype", "f32"))) formats.push_back(minimind::parse_format(f));

  std::string shape;
  minimind::Config shape_config;
  if (auto s = args.get("--shape")) {
    shape = *s;
    shape_config = cli::choose<minimind::Config>("--shape", shape, {{"minimind2-small", minimind::Config::minimind2_small()},
                                                                    {"minimind-3", minimind::Config::minimind3()}});
  } else {
    shape = std::filesystem::path(*args.get("--model")).lexically_normal().filename().string();
    if (shape.empty()) shape = *args.get("--model");
  }
  const bool json = args.has("--json");

  if (!json && grammar) {
    std::printf("| %-15s | %-5s | %7s | %8s | %9s | %15s | %12s | %11s | %11s | %9s |\n", "shape", "dtype", "threads", "test", "documents",
                "forward ms/step", "mask us mean", "mask us p99", "mask us max", "mask/fwd");
    std::printf("| %.15s | %.5s | %.7s | %.8s | %.9s | %.15s | %.12s | %.11s | %.11s | %.9s |\n", "----------------", "------", "--------",
                "---------", "----------", "----------------", "-------------", "------------", "------------", "----------");
  } else if (!json && !batch_sizes.empty()) {
    std::printf("| %-15s | %-5s | %7s | %5s | %6s | %10s | %10s | %10s |\n", "shape", "dtype", "threads", "batch", "test",
                "t/s min", "t/s median", "t/s max");
    std::printf("| %.15s | %.5s | %.7s | %.5s | %.6s | %.10s | %.10s | %.10s |\n", "----------------", "------", "--------",
                "------", "-------", "-----------", "-----------", "-----------");
  } else if (!json) {
    std::printf("| %-15s | %-5s | %9s | %10s | %7s | %6s | %10s | %10s | %10s |\n", "shape", "dtype", "size MiB", "params",
                "threads", "test", "t/s min", "t/s median", "t/s max");
    std::printf("| %.15s | %.5s | %.9s | %.10s | %.7s | %.6s | %.10s | %.10s | %.10s |\n", "----------------", "------",
                "----------", "-----------", "--------", "-------", "-----------", "-----------", "-----------");
  }
  std::vector<std::string> notes;
  for (const auto format : formats) {
    minimind::LoadOptions options{format, thread_counts.front()};
    options.quantized_as_stored = !args.has("--dtype") || options.format == minimind::WeightFormat::Ggml;
    if (!unmerged) options.adapters = adapters;
    const double rss_before = resident_mib();
    const auto load_start = Clock::now();
    Model model = args.has("--model") ? Model::from_pretrained(*args.get("--model"), options)
                                      : Model::random(shape_config, 1, options);
    const double load_ms = seconds_since(load_start) * 1e3;
    const double rss_loaded = resident_mib();
    // What the matrices are held in: a GGUF file's quantized ones as stored (ggml) without --dtype.
    const minimind::WeightFormat held =
        model.model.layers.front().self_attn.q_proj.format() == minimind::WeightFormat::Ggml ? minimind::WeightFormat::Ggml : format;
    const int64_t vocab = model.config().vocab_size;
    Tokens tokens;
    std::vector<int32_t> prompt(static_cast<size_t>(p));
    for (auto& id : prompt) id = tokens.next(vocab);
    auto session = model.new_session(std::max<int64_t>({p, n, 1}));
    if (unmerged) session.set_adapters(adapters);

    for (const int threads : thread_counts) {
      model.set_threads(threads);
      if (grammar) {
        bench_json_mask(model, grammar, shape, format, threads, n, reps, json);
        continue;
      }
      if (!batch_sizes.empty()) {
        bench_batches(model, shape, held, threads, batch_sizes, n, reps, json, tokens,
                      unmerged ? adapters : std::vector<minimind::LoraUse>{}, spread, lora);
        continue;
      }
      for (const auto& [test, count] : {std::pair<std::string, int64_t>{"pp", p}, {"tg", n}}) {
        if (count == 0) continue;
        std::vector<double> rates;
        for (int64_t r = 0; r <= reps; ++r) {  // run 0 warms up
          const double rate = test == "pp" ? run_pp(model, session, prompt) : run_tg(model, session, count, tokens);
          if (r > 0) rates.push_back(rate);
        }
        const Stats s = stats(rates);
        const std::string name = test + std::to_string(count);
        if (json) {
          nlohmann::json row = {{"shape", shape},
                                {"dtype", minimind::format_name(held)},
                                {"threads", threads},
                                {"lora", lora},
                                {"kernels", minimind::kernels::name()},
                                {"test", name},
                                {"tokens_per_s_min", s.min},
                                {"tokens_per_s_median", s.median},
                                {"tokens_per_s_max", s.max},
                                {"repetitions", reps},
                                {"weight_bytes", model.weight_bytes()},
                                {"parameters", model.num_parameters()},
                                {"load_ms", load_ms},
                                {"resident_mib_after_load", rss_loaded},
                                {"resident_mib", resident_mib()}};
          std::printf("%s\n", row.dump().c_str());
        } else {
          std::printf("| %-15s | %-5s | %9.2f | %10zu | %7d | %6s | %10.2f | %10.2f | %10.2f |\n", shape.c_str(),
                      minimind::format_name(held), static_cast<double>(model.weight_bytes()) / (1024.0 * 1024.0),
                      model.num_parameters(), threads, name.c_str(), s.min, s.median, s.max);
        }
        std::fflush(stdout);
      }
    }
    char note[256];
    std::snprintf(note, sizeof note, "%s %s: load %.1f ms, resident %.1f MiB after load (%.1f before), %.1f MiB after the runs",
                  shape.c_str(), minimind::format_name(held), load_ms, rss_loaded, rss_before, resident_mib());
    notes.push_back(note);
  }
  if (!json) {
    std::printf("\n");
    for (const auto& note : notes) std::printf("%s\n", note.c_str());
    if (!adapters.empty()) std::printf("lora: %s\n", lora.c_str());
    for (const auto& use : adapters) std::printf("  %s\n", cli::describe(use).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-bench", [&] { return run(argc, argv); });
}
