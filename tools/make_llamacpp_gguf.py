#!/usr/bin/env python3
"""Writes tests/data/formats/llamacpp/: a small MiniMind2 model (tests/data/formats/ref/quant-mm2)
as GGUF files made by llama.cpp's own tools rather than ours: F32 and F16 by gguf-py's GGUFWriter
(its tensor names and metadata keys), and Q8_0 by llama-quantize from the F32 file. Then random
models of the MiniMind2 and minimind-3 kinds with rows of 256 (so the K quantizations apply),
quantized by llama-quantize's presets Q4_0 and Q4_K_M, with what the C++ test checks them
against in quants.json: each tensor's checksum after gguf-py's dequantization, and the logits of
the PyTorch reference (tools/make_golden.py) over those dequantized weights. The recipe and the
llama.cpp commit are in tests/data/formats/llamacpp/README.md.

  python3 tools/make_llamacpp_gguf.py --gguf-py /path/to/llama.cpp/gguf-py \\
      --quantize /path/to/llama.cpp/build/bin/llama-quantize
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_formats  # noqa: E402  (llama_permute: the q/k row order llama.cpp's converter writes)
import make_golden as mg  # noqa: E402  (safetensors I/O)

SOURCE = "tests/data/formats/ref/quant-mm2"
OUT = "tests/data/formats/llamacpp"


def write(gguf, path, config, tensors, f16, name="quant-mm2"):
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    llama = config["architectures"][0] == "MiniMindForCausalLM"
    w = gguf.GGUFWriter(path, "llama" if llama else "qwen3")
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    head_dim = config["hidden_size"] // heads if llama else config["head_dim"]
    w.add_rope_dimension_count(head_dim)
    if not llama:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_vocab_size(config["vocab_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if llama else gguf.MODEL_ARCH.QWEN3, config["num_hidden_layers"])
    for hf_name, t in tensors.items():
        a = t.numpy().astype(np.float32)
        if llama and hf_name.endswith("self_attn.q_proj.weight"):
            a = make_formats.llama_permute(a, heads)
        elif llama and hf_name.endswith("self_attn.k_proj.weight"):
            a = make_formats.llama_permute(a, kv)
        name = names.get_name(hf_name, try_suffixes=(".weight",))
        assert name is not None, hf_name
        # Norms stay F32, as llama.cpp's converter keeps them.
        w.add_tensor(name, a.astype(np.float16) if f16 and a.ndim == 2 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Random models whose rows are multiples of 256, small enough to commit once quantized: ffn_down's
# 704 columns (and minimind-3's attn_output's 384) are not, so Q4_K_M falls back to Q5_0 / Q8_0
# there as it does for the published shapes.
QUANT_SHAPES = [
    ("mm2-256", mg.mm2_config(256, 2, 4, 2, 704, vocab=512), 4301),
    ("mm3-256", mg.mm3_config(256, 2, 4, 2, 96, 704, vocab=512), 4302),
]
PRESETS = ["Q4_0", "Q4_K_M"]


def fnv1a64(data):
    """FNV-1a, 64 bits, of a byte string: what the C++ test recomputes over its dequantized tensor."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def unpermute(a, n_head):
    """The inverse of llama_permute: HF's rows from llama.cpp's."""
    rows = a.shape[0] // n_head
    return a.reshape(n_head, rows // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def dequantized_model(gguf, path, config):
    """-> (HF name -> float32 tensor, GGUF name -> FNV-1a of gguf-py's float32 bytes, type counts)."""
    from gguf.quants import dequantize
    llama = config["architectures"][0] == "MiniMindForCausalLM"
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA if llama else gguf.MODEL_ARCH.QWEN3, config["num_hidden_layers"])
    hf_of = {}
    for hf in mg.draw_weights(mg.Cfg(config), 0):
        hf_of[names.get_name(hf[0], try_suffixes=(".weight",))] = hf[0]
    tensors, sums, types = {}, {}, {}
    for t in gguf.GGUFReader(path).tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))
        sums[t.name] = "%016x" % fnv1a64(np.ascontiguousarray(a).tobytes())
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        hf = hf_of[t.name]
        if llama and hf.endswith("self_attn.q_proj.weight"):
            a = unpermute(a, config["num_attention_heads"])
        elif llama and hf.endswith("self_attn.k_proj.weight"):
            a = unpermute(a, config["num_key_value_heads"])
        tensors[hf] = torch.from_numpy(np.ascontiguousarray(a))
    return tensors, sums, types


def write_quantized(gguf, quantize, out):
    entries = []
    rng = np.random.RandomState(43)
    for name, config, seed in QUANT_SHAPES:
        tensors = {n: torch.from_numpy(a) for n, a in mg.draw_weights(mg.Cfg(config), seed)}
        f32 = os.path.join(out, name + "-f32.gguf.tmp")
        write(gguf, f32, config, tensors, f16=False, name=name)
        prompts = [[int(i) for i in rng.randint(0, config["vocab_size"], size=6)] for _ in range(2)]
        for preset in PRESETS:
            file = "%s-%s.gguf" % (name, preset.lower())
            subprocess.run([quantize, f32, os.path.join(out, file), preset], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            deq, sums, types = dequantized_model(gguf, os.path.join(out, file), config)
            model = mg.load_model(mg.Cfg(config), deq)
            logits = np.stack([mg.full_logits(model, ids).numpy() for ids in prompts]).astype(np.float32)
            logits_file = file.replace(".gguf", ".logits.f32")
            logits.tofile(os.path.join(out, logits_file))
            entries.append({"file": file, "preset": preset, "types": types, "prompts": prompts,
                            "vocab_size": config["vocab_size"], "logits": logits_file, "dequantized_fnv1a64": sums})
        os.remove(f32)
    with open(os.path.join(out, "quants.json"), "w") as f:
        f.write(json.dumps(entries, indent=1) + "\n")


def llama_cpp_tools(description):
    """--gguf-py and --quantize from the command line -> (args, the gguf module from that gguf-py)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("--quantize", required=True, help="llama.cpp's llama-quantize binary (an existing build)")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf
    return args, gguf


def main():
    args, gguf = llama_cpp_tools(__doc__.split("\n\n")[0])

    config = json.load(open(os.path.join(ROOT, SOURCE, "config.json")))
    tensors = mg.read_safetensors(os.path.join(ROOT, SOURCE, "model.safetensors"))[0]
    out = os.path.join(ROOT, OUT)
    os.makedirs(out, exist_ok=True)
    f32 = os.path.join(out, "quant-mm2-f32.gguf")
    write(gguf, f32, config, tensors, f16=False)
    write(gguf, os.path.join(out, "quant-mm2-f16.gguf"), config, tensors, f16=True)
    subprocess.run([args.quantize, f32, os.path.join(out, "quant-mm2-q8_0.gguf"), "Q8_0"], check=True,
                   stdout=subprocess.DEVNULL)
    write_quantized(gguf, args.quantize, out)


if __name__ == "__main__":
    main()
