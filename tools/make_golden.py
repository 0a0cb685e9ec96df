#!/usr/bin/python3
"""minimind.cpp's own PyTorch reference for the MiniMind forward pass, and its golden cases.

The model is re-implemented here as small torch modules (RMSNorm, rotary embedding with both
YaRN rules, Attention with GQA and optional q/k norm, FeedForward, MoE for both generations,
Block, Model), following the conventions of upstream's model_minimind.py for the two model
generations:

  * MiniMind2 (architecture MiniMindForCausalLM, upstream's 2025 code): head_dim = hidden/heads,
    no q/k norm, MoE with shared experts, top-k weights renormalised only when k > 1, and its
    own YaRN rule (see `minimind2_yarn`).
  * minimind-3 (Qwen3ForCausalLM / Qwen3MoeForCausalLM, upstream's 2026 code): explicit head_dim,
    RMSNorm of every q and k head before RoPE, MoE without shared experts and top-k weights
    renormalised whenever norm_topk_prob is set, standard YaRN ramp (see `qwen3_yarn`).

Usage (Debian's python3-torch and python3-numpy; no safetensors / transformers needed):

  /usr/bin/python3 tools/make_golden.py                 # (re)write tests/data/golden/
  /usr/bin/python3 tools/make_golden.py --check-shared /work/shared/golden/tiny-mm2 [...]
  /usr/bin/python3 tools/make_golden.py --check-shared tests/data/golden/mm3-yarn
  /usr/bin/python3 tools/make_golden.py --f64           # (re)write tests/data/golden-f64/ from
                                                        # tests/data/golden/ and ../shared/golden/

Writing is deterministic: weights and prompts come from numpy's legacy RandomState (a stream
numpy promises never to change), torch runs on one thread, and every file is written in a fixed
order, so rerunning reproduces the files byte for byte.
"""

import argparse
import copy
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)  # one summation order for matmuls: byte-identical reruns

FORMAT = "minimind-golden-1"
GREEDY_N = 24
MIN_GREEDY_MARGIN = 0.005  # top-1 minus top-2 at every greedy step
MIN_TOP5_GAP = 0.003       # between consecutive top-5 logits
MIN_ROUTER_GAP = 1e-4      # k-th minus (k+1)-th router score, every token of every MoE layer
TOL_F32 = 1e-4
TOL_HALF = 1e-2


# ---------------------------------------------------------------------------------------------
# safetensors, by hand
# ---------------------------------------------------------------------------------------------

