#!/usr/bin/python3
"""Writes tests/data/formats/: the committed checkpoints in the other formats MiniMind models come
in, made from the committed golden cases (tests/data/golden/) and the demo model, so the loaders
are tested against the safetensors path on a fresh clone.

- pth/: PyTorch state dicts written by torch.save exactly as upstream MiniMind saves them:
  `{k: v.half() for k, v in state_dict.items()}` (train scripts), the float32 `model.state_dict()`
  itself (an OrderedDict with `_metadata`, lm_head.weight sharing the embedding's storage, as a
  tied upstream model has it), a bfloat16 one, one whose tensors are strided views, and one of
  nn.Parameters (state_dict(keep_vars=True)).
- gguf/: GGUF v3 files from our own writer below (the format is public: magic, version, counts,
  typed metadata, tensor infos, aligned data): architectures llama (MiniMind2, q/k rows permuted
  the way llama.cpp's converter does), qwen3 and qwen3moe (minimind-3); types F32, F16, BF16,
  Q8_0, Q4_0; tokenizer metadata for the demo model, a tiny tokenizer trained here, and (when
  ../shared exists) MiniMind2's real tokenizer.
- ref/: two small random checkpoints (safetensors) whose rows are multiples of 32, the block size
  of Q8_0 (the golden cases' hidden sizes 16 and 24 are not), the references of the Q8_0 files.
- manifest.json: what each file is and what the tests compare it with.
Also the fuzz seed corpora tests/fuzz/corpus/{pth,gguf}/.

Debian's python3-torch 1.13 and python3-numpy; deterministic (rerunning rewrites every byte).
Usage: /usr/bin/python3 tools/make_formats.py [--shared DIR]
"""
import argparse
import collections
import json
import os
import shutil
import struct
import sys
import zipfile

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_golden as mg  # noqa: E402  (the project's PyTorch reference and safetensors I/O)
import train_bpe  # noqa: E402       (byte-level BPE with Hugging Face semantics)

ROOT = os.path.normpath(os.path.join(TOOLS, ".."))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden")
DEMO = os.path.join(ROOT, "examples", "models", "demo")
OUT = os.path.join(ROOT, "tests", "data", "formats")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


# ---------------------------------------------------------------------------------------------
# GGUF writer
# ---------------------------------------------------------------------------------------------
class V:  # metadata value types
    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)


SCALAR = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
          V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "BF16": 30}
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32}  # llama_ftype


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == V.STRING:
        return gguf_string(v)
    if t == V.ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


class Gguf:
    def __init__(self, alignment=32):
        self.alignment = alignment
        self.kv = []       # (key, type, value)
        self.tensors = []  # (name, dims innermost first, ggml type name, raw bytes)

    def add(self, key, t, v):
        self.kv.append((key, t, v))

    def tensor(self, name, shape, ggml_type, raw):
        self.tensors.append((name, list(reversed(shape)), ggml_type, raw))

    def bytes(self):
        pad = lambda n: (-n) % self.alignment  # noqa: E731
        out = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, t, v in self.kv:
            out += [gguf_string(key), struct.pack("<I", t), gguf_value(t, v)]
        offset = 0
        for name, dims, gt, raw in self.tensors:
            out += [gguf_string(name), struct.pack("<I", len(dims)), struct.pack(f"<{len(dims)}Q", *dims),
                    struct.pack("<IQ", GGML[gt], offset)]
            offset += len(raw) + pad(len(raw))
        head = b"".join(out)
        data = b"".join(raw + b"\0" * pad(len(raw)) for _, _, _, raw in self.tensors)
        return head + b"\0" * pad(len(head)) + data


# ---------------------------------------------------------------------------------------------
# ggml block formats (the public layouts; Q8_0 rounds half away from zero as C's roundf)
# ---------------------------------------------------------------------------------------------
def quantize_q8_0(a):
    b = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    x = b * inv
    q = (np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))).astype(np.int8)
    return np.concatenate([d.astype("<f2").view(np.uint8), q.view(np.uint8)], axis=1).tobytes()


