// The minimind-tokenize program (examples/tokenize.cpp), run as a user runs it.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace {

struct Run {
  int status = -1;
  std::string out;
  std::string err;
};

std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The program, or nullopt after recording that the calling test is skipped.
std::optional<std::filesystem::path> program() {
  const std::filesystem::path path = minimind::testing::bin_dir() / "minimind-tokenize";
  if (std::filesystem::exists(path)) return path;
  minimind::testing::skip_test(path.string() + " not built (MINIMIND_BUILD_EXAMPLES=OFF?)");
  return std::nullopt;
}

// Runs the program with `arguments` (already shell-quoted), standard input from `stdin_file`.
Run run(const std::filesystem::path& binary, const std::string& arguments,
        const std::string& stdin_file = "/dev/null") {
  const std::filesystem::path err_file = minimind::testing::scratch_dir("tokenize_cli_err") / "err";
  const std::string command = shell_quoted(binary.string()) + " " + arguments + " <" +
                              shell_quoted(stdin_file) + " 2>" + shell_quoted(err_file.string());
  Run result;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = minimind::testing::read_file(err_file);
  return result;
}

std::optional<std::filesystem::path> model_dir(const char* name) {
  const auto models = minimind::testing::shared_dir("minimind");
  if (!models) return std::nullopt;
  return *models / name;
}

}  // namespace

TEST_CASE("minimind-tokenize --help, and usage errors as one line with a non-zero status") {
  const auto binary = program();
  if (!binary) return;
  const Run help = run(*binary, "--help");
  CHECK(help.status == 0);
  CHECK(help.out.starts_with("usage: minimind-tokenize"));
  const Run neither = run(*binary, "--text hi");
  CHECK(neither.status == 2);
  CHECK(neither.out.empty());
  CHECK(neither.err ==
        "minimind-tokenize: error: give exactly one of --tokenizer FILE or --model DIR\n");
  const Run unknown = run(*binary, "--tokenizer x.json --frobnicate");
  CHECK(unknown.status == 2);
  CHECK(unknown.err == "minimind-tokenize: error: unknown argument '--frobnicate' (see --help)\n");
  const Run missing = run(*binary, "--tokenizer /nonexistent/tokenizer.json --text hi");
  CHECK(missing.status == 1);
  CHECK(missing.err ==
        "minimind-tokenize: error: /nonexistent/tokenizer.json: cannot open file\n");
}

TEST_CASE("minimind-tokenize encodes --text and standard input, and decodes --decode") {
  const auto binary = program();
  const auto model = model_dir("minimind2");
  if (!binary || !model) return;
  const std::string model_flag = "--model " + shell_quoted(model->string());
  // The README's example line of the golden data.
  const Run text = run(*binary, model_flag + " --text " + shell_quoted("<|im_start|>user\n你好<|im_end|>"));
  CHECK(text.status == 0);
  CHECK(text.out == "1,320,275,201,5134,2\n");
  CHECK(text.err.empty());

  const std::filesystem::path input = minimind::testing::scratch_dir("tokenize_cli_in") / "in.txt";
  minimind::testing::write_file(input, "<|im_start|>user\n你好<|im_end|>");
  const Run piped = run(*binary, "--tokenizer " + shell_quoted((*model / "tokenizer.json").string()),
                        input.string());
  CHECK(piped.out == text.out);

  const Run decoded = run(*binary, model_flag + " --decode 1,320,275,201,5134,2");
  CHECK(decoded.status == 0);
  CHECK(decoded.out == "<|im_start|>user\n你好<|im_end|>");
  const Run skipped = run(*binary, model_flag + " --decode '1, 320,275' --skip-special-tokens");
  CHECK(skipped.out == "user");

  const Run bad_id = run(*binary, model_flag + " --decode 1,99999");
  CHECK(bad_id.status == 1);
  CHECK(bad_id.out.empty());
  CHECK(bad_id.err ==
        "minimind-tokenize: error: token id 99999 is out of range (vocab size 6400)\n");
  const Run not_id = run(*binary, model_flag + " --decode 1,x");
  CHECK(not_id.status == 2);
  CHECK(not_id.err == "minimind-tokenize: error: --decode: 'x' is not a token id\n");
}

TEST_CASE("minimind-tokenize --jsonl gives the golden ids for every line, in one process") {
  const auto binary = program();
  const auto golden = minimind::testing::shared_dir("golden/tokenizer");
  if (!binary || !golden) return;
  for (const char* name : {"minimind2", "minimind-3"}) {
    CAPTURE(std::string(name));
    const auto model = model_dir(name);
    if (!model) return;
    const std::filesystem::path lines = *golden / (std::string(name) + ".jsonl");
    const Run result = run(*binary, "--model " + shell_quoted(model->string()) + " --jsonl " +
                                        shell_quoted(lines.string()));
    CHECK(result.status == 0);
    std::ifstream expected_in(lines);
    std::istringstream got_in(result.out);
    std::size_t compared = 0, matching = 0;
    for (std::string expected, got; std::getline(expected_in, expected);) {
      ++compared;
      if (!std::getline(got_in, got)) break;
      matching += nlohmann::json::parse(got) == nlohmann::json{{"ids", nlohmann::json::parse(expected)["ids"]}};
    }
    CHECK(compared == 473);
    CHECK(matching == compared);
  }
}

TEST_CASE("minimind-tokenize --jsonl names the line it cannot read") {
  const auto binary = program();
  const auto model = model_dir("minimind2");
  if (!binary || !model) return;
  const std::filesystem::path input = minimind::testing::scratch_dir("tokenize_cli_jsonl") / "in.jsonl";
  minimind::testing::write_file(
      input, "{\"text\": \"<|im_start|>user\\n你好<|im_end|>\"}\n{\"txt\": 1}\n{\"text\": \"x\"}\n");
  const Run result = run(*binary, "--model " + shell_quoted(model->string()) + " --jsonl -",
                         input.string());
  CHECK(result.status == 1);
  CHECK(result.out == "{\"ids\": [1, 320, 275, 201, 5134, 2]}\n");  // the lines before it
  CHECK(result.err == "minimind-tokenize: error: -:2: expected a JSON object with a string \"text\"\n");
}