def round_to_dtype(a, dtype):
    """float32 array -> (raw little-endian bytes in `dtype`, the same values widened to float32)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes(), a.copy()
    if dtype == "F16":
        h = a.astype("<f2")  # round to nearest even
        return h.tobytes(), h.astype(np.float32)
    if dtype == "BF16":
        u = a.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even
        return u.tobytes(), (u.astype(np.uint32) << 16).view(np.float32)
    raise ValueError(dtype)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float32 array); all stored in `dtype`, data in header order."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    width = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    for name, a in tensors:
        raw, _ = round_to_dtype(a, dtype)
        assert len(raw) == a.size * width
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """-> (ordered dict name -> float32 torch tensor widened exactly, name -> dtype, name -> raw bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    base, tensors, dtypes, raws = 8 + n, {}, {}, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        tensors[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
        dtypes[name], raws[name] = dt, raw
    return tensors, dtypes, raws


# ---------------------------------------------------------------------------------------------
# config: everything that differs between the generations is decided here, once
# ---------------------------------------------------------------------------------------------

class Cfg:
    def __init__(self, c):
        self.raw = c
        self.arch = c["architectures"][0]
        self.minimind2 = self.arch == "MiniMindForCausalLM"
        assert self.minimind2 or self.arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"), self.arch
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = self.hidden // self.heads if self.minimind2 else c.get("head_dim", self.hidden // self.heads)
        self.inter = c["intermediate_size"]
        self.vocab = c["vocab_size"]
        self.eps = c["rms_norm_eps"]
        self.theta = float(c["rope_theta"])
        self.max_pos = c["max_position_embeddings"]
        self.tied = c.get("tie_word_embeddings", True)
        self.qk_norm = not self.minimind2
        # MoE
        if self.minimind2:
            self.moe = bool(c.get("use_moe", False))
            self.experts = c.get("n_routed_experts", 4)
            self.shared_experts = c.get("n_shared_experts", 0)
            self.top_k = c.get("num_experts_per_tok", 2)
            self.expert_inter = self.inter
            # MiniMind2: the top-k weights are renormalised only when there are several of them
            self.renorm_topk = bool(c.get("norm_topk_prob", True)) and self.top_k > 1
        else:
            self.moe = self.arch == "Qwen3MoeForCausalLM"
            self.experts = c.get("num_experts", 0)
            self.shared_experts = 0
            self.top_k = c.get("num_experts_per_tok", 1)
            self.expert_inter = c.get("moe_intermediate_size", self.inter)
            self.renorm_topk = bool(c.get("norm_topk_prob", False))
            if self.moe:
                assert c.get("decoder_sparse_step", 1) == 1 and not c.get("mlp_only_layers"), "all layers MoE only"
        # RoPE scaling
        rs = c.get("rope_scaling")
        self.yarn = None
        if self.minimind2:
            if rs is None and c.get("inference_rope_scaling", False):
                rs = {"type": "yarn"}
            if rs is not None:
                assert rs.get("type", rs.get("rope_type")) == "yarn", rs
                self.yarn = dict(rule="minimind2", factor=rs.get("factor", 4),
                                 orig=rs.get("original_max_position_embeddings", 2048),
                                 beta_fast=rs.get("beta_fast", 4.0), beta_slow=rs.get("beta_slow", 1.0),
                                 attention_factor=1.0)
        elif rs is not None:
            assert rs.get("type", rs.get("rope_type")) == "yarn", rs
            self.yarn = dict(rule="qwen3", factor=rs["factor"],
                             orig=rs.get("original_max_position_embeddings", 2048),
                             beta_fast=rs.get("beta_fast", 32.0), beta_slow=rs.get("beta_slow", 1.0),
                             attention_factor=rs.get("attention_factor", 1.0))
        if self.yarn is not None and not self.max_pos / self.yarn["orig"] > 1.0:
            self.yarn = None  # YaRN only when max_position_embeddings / orig > 1, then at all positions


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def qwen3_yarn(inv_freq, head_dim, theta, y):
    """Standard YaRN ramp (minimind-3): upstream's precompute_freqs_cis since 151fdf7 (2025-12-01)."""
    half = head_dim // 2
    d = lambda b: head_dim * math.log(y["orig"] / (2 * math.pi * b)) / (2 * math.log(theta))
    low = max(math.floor(d(y["beta_fast"])), 0)
    high = min(math.ceil(d(y["beta_slow"])), half - 1)
    ramp = torch.clamp((torch.arange(half, dtype=inv_freq.dtype) - low) / max(high - low, 0.001), 0, 1)
    return inv_freq * (1 - ramp + ramp / y["factor"]), y["attention_factor"]


def minimind2_yarn(inv_freq, head_dim, theta, y):
    """MiniMind2's rule, upstream 4e35fb9 (2025-10-17) .. 6b86ea3: per-pair beta below the first pair
    whose wavelength exceeds orig, 1/factor from there on; no attention factor."""
    half = head_dim // 2
    c = next((j for j in range(half) if 2 * math.pi / inv_freq[j] > y["orig"]), half)
    beta = y["beta_slow"] + (y["beta_fast"] - y["beta_slow"]) * (
        torch.arange(half, dtype=inv_freq.dtype) / max(half - 1, 1))
    f = y["factor"]
    scale = torch.where(torch.arange(half) < c, (beta * f - beta + 1) / (beta * f),
                        torch.full_like(beta, 1.0 / f))
    return inv_freq * scale, 1.0


def rope_inv_freq(cfg, dtype=torch.float32, yarn=True):
    """-> (inv_freq [head_dim/2], attention_factor)."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.theta ** (torch.arange(0, hd, 2)[: hd // 2].to(dtype) / hd))
    if yarn and cfg.yarn is not None:
        rule = qwen3_yarn if cfg.yarn["rule"] == "qwen3" else minimind2_yarn
        return rule(inv, hd, cfg.theta, cfg.yarn)
    return inv, 1.0


class Rotary:
    """cos/sin for positions [start, start+n): angle pos*inv_freq, repeated over both halves."""

    def __init__(self, cfg, dtype=torch.float32, yarn=True):
        self.inv_freq, self.attention_factor = rope_inv_freq(cfg, dtype, yarn)

    def __call__(self, start, n):
        ang = torch.outer(torch.arange(start, start + n, dtype=self.inv_freq.dtype), self.inv_freq)
        cos = torch.cat([ang.cos(), ang.cos()], -1) * self.attention_factor
        sin = torch.cat([ang.sin(), ang.sin()], -1) * self.attention_factor
        return cos, sin


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def apply_rope(x, cos, sin):
    """x [T, heads, head_dim]; cos/sin [T, head_dim]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, cfg, device=None):
        super().__init__()
        self.h, self.kv, self.hd = cfg.heads, cfg.kv_heads, cfg.head_dim
        assert self.h % self.kv == 0
        lin = lambda i, o: nn.Linear(i, o, bias=False, device=device)
        self.q_proj = lin(cfg.hidden, self.h * self.hd)
        self.k_proj = lin(cfg.hidden, self.kv * self.hd)
        self.v_proj = lin(cfg.hidden, self.kv * self.hd)
        self.o_proj = lin(self.h * self.hd, cfg.hidden)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.hd, cfg.eps, device)
            self.k_norm = RMSNorm(self.hd, cfg.eps, device)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin, cache):
        """x [T, hidden]; cache (k, v) [S, kv_heads, head_dim] of earlier positions, or None."""
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.h, self.hd)
        k = self.k_proj(x).view(T, self.kv, self.hd)
        v = self.v_proj(x).view(T, self.kv, self.hd)
        if self.q_norm is not None:  # per head, before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 0), torch.cat([cache[1], v], 0)
        S = k.shape[0]
        rep = self.h // self.kv  # query head i uses kv head i // rep
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q, kk) / math.sqrt(self.hd)
        past = S - T
        mask = torch.arange(S)[None, :] > (past + torch.arange(T))[:, None]  # key after query
        scores = scores.masked_fill(mask[None], float("-inf"))
        out = torch.einsum("hts,shd->thd", F.softmax(scores, dim=-1), vv)
        return self.o_proj(out.reshape(T, self.h * self.hd)), (k, v)