def quantize_q4_0(a):
    b = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    imax = np.abs(b).argmax(axis=1)
    m = b[np.arange(len(b)), imax][:, None]
    d = m / np.float32(-8)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(np.trunc(b * inv + np.float32(8.5)), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([d.astype("<f2").view(np.uint8), packed], axis=1).tobytes()


def dequantize(raw, gt, shape):
    if gt == "Q8_0":
        blk = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = blk[:, :2].copy().view("<f2").astype(np.float32)
        return (d * blk[:, 2:].copy().view(np.int8).astype(np.float32)).reshape(shape)
    blk = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 18)
    d = blk[:, :2].copy().view("<f2").astype(np.float32)
    q = np.concatenate([blk[:, 2:] & 15, blk[:, 2:] >> 4], axis=1).astype(np.float32) - 8
    return (d * q).reshape(shape)


def encode(a, gt):
    """float32 array -> (ggml type actually used, raw bytes, the values a reader gets back)."""
    if gt in ("Q8_0", "Q4_0"):
        if a.ndim < 2 or a.shape[-1] % 32:
            gt = "F32"  # a row that is not whole blocks stays unquantized, as llama.cpp does
        else:
            raw = quantize_q8_0(a) if gt == "Q8_0" else quantize_q4_0(a)
            return gt, raw, dequantize(raw, gt, a.shape)
    raw, back = mg.round_to_dtype(a, gt)
    return gt, raw, back.reshape(a.shape)


# ---------------------------------------------------------------------------------------------
# HF checkpoint -> GGUF
# ---------------------------------------------------------------------------------------------
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
}


def llama_permute(w, n_head):
    """llama.cpp's converter: within each head, rows (first half, second half) are interleaved so
    that RoPE pairs are adjacent. GGUF row 2i + j of a head = HF row j * head_dim/2 + i."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(tensors, config, arch):
    """[(gguf name, float32 array)] in llama.cpp's names; experts stacked into 3-D tensors."""
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    out, experts = [], collections.OrderedDict()
    for name, a in tensors.items():
        a = a.numpy() if isinstance(a, torch.Tensor) else a
        if name == "model.embed_tokens.weight":
            out.append(("token_embd.weight", a))
        elif name == "model.norm.weight":
            out.append(("output_norm.weight", a))
        elif name == "lm_head.weight":
            out.append(("output.weight", a))
        else:
            parts = name.split(".")
            assert parts[:2] == ["model", "layers"], name
            blk, rest = parts[2], ".".join(parts[3:])
            if rest.startswith(("mlp.experts.", "mlp.shared_experts.")):
                kind = "exps" if rest.startswith("mlp.experts.") else "shexp"
                proj = parts[-2].split("_")[0]  # gate / up / down
                experts.setdefault(f"blk.{blk}.ffn_{proj}_{kind}.weight", []).append(a)
                continue
            if arch == "llama" and rest == "self_attn.q_proj.weight":
                a = llama_permute(a, heads)
            if arch == "llama" and rest == "self_attn.k_proj.weight":
                a = llama_permute(a, kv)
            out.append((f"blk.{blk}.{LAYER_NAMES[rest]}", a))
    for name, parts in experts.items():
        out.append((name, parts[0] if name.endswith("_shexp.weight") and len(parts) == 1 else np.stack(parts)))
    return out


