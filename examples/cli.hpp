#pragma once
// What every example program shares: flag parsing with one-line errors, and the main() wrapper
// that turns any exception into `<program>: error: ...` on stderr with exit status 1.
#include <minimind/error.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cli {

// A command-line mistake; reported like any other error.
struct UsageError : minimind::Error {
  using minimind::Error::Error;
};

inline int64_t parse_int(std::string_view text, const std::string& what) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw UsageError(what + ": \"" + std::string(text) + "\" is not an integer");
  }
  return value;
}

inline double parse_double(std::string_view text, const std::string& what) {
  std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) throw UsageError(what + ": \"" + s + "\" is not a number");
  return value;
}

// The value a flag's text names in `choices`, or a UsageError listing them.
template <class T>
T choose(const std::string& flag, const std::string& text, const std::vector<std::pair<std::string, T>>& choices) {
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].first == text) return choices[i].second;
    names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
  }
  throw UsageError(flag + ": unknown value \"" + text + "\" (" + names + ")");
}

// "1,2,3" -> {1, 2, 3}.
inline std::vector<int32_t> parse_ids(std::string_view text, const std::string& what) {
  std::vector<int32_t> ids;
  if (text.empty()) throw UsageError(what + ": empty id list");
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int64_t id = parse_int(item, what);
    if (id < INT32_MIN || id > INT32_MAX) throw UsageError(what + ": id " + std::to_string(id) + " is out of range");
    ids.push_back(static_cast<int32_t>(id));
    start = comma + 1;
  }
  return ids;
}

// Flags in the GNU style: --name VALUE, --name=VALUE, and switches without a value.
class Args {
 public:
  struct Flag {
    std::string name;
    std::string help;
    bool takes_value = true;
    bool repeatable = false;
  };

  Args(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  Args& value(const std::string& name, const std::string& help) {
    flags_.push_back({name, help, true});
    return *this;
  }
  Args& toggle(const std::string& name, const std::string& help) {
    flags_.push_back({name, help, false});
    return *this;
  }
  // A flag that may be given several times; occurrences() keeps every value in order.
  Args& repeatable(const std::string& name, const std::string& help) {
    flags_.push_back({name, help, true, true});
    return *this;
  }
  // An operand without a leading "--" (e.g. a file); the program says how many it needs.
  Args& operand(const std::string& name, const std::string& help) {
    operands_.push_back({name, help, true});
    return *this;
  }
  const std::vector<std::string>& operands() const { return operand_values_; }

  // Returns false when --help was printed.
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        print_help();
        return false;
      }
      std::optional<std::string> inline_value;
      if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
      if (!operands_.empty() && (arg.empty() || arg[0] != '-' || arg == "-")) {
        operand_values_.push_back(arg);
        continue;
      }
      const Flag* flag = find(arg);
      if (flag == nullptr) throw UsageError("unknown flag " + arg + " (see --help)");
      if (!flag->takes_value) {
        if (inline_value) throw UsageError(arg + " takes no value");
        values_[flag->name] = "";
        continue;
      }
      if (inline_value) {
        values_[flag->name] = *inline_value;
      } else {
        if (i + 1 >= argc) throw UsageError(arg + " needs a value");
        values_[flag->name] = argv[++i];
      }
      if (flag->repeatable) occurrences_.emplace_back(flag->name, values_[flag->name]);
    }
    return true;
  }

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  // Every (flag, value) of the repeatable flags `names`, in command-line order.
  std::vector<std::pair<std::string, std::string>> occurrences(const std::vector<std::string>& names) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& o : occurrences_) {
      if (std::find(names.begin(), names.end(), o.first) != names.end()) out.push_back(o);
    }
    return out;
  }
  std::string get_or(const std::string& name, const std::string& fallback) const { return get(name).value_or(fallback); }
  int64_t int_or(const std::string& name, int64_t fallback) const {
    auto v = get(name);
    return v ? parse_int(*v, name) : fallback;
  }
  std::optional<double> number(const std::string& name) const {
    auto v = get(name);
    return v ? std::optional<double>(parse_double(*v, name)) : std::nullopt;
  }

  void print_help() const {
    std::string names;
    for (const auto& o : operands_) names += " " + o.name;
    std::printf("%s: %s\n\nUsage: %s%s [flags]\n\n", program_.c_str(), summary_.c_str(), program_.c_str(), names.c_str());
    for (const auto& o : operands_) std::printf("  %-26s %s\n", o.name.c_str(), o.help.c_str());
    for (const auto& f : flags_) {
      std::string left = f.name + (f.takes_value ? " VALUE" : "");
      std::printf("  %-26s %s\n", left.c_str(), f.help.c_str());
    }
    std::printf("  %-26s %s\n", "--help", "print this help and exit");
  }

 private:
  const Flag* find(const std::string& name) const {
    for (const auto& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }
  std::string program_, summary_;
  std::vector<Flag> flags_, operands_;
  std::vector<std::string> operand_values_;
  std::map<std::string, std::string> values_;
  std::vector<std::pair<std::string, std::string>> occurrences_;
};

