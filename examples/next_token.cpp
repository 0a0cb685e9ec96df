// minimind-next: the model's guess for the next token, made visible. Runs the prompt through the
// network once and prints the K tokens whose embedding rows score highest against the final
// hidden state (logits = h E^T), with their probabilities.
#include <minimind/minimind.hpp>

#include "cli.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

namespace {

struct Candidate {
  int32_t id;
  float logit;
  double probability;
};

std::vector<Candidate> top_candidates(const minimind::RowVector<float>& logits, int64_t k) {
  const double max_logit = logits.maxCoeff();
  double total = 0;
  for (Eigen::Index j = 0; j < logits.size(); ++j) total += std::exp(static_cast<double>(logits[j]) - max_logit);
  std::vector<int32_t> order(static_cast<size_t>(logits.size()));
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, logits.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<Candidate> out;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = order[static_cast<size_t>(i)];
    out.push_back({id, logits[id], std::exp(static_cast<double>(logits[id]) - max_logit) / total});
  }
  return out;
}

int run(int argc, char** argv) {
  cli::Args args("minimind-next", "print the most likely next tokens after a prompt");
  cli::model_flag(args)
      .value("--prompt", "prompt text, encoded with the checkpoint's tokenizer")
      .value("--ids", "prompt as comma-separated token ids, e.g. 1,2,3")
      .value("--top", "how many candidates to print (default 5)")
      .value("--logits-out", "write the last position's logits as raw little-endian float32")
      .toggle("--json", "print one JSON object instead of a table")
      .toggle("--info", "print the model's architecture, dimensions and parameter count");
  if (!args.parse(argc, argv)) return 0;

  const int64_t top = args.int_or("--top", 5);
  if (top < 1) throw cli::UsageError("--top must be at least 1");
  if (args.has("--ids") && args.has("--prompt")) throw cli::UsageError("give --prompt or --ids, not both");
  const auto checkpoint = cli::load_checkpoint(args);
  const auto& model = checkpoint.model;
  const auto& config = model.config();

  if (args.has("--info")) {
    std::printf("architecture        %s\n", config.architecture.c_str());
    std::printf("generation          %s\n", config.generation == minimind::Generation::MiniMind2 ? "MiniMind2" : "minimind-3");
    std::printf("hidden_size         %lld\n", static_cast<long long>(config.hidden_size));
    std::printf("num_hidden_layers   %lld\n", static_cast<long long>(config.num_hidden_layers));
    std::printf("attention heads     %lld (kv %lld, head_dim %lld)\n", static_cast<long long>(config.num_attention_heads),
                static_cast<long long>(config.num_key_value_heads), static_cast<long long>(config.head_dim));
    std::printf("intermediate_size   %lld\n", static_cast<long long>(config.intermediate_size));
    if (config.num_experts > 0) {
      std::printf("experts             %lld (top %lld, shared %lld, width %lld)\n", static_cast<long long>(config.num_experts),
                  static_cast<long long>(config.num_experts_per_tok), static_cast<long long>(config.n_shared_experts),
                  static_cast<long long>(config.moe_intermediate_size));
    }
    std::printf("vocab_size          %lld\n", static_cast<long long>(config.vocab_size));
    std::printf("embeddings          %s\n", model.is_tied() ? "tied (one matrix for embed_tokens and lm_head)" : "untied");
    std::printf("parameters          %zu\n", model.num_parameters());
    std::printf("weight bytes        %zu\n", model.weight_bytes());
    std::printf("kernels: %s\n", minimind::kernels::name());
    if (!args.has("--ids") && !args.has("--prompt")) return 0;
  }

  std::vector<int32_t> ids;
  if (auto text = args.get("--prompt")) ids = checkpoint.require_tokenizer().encode(*text);
  else if (auto ids_text = args.get("--ids")) ids = cli::parse_ids(*ids_text, "--ids");
  else throw cli::UsageError("give the prompt with --prompt TEXT or --ids 1,2,3 (see --help)");
  if (ids.empty()) throw cli::UsageError("the prompt encodes to no tokens");
  if (static_cast<int64_t>(ids.size()) > config.max_position_embeddings) {
    throw cli::UsageError("the prompt has " + std::to_string(ids.size()) + " tokens, more than the context of " +
                          std::to_string(config.max_position_embeddings));
  }

  auto session = model.new_session(static_cast<minimind::Index>(ids.size()));
  const minimind::RowVector<float> logits = model.forward(session, ids, false).row(0);

  if (auto path = args.get("--logits-out")) {
    std::ofstream out(*path, std::ios::binary);
    if (!out) throw minimind::Error(*path + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw minimind::Error(*path + ": write failed");
  }

  const auto candidates = top_candidates(logits, top);
  const auto* tokenizer = checkpoint.tokenizer ? &*checkpoint.tokenizer : nullptr;
  if (args.has("--json")) {
    nlohmann::json j;
    j["model"] = checkpoint.dir.string();
    j["prompt_ids"] = ids;
    j["vocab_size"] = config.vocab_size;
    j["top"] = nlohmann::json::array();
    for (const auto& c : candidates) {
      nlohmann::json entry = {{"id", c.id}, {"logit", c.logit}, {"probability", c.probability}};
      // Invalid UTF-8 (half a character) is replaced so the JSON stays valid.
      if (tokenizer) entry["text"] = tokenizer->token_to_piece(c.id);
      j["top"].push_back(entry);
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%-6s %-8s %10s %12s  %s\n", "rank", "id", "logit", "probability", tokenizer ? "token" : "");
  for (size_t i = 0; i < candidates.size(); ++i) {
    // Quoted as JSON so spaces, newlines and half characters stay visible.
    const std::string text = tokenizer ? nlohmann::json(tokenizer->token_to_piece(candidates[i].id))
                                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                       : "";
    std::printf("%-6zu %-8d %10.4f %12.6f  %s\n", i + 1, candidates[i].id, candidates[i].logit, candidates[i].probability, text.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-next", [&] { return run(argc, argv); });
}