class FeedForward(nn.Module):
    def __init__(self, hidden, inter, device=None):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False, device=device)
        self.up_proj = nn.Linear(hidden, inter, bias=False, device=device)
        self.down_proj = nn.Linear(inter, hidden, bias=False, device=device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Router softmax(x W^T) over experts, top-k experts weighted by their scores (renormalised
    per cfg.renorm_topk), plus every shared expert with weight 1 (MiniMind2 only)."""

    router_gaps = []  # min (k-th - (k+1)-th) score of each call, for the near-tie check

    def __init__(self, cfg, device=None):
        super().__init__()
        self.k, self.renorm = cfg.top_k, cfg.renorm_topk
        self.gate = nn.Linear(cfg.hidden, cfg.experts, bias=False, device=device)
        self.experts = nn.ModuleList([FeedForward(cfg.hidden, cfg.expert_inter, device) for _ in range(cfg.experts)])
        if cfg.shared_experts > 0:
            self.shared_experts = nn.ModuleList(
                [FeedForward(cfg.hidden, cfg.expert_inter, device) for _ in range(cfg.shared_experts)])
        else:
            self.shared_experts = None

    def forward(self, x):
        scores = F.softmax(self.gate(x), dim=-1)
        w, idx = torch.topk(scores, self.k, dim=-1)
        if self.k < scores.shape[-1]:
            s = scores.sort(-1, descending=True).values
            MoE.router_gaps.append(float((s[:, self.k - 1] - s[:, self.k]).min()))
        if self.renorm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            chosen = idx == e  # [T, k], at most one True per row
            rows = chosen.any(-1).nonzero().flatten()
            if rows.numel():
                y.index_add_(0, rows, expert(x[rows]) * w[chosen][:, None])
        if self.shared_experts is not None:
            for expert in self.shared_experts:
                y = y + expert(x)
        return y


class Block(nn.Module):
    def __init__(self, cfg, device=None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps, device)
        self.self_attn = Attention(cfg, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps, device)
        self.mlp = MoE(cfg, device) if cfg.moe else FeedForward(cfg.hidden, cfg.inter, device)

    def forward(self, x, cos, sin, cache):
        a, cache = self.self_attn(self.input_layernorm(x), cos, sin, cache)
        h = x + a
        return h + self.mlp(self.post_attention_layernorm(h)), cache


class Model(nn.Module):
    def __init__(self, cfg, device=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden, device=device)
        self.layers = nn.ModuleList([Block(cfg, device) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.hidden, cfg.eps, device)


class CausalLM(nn.Module):
    """State-dict names are the checkpoint's tensor names. Tied: no lm_head, logits use the embedding."""

    def __init__(self, cfg, device=None, yarn=True):
        super().__init__()
        self.cfg = cfg
        self.model = Model(cfg, device)
        self.lm_head = None if cfg.tied else nn.Linear(cfg.hidden, cfg.vocab, bias=False, device=device)
        self.yarn = yarn
        self.rotary = Rotary(cfg, torch.float32, yarn)

    def to_float64(self, rope_float64=False):
        """A float64 copy; the RoPE tables stay float32 (the convention) unless rope_float64."""
        m = copy.deepcopy(self).double()
        m.rotary = Rotary(self.cfg, torch.float64 if rope_float64 else torch.float32, self.yarn)
        return m

    def forward(self, ids, cache=None):
        """ids: list of ints; cache: list per layer of (k, v) or None. -> (logits [T, vocab], cache)."""
        start = 0 if cache is None else cache[0][0].shape[0]
        x = self.model.embed_tokens(torch.tensor(ids, dtype=torch.long))
        dtype = x.dtype
        cos, sin = self.rotary(start, len(ids))
        cos, sin = cos.to(dtype), sin.to(dtype)
        new_cache = []
        for i, layer in enumerate(self.model.layers):
            x, c = layer(x, cos, sin, None if cache is None else cache[i])
            new_cache.append(c)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return x @ w.t(), new_cache


def load_model(cfg, tensors, yarn=True):
    """Build from name -> float32 tensor. A tied checkpoint may also store lm_head.weight: it must
    equal the embedding, and only one copy is kept."""
    tensors = dict(tensors)
    if cfg.tied and "lm_head.weight" in tensors:
        assert torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"]), \
            "tied checkpoint with an lm_head.weight different from the embedding"
        del tensors["lm_head.weight"]
    m = CausalLM(cfg, yarn=yarn)
    m.load_state_dict(tensors, strict=True)
    m.eval()
    return m


def count_params(config):
    m = CausalLM(Cfg(config), device="meta")
    return sum(p.numel() for p in m.parameters())


# ---------------------------------------------------------------------------------------------
# running prompts
# ---------------------------------------------------------------------------------------------

def full_logits(m, ids):
    with torch.no_grad():
        return m(ids)[0]


def greedy(m, prompt, n):
    """KV-cache greedy decoding, each step cross-checked against a full recompute.
    -> (ids, margins, max |cached - recomputed|)"""
    out, margins, worst = [], [], 0.0
    with torch.no_grad():
        logits, cache = m(prompt)
        last = logits[-1]
        for step in range(n):
            ref = m(prompt + out)[0][-1]
            worst = max(worst, float((ref - last).abs().max()))
            top2 = torch.topk(last, 2)
            nxt = int(top2.indices[0])
            assert nxt == int(torch.argmax(ref)), "cached and recomputed greedy ids differ"
            out.append(nxt)
            margins.append(float(top2.values[0] - top2.values[1]))
            if step + 1 < n:
                logits, cache = m([nxt], cache)
                last = logits[-1]
    return out, margins, worst


# ---------------------------------------------------------------------------------------------
# the committed cases
# ---------------------------------------------------------------------------------------------

VOCAB = 128  # small; two cases use 256 so that nothing assumes one vocab size
PROMPT_LENS = [("short", 8), ("single", 1), ("medium", 40), ("long", 200)]


def mm2_config(hidden, layers, heads, kv, inter, dtype="F32", eps=1e-5, theta=1e6, max_pos=32768,
               inference_rope_scaling=False, use_moe=False, experts=4, shared=1, top_k=2, norm_topk=True,
               vocab=VOCAB):
    return {
        "architectures": ["MiniMindForCausalLM"], "model_type": "minimind", "aux_loss_alpha": 0.1,
        "bos_token_id": 1, "dropout": 0.0, "eos_token_id": 2, "flash_attn": True, "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": inter, "max_position_embeddings": max_pos,
        "n_routed_experts": experts, "n_shared_experts": shared, "norm_topk_prob": norm_topk,
        "num_attention_heads": heads, "num_experts_per_tok": top_k, "num_hidden_layers": layers,
        "num_key_value_heads": kv, "inference_rope_scaling": inference_rope_scaling, "rms_norm_eps": eps,
        "rope_scaling": None, "rope_theta": theta, "scoring_func": "softmax", "seq_aux": True,
        "tie_word_embeddings": True, "torch_dtype": TORCH_DTYPE[dtype], "use_moe": use_moe, "vocab_size": vocab,
    }


def mm3_config(hidden, layers, heads, kv, head_dim, inter, dtype="F32", eps=1e-6, theta=1e6, max_pos=32768,
               tied=True, rope_scaling=None, moe=None, vocab=VOCAB):
    c = {
        "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if moe else "qwen3", "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": head_dim, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": inter, "max_position_embeddings": max_pos,
        "max_window_layers": layers, "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": kv, "rms_norm_eps": eps, "rope_scaling": rope_scaling, "rope_theta": theta,
        "sliding_window": None, "tie_word_embeddings": tied, "torch_dtype": TORCH_DTYPE[dtype], "use_cache": True,
        "use_sliding_window": False, "vocab_size": vocab,
    }
    if moe:
        c.update({"decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": moe["inter"],
                  "norm_topk_prob": moe["norm"], "num_experts": moe["experts"], "num_experts_per_tok": moe["top_k"],
                  "output_router_logits": False, "router_aux_loss_coef": 0.001})
    return c


TORCH_DTYPE = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

YARN_MM3 = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_fast": 32.0,
            "beta_slow": 1.0, "attention_factor": 1.2}

