#!/usr/bin/env python3
"""Writes tests/data/convert/: the metadata llama.cpp's own converter (convert_hf_to_gguf.py)
writes for a small Llama (MiniMind2's layout, MiniMind2's tokenizer) and a small Qwen3
(minimind-3's, with its tokenizer), as JSON: every key with its GGUF value type and value (long
arrays as their length, first and last elements and a SHA-256 of their JSON), plus the tensor
names, types and shapes, and the config.json each was made from. test_gguf_export converts the
same configs with minimind::export_gguf and compares. Recipe in tests/data/convert/README.md.

  python3 tools/make_gguf_reference.py --llama-cpp /path/to/llama.cpp --shared ../shared

convert_hf_to_gguf.py reads the vocabulary through transformers' AutoTokenizer, which this
machine does not have (nor AutoConfig: a stand-in fails, and the converter falls back to reading
config.json, as it does for any config transformers cannot parse), and names the pre-tokenizer by hashing what it encodes; both are replaced
(get_vocab_base) by the same list read from tokenizer.json (added tokens CONTROL when special or
looking special by the converter's own does_token_look_special, else USER_DEFINED) with the
pre-tokenizer "gpt-2" (MiniMind's ByteLevel split is GPT-2's). Everything else, SpecialVocab's
merges, special ids, add_bos/add_eos and chat template included, is the converter's code.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "data", "convert")

MODELS = {
    "llama": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 192, "vocab_size": 6400,
               "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
               "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
               "torch_dtype": "float32"}, "minimind2", False),
    "qwen3": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 48, "head_dim": 12,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 192,
               "vocab_size": 6400, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
               "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
               "rope_scaling": None, "torch_dtype": "float32"}, "minimind-3", True),
}


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def fnv1a32(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def weights(name, shape):
    """Values a C++ test makes again without numpy: element i of tensor `name` is
    ((i * 2654435761 + fnv1a32(name)) mod 2^32) / 2^31 - 1, in float64, rounded to float32."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    bits = (i * np.uint64(2654435761) + np.uint64(fnv1a32(name.encode()))) & np.uint64(0xFFFFFFFF)
    return (bits.astype(np.float64) / 2.0**31 - 1.0).astype(np.float32).reshape(shape)


def hf_checkpoint(directory, config, tokenizer_dir, qk_norm):
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim") or h // heads
    ff, vocab = config["intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": (vocab, h)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (heads * hd, h),
                       p + "self_attn.k_proj.weight": (kv * hd, h), p + "self_attn.v_proj.weight": (kv * hd, h),
                       p + "self_attn.o_proj.weight": (h, heads * hd), p + "post_attention_layernorm.weight": (h,),
                       p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
                       p + "mlp.down_proj.weight": (h, ff)})
        if qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    shapes["model.norm.weight"] = (h,)
    save_safetensors(os.path.join(directory, "model.safetensors"), {n: weights(n, s) for n, s in shapes.items()})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), directory)


def vocab_from_tokenizer_json(self):
    """get_vocab_base without transformers (see the module docstring)."""
    import gguf
    tok = json.load(open(os.path.join(self.dir_model, "tokenizer.json"), encoding="utf-8"))
    vocab_size = self.hparams["vocab_size"]
    tokens, types = [None] * vocab_size, [gguf.TokenType.NORMAL] * vocab_size
    for text, i in tok["model"]["vocab"].items():
        tokens[i] = text
    for a in tok["added_tokens"]:
        tokens[a["id"]] = a["content"]
        special = a["special"] or self.does_token_look_special(a["content"])
        types[a["id"]] = gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", gguf.TokenType.UNUSED
    return tokens, types, "gpt-2"


def absent_transformers():
    """A stand-in module: AutoConfig fails, so the converter reads config.json itself (its own fallback)."""
    import types

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise OSError("transformers is not installed")

    module = types.ModuleType("transformers")
    module.AutoConfig = AutoConfig
    return module


def absent_sentencepiece():
    """A stand-in module: there is no tokenizer.model, so the converter moves on to the next kind of vocabulary."""
    import types
    module = types.ModuleType("sentencepiece")
    module.SentencePieceProcessor = type("SentencePieceProcessor", (), {})
    return module


def silent_tqdm():
    """gguf-py's progress bar, when python3-tqdm is not installed: no bar."""
    import types

    class tqdm:
        def __init__(self, *args, **kwargs):
            pass

        def update(self, n=1):
            pass

        def close(self):
            pass

        def set_description(self, *args, **kwargs):
            pass

    module = types.ModuleType("tqdm")
    module.tqdm = tqdm
    return module


def summarize(reader):
    import gguf
    keys = {}
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        value = field.contents()
        entry = {"type": vtype.name}
        if vtype == gguf.GGUFValueType.ARRAY:
            entry["element_type"] = field.types[-1].name
            entry["count"] = len(value)
            entry["first"] = value[:3]
            entry["last"] = value[-3:]
            # FNV-1a 64 of the elements: each string's UTF-8 bytes and a 0 byte, each integer as int32
            encoded = b"".join(v.encode() + b"\0" if isinstance(v, str) else struct.pack("<i", v) for v in value)
            entry["fnv1a64"] = f"{fnv1a64(encoded):016x}"
        else:
            entry["value"] = value
        keys[field.name] = entry
    tensors = {t.name: {"type": t.tensor_type.name, "dims": [int(d) for d in t.shape],
                        "fnv1a64": f"{fnv1a64(bytes(t.data.tobytes())):016x}"} for t in reader.tensors}
    return keys, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp's checkout (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"), help="the shared data (MiniMind tokenizers)")
    args = ap.parse_args()
    sys.path[:0] = [os.path.join(args.llama_cpp, "gguf-py"), args.llama_cpp]
    sys.modules["transformers"] = absent_transformers()
    sys.modules["sentencepiece"] = absent_sentencepiece()
    sys.modules.setdefault("tqdm", silent_tqdm())
    import torch
    # Debian's torch 1.13 predates these dtypes, which the converter only names in tables; stand-ins
    # that no float32 checkpoint ever holds.
    for i, name in enumerate(("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "uint16", "uint32", "uint64")):
        if not hasattr(torch, name):
            setattr(torch, name, f"absent dtype {i}")
    import gguf
    import convert_hf_to_gguf as converter
    from conversion.base import TextModel
    TextModel.get_vocab_base = vocab_from_tokenizer_json

    os.makedirs(OUT, exist_ok=True)
    for arch, (config, tokenizer, qk_norm) in MODELS.items():
        reference = {"made_by": "llama.cpp d32676d77 convert_hf_to_gguf.py, through tools/make_gguf_reference.py",
                     "tokenizer": f"minimind/{tokenizer}", "config": config, "weights": weights.__doc__.split("\n", 1)[1].strip()}
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = os.path.join(tmp, "model")
            os.makedirs(model_dir)
            hf_checkpoint(model_dir, config, os.path.join(args.shared, "minimind", tokenizer), qk_norm)
            for outtype in ("f16", "bf16", "q8_0"):
                out = os.path.join(tmp, outtype + ".gguf")
                sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", out, "--outtype", outtype]
                converter.main()
                keys, tensors = summarize(gguf.GGUFReader(out))
                if outtype == "f16":
                    reference["metadata"] = keys
                reference["file_type_" + outtype] = keys["general.file_type"]["value"]
                reference["tensors_" + outtype] = tensors
        with open(os.path.join(OUT, f"{arch}-reference.json"), "w", encoding="utf-8") as f:
            json.dump(reference, f, indent=1, ensure_ascii=False)
            f.write("\n")

if __name__ == "__main__":
    main()