def gguf_metadata(g, config, arch, dtype, name):
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    k = lambda s: f"{arch}.{s}"  # noqa: E731
    g.add("general.architecture", V.STRING, arch)
    g.add("general.name", V.STRING, name)
    g.add("general.file_type", V.UINT32, FILE_TYPE[dtype])
    if dtype in ("Q8_0", "Q4_0"):
        g.add("general.quantization_version", V.UINT32, 2)
    g.add(k("context_length"), V.UINT32, config["max_position_embeddings"])
    g.add(k("embedding_length"), V.UINT32, config["hidden_size"])
    g.add(k("block_count"), V.UINT32, config["num_hidden_layers"])
    g.add(k("feed_forward_length"), V.UINT32, config["intermediate_size"])
    g.add(k("attention.head_count"), V.UINT32, heads)
    g.add(k("attention.head_count_kv"), V.UINT32, config.get("num_key_value_heads") or heads)
    g.add(k("attention.layer_norm_rms_epsilon"), V.FLOAT32, config["rms_norm_eps"])
    g.add(k("rope.freq_base"), V.FLOAT32, config["rope_theta"])
    g.add(k("rope.dimension_count"), V.UINT32, head_dim)
    g.add(k("vocab_size"), V.UINT32, config["vocab_size"])
    if arch != "llama":
        g.add(k("attention.key_length"), V.UINT32, head_dim)
        g.add(k("attention.value_length"), V.UINT32, head_dim)
    if arch == "qwen3moe":
        g.add(k("expert_count"), V.UINT32, config["num_experts"])
        g.add(k("expert_used_count"), V.UINT32, config["num_experts_per_tok"])
        g.add(k("expert_feed_forward_length"), V.UINT32, config["moe_intermediate_size"])
    if arch == "llama" and config.get("use_moe"):
        g.add(k("expert_count"), V.UINT32, config["n_routed_experts"])
        g.add(k("expert_used_count"), V.UINT32, config["num_experts_per_tok"])
        g.add(k("expert_shared_count"), V.UINT32, config["n_shared_experts"])
        g.add(k("expert_weights_norm"), V.BOOL, bool(config["norm_topk_prob"]))
    rs = config.get("rope_scaling")
    if arch == "llama" and rs is None and config.get("inference_rope_scaling"):
        rs = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_fast": 4.0,
              "beta_slow": 1.0}  # MiniMind2's inference_rope_scaling preset, spelled out
    if rs is not None:
        g.add(k("rope.scaling.type"), V.STRING, "yarn")
        g.add(k("rope.scaling.factor"), V.FLOAT32, rs["factor"])
        g.add(k("rope.scaling.original_context_length"), V.UINT32, rs["original_max_position_embeddings"])
        g.add(k("rope.scaling.yarn_beta_fast"), V.FLOAT32, rs["beta_fast"])
        g.add(k("rope.scaling.yarn_beta_slow"), V.FLOAT32, rs["beta_slow"])
        if rs.get("attention_factor", 1.0) != 1.0:
            g.add(k("rope.scaling.attn_factor"), V.FLOAT32, rs["attention_factor"])


def tokenizer_metadata(g, tok, tok_config, pre="default"):
    """tokenizer.json (+ tokenizer_config.json) -> llama.cpp's tokenizer.ggml.* keys."""
    m = tok["model"]
    tokens = [None] * len(m["vocab"])
    for t, i in m["vocab"].items():
        tokens[i] = t
    types = [1] * len(tokens)  # NORMAL
    for a in tok["added_tokens"]:
        while a["id"] >= len(tokens):
            tokens.append(None)
            types.append(1)
        tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4  # CONTROL / USER_DEFINED
    assert None not in tokens
    merges = [" ".join(x) if isinstance(x, list) else x for x in m["merges"]]
    ids = {t: i for i, t in enumerate(tokens)}
    g.add("tokenizer.ggml.model", V.STRING, "gpt2")
    g.add("tokenizer.ggml.pre", V.STRING, pre)
    g.add("tokenizer.ggml.tokens", V.ARRAY, (V.STRING, tokens))
    g.add("tokenizer.ggml.token_type", V.ARRAY, (V.INT32, types))
    g.add("tokenizer.ggml.merges", V.ARRAY, (V.STRING, merges))
    for field, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                       ("pad_token", "padding_token_id"), ("unk_token", "unknown_token_id")):
        if tok_config.get(field):
            g.add(f"tokenizer.ggml.{key}", V.UINT32, ids[tok_config[field]])
    g.add("tokenizer.ggml.add_bos_token", V.BOOL, bool(tok_config.get("add_bos_token", False)))
    g.add("tokenizer.ggml.add_eos_token", V.BOOL, bool(tok_config.get("add_eos_token", False)))
    if tok_config.get("chat_template"):
        g.add("tokenizer.chat_template", V.STRING, tok_config["chat_template"])