# name, config, seed, extra. Shapes are tiny on purpose: the point is the semantics, not the size.
CASES = [
    ("mm2-dense-f32", mm2_config(16, 2, 2, 1, 48, vocab=256), 101, {}),
    ("mm2-yarn", mm2_config(16, 2, 1, 1, 32, inference_rope_scaling=True), 201, {}),
    ("mm2-moe", mm2_config(16, 2, 2, 1, 16, use_moe=True, experts=4, shared=1, top_k=2, norm_topk=True), 301, {}),
    ("mm2-moe-top1", mm2_config(16, 2, 2, 1, 16, use_moe=True, experts=4, shared=0, top_k=1, norm_topk=True), 401, {}),
    ("mm3-dense", mm3_config(16, 2, 4, 2, 8, 32, vocab=256), 501, {}),
    ("mm3-yarn", mm3_config(16, 2, 2, 1, 16, 32, max_pos=8192, rope_scaling=YARN_MM3), 601, {}),
    ("mm3-moe", mm3_config(16, 2, 4, 2, 8, 32, moe={"experts": 4, "top_k": 2, "norm": True, "inter": 16}), 701, {}),
    ("untied", mm3_config(16, 2, 4, 2, 8, 32, tied=False), 801, {}),
    ("bf16", mm3_config(24, 2, 4, 2, 8, 48, dtype="BF16"), 901, {}),
    ("f16", mm3_config(24, 2, 4, 2, 8, 48, dtype="F16"), 1001, {}),
    ("tied-lm-head-stored", mm2_config(16, 2, 2, 1, 32), 1101, {"store_lm_head": True}),
    ("gqa-1kv", mm3_config(16, 2, 4, 1, 8, 32), 1201, {}),
    ("mha", mm2_config(16, 2, 2, 2, 32, theta=1e4), 1301, {}),
]


