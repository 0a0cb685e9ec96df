// minimind-convert: any MiniMind checkpoint (HF directory, .safetensors, upstream's .pth, GGUF)
// to a GGUF file that llama.cpp, ollama and LM Studio run, with its tokenizer and chat template,
// LoRA adapters merged in.
// The rules (architectures, tensor types, metadata) are minimind/gguf_export.hpp's.
#include <minimind/gguf_export.hpp>
#include <minimind/minimind.hpp>

#include "cli.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  return cli::run("minimind-convert", [&] {
    cli::Args args("minimind-convert", "writes a MiniMind checkpoint as a GGUF file for llama.cpp, ollama and LM Studio");
    args.operand("IN", "checkpoint directory, or .safetensors/.pth/.gguf file")
        .operand("OUT", "the GGUF file to write")
        .value("--type", "type of the weight matrices: f32, f16, bf16, q8_0, q4_0 or q4_k_m (llama-quantize's mix; default f16; norms stay f32)")
        .value("--name", "general.name in the file (default: IN's directory or file name)")
        .toggle("--force", "replace OUT if it exists");
    cli::lora_flags(args);
    if (!args.parse(argc, argv)) return 0;
    if (args.operands().size() != 2) throw cli::UsageError("give IN and OUT (see --help)");
    const std::filesystem::path in = args.operands()[0], out = args.operands()[1];
    minimind::GgufExportOptions options;
    using minimind::GgufType;
    // nullopt: llama-quantize's Q4_K_M mix rather than one type
    const auto type = cli::choose<std::optional<GgufType>>("--type", args.get_or("--type", "f16"),
                                                           {{"f32", GgufType::F32},
                                                            {"f16", GgufType::F16},
                                                            {"bf16", GgufType::BF16},
                                                            {"q8_0", GgufType::Q8_0},
                                                            {"q4_0", GgufType::Q4_0},
                                                            {"q4_k_m", std::nullopt}});
    options.q4_k_m = !type;
    if (type) options.type = *type;
    options.name = args.get_or("--name", "");
    if (std::filesystem::exists(out) && !args.has("--force")) {
      throw minimind::Error(out.string() + ": exists (use --force to replace it)");
    }

    const auto start = std::chrono::steady_clock::now();
    options.adapters = cli::lora_adapters(args);
    for (const auto& use : options.adapters) std::fprintf(stderr, "minimind-convert: merging %s\n", cli::describe(use).c_str());
    std::fprintf(stderr, "minimind-convert: reading %s\n", in.string().c_str());
    const minimind::Checkpoint checkpoint = minimind::load_checkpoint(in);
    const auto [tokenizer, tokenizer_config] = minimind::checkpoint_tokenizer_files(checkpoint);
    if (!tokenizer) {
      throw minimind::Error(in.string() + ": no tokenizer (tokenizer.json beside the weights, or GGUF tokenizer metadata); "
                            "llama.cpp cannot load a GGUF without one");
    }
    // A tokenizer this library cannot read would not work in llama.cpp either.
    minimind::Tokenizer::from_json(*tokenizer, in.string() + " (tokenizer)", tokenizer_config ? &*tokenizer_config : nullptr);
    options.progress = [](const std::string& name, size_t i, size_t n) {
      std::fprintf(stderr, "minimind-convert: [%zu/%zu] %s\n", i + 1, n, name.c_str());
    };
    const minimind::GgufWriter writer = minimind::export_gguf(checkpoint, tokenizer, tokenizer_config, options);
    // Written beside OUT and renamed, so an interrupted run leaves no half file under OUT's name
    // (and IN may be OUT: its mapped bytes are read before the rename).
    std::filesystem::path partial = out;
    partial += ".partial";
    writer.write(partial);
    std::error_code error;
    std::filesystem::rename(partial, out, error);
    if (error) throw minimind::Error(out.string() + ": cannot rename " + partial.string() + " to it: " + error.message());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "minimind-convert: wrote %s (%s, %.1f MiB) in %.2f s\n", out.string().c_str(),
                 args.get_or("--type", "f16").c_str(), static_cast<double>(std::filesystem::file_size(out)) / (1 << 20), seconds);
    return 0;
  });
}