def write_gguf(path, tensors, config, arch, dtype, name, tokenizer=None, alignment=32):
    """-> name -> the float32 values a reader gets back (after rounding or quantization), HF names."""
    g = Gguf(alignment)
    if alignment != 32:
        g.add("general.alignment", V.UINT32, alignment)
    gguf_metadata(g, config, arch, dtype, name)
    if tokenizer:
        tokenizer_metadata(g, *tokenizer)
    for gname, a in gguf_tensors(tensors, config, arch):
        # Norms and the MoE router stay float32 (llama.cpp never quantizes them).
        gt = "F32" if a.ndim == 1 or gname.endswith("ffn_gate_inp.weight") else dtype
        used, raw, _ = encode(a, gt)
        g.tensor(gname, a.shape, used, raw)
    with open(path, "wb") as f:
        f.write(g.bytes())


def dequantized_tensors(tensors, dtype):
    """The HF tensors as a reader of a `dtype` GGUF gets them (same rules as write_gguf)."""
    out = collections.OrderedDict()
    for name, t in tensors.items():
        a = t.numpy()
        gt = "F32" if a.ndim == 1 or name.endswith("mlp.gate.weight") else dtype
        out[name] = torch.from_numpy(np.ascontiguousarray(encode(a, gt)[2], dtype=np.float32))
    return out


# ---------------------------------------------------------------------------------------------
# .pth state dicts, saved as upstream saves them
# ---------------------------------------------------------------------------------------------
def upstream_state_dict(tensors, tied):
    """What upstream's model.state_dict() holds: an OrderedDict with _metadata, and for a tied
    model lm_head.weight as the very tensor of the embedding (one storage)."""
    sd = collections.OrderedDict((n, t.clone()) for n, t in tensors.items())
    if tied and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def strided_state_dict(tensors):
    """Every layout torch.save keeps: q_proj transposed in its storage (non-contiguous), k_proj
    and v_proj sharing one storage (v at an offset), the rest ordinary."""
    sd = {}
    for n, t in tensors.items():
        if n.endswith("q_proj.weight"):
            sd[n] = t.t().contiguous().t()
            assert not sd[n].is_contiguous()
        elif n.endswith("k_proj.weight"):
            v = tensors[n.replace("k_proj", "v_proj")]
            both = torch.cat([t, v])
            sd[n], sd[n.replace("k_proj", "v_proj")] = both[: t.shape[0]], both[t.shape[0]:]
            assert sd[n.replace("k_proj", "v_proj")].storage_offset() > 0
        elif n.endswith("v_proj.weight"):
            continue
        else:
            sd[n] = t.clone()
    return sd


# ---------------------------------------------------------------------------------------------
# the quantized references: random weights, rows of whole Q8_0 blocks
# ---------------------------------------------------------------------------------------------
QUANT_REFS = [
    ("quant-mm2", mg.mm2_config(32, 2, 4, 2, 96, vocab=256), 3101),
    ("quant-mm3-moe", mg.mm3_config(32, 2, 4, 2, 8, 64, vocab=256,
                                    moe={"experts": 4, "top_k": 2, "norm": True, "inter": 32}), 3201),
]


def logits_of(config, tensors, ids):
    return mg.full_logits(mg.load_model(mg.Cfg(config), tensors), ids)