def features(cfg, dtype, store_lm_head=False):
    f = ["minimind2" if cfg.minimind2 else "minimind3", dtype, f"hidden {cfg.hidden}", f"layers {cfg.layers}",
         f"heads {cfg.heads}/{cfg.kv_heads} (n_rep {cfg.heads // cfg.kv_heads})", f"head_dim {cfg.head_dim}",
         f"intermediate {cfg.inter}", f"eps {cfg.eps:g}", f"theta {cfg.theta:g}", "tied" if cfg.tied else "untied"]
    if cfg.qk_norm:
        f.append("q/k norm")
    if cfg.moe:
        f.append(f"MoE {'minimind2' if cfg.minimind2 else 'minimind3'} {cfg.experts} experts top-{cfg.top_k} "
                 f"norm_topk_prob {bool(cfg.raw.get('norm_topk_prob'))} shared {cfg.shared_experts} "
                 f"expert-intermediate {cfg.expert_inter}")
    if cfg.yarn is not None:
        y = cfg.yarn
        f.append(f"YaRN {y['rule']} factor {y['factor']:g} orig {y['orig']} beta_fast {y['beta_fast']:g} "
                 f"beta_slow {y['beta_slow']:g} attention_factor {y['attention_factor']:g} max_pos {cfg.max_pos}")
    if store_lm_head:
        f.append("lm_head.weight stored (identical to embed_tokens)")
    return f


def draw_weights(cfg, seed):
    """name -> float32 array, in checkpoint order. Norm weights are not 1, so skipping one shows."""
    rng = np.random.RandomState(seed)
    shapes = [(n, tuple(p.shape)) for n, p in CausalLM(cfg, device="meta").state_dict().items()]
    out = []
    for name, shape in shapes:
        if name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            a = 0.5 * rng.standard_normal(shape)
        elif name == "lm_head.weight":
            a = 0.5 * rng.standard_normal(shape)
        elif name.endswith("mlp.gate.weight"):  # router: decisive enough to keep top-k away from ties
            a = 3.0 * rng.standard_normal(shape) / math.sqrt(shape[1])
        else:
            gain = 0.7 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
            a = gain * rng.standard_normal(shape) / math.sqrt(shape[1])
        out.append((name, a.astype(np.float32)))
    return out


def draw_prompts(seed, vocab):
    rng = np.random.RandomState(seed + 7919)
    prompts = []
    for name, n in PROMPT_LENS:
        ids = [int(i) for i in rng.randint(0, vocab, size=n)]
        if name == "short":
            ids[0] = 1  # bos
        prompts.append((name, ids))
    return prompts


def f9(x):
    return float("%.9g" % float(x))


def evaluate(m, prompts):
    """Everything expected.json needs, plus the acceptance numbers."""
    MoE.router_gaps.clear()
    res = []
    for name, ids in prompts:
        logits = full_logits(m, ids)
        g_ids, g_margins, cache_err = greedy(m, ids, GREEDY_N)
        last = logits[-1]
        top5 = torch.topk(last, 5)
        res.append(dict(name=name, ids=ids, logits=logits, greedy_ids=g_ids, greedy_margins=g_margins,
                        cache_err=cache_err, top5_ids=[int(i) for i in top5.indices],
                        top5_logits=[float(v) for v in top5.values]))
    router_gap = min(MoE.router_gaps) if MoE.router_gaps else None
    return res, router_gap


