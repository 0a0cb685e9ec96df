#!/usr/bin/python3
"""Exports the trained demo model as a Hugging Face checkpoint directory and writes its golden
data.

Writes into OUTDIR (examples/models/demo/):
  config.json             MiniMindForCausalLM config, key layout of ../shared/golden/tiny-mm2
  generation_config.json  bos/eos ids and sampling defaults
  model.safetensors       F32 weights, written by hand (no lm_head.weight: tied)
  tokenizer.json, tokenizer_config.json   copied from the BPE training output
  golden.json             prompts, ids, last-position logits, top-5, greedy continuations; chats:
                          conversations rendered with the chat template and their greedy replies
  README.md               what the directory is, how it was made, golden.json's fields

The golden values come from a plain float32 torch forward pass (a KV-cache implementation
written here from ../shared/golden/README.md "Conventions") over the weights *reloaded from
the written model.safetensors* by an independent reader, so they describe the file, not the
training state. The script cross-checks that forward against the training module and against
full recomputation, and asserts what the demo must show (top-1 after 今天天气 is 很; the greedy
continuations are the learned sentences; the chats' greedy replies think and call the tools as
trained).

Usage: export_demo.py TRAIN_PT TOKENIZER_DIR OUTDIR
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bpe import Tokenizer  # noqa: E402
import train_demo_model  # noqa: E402
import demo_corpus  # noqa: E402

BOS, EOS = 1, 2
GREEDY_N = 16
TOLERANCE = 1e-3

# (name, prompt text, expected greedy text up to eos)
PROMPTS = [
    ("weather_zh", "今天天气", "很好，我们去公园散步。"),
    ("pet_zh", "小明家养了一只", "猫，它喜欢吃鱼。"),
    ("stone_zh", "这块石头", "很硬。"),
    ("cat_en", "The cat", " eats fish."),
    ("weather_zh_bos", "<|im_start|>今天天气", "很好，我们去公园散步。"),
    ("pet2_zh", "小红家养了一只", "狗，它每天都很开心。"),
    ("tom_en", "Tom has a", " small dog."),
]


CHAT_GREEDY_N = 64
WEATHER_RESULT = {"city": "北京", "weather": "晴", "temperature": 25}


def _user(text):
    return {"role": "user", "content": text}


def _call(name, arguments):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def _tool(result):
    return {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result, ensure_ascii=False)}


def _is(expected):
    return lambda reply: reply == expected


def _answers_weather(reply):
    # The trained form of an answer from get_weather's result. The model is too small (and
    # trained too briefly) to copy the result's values into it: the form is what it learned.
    return set(reply) == {"content"} and re.fullmatch(r"\S+今天\S+，\d+度。", reply["content"]) is not None


def _calls_add(reply):
    calls = reply.get("tool_calls", [])
    return (len(calls) == 1 and calls[0]["function"]["name"] == "add" and reply["content"] == "" and
            all(isinstance(calls[0]["function"]["arguments"].get(k), int) for k in ("a", "b")))


# (name, messages, tools offered, open think block, what the greedy reply must be)
CHATS = [
    ("chat_zh", [_user("今天天气怎么样？")], False, False, _is({"content": "今天天气很好，我们去公园散步。"})),
    ("think_zh", [_user("你好")], False, True, _is({"reasoning_content": "用户在打招呼，我也打招呼。", "content": "你好，很高兴认识你。"})),
    ("tool_weather", [_user("北京的天气怎么样？")], True, False, _is(_call("get_weather", {"city": "北京"}))),
    ("tool_weather_answer", [_user("北京的天气怎么样？"), _call("get_weather", {"city": "北京"}), _tool(WEATHER_RESULT)], True, False,
     _answers_weather),
    ("tool_add", [_user("3加5等于几？")], True, False, _calls_add),
]


def chat_prompt(messages, tools, think):
    """The prompt with the generation prompt: minimind-3's closed empty think block, or an open one."""
    text = demo_corpus.render_chat(messages, demo_corpus.DEMO_TOOLS if tools else None) + "<|im_start|>assistant\n"
    return text + ("<think>\n" if think else "<think>\n\n</think>\n\n")