def quant_prompts(config, ref, quant, seed, n=3):
    """Prompts on which every position's top-1 agrees and the reference margin is at least 4x the
    largest logit difference, so the C++ test's top-1 check cannot flip. -> (prompts, max diff)."""
    rng = np.random.RandomState(seed)
    chosen, worst = [], 0.0
    for _ in range(200):
        ids = [int(i) for i in rng.randint(0, config["vocab_size"], size=8)]
        a, b = logits_of(config, ref, ids), logits_of(config, quant, ids)
        diff = float((a - b).abs().max())
        top2 = torch.topk(a, 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        if bool((a.argmax(-1) == b.argmax(-1)).all()) and margin > 4 * diff:
            chosen.append(ids)
            worst = max(worst, diff)
            if len(chosen) == n:
                return chosen, worst
    raise RuntimeError("no prompts with clear-cut top-1")


def write_quant_ref(name, config, seed):
    cfg = mg.Cfg(config)
    d = os.path.join(OUT, "ref", name)
    os.makedirs(d, exist_ok=True)
    stored = mg.draw_weights(cfg, seed)
    mg.write_safetensors(os.path.join(d, "model.safetensors"), stored, "F32")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    return collections.OrderedDict((n, torch.from_numpy(a)) for n, a in stored)


def stated_bound(x):
    """The max difference a test allows: twice the measured one, rounded up to 2 digits."""
    e = 10.0 ** (np.floor(np.log10(2 * x)) - 1)
    return float(np.ceil(2 * x / e) * e)


# ---------------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------------
TINY_LINES = ["今天天气很好，我们去公园散步。", "The cat eats fish. The dog eats meat.", "小明家养了一只猫。",
              "1234 + 5678 = 6912", "  spaces   and\ttabs\n", "The weather is good today."]
TINY_TEXTS = ["The cat eats fish.", "今天天气很好", "<|im_start|>user\n你好<|im_end|>", "a <think>b</think> 12345",
              "  multiple   spaces\n\nand lines", "unseen: ζ ü Ω 😀"]


def tiny_tokenizer():
    """A tokenizer trained here: 3 special tokens, the 256 bytes, ~60 merges, and one
    non-special added token (USER_DEFINED in GGUF), with add_bos_token set."""
    vocab, merges = train_bpe.train(TINY_LINES, 320)
    tok = train_bpe.tokenizer_json(vocab, merges)
    tok["added_tokens"].append({"id": len(vocab), "content": "<think>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": True, "special": False})
    tok["added_tokens"].append({"id": len(vocab) + 1, "content": "</think>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": True, "special": False})
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "add_bos_token": True, "add_eos_token": False, "chat_template": train_bpe.CHAT_TEMPLATE}
    added = {a["content"]: a["id"] for a in tok["added_tokens"]}
    py = train_bpe.Tokenizer(vocab, merges, added)
    expected = [{"text": t, "ids": [added["<|im_start|>"]] + py.encode(t)} for t in TINY_TEXTS]
    return tok, config, expected


# ---------------------------------------------------------------------------------------------

def golden(name):
    d = os.path.join(GOLDEN, name)
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    tensors, dtypes, _ = mg.read_safetensors(os.path.join(d, "model.safetensors"))
    return config, tensors, set(dtypes.values()).pop()