def acceptable(res, router_gap):
    for r in res:
        if min(r["greedy_margins"]) < MIN_GREEDY_MARGIN:
            return f"greedy margin {min(r['greedy_margins']):.4g} in {r['name']}"
        t = r["top5_logits"]
        if min(a - b for a, b in zip(t, t[1:])) < MIN_TOP5_GAP:
            return f"top-5 gap in {r['name']}"
    if router_gap is not None and router_gap < MIN_ROUTER_GAP:
        return f"router gap {router_gap:.3g}"
    return None


def max_diff(ra, rb):
    return max(float((a["logits"].double() - b["logits"].double()).abs().max()) for a, b in zip(ra, rb))


def contrasts(config):
    """(label, Cfg) pairs of plausible misreadings of this case's config."""
    out = []
    cfg = Cfg(config)
    if cfg.yarn is not None:
        wrong = Cfg(config)
        wrong.yarn = None
        out.append(("vs-no-yarn", wrong))
        if cfg.yarn["attention_factor"] != 1.0:  # the ramp and the attention factor must each matter
            wrong = Cfg(config)
            wrong.yarn = dict(wrong.yarn, attention_factor=1.0)
            out.append(("vs-attention-factor-1", wrong))
            wrong = Cfg(config)
            wrong.yarn = dict(wrong.yarn, factor=1.0)  # inv_freq unscaled, cos/sin still scaled
            out.append(("vs-no-ramp", wrong))
        other = Cfg(config)  # the other generation's YaRN rule, same numbers
        other.yarn = dict(other.yarn, rule="qwen3" if cfg.yarn["rule"] == "minimind2" else "minimind2")
        out.append(("vs-other-yarn-rule", other))
    if cfg.moe:
        wrong = Cfg(config)
        wrong.renorm_topk = not cfg.renorm_topk
        out.append(("vs-renorm-" + ("off" if cfg.renorm_topk else "on"), wrong))
    return out


def make_case(out_root, name, config, seed, extra):
    cfg = Cfg(config)
    dtype = {v: k for k, v in TORCH_DTYPE.items()}[config["torch_dtype"]]
    for attempt in range(200):  # deterministic: the first seed whose decisions are all clear-cut
        s = seed + attempt
        stored = [(n, round_to_dtype(a, dtype)[1]) for n, a in draw_weights(cfg, s)]
        tensors = {n: torch.from_numpy(a) for n, a in stored}
        m = load_model(cfg, tensors)
        prompts = draw_prompts(s, cfg.vocab)
        res, router_gap = evaluate(m, prompts)
        why = acceptable(res, router_gap)
        if why is None:
            break
        print(f"  {name}: seed {s} rejected ({why})")
    else:
        raise RuntimeError(f"{name}: no acceptable seed")

    report = {"seed": s, "router_gap": router_gap, "cache_err": max(r["cache_err"] for r in res)}
    # float32 vs float64 (RoPE tables float32 as the convention says; and all-float64 for scale)
    r64, _ = evaluate(m.to_float64(), prompts)
    r64r, _ = evaluate(m.to_float64(rope_float64=True), prompts)
    report["f64"], report["f64_rope64"] = max_diff(res, r64), max_diff(res, r64r)
    assert all(a["greedy_ids"] == b["greedy_ids"] for a, b in zip(res, r64)), "float64 greedy ids differ"
    # each case must tell its convention apart from the nearest wrong one (by > 1e-3 somewhere)
    for label, wrong in contrasts(config):
        d = max(float((full_logits(load_model(wrong, tensors), ids) - r["logits"]).abs().max())
                for (_, ids), r in zip(prompts, res))
        assert d > 1e-3, f"{name}: {label} gives the same logits ({d})"
        report[label] = d

    # write
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        f.write(json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2) + "\n")
    to_store = list(stored)
    if extra.get("store_lm_head"):
        to_store.append(("lm_head.weight", dict(stored)["model.embed_tokens.weight"]))
    write_safetensors(os.path.join(d, "model.safetensors"), to_store, dtype)
    tol = TOL_F32 if dtype == "F32" else TOL_HALF
    exp_prompts = []
    for k, r in enumerate(res):
        has_file = r["name"] != "long"
        if has_file:
            r["logits"].numpy().astype("<f4").tofile(os.path.join(d, f"logits_{k}.f32"))
        exp_prompts.append({
            "name": r["name"], "ids": r["ids"], "len": len(r["ids"]),
            "last_logits": [f9(v) for v in r["logits"][-1].tolist()],
            "top5_ids": r["top5_ids"], "top5_logits": [f9(v) for v in r["top5_logits"]],
            "logits_file": f"logits_{k}.f32" if has_file else None,
            "logits_shape": [len(r["ids"]), cfg.vocab] if has_file else None,
            "greedy_ids": r["greedy_ids"], "greedy_margins": [f9(v) for v in r["greedy_margins"]],
        })
    feats = features(cfg, dtype, extra.get("store_lm_head", False))
    expected = {"format": FORMAT, "model": ".", "weights_dtype": dtype, "compute_dtype": "float32",
                "vocab_size": cfg.vocab, "greedy_n": GREEDY_N,
                "tolerance": {"logits_max_abs": tol, "greedy_ids": "exact"}, "prompts": exp_prompts,
                "case": name, "architecture": cfg.arch, "features": feats}
    with open(os.path.join(d, "expected.json"), "w") as f:
        f.write(json.dumps(expected))
    entry = {"case": name, "dir": name, "weights_dtype": dtype, "architecture": cfg.arch, "features": feats,
             "tolerance": {"logits_max_abs": tol, "greedy_ids": "exact"},
             "model_safetensors_bytes": os.path.getsize(os.path.join(d, "model.safetensors"))}
    return entry, report


