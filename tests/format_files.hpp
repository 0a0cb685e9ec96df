#pragma once
// Shared by the .pth / GGUF / checkpoint tests: the committed files of tests/data/formats/
// (tools/make_formats.py; manifest.json says what each one is), their safetensors references,
// and the comparison of two models' logits.
#include <doctest/doctest.h>
#include <minimind/detail/io/json.hpp>
#include <minimind/detail/io/safetensors.hpp>
#include <minimind/model.hpp>

#include "test_support.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace minimind::testing {

inline std::filesystem::path formats_dir() { return data_dir() / "formats"; }
inline const io::Json& formats_manifest() {
  static const io::Json manifest = io::read_json_file(formats_dir() / "manifest.json");
  return manifest;
}
inline std::filesystem::path repo_path(const io::Json& relative) { return source_dir() / relative.get<std::string>(); }

// The prompts of a golden case (expected.json), or the manifest's own.
inline std::vector<std::vector<int32_t>> reference_prompts(const io::Json& entry) {
  std::vector<std::vector<int32_t>> prompts;
  if (entry.contains("prompts")) {
    for (const auto& p : entry["prompts"]) prompts.push_back(p.get<std::vector<int32_t>>());
    return prompts;
  }
  const auto expected = io::read_json_file(repo_path(entry["reference"]) / "expected.json");
  for (const auto& p : expected.at("prompts")) prompts.push_back(p.at("ids").get<std::vector<int32_t>>());
  return prompts;
}

// A copy of `table` with its F32 tensors rounded to F16 (round to nearest even, as torch's
// .half() and numpy do): every tensor, or only the matrices a GGUF writer stores as F16 (not the
// norms and not the MoE router, which stay F32).
inline io::TensorTable rounded_to_f16(const io::TensorTable& table, bool matrices_only) {
  io::TensorTable out;
  for (const auto& [name, t] : table.tensors()) {
    io::TensorRef copy = t;
    const bool keep = t.dtype != io::Dtype::F32 ||
                      (matrices_only && (t.shape.size() != 2 || name.ends_with("mlp.gate.weight")));
    if (!keep) {
      auto buffer = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(t.numel()));
      const float* src = reinterpret_cast<const float*>(t.bytes.data());
      for (size_t i = 0; i < buffer->size(); ++i) buffer->at(i) = Eigen::numext::bit_cast<uint16_t>(Eigen::half(src[i]));
      copy.dtype = io::Dtype::F16;
      copy.bytes = {reinterpret_cast<std::byte*>(buffer->data()), buffer->size() * 2};
      copy.owner = buffer;
    }
    out.add(std::move(copy), "rounded-to-f16");
  }
  return out;
}

struct Comparison {
  double max_abs = 0;        // over every logit of every prompt
  bool top1_all = true;      // argmax equal at every position
  bool top1_last = true;     // argmax equal at each prompt's last position
};

inline Comparison compare_logits(const MiniMindForCausalLM<float>& reference, const MiniMindForCausalLM<float>& other,
                                 const std::vector<std::vector<int32_t>>& prompts) {
  Comparison c;
  for (const auto& ids : prompts) {
    const MatrixRM<float> a = reference.forward(ids), b = other.forward(ids);
    REQUIRE(a.rows() == b.rows());
    REQUIRE(a.cols() == b.cols());
    c.max_abs = worse(c.max_abs, max_abs_diff(a, b));
    for (Index i = 0; i < a.rows(); ++i) {
      Index ia = 0, ib = 0;
      a.row(i).maxCoeff(&ia);
      b.row(i).maxCoeff(&ib);
      if (ia != ib) {
        c.top1_all = false;
        if (i + 1 == a.rows()) c.top1_last = false;
      }
    }
  }
  return c;
}

// The manifest entry whose file is `file` (relative to tests/data/formats/).
inline const io::Json& manifest_entry(const std::string& kind, const std::string& file) {
  for (const auto& e : formats_manifest().at(kind)) {
    if (e.at("file").get<std::string>() == "tests/data/formats/" + file) return e;
  }
  FAIL("no manifest entry for " << file);
  static const io::Json none;
  return none;
}

// Every 1/8 of a file image: the prefixes a truncated download leaves.
inline std::vector<std::string> truncations(const std::string& image) {
  std::vector<std::string> out;
  for (size_t k = 0; k < 8; ++k) out.push_back(image.substr(0, image.size() * k / 8));
  return out;
}

// Tests run on one thread: these models are tiny, and a pool's wake-ups would dominate.
inline LoadOptions one_thread() {
  LoadOptions options;
  options.threads = 1;
  return options;
}

inline std::span<std::byte> as_bytes(std::string& s) { return {reinterpret_cast<std::byte*>(s.data()), s.size()}; }

}  // namespace minimind::testing