def reply_of(text, think):
    """The assistant message a greedy reply is, for the shapes the demo writes (reasoning when the
    think block was open, then an answer or one call); export checks it by rendering it back."""
    reply = {}
    if think:
        reasoning, _, text = text.partition("\n</think>\n\n")
        reply["reasoning_content"] = reasoning
    call = re.fullmatch(r"<tool_call>\n(.*)\n</tool_call>", text, re.S)
    if call is None:
        return dict(reply, content=text)
    try:
        fields = json.loads(call.group(1))
    except json.JSONDecodeError:
        return dict(reply, content=text)
    return dict(reply, **_call(fields.get("name"), fields.get("arguments")))


def expected_reply_text(messages, tools, think, reply):
    """What the model writes for `reply`: its assistant turn as the template renders it, after the
    prompt, up to the <|im_end|> it ends with."""
    prompt = chat_prompt(messages, tools, think)
    turn = dict({"role": "assistant", "content": ""}, **reply)
    full = demo_corpus.render_chat(messages + [turn], demo_corpus.DEMO_TOOLS if tools else None)
    assert full.startswith(prompt) and full.endswith("<|im_end|>\n"), (prompt, full)
    return full[len(prompt):-len("<|im_end|>\n")]


# ---------------------------------------------------------------------------------------------
# safetensors, by hand
# ---------------------------------------------------------------------------------------------
def write_safetensors(path, tensors):
    """tensors: list of (name, float32 numpy array), written in that order."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    assert n % 8 == 0
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        assert b == end, "tensors must be contiguous, in header order"
        end = e
        a = np.frombuffer(data[base + b: base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    assert base + end == len(data)
    return header, out


def tensor_order(n_layers):
    names = ["model.embed_tokens.weight"]
    for i in range(n_layers):
        p = f"model.layers.{i}."
        names += [p + "input_layernorm.weight"] + \
                 [p + f"self_attn.{x}_proj.weight" for x in "qkvo"] + \
                 [p + "post_attention_layernorm.weight"] + \
                 [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
    return names + ["model.norm.weight"]


# ---------------------------------------------------------------------------------------------
# Reference forward pass (float32, KV cache), from the conventions
# ---------------------------------------------------------------------------------------------
class Reference:
    def __init__(self, W, cfg):
        self.W, self.c = W, cfg
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg["hidden_size"] // self.nh
        self.eps = cfg["rms_norm_eps"]
        j = torch.arange(0, self.hd, 2, dtype=torch.float32)
        self.inv_freq = 1.0 / (cfg["rope_theta"] ** (j / self.hd))

    def norm(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, pos):  # x [t, heads, hd]
        ang = torch.outer(pos.float(), self.inv_freq)
        cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
        h = self.hd // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def forward(self, ids, cache):
        """Feeds `ids` after the positions already in `cache` (a list of per-layer (k, v));
        returns the logits of every fed position [len(ids), vocab]."""
        W, L = self.W, self.c["num_hidden_layers"]
        start = cache[0][0].shape[0] if cache else 0
        if not cache:
            cache.extend([(torch.zeros(0, self.nkv, self.hd), torch.zeros(0, self.nkv, self.hd)) for _ in range(L)])
        t = len(ids)
        pos = torch.arange(start, start + t)
        x = W["model.embed_tokens.weight"][torch.tensor(ids)]
        for i in range(L):
            p = f"model.layers.{i}."
            h = self.norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].t()).view(t, self.nh, self.hd)
            k = (h @ W[p + "self_attn.k_proj.weight"].t()).view(t, self.nkv, self.hd)
            v = (h @ W[p + "self_attn.v_proj.weight"].t()).view(t, self.nkv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            K = torch.cat([cache[i][0], k]); V = torch.cat([cache[i][1], v])
            cache[i] = (K, V)
            n = K.shape[0]
            rep = self.nh // self.nkv
            out = torch.empty(t, self.nh, self.hd)
            mask = torch.arange(n)[None, :] > pos[:, None]  # key position after query position
            for hh in range(self.nh):
                kv = hh // rep
                s = (q[:, hh, :] @ K[:, kv, :].t()) / math.sqrt(self.hd)
                s = s.masked_fill(mask, float("-inf"))
                out[:, hh, :] = torch.softmax(s, -1) @ V[:, kv, :]
            x = x + out.reshape(t, -1) @ W[p + "self_attn.o_proj.weight"].t()
            h = self.norm(x, W[p + "post_attention_layernorm.weight"])
            g = h @ W[p + "mlp.gate_proj.weight"].t()
            u = h @ W[p + "mlp.up_proj.weight"].t()
            x = x + (F.silu(g) * u) @ W[p + "mlp.down_proj.weight"].t()
        x = self.norm(x, W["model.norm.weight"])
        return x @ W["model.embed_tokens.weight"].t()


def margin(logits):
    top2 = torch.topk(logits, 2).values
    return float(top2[0] - top2[1])


def f32(x):
    """A float32 as the shortest decimal that reads back to the same float32."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-")) if math.isfinite(x) else x