# ---------------------------------------------------------------------------------------------
# checking a case directory (the shared ones, or our own written files read back)
# ---------------------------------------------------------------------------------------------

def check_case(d, tol=1e-5):
    with open(os.path.join(d, "config.json")) as f:
        cfg = Cfg(json.load(f))
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    tensors, _, raws = read_safetensors(os.path.join(d, "model.safetensors"))
    if cfg.tied and "lm_head.weight" in raws:
        assert raws["lm_head.weight"] == raws["model.embed_tokens.weight"], f"{d}: stored lm_head differs"
    m = load_model(cfg, tensors)
    in_files, in_json, greedy_ok = 0.0, 0.0, True
    for p in exp["prompts"]:
        logits = full_logits(m, p["ids"])
        if p["logits_file"]:
            ref = np.fromfile(os.path.join(d, p["logits_file"]), dtype="<f4").reshape(p["logits_shape"])
            in_files = max(in_files, float(np.abs(logits.numpy().astype(np.float64) - ref).max()))
        last = logits[-1].numpy().astype(np.float64)
        in_json = max(in_json, float(np.abs(last - np.array(p["last_logits"])).max()))
        g, _, _ = greedy(m, p["ids"], exp["greedy_n"])
        greedy_ok &= g == p["greedy_ids"]
    worst = max(in_files, in_json)
    ok = worst <= tol and greedy_ok
    print(f"{os.path.basename(os.path.normpath(d)):22s} {exp['weights_dtype']:5s} max|diff| logits files "
          f"{in_files:.3e}, last_logits (9 digits in JSON) {in_json:.3e}; "
          f"greedy {'identical' if greedy_ok else 'DIFFERENT'}  {'OK' if ok else 'FAIL'}")
    return ok, worst


def hidden_states(m, ids):
    """The residual stream after each block at every position, [layers, T, hidden]: what
    Trace's per-layer norms and logit lens are computed from."""
    with torch.no_grad():
        x = m.model.embed_tokens(torch.tensor(ids, dtype=torch.long))
        cos, sin = m.rotary(0, len(ids))
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        out = []
        for layer in m.model.layers:
            x, _ = layer(x, cos, sin, None)
            out.append(x)
        return torch.stack(out)


def dump_hidden_states(d):
    """Writes hidden_<k>.f32 (raw little-endian float32 [layers, len, hidden]) beside each
    logits_<k>.f32 of a case directory, checking that the reference's logits still match."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = Cfg(json.load(f))
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    m = load_model(cfg, read_safetensors(os.path.join(d, "model.safetensors"))[0])
    for p in exp["prompts"]:
        if not p["logits_file"]:
            continue
        ref = np.fromfile(os.path.join(d, p["logits_file"]), dtype="<f4").reshape(p["logits_shape"])
        assert np.abs(full_logits(m, p["ids"]).numpy() - ref).max() <= 1e-5, f"{d}: logits differ from the reference"
        name = p["logits_file"].replace("logits_", "hidden_")
        hidden_states(m, p["ids"]).numpy().astype("<f4").tofile(os.path.join(d, name))
        print(f"{os.path.join(d, name)}: [{cfg.layers}, {len(p['ids'])}, {cfg.hidden}]")


# ---------------------------------------------------------------------------------------------
# the float64 oracle: every case above and every shared case, all in float64 (RoPE too)
# ---------------------------------------------------------------------------------------------

F64_FORMAT = "minimind-golden-f64-1"
F64_TOLERANCE = 1e-9


def f64_case(d, source, all_rows):
    """Float64 logits of a case directory's prompts -> (JSON entry, raw little-endian float64 bytes).
    all_rows: prompt names whose logits are kept at every position; the rest keep the last one."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = Cfg(json.load(f))
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    tensors, _, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    m = load_model(cfg, tensors).to_float64(rope_float64=True)
    name = os.path.basename(os.path.normpath(d))
    prompts, blobs, offset = [], [], 0
    for p in exp["prompts"]:
        logits = full_logits(m, p["ids"])
        assert logits.dtype == torch.float64
        rows = "all" if p["name"] in all_rows else "last"
        kept = logits if rows == "all" else logits[-1:]
        # the float32 golden values this oracle stands beside, to show the two agree in scale
        f32_gap = float((logits[-1] - torch.tensor(p["last_logits"], dtype=torch.float64)).abs().max())
        assert f32_gap < 1e-3, f"{name}/{p['name']}: float64 is {f32_gap} from the float32 golden logits"
        blobs.append(kept.numpy().astype("<f8").tobytes())
        prompts.append({"name": p["name"], "ids": p["ids"], "rows": rows, "shape": list(kept.shape),
                        "offset": offset})
        offset += kept.numel()
    entry = {"case": name, "source": source, "vocab_size": cfg.vocab, "logits_file": name + ".f64",
             "prompts": prompts}
    return entry, b"".join(blobs)


