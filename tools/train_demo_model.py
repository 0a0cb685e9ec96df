#!/usr/bin/python3
"""Trains the embedded demo model: a tiny MiniMind2-architecture causal LM (MiniMindForCausalLM,
model_type minimind) on the demo corpus, with Debian's python3-torch (1.13) on the CPU.

Architecture (upstream jingyaogong/minimind model/model_minimind.py, MiniMind2 = commit c090b69,
and ../shared/golden/README.md "Conventions"): token embedding; per block
`h = x + o_proj(attn(input_layernorm(x)))`, `out = h + mlp(post_attention_layernorm(h))`;
RMSNorm `w * x * rsqrt(mean(x^2) + eps)`; attention without biases and without q/k norm, GQA,
rotate-half RoPE (theta 1e6), scores / sqrt(head_dim), causal softmax; SwiGLU MLP
`down(silu(gate(x)) * up(x))`; final RMSNorm; tied embeddings: the logits are
`norm(h) @ embed_tokens.weight^T` (there is no separate lm_head).

Training sequences (upstream's pretraining format, packed): every document (corpus line) is
`<|im_start|> text <|im_end|>` (bos 1, eos 2), as upstream's PretrainDataset builds them; a
sequence is a run of randomly drawn documents cut to `--seq-len` tokens, and the loss is on
every position. Half of the sequences drop the leading bos of their first document, so the
model also continues a bare prompt at position 0 (`minimind-next --prompt 今天天气`, which
encodes the text with add_bos_token false as the tokenizer config says) as well as a prompt
that starts with `<|im_start|>`. After an eos the model has learned to emit bos and start a
new sentence, so greedy decoding past eos stays meaningful.

Chat samples (--chat, tools/demo_corpus.py): rendered conversations, already holding their
<|im_start|> / <|im_end|> tokens, packed the same way into a second batch of longer sequences
(--chat-seq-len: a conversation with the tools block is ~370 tokens); each step's loss is the
text batch's plus the chat batch's.

Deterministic: fixed seeds (torch, and Python's random for the batches), deterministic
algorithms, torch.set_num_threads(--threads). The default is 1 thread: on a busy 2-core machine
two OpenMP threads were 2-10x slower than one, and the losses came out the same with 1 and 2.
Speed: Debian's torch calls the system libblas.so.3, which is the slow reference BLAS unless
OpenBLAS is installed; tools/make_demo.sh puts libopenblas0-openmp's copy first on
LD_LIBRARY_PATH when it is there (about 0.3 s per step instead of 5 s).

Usage: train_demo_model.py CORPUS TOKENIZER_JSON OUT.pt [--steps N] ...
Writes OUT.pt: {"config": {...}, "state_dict": {...float32...}, "log": {...}}.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bpe import Tokenizer  # noqa: E402

BOS, EOS = 1, 2


def default_config(vocab_size):
    hidden = 128
    inter = int(hidden * 8 / 3)
    inter = 64 * ((inter + 64 - 1) // 64)  # upstream MiniMind2's rule: 341 -> 384
    return {
        "hidden_size": hidden,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": inter,
        "vocab_size": vocab_size,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1e6,
        "max_position_embeddings": 512,
    }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(head_dim, end, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    ang = torch.outer(torch.arange(end).float(), inv_freq).float()
    return torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c["hidden_size"] // self.nh
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd)
        cos, sin = cos[:t].unsqueeze(1), sin[:t].unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=2)  # query head h uses kv head h // rep
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        s = s + torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        o = F.softmax(s, dim=-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Model(nn.Module):
    """Parameter names match the HF checkpoint under the `model.` prefix."""

    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Block(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        cos, sin = rope_tables(c["hidden_size"] // c["num_attention_heads"],
                               c["max_position_embeddings"], c["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)


class MiniMindForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Model(c)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * c["num_hidden_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids):
        m = self.model
        x = m.embed_tokens(ids)
        for layer in m.layers:
            x = layer(x, m.cos, m.sin)
        return m.norm(x) @ m.embed_tokens.weight.t()  # tied: lm_head is the embedding


def make_batch(rng, docs, batch, seq_len, p_bos):
    xs = []
    for _ in range(batch):
        seq = [] if rng.random() >= p_bos else [BOS]
        first = True
        while len(seq) < seq_len + 1:
            if not first:
                seq.append(BOS)
            seq += docs[rng.randrange(len(docs))] + [EOS]
            first = False
        xs.append(seq[: seq_len + 1])
    t = torch.tensor(xs, dtype=torch.long)
    return t[:, :-1], t[:, 1:]


def make_chat_batch(rng, chats, batch, seq_len):
    """Rendered conversations carry their own bos/eos: packed back to back, from a chat start."""
    xs = []
    for _ in range(batch):
        seq = []
        while len(seq) < seq_len + 1:
            seq += chats[rng.randrange(len(chats))]
        xs.append(seq[: seq_len + 1])
    t = torch.tensor(xs, dtype=torch.long)
    return t[:, :-1], t[:, 1:]


@torch.no_grad()
def greedy(model, ids, n):
    ids = list(ids)
    out = []
    for _ in range(n):
        nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
        out.append(nxt)
        ids.append(nxt)
        if nxt == EOS:
            break
    return out


def _chat_prompt(messages, tools=None, think=False):
    import demo_corpus
    text = demo_corpus.render_chat(messages, tools) + "<|im_start|>assistant\n"
    return text + ("<think>\n" if think else "<think>\n\n</think>\n\n")


# Chat prompts whose greedy replies are printed: an answer, a thinking one, a tool call.
CHAT_CHECKS = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("tokenizer_json")
    ap.add_argument("out")
    ap.add_argument("--chat", help="chat samples, JSON lines of rendered conversations")
    ap.add_argument("--chat-batch", type=int, default=4)
    ap.add_argument("--chat-seq-len", type=int, default=384)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=48)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--p-bos", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    rng = random.Random(args.seed)

    tok = Tokenizer.from_file(args.tokenizer_json)
    if args.chat:
        import demo_corpus
        user = lambda q: [{"role": "user", "content": q}]  # noqa: E731
        CHAT_CHECKS[:] = [_chat_prompt(user("今天天气怎么样？")), _chat_prompt(user("你好"), think=True),
                          _chat_prompt(user("北京的天气怎么样？"), demo_corpus.DEMO_TOOLS),
                          _chat_prompt(user("3加5等于几？"), demo_corpus.DEMO_TOOLS)]
    with open(args.corpus, encoding="utf-8") as f:
        docs = [tok.encode(l.rstrip("\n")) for l in f if l.strip()]
    chats = []
    if args.chat:
        with open(args.chat, encoding="utf-8") as f:
            chats = [tok.encode(json.loads(l)) for l in f if l.strip()]
    vocab_size = max(tok.id_to_token) + 1
    cfg = default_config(vocab_size)
    model = MiniMindForCausalLM(cfg)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"train_demo_model: {len(docs)} documents, {sum(map(len, docs))} tokens; {len(chats)} chats, "
          f"{sum(map(len, chats))} tokens; config {json.dumps(cfg)}; "
          f"{nparam} parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))

    t0 = time.time()
    losses = []
    model.train()
    for step in range(args.steps):
        x, y = make_batch(rng, docs, args.batch, args.seq_len, args.p_bos)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        if chats:
            cx, cy = make_chat_batch(rng, chats, args.chat_batch, args.chat_seq_len)
            cl = model(cx)
            loss = loss + F.cross_entropy(cl.reshape(-1, cl.shape[-1]), cy.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == args.steps - 1:
            recent = sum(losses[-50:]) / len(losses[-50:])
            print(f"  step {step:5d}  loss {loss.item():.4f}  (avg50 {recent:.4f})  lr {lr_at(step):.2e}  "
                  f"{time.time() - t0:.0f}s", flush=True)
    train_s = time.time() - t0
    model.eval()

    # Loss over a fixed evaluation set (seeded), and the greedy checks.
    erng = random.Random(args.seed + 1)
    with torch.no_grad():
        ev = []
        for _ in range(8):
            x, y = make_batch(erng, docs, 32, args.seq_len, args.p_bos)
            lg = model(x)
            ev.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item())
    eval_loss = sum(ev) / len(ev)
    final_avg = sum(losses[-50:]) / len(losses[-50:])
    print(f"train_demo_model: {args.steps} steps in {train_s:.0f}s; final loss (avg of last 50 steps) {final_avg:.4f}, "
          f"eval loss {eval_loss:.4f}")
    for p in ["今天天气", "小明家养了一只", "这块石头", "The cat", "<|im_start|>今天天气"]:
        g = greedy(model, tok.encode(p), 20)
        print(f"  greedy {p!r} -> {tok.decode(g)!r}")
    for p in CHAT_CHECKS:
        g = greedy(model, tok.encode(p), 60)
        print(f"  greedy {p[-40:]!r} -> {tok.decode(g)!r}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save({
        "config": cfg,
        "state_dict": {k: v.detach().float().contiguous() for k, v in model.state_dict().items()},
        "log": {"steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "lr": args.lr,
                "chats": len(chats), "chat_batch": args.chat_batch, "chat_seq_len": args.chat_seq_len,
                "p_bos": args.p_bos, "seed": args.seed, "threads": args.threads, "parameters": nparam,
                "train_seconds": round(train_s, 1), "final_loss_avg50": round(final_avg, 4),
                "eval_loss": round(eval_loss, 4), "loss_every_100": [round(l, 4) for l in losses[::100]]},
    }, args.out)
    print(f"train_demo_model: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
