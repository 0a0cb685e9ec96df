// minimind-tokenize: a checkpoint's tokenizer from the command line. Encodes text to ids, decodes
// ids to text, checks whole corpora in one process (--jsonl) and measures encode speed (--bench).
#include <minimind/tokenizer.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

constexpr const char* kUsage = R"(usage: minimind-tokenize (--tokenizer FILE | --model DIR) [MODE]

Encodes UTF-8 text with a Hugging Face tokenizer.json (byte-level BPE) and prints the ids
comma-separated, e.g. 1,320,275.

  --tokenizer FILE   a tokenizer.json; no BOS/EOS are added
  --model DIR        a checkpoint directory: tokenizer.json, and tokenizer_config.json when
                     present (its add_bos_token / add_eos_token apply)
modes (default: encode standard input, byte for byte, trailing newline included):
  --text TEXT        encode TEXT
  --jsonl FILE       each line of FILE ("-": standard input) is a JSON object with "text";
                     writes one line {"ids": [...]} per input line, in order
  --decode IDS       print the text of comma-separated ids, as it is (no newline added)
  --bench FILE       encode FILE on one thread and report MB/s (a cold and a warm pass)
  --skip-special-tokens  with --decode: leave out special added tokens
  --help             this text

Errors go to standard error as one line, with a non-zero exit status.
)";

// A command-line mistake: reported like any error, with exit status 2.
struct UsageError : minimind::Error {
  using minimind::Error::Error;
};

struct Options {
  std::optional<std::string> tokenizer_file;
  std::optional<std::string> model_dir;
  std::optional<std::string> text;
  std::optional<std::string> jsonl;
  std::optional<std::string> decode;
  std::optional<std::string> bench;
  bool skip_special_tokens = false;
  bool help = false;
};

Options parse_options(int argc, char** argv) {
  Options options;
  const std::vector<std::pair<std::string_view, std::optional<std::string>*>> valued = {
      {"--tokenizer", &options.tokenizer_file}, {"--model", &options.model_dir},
      {"--text", &options.text},                {"--jsonl", &options.jsonl},
      {"--decode", &options.decode},            {"--bench", &options.bench}};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      continue;
    }
    if (arg == "--skip-special-tokens") {
      options.skip_special_tokens = true;
      continue;
    }
    bool known = false;
    for (const auto& [name, target] : valued) {
      std::optional<std::string> value;
      if (arg == name) {
        if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
        value = argv[++i];
      } else if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=') {
        value = std::string(arg.substr(name.size() + 1));
      } else {
        continue;
      }
      if (*target) throw UsageError(std::string(name) + " is given twice");
      *target = std::move(value);
      known = true;
      break;
    }
    if (!known) throw UsageError("unknown argument '" + std::string(arg) + "' (see --help)");
  }
  if (options.help) return options;
  if (options.tokenizer_file.has_value() == options.model_dir.has_value()) {
    throw UsageError("give exactly one of --tokenizer FILE or --model DIR");
  }
  const int modes = options.text.has_value() + options.jsonl.has_value() +
                    options.decode.has_value() + options.bench.has_value();
  if (modes > 1) throw UsageError("give at most one of --text, --jsonl, --decode, --bench");
  if (options.skip_special_tokens && !options.decode) {
    throw UsageError("--skip-special-tokens goes with --decode");
  }
  return options;
}

// "1,2, 3" -> {1, 2, 3}.
std::vector<std::int32_t> parse_ids(std::string_view list) {
  std::vector<std::int32_t> ids;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    std::string_view item = list.substr(start, comma - start);
    while (item.starts_with(' ')) item.remove_prefix(1);
    while (item.ends_with(' ')) item.remove_suffix(1);
    std::int32_t id = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) {
      throw UsageError("--decode: '" + std::string(item) + "' is not a token id");
    }
    ids.push_back(id);
    if (comma == list.size()) return ids;
    start = comma + 1;
  }
}

std::string read_all(std::istream& in) {
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw minimind::Error(path + ": cannot open file");
  return read_all(in);
}

std::string join_ids(const std::vector<std::int32_t>& ids, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += separator;
    out += std::to_string(ids[i]);
  }
  return out;
}

void write_stdout(const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

void encode_jsonl(const minimind::Tokenizer& tokenizer, const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw minimind::Error(path + ": cannot open file");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string out;
  std::size_t line_number = 0;
  // The lines before a bad one are still written, so the output shows how far it got.
  const auto fail = [&](const std::string& problem) {
    write_stdout(out);
    throw minimind::Error(path + ":" + std::to_string(line_number) + ": " + problem);
  };
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    nlohmann::json entry;
    try {
      entry = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for 1e999
      fail(std::string("not valid JSON (") + error.what() + ")");
    }
    if (!entry.is_object() || !entry.contains("text") || !entry["text"].is_string()) {
      fail("expected a JSON object with a string \"text\"");
    }
    try {
      out += "{\"ids\": [" + join_ids(tokenizer.encode(entry["text"].get<std::string>()), ", ") + "]}\n";
    } catch (const minimind::Error& error) {
      fail(error.what());
    }
    if (out.size() > (1 << 16)) {
      write_stdout(out);
      out.clear();
    }
  }
  write_stdout(out);
}

// Encode speed on one thread: the first pass starts with an empty word cache, the second reuses it.
void bench(const minimind::Tokenizer& tokenizer, const std::string& path) {
  const std::string text = read_file(path);
  for (const char* pass : {"cold", "warm"}) {
    const auto wall_start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    const std::size_t tokens = tokenizer.encode(text).size();
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    const double megabytes = static_cast<double>(text.size()) / 1e6;
    std::printf("%s: %zu bytes -> %zu tokens in %.3f s CPU (%.3f s wall): %.1f MB/s CPU, %.1f MB/s wall\n",
                pass, text.size(), tokens, cpu_seconds, wall_seconds, megabytes / cpu_seconds,
                megabytes / wall_seconds);
  }
}

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const minimind::Tokenizer tokenizer = options.model_dir
                                            ? minimind::Tokenizer::from_pretrained(*options.model_dir)
                                            : minimind::Tokenizer::from_file(*options.tokenizer_file);
  if (options.decode) {
    write_stdout(tokenizer.decode(parse_ids(*options.decode), options.skip_special_tokens));
  } else if (options.jsonl) {
    encode_jsonl(tokenizer, *options.jsonl);
  } else if (options.bench) {
    bench(tokenizer, *options.bench);
  } else {
    const std::string text = options.text ? *options.text : read_all(std::cin);
    write_stdout(join_ids(tokenizer.encode(text), ",") + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "minimind-tokenize: error: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "minimind-tokenize: error: %s\n", error.what());
    return 1;
  }
}