def write_f64(out, project_root, shared_root):
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    sources = [("project", os.path.join(project_root, name)) for name, _, _, _ in CASES]
    with open(os.path.join(shared_root, "models.json")) as f:
        shared = json.load(f)
    sources += [("shared", os.path.join(shared_root, e["dir"])) for e in shared]
    entries = []
    for source, d in sources:
        # Our cases are tiny (vocab 128/256): every position of `short`. The shared ones have a
        # vocab of 6400, so only last positions, which keeps the directory small.
        entry, raw = f64_case(d, source, {"short"} if source == "project" else set())
        with open(os.path.join(out, entry["logits_file"]), "wb") as f:
            f.write(raw)
        entries.append(entry)
        print(f"{entry['case']:22s} {source:8s} {len(raw):8d} bytes")
    index = {"format": F64_FORMAT, "compute_dtype": "float64",
             "tolerance": {"logits_max_abs": F64_TOLERANCE}, "cases": entries}
    with open(os.path.join(out, "cases.json"), "w") as f:
        f.write(json.dumps(index, indent=1) + "\n")
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"total {total} bytes in {out}")


# ---------------------------------------------------------------------------------------------

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden"))
    ap.add_argument("--check-shared", nargs="+", metavar="DIR",
                    help="check a case directory's logits against this implementation (1e-5) instead of writing")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--f64", metavar="OUT", nargs="?", const=os.path.join(here, "..", "tests", "data", "golden-f64"),
                    help="write the float64 oracle of every case (ours from --out, and --shared's) instead")
    ap.add_argument("--shared", default=os.path.join(here, "..", "..", "shared", "golden"),
                    help="the shared golden directory (default ../shared/golden beside the checkout)")
    ap.add_argument("--hidden-states", nargs="+", metavar="DIR",
                    help="write each case directory's per-block hidden states (hidden_<k>.f32) instead")
    args = ap.parse_args()

    if args.f64:
        write_f64(os.path.normpath(args.f64), os.path.normpath(args.out), os.path.normpath(args.shared))
        return

    if args.hidden_states:
        for d in args.hidden_states:
            dump_hidden_states(d)
        return

    if args.check_shared:
        results = [check_case(d, args.tol) for d in args.check_shared]
        sys.exit(0 if all(ok for ok, _ in results) else 1)

    # sanity check of the modules: parameter counts of the real shapes, tied matrix counted once
    small = mm2_config(512, 8, 8, 2, 1408, vocab=6400)
    mm3 = mm3_config(768, 8, 8, 4, 96, 2432, vocab=6400)
    for label, c, want in (("MiniMind2-Small", small, 25_829_888), ("minimind-3", mm3, 63_912_192)):
        n = count_params(c)
        print(f"params {label}: {n:,} (expected {want:,}) {'OK' if n == want else 'MISMATCH'}")
        assert n == want

    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    entries = []
    print(f"{'case':22s} {'seed':>5s} {'bytes':>8s}  {'f32-f64':>9s} {'(rope64)':>9s} {'cache':>9s}  other")
    for name, config, seed, extra in CASES:
        entry, rep = make_case(out, name, config, seed, extra)
        entries.append(entry)
        size = sum(os.path.getsize(os.path.join(out, name, f)) for f in os.listdir(os.path.join(out, name)))
        other = "".join(f" {k} {v:.3g}" for k, v in rep.items()
                        if k.startswith("vs-") or (k == "router_gap" and v is not None))
        print(f"{name:22s} {rep['seed']:5d} {size:8d}  {rep['f64']:9.2e} {rep['f64_rope64']:9.2e} "
              f"{rep['cache_err']:9.2e} {other}")
    with open(os.path.join(out, "models.json"), "w") as f:
        f.write(json.dumps(entries, indent=1) + "\n")

    print("read back from disk:")
    assert all(check_case(os.path.join(out, e["dir"]))[0] for e in entries)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
    print(f"total {total} bytes in {out}")


if __name__ == "__main__":
    main()
