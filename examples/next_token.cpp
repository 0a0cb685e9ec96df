// minimind-next: the model's guess for the next token, made visible. Runs the prompt through the
// network once and prints the K tokens whose embedding rows score highest against the final
// hidden state (logits = h E^T), with their probabilities; --trace shows every step on the way there.
#include <minimind/minimind.hpp>
#include <minimind/trace.hpp>

#include "cli.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace {

// A token's text for a terminal: quoted as JSON so spaces, newlines and half characters stay visible.
std::string quoted(const std::string& piece) {
  return nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The tutorial's path through one prediction, one step after another.
void print_trace(const minimind::Trace& t, bool tied) {
  const bool pieces = !t.pieces.empty();
  std::printf("1. the prompt: %zu token ids%s\n", t.ids.size(), pieces ? " and their pieces" : "");
  for (size_t i = 0; i < t.ids.size(); ++i) {
    std::printf("   %3zu  %6d  %s\n", i, t.ids[i], pieces ? quoted(t.pieces[i]).c_str() : "");
  }
  std::printf("\n2. the last token's embedding row E[%d] (hidden size %lld): ", t.ids.back(), static_cast<long long>(t.hidden_size));
  for (double v : t.embedding_first) std::printf("%.4f ", v);
  std::printf("...  L2 norm %.4f\n", t.embedding_norm);
  std::printf("\n3. the blocks: the residual stream after each block at the last position; the entropy (nats)\n"
              "   of each attention head's weights over the positions; the logit lens: that residual put\n"
              "   through the final RMSNorm and lm_head, as if the network stopped there\n");
  std::printf("   %5s  %13s  %-40s  %s\n", "block", "residual norm", "attention entropy per head", "lens top token (probability)");
  for (size_t l = 0; l < t.layers.size(); ++l) {
    const auto& layer = t.layers[l];
    std::string entropies;
    char buffer[32];
    for (double e : layer.attention_entropy) {
      std::snprintf(buffer, sizeof buffer, "%.2f ", e);
      entropies += buffer;
    }
    const auto& lens = layer.lens.back();
    std::printf("   %5zu  %13.4f  %-40s  %d %s (%.4f)", l, layer.residual_norm, entropies.c_str(), lens.id,
                pieces ? quoted(lens.piece).c_str() : "", lens.probability);
    if (!layer.experts.empty()) {
      std::printf("  experts");
      for (size_t e = 0; e < layer.experts.size(); ++e) std::printf(" %d (%.3f)", layer.experts[e], layer.expert_weights[e]);
    }
    std::printf("\n");
  }
  std::printf("\n4. the final RMSNorm: h, the last position's normed hidden state, has L2 norm %.4f\n", t.final_norm);
  std::printf("\n5. the logits: h . E[id] for every id, where E is the %s; softmax gives the probabilities\n",
              tied ? "embedding matrix (the same one step 2 took a row of)" : "lm_head matrix (this checkpoint does not tie it to the embedding)");
  std::printf("   %-6s %-8s %10s %12s  %s\n", "rank", "id", "h . E[id]", "probability", pieces ? "token" : "");
  for (size_t i = 0; i < t.top.size(); ++i) {
    std::printf("   %-6zu %-8d %10.4f %12.6f  %s\n", i + 1, t.top[i].id, t.top[i].logit, t.top[i].probability,
                pieces ? quoted(t.top[i].piece).c_str() : "");
  }
}

int run(int argc, char** argv) {
  cli::Args args("minimind-next", "print the most likely next tokens after a prompt");
  cli::lora_flags(cli::model_flag(args))
      .value("--prompt", "prompt text, encoded with the checkpoint's tokenizer")
      .value("--ids", "prompt as comma-separated token ids, e.g. 1,2,3")
      .value("--top", "how many candidates to print (default 5)")
      .value("--logits-out", "write the last position's logits as raw little-endian float32")
      .toggle("--json", "print one JSON object instead of a table")
      .toggle("--trace", "show the steps of the prediction: embedding, each block (residual norm, attention entropy, logit lens), final norm, logits")
      .toggle("--attention", "with --trace --json: add the attention maps [layer][head][position][position]")
      .toggle("--info", "print the model's architecture, dimensions and parameter count, and the LoRA adapters merged into it");
  if (!args.parse(argc, argv)) return 0;

  const int64_t top = args.int_or("--top", 5);
  if (top < 1) throw cli::UsageError("--top must be at least 1");
  if (args.has("--ids") && args.has("--prompt")) throw cli::UsageError("give --prompt or --ids, not both");
  const minimind::LoadOptions options = cli::load_options(args);
  const auto checkpoint = minimind::load_pretrained<float>(cli::model_dir(args), options);
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
    std::printf("lora adapters       %zu%s\n", options.adapters.size(), options.adapters.empty() ? "" : " (merged at load)");
    for (const auto& use : options.adapters) std::printf("  %s\n", cli::describe(use).c_str());
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

  const auto* tokenizer = checkpoint.tokenizer ? &*checkpoint.tokenizer : nullptr;
  if (args.has("--attention") && !(args.has("--trace") && args.has("--json"))) {
    throw cli::UsageError("--attention needs --trace --json");
  }
  if (args.has("--trace")) {
    if (args.has("--logits-out")) throw cli::UsageError("--logits-out cannot be combined with --trace");
    minimind::TraceOptions options;
    options.top = top;
    options.attention = args.has("--attention");
    const auto t = minimind::trace(model, ids, tokenizer, options);
    if (args.has("--json")) std::printf("%s\n", t.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    else print_trace(t, model.is_tied());
    return 0;
  }

  auto session = model.new_session(static_cast<minimind::Index>(ids.size()));
  const minimind::RowVector<float> logits = model.forward(session, ids, false).row(0);

  if (auto path = args.get("--logits-out")) {
    std::ofstream out(*path, std::ios::binary);
    if (!out) throw minimind::Error(*path + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    if (!out) throw minimind::Error(*path + ": write failed");
  }

  const auto candidates = minimind::top_tokens(logits, top);
  if (args.has("--json")) {
    nlohmann::json j;
    j["model"] = checkpoint.path.string();
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
    const std::string text = tokenizer ? quoted(tokenizer->token_to_piece(candidates[i].id)) : "";
    std::printf("%-6zu %-8d %10.4f %12.6f  %s\n", i + 1, candidates[i].id, candidates[i].logit, candidates[i].probability, text.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run("minimind-next", [&] { return run(argc, argv); });
}
