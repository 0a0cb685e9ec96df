#!/usr/bin/env python3
"""Writes tests/data/formats/llamacpp/: a small MiniMind2 model (tests/data/formats/ref/quant-mm2)
as GGUF files made by llama.cpp's own tools rather than ours: F32 and F16 by gguf-py's GGUFWriter
(its tensor names and metadata keys), and Q8_0 by llama-quantize from the F32 file. The recipe
and the llama.cpp commit are in tests/data/formats/llamacpp/README.md.

  python3 tools/make_llamacpp_gguf.py --gguf-py /path/to/llama.cpp/gguf-py \\
      --quantize /path/to/llama.cpp/build/bin/llama-quantize
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_formats  # noqa: E402  (llama_permute: the q/k row order llama.cpp's converter writes)
import make_golden as mg  # noqa: E402  (safetensors I/O)

SOURCE = "tests/data/formats/ref/quant-mm2"
OUT = "tests/data/formats/llamacpp"


def write(gguf, path, config, tensors, f16):
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("quant-mm2")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_rope_dimension_count(config["hidden_size"] // heads)
    w.add_vocab_size(config["vocab_size"])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config["num_hidden_layers"])
    for hf_name, t in tensors.items():
        a = t.numpy().astype(np.float32)
        if hf_name.endswith("self_attn.q_proj.weight"):
            a = make_formats.llama_permute(a, heads)
        elif hf_name.endswith("self_attn.k_proj.weight"):
            a = make_formats.llama_permute(a, kv)
        name = names.get_name(hf_name, try_suffixes=(".weight",))
        assert name is not None, hf_name
        # Norms stay F32, as llama.cpp's converter keeps them.
        w.add_tensor(name, a.astype(np.float16) if f16 and a.ndim == 2 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("--quantize", required=True, help="llama.cpp's llama-quantize binary")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf

    config = json.load(open(os.path.join(ROOT, SOURCE, "config.json")))
    tensors = mg.read_safetensors(os.path.join(ROOT, SOURCE, "model.safetensors"))[0]
    out = os.path.join(ROOT, OUT)
    os.makedirs(out, exist_ok=True)
    f32 = os.path.join(out, "quant-mm2-f32.gguf")
    write(gguf, f32, config, tensors, f16=False)
    write(gguf, os.path.join(out, "quant-mm2-f16.gguf"), config, tensors, f16=True)
    subprocess.run([args.quantize, f32, os.path.join(out, "quant-mm2-q8_0.gguf"), "Q8_0"], check=True,
                   stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