// Runs body; any exception becomes one line on stderr and exit status 1.
inline int run(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n' || c == '\r') c = ' ';  // one line, whatever the message holds
    std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
    return 1;
  }
}

}  // namespace cli

// ---- Loading a checkpoint the same way in every program ----
#include <minimind/instances.hpp>  // the model is compiled once for all programs (model_instances.cpp)

#include <filesystem>

namespace cli {

// The --model flag every program shares; defaults to the demo model shipped in examples/models.
inline Args& model_flag(Args& args) {
  return args.value("--model", "checkpoint directory, or .safetensors/.pth/.gguf file (default: the demo model, " MINIMIND_DEMO_MODEL_DIR ")")
      .value("--dtype", "weight format held in memory: f32, bf16, q8 or q4 (default f32; a GGUF file's quantized matrices are held as stored unless --dtype is given)")
      .value("--threads", "threads per forward pass (default: one per core)");
}
inline std::filesystem::path model_dir(const Args& args) { return args.get_or("--model", MINIMIND_DEMO_MODEL_DIR); }

// --lora PATH and --lora-scaled PATH:SCALE, as llama.cpp spells them: LoRA adapters (upstream
// MiniMind .pth, or a PEFT directory) merged into the weights at load unless a program runs them
// per sequence. Their order on the command line is kept.
inline Args& lora_flags(Args& args) {
  return args.repeatable("--lora", "LoRA adapter applied with scale 1: MiniMind .pth or PEFT directory (repeatable)")
      .repeatable("--lora-scaled", "LoRA adapter with a scale, PATH:SCALE, e.g. lora_medical_512.pth:0.5 (repeatable)");
}
inline std::vector<minimind::LoraUse> lora_adapters(const Args& args) {
  std::vector<minimind::LoraUse> adapters;
  for (const auto& [flag, value] : args.occurrences({"--lora", "--lora-scaled"})) {
    std::string path = value;
    float scale = 1;
    if (flag == "--lora-scaled") {
      const size_t colon = value.rfind(':');
      if (colon == std::string::npos || colon == 0) throw UsageError("--lora-scaled: \"" + value + "\" is not PATH:SCALE");
      const double s = parse_double(std::string_view(value).substr(colon + 1), "--lora-scaled scale");
      if (!std::isfinite(s)) throw UsageError("--lora-scaled: scale \"" + value.substr(colon + 1) + "\" is not a finite number");
      path = value.substr(0, colon), scale = static_cast<float>(s);
    }
    adapters.push_back({std::make_shared<const minimind::LoraAdapter>(minimind::LoraAdapter::load(path)), scale});
  }
  return adapters;
}
// One line about an adapter: its format, rank, the modules it changes and its parameters.
inline std::string describe(const minimind::LoraUse& use) {
  const minimind::LoraAdapter& a = *use.adapter;
  std::vector<std::string> kinds;  // the distinct matrix names, experts marked
  for (const auto& m : a.modules()) {
    const size_t dot = m.name.rfind('.');
    std::string kind = m.name.substr(dot + 1);
    if (m.site.ffn == minimind::LoraSite::Ffn::Expert) kind = "experts." + kind;
    if (m.site.ffn == minimind::LoraSite::Ffn::SharedExpert) kind = "shared_experts." + kind;
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  std::string list;
  for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", static_cast<double>(use.scale));
  return a.path().string() + ": " + minimind::lora_format_name(a.format()) + ", rank " + std::to_string(a.rank()) + ", " +
         std::to_string(a.modules().size()) + " modules (" + list + "), " + std::to_string(a.num_parameters()) +
         " parameters, scale " + scale;
}

inline minimind::LoadOptions load_options(const Args& args) {
  minimind::LoadOptions options;
  options.format = minimind::parse_format(args.get_or("--dtype", "f32"));
  options.quantized_as_stored = !args.has("--dtype") || options.format == minimind::WeightFormat::Ggml;
  const int64_t threads = args.int_or("--threads", 0);
  constexpr int64_t kMax = minimind::MiniMindForCausalLM<float>::kMaxThreads;
  if (args.has("--threads") && (threads < 1 || threads > kMax)) {
    throw UsageError("--threads must be in [1, " + std::to_string(kMax) + "]");
  }
  options.threads = static_cast<int>(threads);
  options.adapters = lora_adapters(args);
  return options;
}
// The checkpoint named by --model, held as --dtype, run on --threads.
inline minimind::Pretrained<float> load_pretrained(const Args& args) { return minimind::load_pretrained<float>(model_dir(args), load_options(args)); }

// The sampling flags of the generating programs, and how they override the checkpoint's defaults.
inline Args& sampling_flags(Args& args) {
  return args.value("--max-new-tokens", "how many tokens to generate at most (default: generation_config.json, else 512)")
      .value("--temperature", "sampling temperature; 0 = greedy (default: generation_config.json, else 0.85)")
      .value("--top-k", "keep the K most likely tokens; 0 = off")
      .value("--top-p", "keep the smallest set of tokens with probability mass >= P, in (0, 1]")
      .value("--min-p", "drop tokens less likely than P times the best one")
      .value("--repetition-penalty", "penalise tokens already seen (upstream's rule); 1 = off")
      .value("--seed", "random seed (default 42)");
}
inline minimind::GenerationConfig apply_sampling_flags(const Args& args, minimind::GenerationConfig config) {
  config.max_new_tokens = args.int_or("--max-new-tokens", config.max_new_tokens);
  if (auto t = args.number("--temperature")) config.sampling.temperature = static_cast<float>(*t);
  config.sampling.top_k = args.int_or("--top-k", config.sampling.top_k);
  if (auto p = args.number("--top-p")) config.sampling.top_p = static_cast<float>(*p);
  if (auto p = args.number("--min-p")) config.sampling.min_p = static_cast<float>(*p);
  if (auto r = args.number("--repetition-penalty")) config.sampling.repetition_penalty = static_cast<float>(*r);
  const int64_t seed = args.int_or("--seed", static_cast<int64_t>(config.sampling.seed));
  if (seed < 0) throw UsageError("--seed must not be negative");
  config.sampling.seed = static_cast<uint64_t>(seed);
  config.validate();
  return config;
}

// A chat reply printed as it streams, its reasoning apart from the answer: after a "thinking: "
// label (dimmed on a terminal), then a blank line before the answer; or left out (--hide-thinking).
class ReplyPrinter {
 public:
  ReplyPrinter(minimind::ChatReplyOptions options, bool show_thinking, bool terminal)
      : parser_(std::move(options)), show_thinking_(show_thinking), terminal_(terminal) {}

  void push(std::string_view text) { print(parser_.push(text)); }
  void finish() {
    print(parser_.finish());
    end_thinking("");  // a reply cut off while thinking
  }

 private:
  void print(const std::vector<minimind::ChatReplyDelta>& deltas) {
    for (const auto& delta : deltas) {
      if (delta.kind == minimind::ChatReplyDelta::Kind::reasoning) {
        if (!show_thinking_) continue;
        if (!thinking_) std::fputs(terminal_ ? "\x1b[2mthinking: " : "thinking: ", stdout);
        thinking_ = true;
      } else {
        end_thinking("\n\n");
      }
      if (delta.kind == minimind::ChatReplyDelta::Kind::tool_call) {
        // The call as the model asked for it; its arguments are a JSON string.
        std::printf("%stool call: %s(%s)", delta.index > 0 ? "\n" : "", delta.call.name.c_str(), delta.call.arguments.get<std::string>().c_str());
      }
      std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
    }
    std::fflush(stdout);
  }
  void end_thinking(const char* separator) {
    if (!std::exchange(thinking_, false)) return;
    if (terminal_) std::fputs("\x1b[0m", stdout);
    std::fputs(separator, stdout);
  }

  minimind::ChatReplyParser parser_;
  bool show_thinking_, terminal_;
  bool thinking_ = false;  // reasoning is being printed
};

}  // namespace cli