def rel(path):
    return os.path.relpath(path, ROOT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"),
                    help="the shared directory, for MiniMind2's real tokenizer (skipped when absent)")
    args = ap.parse_args()
    for sub in ("pth", "gguf", "ref"):
        shutil.rmtree(os.path.join(OUT, sub), ignore_errors=True)
        os.makedirs(os.path.join(OUT, sub))
    for sub in ("pth", "gguf"):
        shutil.rmtree(os.path.join(CORPUS, sub), ignore_errors=True)
        os.makedirs(os.path.join(CORPUS, sub))
    manifest = {"format": "minimind-formats-1", "pth": [], "gguf": [], "tokenizers": []}

    # .pth: (file, golden case, how it is saved, compared with)
    pth_cases = [
        ("mm2-dense-f32.pth", "mm2-dense-f32", "state_dict", "exact"),
        ("mm2-dense-f16.pth", "mm2-dense-f32", "half", "f16-all"),
        ("f16.pth", "f16", "half", "exact"),
        ("bf16.pth", "bf16", "bfloat16", "exact"),
        ("mm3-dense-f32.pth", "mm3-dense", "state_dict", "exact"),
        ("mm3-moe-f16.pth", "mm3-moe", "half", "f16-all"),
        ("mm3-dense-strided.pth", "mm3-dense", "strided", "exact"),
        ("mha-parameters.pth", "mha", "parameters", "exact"),
    ]
    for fname, case, how, compare in pth_cases:
        config, tensors, _ = golden(case)
        tied = config.get("tie_word_embeddings", True)
        sd = upstream_state_dict(tensors, tied)
        if how == "half":
            sd = {k: v.half() for k, v in sd.items()}  # upstream's train scripts, verbatim
        elif how == "bfloat16":
            sd = {k: v.bfloat16() for k, v in sd.items()}
        elif how == "strided":
            sd = strided_state_dict(tensors)
        elif how == "parameters":  # what state_dict(keep_vars=True) holds
            sd = collections.OrderedDict((k, torch.nn.Parameter(v, requires_grad=k.endswith("norm.weight")))
                                         for k, v in tensors.items())
        path = os.path.join(OUT, "pth", fname)
        torch.save(sd, path)
        manifest["pth"].append({"file": rel(path), "reference": rel(os.path.join(GOLDEN, case)), "saved_as": how, "compare": compare})

    # GGUF: (file, source, arch, dtype, compare)
    gguf_cases = [
        ("mm2-dense-f32.gguf", "mm2-dense-f32", "llama", "F32", "exact"),
        ("mm2-dense-f16.gguf", "mm2-dense-f32", "llama", "F16", "f16-matrices"),
        ("mm2-yarn-f32.gguf", "mm2-yarn", "llama", "F32", "exact"),
        ("mm2-moe-f32.gguf", "mm2-moe", "llama", "F32", "exact"),
        ("mha-f32.gguf", "mha", "llama", "F32", "exact"),
        ("tied-lm-head-stored-f32.gguf", "tied-lm-head-stored", "llama", "F32", "exact"),
        ("mm3-dense-f32.gguf", "mm3-dense", "qwen3", "F32", "exact"),
        ("mm3-yarn-f32.gguf", "mm3-yarn", "qwen3", "F32", "exact"),
        ("untied-f32.gguf", "untied", "qwen3", "F32", "exact"),
        ("f16-f16.gguf", "f16", "qwen3", "F16", "exact"),
        ("bf16-bf16.gguf", "bf16", "qwen3", "BF16", "exact"),
        ("mm3-moe-f32.gguf", "mm3-moe", "qwen3moe", "F32", "exact"),
        ("mm3-moe-f16.gguf", "mm3-moe", "qwen3moe", "F16", "f16-matrices"),
    ]
    for fname, case, arch, dtype, compare in gguf_cases:
        config, tensors, _ = golden(case)
        path = os.path.join(OUT, "gguf", fname)
        write_gguf(path, tensors, config, arch, dtype, case, alignment=64 if case == "mha" else 32)
        manifest["gguf"].append({"file": rel(path), "reference": rel(os.path.join(GOLDEN, case)), "arch": arch, "dtype": dtype,
                                 "compare": compare})

    # Q8_0 against the random references
    for name, config, seed in QUANT_REFS:
        tensors = write_quant_ref(name, config, seed)
        arch = "llama" if config["architectures"][0] == "MiniMindForCausalLM" else "qwen3moe"
        path = os.path.join(OUT, "gguf", f"{name}-q8_0.gguf")
        write_gguf(path, tensors, config, arch, "Q8_0", name)
        prompts, diff = quant_prompts(config, tensors, dequantized_tensors(tensors, "Q8_0"), seed)
        manifest["gguf"].append({"file": rel(path), "reference": rel(os.path.join(OUT, "ref", name)), "arch": arch,
                                 "dtype": "Q8_0", "compare": "quantized", "top1": "all", "prompts": prompts, "measured_max_abs": diff,
                                 "max_abs": stated_bound(diff)})
        print(f"{name} Q8_0: max |logit diff| {diff:.3g} (reference torch)")

    # The demo model (trained, so its top-1 margins are real) in Q4_0, with its tokenizer.
    with open(os.path.join(DEMO, "config.json")) as f:
        demo_config = json.load(f)
    demo_tensors, _, _ = mg.read_safetensors(os.path.join(DEMO, "model.safetensors"))
    with open(os.path.join(DEMO, "tokenizer.json"), encoding="utf-8") as f:
        demo_tok = json.load(f)
    with open(os.path.join(DEMO, "tokenizer_config.json"), encoding="utf-8") as f:
        demo_tok_config = json.load(f)
    with open(os.path.join(DEMO, "golden.json"), encoding="utf-8") as f:
        demo_golden = json.load(f)
    path = os.path.join(OUT, "gguf", "demo-q4_0.gguf")
    write_gguf(path, demo_tensors, demo_config, "llama", "Q4_0", "minimind-demo", tokenizer=(demo_tok, demo_tok_config))
    deq = dequantized_tensors(demo_tensors, "Q4_0")
    diff = max(float((logits_of(demo_config, demo_tensors, p["ids"]) - logits_of(demo_config, deq, p["ids"]))
                     .abs().max()) for p in demo_golden["prompts"])
    agree = all(int(logits_of(demo_config, deq, p["ids"])[-1].argmax()) == p["top5_ids"][0] for p in demo_golden["prompts"])
    assert agree, "Q4_0 changes a top-1 of the demo model"
    manifest["gguf"].append({"file": rel(path), "reference": rel(DEMO), "arch": "llama", "dtype": "Q4_0", "compare": "quantized", "top1": "last",
                             "prompts": [p["ids"] for p in demo_golden["prompts"]], "measured_max_abs": diff,
                             "max_abs": stated_bound(diff), "tokenizer": rel(DEMO)})
    print(f"demo Q4_0: max |logit diff| {diff:.3g} (reference torch), top-1 of every golden prompt kept")

    # Tokenizer-only files (no tensors).
    tok, tok_config, expected = tiny_tokenizer()
    g = Gguf()
    g.add("general.architecture", V.STRING, "llama")
    tokenizer_metadata(g, tok, tok_config)
    path = os.path.join(OUT, "gguf", "tiny-tokenizer.gguf")
    with open(path, "wb") as f:
        f.write(g.bytes())
    manifest["tokenizers"].append({"file": rel(path), "expected": expected, "add_bos": True,
                                   "user_defined": ["<think>", "</think>"]})
    shared_tok = os.path.join(args.shared, "minimind", "minimind2")
    if os.path.isdir(shared_tok):
        with open(os.path.join(shared_tok, "tokenizer.json"), encoding="utf-8") as f:
            t = json.load(f)
        with open(os.path.join(shared_tok, "tokenizer_config.json"), encoding="utf-8") as f:
            c = json.load(f)
        g = Gguf()
        g.add("general.architecture", V.STRING, "llama")
        tokenizer_metadata(g, t, c, pre="qwen2")  # the pre-type MiniMind's README suggests; we ignore it
        path = os.path.join(OUT, "gguf", "minimind2-tokenizer.gguf")
        with open(path, "wb") as f:
            f.write(g.bytes())
        manifest["tokenizers"].append({"file": rel(path), "shared_golden": "golden/tokenizer/minimind2.jsonl"})
    else:
        print(f"{shared_tok} absent: minimind2-tokenizer.gguf not written")

    with open(os.path.join(OUT, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")

    # Fuzz seeds: small valid files of each kind (libFuzzer mutates small inputs best).
    shutil.copy(os.path.join(OUT, "gguf", "tiny-tokenizer.gguf"), os.path.join(CORPUS, "gguf", "tiny-tokenizer.gguf"))
    tiny_moe = mg.mm3_config(32, 1, 2, 1, 16, 32, vocab=16, moe={"experts": 2, "top_k": 1, "norm": True, "inter": 32})
    t = collections.OrderedDict((n, torch.from_numpy(a)) for n, a in mg.draw_weights(mg.Cfg(tiny_moe), 1))
    write_gguf(os.path.join(CORPUS, "gguf", "tiny-moe-q8_0.gguf"), t, tiny_moe, "qwen3moe", "Q8_0", "tiny")
    tiny = mg.mm2_config(8, 1, 2, 1, 16, vocab=16)
    t = collections.OrderedDict((n, torch.from_numpy(a)) for n, a in mg.draw_weights(mg.Cfg(tiny), 1))
    write_gguf(os.path.join(CORPUS, "gguf", "tiny-f16.gguf"), t, tiny, "llama", "F16", "tiny", alignment=64)
    torch.save(upstream_state_dict(t, True), os.path.join(CORPUS, "pth", "tiny-f32.pth"))
    torch.save({k: v.bfloat16() for k, v in strided_state_dict(t).items()}, os.path.join(CORPUS, "pth", "tiny-strided-bf16.pth"))
    # fuzz_pth feeds an input starting 0x80 to the pickle machine alone: the bare data.pkl files.
    for f in ("tiny-f32", "tiny-strided-bf16"):
        with zipfile.ZipFile(os.path.join(CORPUS, "pth", f + ".pth")) as z:
            with open(os.path.join(CORPUS, "pth", f + ".pkl"), "wb") as out:
                out.write(z.read(f"{f}/data.pkl"))

    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    seeds = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(CORPUS) for f in fs)
    print(f"total {total} bytes in {OUT}, {seeds} bytes of fuzz seeds in {CORPUS}")


if __name__ == "__main__":
    main()
