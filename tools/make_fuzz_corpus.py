#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets into tests/fuzz/corpus/<target>/.

Seeds are small valid inputs (a few kB at most: libFuzzer's default input size limit follows the
largest seed, and small inputs mutate faster), one per feature a target should reach: each
architecture and dtype for safetensors, each generation's config.json, both merge forms of
tokenizer.json, text with added tokens, ids that split a character, conversations with tools.
Standard library only. Run from anywhere: python3 tools/make_fuzz_corpus.py
"""
import json
import math
import pathlib
import random
import shutil
import struct
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_bpe import bytes_to_unicode  # noqa: E402  GPT-2's byte map, shared with the demo tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
rng = random.Random(20260101)


def write(target, name, data):
    path = CORPUS / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def fresh(target):
    shutil.rmtree(CORPUS / target, ignore_errors=True)


# --- safetensors -----------------------------------------------------------------------------

def f32(values):
    return struct.pack("<%df" % len(values), *values)


def f16(values):
    return struct.pack("<%de" % len(values), *values)


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


ENCODERS = {"F32": (f32, 4), "F16": (f16, 2), "BF16": (bf16, 2)}


def safetensors(tensors, dtype, config):
    """tensors: [(name, shape)]; norms are ones, the rest small random values."""
    header = {"__metadata__": {"format": "pt", "config": json.dumps(config, separators=(",", ":"))}}
    data = b""
    encode, _ = ENCODERS[dtype]
    for name, shape in tensors:
        n = math.prod(shape)
        values = [1.0] * n if "norm" in name else [round(rng.uniform(-0.5, 0.5), 3) for _ in range(n)]
        blob = encode(values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + data


def model_tensors(hidden, heads, kv_heads, head_dim, ffn, vocab, layers=1, qk_norm=False, experts=0,
                  shared=0, moe_ffn=0, untied=False):
    out = [("model.embed_tokens.weight", [vocab, hidden])]
    for l in range(layers):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", [hidden]),
                (p + "self_attn.q_proj.weight", [heads * head_dim, hidden]),
                (p + "self_attn.k_proj.weight", [kv_heads * head_dim, hidden]),
                (p + "self_attn.v_proj.weight", [kv_heads * head_dim, hidden]),
                (p + "self_attn.o_proj.weight", [hidden, heads * head_dim]),
                (p + "post_attention_layernorm.weight", [hidden])]
        if qk_norm:
            out += [(p + "self_attn.q_norm.weight", [head_dim]), (p + "self_attn.k_norm.weight", [head_dim])]
        mlps = []
        if experts:
            out.append((p + "mlp.gate.weight", [experts, hidden]))
            mlps += [("mlp.experts.%d." % e, moe_ffn) for e in range(experts)]
            mlps += [("mlp.shared_experts.%d." % e, moe_ffn) for e in range(shared)]
        else:
            mlps.append(("mlp.", ffn))
        for mlp, width in mlps:
            out += [(p + mlp + "gate_proj.weight", [width, hidden]), (p + mlp + "up_proj.weight", [width, hidden]),
                    (p + mlp + "down_proj.weight", [hidden, width])]
    out.append(("model.norm.weight", [hidden]))
    if untied:
        out.append(("lm_head.weight", [vocab, hidden]))
    return out


def safetensors_seeds():
    fresh("safetensors")
    mm2 = {"architectures": ["MiniMindForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 16,
           "max_position_embeddings": 64}
    write("safetensors", "mm2-f32.safetensors", safetensors(model_tensors(8, 2, 1, 4, 16, 16), "F32", mm2))
    untied = dict(mm2, tie_word_embeddings=False, inference_rope_scaling=True, max_position_embeddings=8192)
    write("safetensors", "mm2-untied-yarn-bf16.safetensors",
          safetensors(model_tensors(8, 2, 1, 4, 16, 16, untied=True), "BF16", untied))
    mm3 = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 2, "head_dim": 4, "intermediate_size": 8, "vocab_size": 12,
           "max_position_embeddings": 4096,
           "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 1024}}
    write("safetensors", "mm3-yarn-f16.safetensors",
          safetensors(model_tensors(8, 2, 2, 4, 8, 12, layers=2, qk_norm=True), "F16", mm3))
    moe3 = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 10,
            "num_experts": 3, "num_experts_per_tok": 2, "moe_intermediate_size": 4, "max_position_embeddings": 64}
    write("safetensors", "mm3-moe-f32.safetensors",
          safetensors(model_tensors(8, 2, 1, 4, 0, 10, qk_norm=True, experts=3, moe_ffn=4), "F32", moe3))
    moe2 = dict(mm2, use_moe=True, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
                intermediate_size=8)
    write("safetensors", "mm2-moe-top1-f32.safetensors",
          safetensors(model_tensors(8, 2, 1, 4, 0, 16, experts=2, shared=1, moe_ffn=8), "F32", moe2))
    # No config in the metadata: the target's default one-layer MiniMind2 shape.
    image = safetensors(model_tensors(8, 2, 1, 4, 16, 16), "F32", mm2)
    header_len = struct.unpack("<Q", image[:8])[0]
    header = json.loads(image[8:8 + header_len])
    del header["__metadata__"]
    header["empty"] = {"dtype": "F32", "shape": [0, 8], "data_offsets": [0, 0]}
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    write("safetensors", "default-config-zero-sized.safetensors",
          struct.pack("<Q", len(text)) + text.encode() + image[8 + header_len:])
    write("safetensors", "empty-header.safetensors", struct.pack("<Q", 8) + b"{}      ")


# --- config.json -----------------------------------------------------------------------------

def config_seeds():
    fresh("config")
    golden = ROOT / "tests" / "data" / "golden"
    for config in sorted(golden.glob("*/config.json")):
        write("config", config.parent.name + ".json", config.read_text())
    write("config", "demo.json", (ROOT / "examples" / "models" / "demo" / "config.json").read_text())
    write("config", "model-type-only.json", '{"model_type": "qwen3_moe", "head_dim": null, "intermediate_size": null}')


# --- tokenizer.json, encode, decode ------------------------------------------------------------

def small_tokenizer(pairs=True, **model):
    spell = bytes_to_unicode()
    vocab = {spell[b]: b for b in range(256)}
    merges = []
    for left, right in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("ä", "¸"), ("ä¸", "Ń")]:
        vocab[left + right] = len(vocab)
        merges.append([left, right] if pairs else left + " " + right)
    added = [{"id": len(vocab), "content": "<|im_start|>", "special": True},
             {"id": len(vocab) + 1, "content": "<|im_end|>", "special": True, "lstrip": True, "rstrip": True},
             {"id": len(vocab) + 2, "content": "<think>", "single_word": True, "normalized": True}]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
            "model": dict({"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                           "byte_fallback": False, "vocab": vocab, "merges": merges}, **model)}


def tokenizer_seeds():
    fresh("tokenizer_json")
    dump = lambda t: json.dumps(t, ensure_ascii=False, separators=(",", ":"))
    write("tokenizer_json", "pairs.json", dump(small_tokenizer()))
    write("tokenizer_json", "strings.json", dump(small_tokenizer(pairs=False)))
    unk = small_tokenizer(unk_token="a", fuse_unk=True, ignore_merges=True)
    unk["model"]["vocab"] = {k: v for k, v in unk["model"]["vocab"].items() if v < 0x80 or v >= 256}
    # ids must run from 0 without gaps: renumber what is left.
    kept = sorted(unk["model"]["vocab"].items(), key=lambda kv: kv[1])
    unk["model"]["vocab"] = {k: i for i, (k, _) in enumerate(kept)}
    unk["model"]["merges"] = [m for m in unk["model"]["merges"] if all(x in unk["model"]["vocab"] for x in m)]
    for i, token in enumerate(unk["added_tokens"]):
        token["id"] = len(kept) + i
    write("tokenizer_json", "unk-fuse-ignore-merges.json", dump(unk))
    no_regex = small_tokenizer()
    no_regex["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}
    write("tokenizer_json", "prefix-space-no-regex.json", dump(no_regex))

    fresh("encode")
    texts = {
        "english.txt": "Hello, world! It's 2026; they'll've 12,345 tokens.\n",
        "chinese.txt": "今天天气很好，我们去公园散步吧。",
        "mixed.txt": "MiniMind 是一个小模型 🤖 with émojis and    spaces\t\ttabs\r\n",
        "chat.txt": "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "unicode-spaces.txt": "a\u3000b\u00a0c\u2028d\u0085e\ufeff f",
        "marks.txt": "e\u0301 \u0915\u094d\u0937 \U0001F469\u200D\U0001F4BB",
        "near-special.txt": "<|im_start <|im_end|x <think > </think>",
    }
    for name, text in texts.items():
        write("encode", name, text)

    fresh("decode")
    # A flag byte (bit 0: skip_special_tokens), then ids as two bytes each; 0xFF then four raw bytes.
    # With vocab 6400 the two-byte value v means id v % 6416 - 8.
    ids = lambda values: b"".join(struct.pack(">H", v + 8) for v in values)
    write("decode", "ascii.bin", b"\x00" + ids([72, 101, 108, 108, 111, 1, 2]))
    write("decode", "specials-skipped.bin", b"\x01" + ids([1, 300, 2, 0, 3, 4, 5, 6]))
    write("decode", "bytes-high.bin", b"\x00" + ids([200, 201, 202, 203, 250, 255, 180, 190]))
    write("decode", "random.bin", b"\x00" + ids([rng.randrange(6400) for _ in range(24)]))
    write("decode", "out-of-range.bin", b"\x00" + ids([5, 6399, 6400]) + b"\xff" + struct.pack("<i", -2**31))


# --- chat template ---------------------------------------------------------------------------

def chat_seeds():
    fresh("chat_template")
    # FuzzedDataProvider takes strings from the front and integers and booleans from the back; the
    # last byte's low bit chooses template recognition (1) or rendering (0).
    # The real templates, when ../shared is beside the checkout.
    for name in ("minimind2", "minimind-3"):
        config = ROOT.parent / "shared" / "minimind" / name / "tokenizer_config.json"
        if config.exists():
            text = json.loads(config.read_text())["chat_template"]
            write("chat_template", name + "-template.bin", text.encode() + b"\x01")
    for i in range(6):
        body = "".join(rng.choice(["hi", "你好", "<think>x</think>y", '{"a": 1}', "\\", "\n", "tool"])
                       for _ in range(12))
        write("chat_template", "conversation-%d.bin" % i, body.encode() + bytes(rng.randrange(256) for _ in range(24)) + b"\x00")


if __name__ == "__main__":
    safetensors_seeds()
    config_seeds()
    tokenizer_seeds()
    chat_seeds()
    for target in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        files = list(target.iterdir())
        print("%-16s %2d seeds, %6d bytes" % (target.name, len(files), sum(f.stat().st_size for f in files)))