def greedy(ref, ids, n, stop_at_eos):
    cache = []
    logits = ref.forward(ids, cache)[-1]
    out, margins = [], []
    full = list(ids)
    for step in range(n):
        nxt = int(logits.argmax())
        out.append(nxt)
        margins.append(margin(logits))
        full.append(nxt)
        if stop_at_eos and nxt == EOS:
            break
        if step == n - 1:
            break
        logits = ref.forward([nxt], cache)[-1]
        # the KV-cache path must agree with recomputing the whole sequence
        again = ref.forward(full, [])[-1]
        assert float((again - logits).abs().max()) < 1e-4
    return out, margins


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train_pt")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("outdir")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    ck = torch.load(args.train_pt)
    cfg, sd, log = ck["config"], ck["state_dict"], ck["log"]
    tok_json = os.path.join(args.tokenizer_dir, "tokenizer.json")
    tok = Tokenizer.from_file(tok_json)
    assert max(tok.id_to_token) + 1 == cfg["vocab_size"]
    os.makedirs(args.outdir, exist_ok=True)

    # --- files ------------------------------------------------------------------------------
    config = {
        "architectures": ["MiniMindForCausalLM"],
        "model_type": "minimind",
        "aux_loss_alpha": 0.1,
        "bos_token_id": BOS,
        "dropout": 0.0,
        "eos_token_id": EOS,
        "flash_attn": True,
        "hidden_act": "silu",
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "max_position_embeddings": cfg["max_position_embeddings"],
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": cfg["num_attention_heads"],
        "num_experts_per_tok": 2,
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "inference_rope_scaling": False,
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": cfg["rope_theta"],
        "scoring_func": "softmax",
        "seq_aux": True,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_moe": False,
        "vocab_size": cfg["vocab_size"],
    }
    gen_config = {"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": True, "temperature": 0.7,
                  "top_p": 0.9, "top_k": 20, "max_new_tokens": 32}

    def dump(name, obj):
        with open(os.path.join(args.outdir, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")

    dump("config.json", config)
    dump("generation_config.json", gen_config)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(args.tokenizer_dir, name), os.path.join(args.outdir, name))

    names = tensor_order(cfg["num_hidden_layers"])
    assert set(names) == set(sd), sorted(set(names) ^ set(sd))
    st_path = os.path.join(args.outdir, "model.safetensors")
    write_safetensors(st_path, [(n, sd[n].numpy()) for n in names])

    # --- reload and check -------------------------------------------------------------------
    header, W = read_safetensors(st_path)
    assert list(k for k in header if k != "__metadata__") == names and "lm_head.weight" not in W
    for n in names:
        assert torch.equal(W[n], sd[n]), n
    ref = Reference(W, cfg)
    train_model = train_demo_model.MiniMindForCausalLM(cfg)
    train_model.load_state_dict(sd)
    train_model.eval()

    prompts = []
    failures = []
    for name, text, expect in PROMPTS:
        ids = tok.encode(text)
        with torch.no_grad():
            all_logits = ref.forward(ids, [])
            tm = train_model(torch.tensor([ids]))[0]
        diff = float((tm - all_logits).abs().max())
        assert diff < 1e-4, (name, diff)
        last = all_logits[-1]
        probs = torch.softmax(last, -1)
        top = torch.topk(last, 5)
        g_ids, g_m = greedy(ref, ids, GREEDY_N, stop_at_eos=True)
        n_ids, n_m = greedy(ref, ids, GREEDY_N, stop_at_eos=False)
        assert n_ids[:len(g_ids)] == g_ids
        stop = "eos" if g_ids[-1] == EOS else "max_new_tokens"
        g_text = tok.decode(g_ids, skip_special_tokens=True)
        if g_text != expect or stop != "eos":
            failures.append(f"{name}: greedy {g_text!r} ({stop}), expected {expect!r}")
        prompts.append({
            "name": name,
            "text": text,
            "ids": ids,
            "len": len(ids),
            "tokens": [tok.decode([i]) for i in ids],
            "last_logits": [f32(v) for v in last.tolist()],
            "top5_ids": top.indices.tolist(),
            "top5_logits": [f32(v) for v in top.values.tolist()],
            "top5_probs": [round(float(probs[i]), 6) for i in top.indices],
            "top5_text": [tok.decode([i]) for i in top.indices.tolist()],
            "greedy_ids": g_ids,
            "greedy_stop": stop,
            "greedy_text": g_text,
            "greedy_margins": [round(m, 6) for m in g_m],
            "greedy_ignore_eos_ids": n_ids,
            "greedy_ignore_eos_text": tok.decode(n_ids),
            "greedy_ignore_eos_margins": [round(m, 6) for m in n_m],
        })
        print(f"  {name:15s} {text!r:28s} top5 " +
              ", ".join(f"{t!r} {p:.3f}" for t, p in zip(prompts[-1]["top5_text"], prompts[-1]["top5_probs"])))
        print(f"  {'':15s} greedy -> {g_text!r} ({stop}, min margin {min(g_m):.3f}); "
              f"ignore eos -> {tok.decode(n_ids)!r} (min margin {min(n_m):.3f})")

    chats = []
    for name, messages, tools, think, wanted in CHATS:
        text = chat_prompt(messages, tools, think)
        ids = tok.encode(text)
        g_ids, g_m = greedy(ref, ids, CHAT_GREEDY_N, stop_at_eos=True)
        stop = "eos" if g_ids[-1] == EOS else "max_new_tokens"
        g_text = tok.decode(g_ids, skip_special_tokens=True)
        reply = reply_of(g_text, think)
        if not wanted(reply) or stop != "eos" or expected_reply_text(messages, tools, think, reply) != g_text:
            failures.append(f"chat {name}: greedy {g_text!r} ({stop}) is not what the demo was trained to say")
        chats.append({"name": name, "messages": messages, "tools": demo_corpus.DEMO_TOOLS if tools else [],
                      "open_thinking": think, "prompt_text": text, "prompt_ids": ids, "greedy_ids": g_ids,
                      "greedy_stop": stop, "greedy_text": g_text, "greedy_margins": [round(m, 6) for m in g_m],
                      "reply": reply})
        print(f"  chat {name:20s} {len(ids)} prompt ids; greedy -> {g_text!r} ({stop}, min margin {min(g_m):.3f})")

    weather = prompts[0]
    assert weather["text"] == "今天天气" and weather["top5_text"][0] == "很", weather["top5_text"]
    assert not failures, "\n".join(failures)
    for p in prompts:
        assert min(p["greedy_margins"]) > 0.05, (p["name"], p["greedy_margins"])
    # Logits agree within TOLERANCE wherever they are computed, so a margin above twice that
    # cannot flip a greedy step; the chats' longer prompts leave some steps with small margins.
    for c in chats:
        assert min(c["greedy_margins"]) > 4 * TOLERANCE, (c["name"], c["greedy_margins"])

    golden = {
        "format": "minimind-demo-golden-1",
        "model": ".",
        "architecture": "MiniMindForCausalLM",
        "weights_dtype": "F32",
        "compute_dtype": "float32",
        "vocab_size": cfg["vocab_size"],
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "greedy_n": GREEDY_N,
        "tolerance": {"logits_max_abs": TOLERANCE, "greedy_ids": "exact"},
        "prompts": prompts,
        "chat_greedy_n": CHAT_GREEDY_N,
        "chats": chats,
    }
    with open(os.path.join(args.outdir, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")

    write_readme(args.outdir, cfg, log, prompts, chats)
    sizes = {n: os.path.getsize(os.path.join(args.outdir, n)) for n in sorted(os.listdir(args.outdir))}
    print("export_demo: wrote " + ", ".join(f"{n} {s}" for n, s in sizes.items()) +
          f"; total {sum(sizes.values())} bytes")
    return 0


README = """# The embedded demo model

A tiny MiniMind2-architecture model (`MiniMindForCausalLM`, `model_type` `minimind`) that the
project makes itself, so that the programs run on a fresh machine without a downloaded
checkpoint and without network: `build/bin/minimind-next --prompt 今天天气` ranks 很 first.
It is trained on a small templated bilingual corpus (tools/demo_corpus.py) and knows little
more than its sentences, e.g. 今天天气很好，我们去公园散步。 / 小明家养了一只猫，它喜欢吃鱼。 /
这块石头很硬。 / The cat eats fish. It also learned a few chats in minimind-3's chat format: it
thinks when the think block is left open (`minimind-chat --think`, the web page's Think), and it
calls two made-up tools, `get_weather(city)` and `add(a, b)`, then answers a tool's result in the
form it learned (below, "Chats"). It is too small, and trained too briefly, to copy values: the
arguments of `add` and the weather in the answer are not the ones asked or given.

Everything here is generated by `tools/make_demo.sh` (see tools/README.md); do not edit by hand.

| | |
| --- | --- |
| architecture | hidden {hidden_size}, {num_hidden_layers} layers, {num_attention_heads} heads / {num_key_value_heads} kv heads (head_dim {head_dim}), intermediate {intermediate_size}, vocab {vocab_size}, rms_norm_eps {rms_norm_eps}, rope_theta {rope_theta:g}, max_position_embeddings {max_position_embeddings}, tied embeddings (no `lm_head.weight`) |
| parameters | {parameters} (F32) |
| tokenizer | byte-level BPE trained on the corpus (tools/train_bpe.py), MiniMind2's tokenizer.json layout and special tokens (`<|endoftext|>` 0, `<|im_start|>` 1, `<|im_end|>` 2), minimind-3's chat template (tools, tool calls and a think block in every assistant turn) |
| training | {steps} steps of {batch} x {seq_len} text tokens + {chat_batch} x {chat_seq_len} chat tokens, AdamW lr {lr} (cosine), seed {seed}, {threads} thread(s): {train_seconds} s; final loss {final_loss_avg50} (mean of the last 50 steps), eval loss {eval_loss} |
| sequences | upstream pretraining format `<|im_start|> text <|im_end|>`, packed; {p_bos_pct}% of sequences keep the bos of their first document, the rest start with bare text, so prompts with and without a leading `<|im_start|>` both work; {chats} chats (tools/demo_corpus.py: the facts as questions, 2 of 3 with reasoning; weather and sums through the tools) rendered with the chat template, packed in a batch of their own |

## Files

`config.json`, `generation_config.json`, `model.safetensors` (F32), `tokenizer.json`,
`tokenizer_config.json`: a Hugging Face checkpoint directory like a real MiniMind2 one.
`golden.json`: expected outputs for tests (below).

## golden.json

Computed in float32 by a plain torch forward pass (tools/export_demo.py, conventions of
shared/golden/README.md) over the weights read back from `model.safetensors`.

| field | meaning |
| --- | --- |
| `format` | `"minimind-demo-golden-1"` |
| `model` | `"."`: this directory |
| `architecture`, `weights_dtype`, `compute_dtype` | `"MiniMindForCausalLM"`, `"F32"`, `"float32"` |
| `vocab_size`, `bos_token_id`, `eos_token_id` | {vocab_size}, 1, 2 |
| `greedy_n` | {greedy_n}: the most new tokens of each greedy run |
| `tolerance` | `{{"logits_max_abs": {tol}, "greedy_ids": "exact"}}` |
| `prompts[k].name` | a short name (`weather_zh`, `pet_zh`, `stone_zh`, `cat_en`, ...) |
| `prompts[k].text` | the prompt text |
| `prompts[k].ids`, `.len` | its ids from an encoder with HF semantics (`add_special_tokens` false: no bos added; a literal `<|im_start|>` in the text is the added token 1) |
| `prompts[k].tokens` | each id decoded alone |
| `prompts[k].last_logits` | the logits at the last prompt position, `vocab_size` floats |
| `prompts[k].top5_ids`, `.top5_logits`, `.top5_probs`, `.top5_text` | the five largest of `last_logits`, descending; softmax probabilities; each id decoded |
| `prompts[k].greedy_ids` | greedy new ids (prompt not included), stopping after eos (2, included) or after `greedy_n` ids |
| `prompts[k].greedy_stop` | `"eos"` or `"max_new_tokens"` |
| `prompts[k].greedy_text` | `greedy_ids` decoded without special tokens: the learned sentence's continuation |
| `prompts[k].greedy_margins` | top-1 minus top-2 logit at each greedy step |
| `prompts[k].greedy_ignore_eos_ids`, `_text`, `_margins` | the same with no stop at eos (eos is fed back like any id: `--ignore-eos`), exactly `greedy_n` ids; the text keeps special tokens |
| `chat_greedy_n` | {chat_greedy_n}: the most new tokens of each chat's greedy run |
| `chats[k].name`, `.messages`, `.tools`, `.open_thinking` | a conversation (OpenAI-style messages), the tools offered (`[]`: none) and whether the think block is left open |
| `chats[k].prompt_text`, `.prompt_ids` | the conversation rendered by the chat template (python3-jinja2, Hugging Face's `tojson`) with the generation prompt, and its ids |
| `chats[k].greedy_ids`, `.greedy_stop`, `.greedy_text`, `.greedy_margins` | as for `prompts` (the text without special tokens) |
| `chats[k].reply` | the assistant message the greedy text is: `content`, `reasoning_content`, `tool_calls` |

Greedy: run the prompt from an empty KV cache, take the argmax of the last position, feed it
back one id at a time. The same ids come from recomputing the whole sequence each step.

## The prompts

| name | prompt | top-5 after the prompt (probability) | greedy continuation |
| --- | --- | --- | --- |
{prompt_rows}

## Chats

Greedy replies to conversations in the chat template (`chats` in golden.json; "think": the
prompt ends in an open `<think>`; "tools": `get_weather` and `add` offered, as the web page's
"The demo model's tools" button offers them):

| name | conversation | greedy reply (`<think>`/`<tool_call>` as written) |
| --- | --- | --- |
{chat_rows}
"""


def write_readme(outdir, cfg, log, prompts, chats):
    chat_rows = []
    for c in chats:
        said = " / ".join(f"{m['role']}: " + (m["content"] or json.dumps(m["tool_calls"][0]["function"], ensure_ascii=False))
                          for m in c["messages"])
        flags = ", ".join(f for f, on in (("think", c["open_thinking"]), ("tools", bool(c["tools"]))) if on)
        chat_rows.append(f"| {c['name']} | {said}{' (' + flags + ')' if flags else ''} | `{json.dumps(c['greedy_text'], ensure_ascii=False)}` |")
    rows = []
    for p in prompts:
        top = ", ".join(f"`{t}` {pr:.3f}".replace("|", "\\|") for t, pr in zip(p["top5_text"], p["top5_probs"]))
        rows.append(f"| {p['name']} | `{p['text']}` | {top} | `{p['greedy_text']}` (min margin {min(p['greedy_margins']):.2f}) |"
                    .replace("`<|im_start|>", "`<\\|im_start\\|>"))
    text = README.format(head_dim=cfg["hidden_size"] // cfg["num_attention_heads"], greedy_n=GREEDY_N,
                         tol=TOLERANCE, p_bos_pct=round(100 * log["p_bos"]), prompt_rows="\n".join(rows),
                         chat_greedy_n=CHAT_GREEDY_N, chat_rows="\n".join(chat_rows),
                         **cfg, **log)
    with open(os.path.join(outdir, "README.md"), "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
