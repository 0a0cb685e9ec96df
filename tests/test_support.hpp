#pragma once
// Paths to test data. ../shared (beside the checkout) is optional: a user's fresh clone lacks it,
// so tests that need it are skipped (skips.hpp), and fail under CI=true.
#include <doctest/doctest.h>

#include "skips.hpp"

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iterator>
#include <optional>
#include <string>

namespace minimind::testing {

inline std::filesystem::path source_dir() { return MINIMIND_SOURCE_DIR; }
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "data"; }
inline std::filesystem::path bin_dir() { return MINIMIND_BIN_DIR; }

// The shared directory, or nullopt after recording that the calling test is skipped.
inline std::optional<std::filesystem::path> shared_dir(const std::string& sub = "") {
  std::filesystem::path dir = std::filesystem::path(MINIMIND_SHARED_DIR) / sub;
  if (std::filesystem::exists(dir)) return dir;
  skip_test(dir.string() + " not found (../shared is absent in a fresh clone)");
  return std::nullopt;
}

// The larger of a running worst difference and a new one; NaN once either is NaN. std::max(worst,
// NaN) keeps `worst`, which would let a NaN output pass every `<= tolerance` check.
inline double worse(double worst, double diff) {
  if (std::isnan(worst) || std::isnan(diff)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(worst, diff);
}

// The largest |a - b| over two Eigen arrays or matrices of one shape; NaN if any element is NaN.
template <class A, class B>
double max_abs_diff(const Eigen::DenseBase<A>& a, const Eigen::DenseBase<B>& b) {
  return static_cast<double>((a.derived().array() - b.derived().array()).abs().template maxCoeff<Eigen::PropagateNaN>());
}

// A fresh, empty scratch directory for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("minimind_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace minimind::testing

#include <array>
#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

namespace minimind::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a shell command line; stdout and stderr are captured separately.
inline CommandResult run_command(const std::string& command, const std::string& stdin_text = "") {
  const auto dir = std::filesystem::temp_directory_path();
  const auto tag = std::to_string(reinterpret_cast<uintptr_t>(&command)) + std::to_string(::getpid());
  const auto in_path = dir / ("minimind_cmd_in_" + tag), err_path = dir / ("minimind_cmd_err_" + tag);
  write_file(in_path, stdin_text);
  CommandResult result;
  FILE* pipe = ::popen((command + " < '" + in_path.string() + "' 2> '" + err_path.string() + "'").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_file(err_path);
  std::filesystem::remove(in_path);
  std::filesystem::remove(err_path);
  return result;
}

inline std::string program(const std::string& name) { return (bin_dir() / name).string(); }

}  // namespace minimind::testing
