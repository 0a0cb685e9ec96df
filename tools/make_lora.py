#!/usr/bin/python3
"""LoRA golden cases: random adapters over the golden models, and the logits PyTorch gives with them.

The adapters come in both formats minimind.cpp reads:

  * upstream's (jingyaogong/minimind model/model_lora.py): apply_lora gives every nn.Linear with
    in_features == out_features a pair A [rank, in], B [out, rank]; forward W x + B(A(x)), no
    factor; save_lora torch.save's {"<module>.lora.A.weight", "<module>.lora.B.weight"} (float16
    since 2026, float32 before; a DDP "module." prefix when saved from the wrapped model);
  * PEFT's: adapter_config.json (r, lora_alpha, target_modules, use_rslora) and
    adapter_model.safetensors with base_model.model.<module>.lora_A.weight / lora_B.weight;
    forward W x + (lora_alpha / r) B(A(x)), lora_alpha / sqrt(r) with use_rslora.

The reference is tools/make_golden.py's model with each adapted nn.Linear's forward wrapped the
way apply_lora wraps it (W x plus each adapter's scale * factor * B(A(x))). A case may run
several adapters at once, each with its scale. Usage (Debian's python3-torch and python3-numpy):

  /usr/bin/python3 tools/make_lora.py                 # (re)write tests/data/lora/
  /usr/bin/python3 tools/make_lora.py --bench-adapter OUT.pth --hidden 512 --layers 8 --rank 16 \\
      --modules q_proj,o_proj --seed 1                # a random upstream adapter for minimind-bench

Deterministic like make_golden.py (numpy's legacy RandomState, torch on one thread), except that
torch.save's archive names each file's folder after it, so only the tensors, not the zip bytes,
are promised identical on rerun.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as g  # noqa: E402

torch.set_num_threads(1)

GREEDY_N = 16
TOL_F32 = 1e-4


# ---------------------------------------------------------------------------------------------
# adapters: random pairs, written in either format
# ---------------------------------------------------------------------------------------------

class Adapter:
    """pairs: module name -> (A [r, in], B [out, r]) float32 arrays as stored (rounded to the file's
    dtype); factor: the format's multiplier (1 upstream, lora_alpha / r or / sqrt(r) for PEFT)."""

    def __init__(self, fmt, pairs, factor=1.0, config=None, dtype="F32", ddp=False):
        self.fmt, self.pairs, self.factor, self.config, self.dtype, self.ddp = fmt, pairs, factor, config, dtype, ddp


def upstream_modules(model):
    """apply_lora's choice: every nn.Linear whose in_features == out_features."""
    return [n for n, mod in model.named_modules() if isinstance(mod, nn.Linear) and mod.in_features == mod.out_features]


def peft_modules(model, targets):
    """PEFT's matching of a target_modules list: a module whose name is a target or ends in '.' + target."""
    return [n for n, mod in model.named_modules()
            if isinstance(mod, nn.Linear) and any(n == t or n.endswith("." + t) for t in targets)]


def random_pairs(model, modules, rank, seed, factor, dtype):
    """Pairs whose delta factor * B A has entries of about 0.1 (the weights are about 0.25)."""
    rng = np.random.RandomState(seed)
    std = math.sqrt(0.1 / (math.sqrt(rank) * factor))
    linear = dict(model.named_modules())
    pairs = {}
    for name in modules:
        mod = linear[name]
        a = std * rng.standard_normal((rank, mod.in_features))
        b = std * rng.standard_normal((mod.out_features, rank))
        pairs[name] = (g.round_to_dtype(a, dtype)[1], g.round_to_dtype(b, dtype)[1])
    return pairs


def upstream_adapter(model, rank, seed, dtype="F16", ddp=False, modules=None):
    modules = upstream_modules(model) if modules is None else modules
    return Adapter("upstream", random_pairs(model, modules, rank, seed, 1.0, dtype), dtype=dtype, ddp=ddp)


def peft_adapter(model, rank, alpha, targets, seed, rslora=False):
    factor = alpha / (math.sqrt(rank) if rslora else rank)
    config = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": None, "bias": "none",
              "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
              "layers_to_transform": None, "lora_alpha": alpha, "lora_dropout": 0.0, "modules_to_save": None,
              "peft_type": "LORA", "r": rank, "rank_pattern": {}, "revision": None, "target_modules": targets,
              "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": rslora}
    pairs = random_pairs(model, peft_modules(model, targets), rank, seed, factor, "F32")
    return Adapter("peft", pairs, factor, config)


TORCH_DTYPE = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def write_adapter(adapter, path):
    """An upstream .pth as save_lora writes it, or a PEFT directory as save_pretrained does."""
    if adapter.fmt == "upstream":
        prefix = "module." if adapter.ddp else ""
        sd = {}
        for name, (a, b) in adapter.pairs.items():
            sd[f"{prefix}{name}.lora.A.weight"] = torch.from_numpy(a).to(TORCH_DTYPE[adapter.dtype])
            sd[f"{prefix}{name}.lora.B.weight"] = torch.from_numpy(b).to(TORCH_DTYPE[adapter.dtype])
        torch.save(sd, path)
        return
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        f.write(json.dumps(adapter.config, indent=2, sort_keys=True) + "\n")
    tensors = []
    for name, (a, b) in adapter.pairs.items():
        tensors += [(f"base_model.model.{name}.lora_A.weight", a), (f"base_model.model.{name}.lora_B.weight", b)]
    g.write_safetensors(os.path.join(path, "adapter_model.safetensors"), tensors, "F32")


def apply(model, uses):
    """Wraps each adapted Linear's forward as apply_lora does: W x + sum of scale * factor * B(A(x))."""
    linear = dict(model.named_modules())
    by_module = {}
    for adapter, scale in uses:
        for name, (a, b) in adapter.pairs.items():
            by_module.setdefault(name, []).append((torch.from_numpy(a), torch.from_numpy(b), scale * adapter.factor))
    for name, pairs in by_module.items():
        mod = linear[name]

        def forward_with_lora(x, base=mod.forward, pairs=pairs):
            y = base(x)
            for a, b, s in pairs:
                y = y + s * ((x @ a.t()) @ b.t())
            return y

        mod.forward = forward_with_lora
    return model


# ---------------------------------------------------------------------------------------------
# the committed cases
# ---------------------------------------------------------------------------------------------

# adapter name -> (base golden case, how it is made, where it goes). Bases: MiniMind2 dense (q and
# o square), MiniMind2 MoE (q, o, every routed and shared expert square), minimind-3 dense (no
# square Linear at this size, so PEFT only), minimind-3 MoE (experts square).
ADAPTERS = [
    ("mm2-upstream-f32", "mm2-dense-f32", lambda m, s: upstream_adapter(m, 4, s, dtype="F32"), "mm2-upstream-f32.pth", 11),
    ("mm2-peft", "mm2-dense-f32",
     lambda m, s: peft_adapter(m, 4, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], s),
     "mm2-peft", 12),
    ("mm2-moe-upstream-ddp", "mm2-moe", lambda m, s: upstream_adapter(m, 4, s, dtype="F16", ddp=True),
     "mm2-moe-upstream-ddp.pth", 13),
    ("mm3-peft-rslora", "mm3-dense",
     lambda m, s: peft_adapter(m, 8, 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], s,
                               rslora=True), "mm3-peft-rslora", 14),
    ("mm3-moe-upstream", "mm3-moe", lambda m, s: upstream_adapter(m, 4, s, dtype="F16"), "mm3-moe-upstream.pth", 15),
    ("mm3-moe-peft", "mm3-moe",
     lambda m, s: peft_adapter(m, 4, 4, ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"], s), "mm3-moe-peft", 16),
]

# Two adapters at once, each with a scale: (case, base, [(adapter, scale)] candidates, the first
# acceptable one is kept).
COMBINED = [
    ("mm2-two-scaled", "mm2-dense-f32", [[("mm2-upstream-f32", 0.5), ("mm2-peft", 1.5)],
                                         [("mm2-upstream-f32", 0.75), ("mm2-peft", 1.25)],
                                         [("mm2-upstream-f32", -0.5), ("mm2-peft", 0.5)]]),
    ("mm3-moe-two-scaled", "mm3-moe", [[("mm3-moe-upstream", -0.75), ("mm3-moe-peft", 2.0)],
                                       [("mm3-moe-upstream", 0.5), ("mm3-moe-peft", 1.5)],
                                       [("mm3-moe-upstream", 1.25), ("mm3-moe-peft", -0.5)],
                                       [("mm3-moe-upstream", 0.25), ("mm3-moe-peft", 0.75)]]),
]


def base_model(golden, base):
    d = os.path.join(golden, base)
    with open(os.path.join(d, "config.json")) as f:
        cfg = g.Cfg(json.load(f))
    with open(os.path.join(d, "expected.json")) as f:
        prompts = [(p["name"], p["ids"]) for p in json.load(f)["prompts"] if p["name"] in ("short", "medium")]
    return cfg, g.read_safetensors(os.path.join(d, "model.safetensors"))[0], prompts


def run_case(cfg, tensors, prompts, uses):
    m = apply(g.load_model(cfg, tensors), uses)
    g.MoE.router_gaps.clear()
    res = []
    for name, ids in prompts:
        logits = g.full_logits(m, ids)
        greedy_ids, margins, cache_err = g.greedy(m, ids, GREEDY_N)
        res.append(dict(name=name, ids=ids, logits=logits, greedy_ids=greedy_ids, margin=min(margins), cache_err=cache_err))
    return res, (min(g.MoE.router_gaps) if g.MoE.router_gaps else None)


def judge(cfg, tensors, prompts, uses):
    """-> (results, None) when the adapters matter and no decision sits near a tie, else (None, why)."""
    res, router_gap = run_case(cfg, tensors, prompts, uses)
    plain, _ = run_case(cfg, tensors, prompts, [])
    change = max(float((r["logits"] - p["logits"]).abs().max()) for r, p in zip(res, plain))
    margin = min(r["margin"] for r in res)
    if change <= 0.1:
        return None, f"the adapters change the logits by only {change}"
    if margin < g.MIN_GREEDY_MARGIN:
        return None, f"greedy margin {margin:.4f}"
    if router_gap is not None and router_gap < g.MIN_ROUTER_GAP:
        return None, f"router gap {router_gap:.3g}"
    return (res, f"changes the logits by up to {change:.3f}; greedy margin {margin:.4f}; router gap "
                 f"{router_gap if router_gap is None else round(router_gap, 5)}; "
                 f"cache {max(r['cache_err'] for r in res):.1e}"), None


def write_case(out, case, base, res, chosen, made):
    d = os.path.join(out, case)
    os.makedirs(d, exist_ok=True)
    prompts_json = []
    for k, r in enumerate(res):
        file = f"logits_{k}.f32"
        r["logits"].numpy().astype("<f4").tofile(os.path.join(d, file))
        prompts_json.append({"name": r["name"], "ids": r["ids"], "logits_file": file,
                             "logits_shape": list(r["logits"].shape), "greedy_ids": r["greedy_ids"]})
    expected = {"case": case, "base": "golden/" + base,
                "adapters": [{"path": made[a][1], "format": made[a][0].fmt, "scale": s} for a, s in chosen],
                "tolerance": {"logits_max_abs": TOL_F32, "greedy_ids": "exact"}, "prompts": prompts_json}
    with open(os.path.join(d, "expected.json"), "w") as f:
        f.write(json.dumps(expected, indent=1) + "\n")


def write_cases(out, golden):
    adapters_dir = os.path.join(out, "adapters")
    os.makedirs(adapters_dir, exist_ok=True)
    made, cases = {}, []
    for name, base, make, file, seed in ADAPTERS:  # each alone at scale 1: the first acceptable seed
        cfg, tensors, prompts = base_model(golden, base)
        for s in range(seed, seed + 1000, 100):
            adapter = make(g.load_model(cfg, tensors), s)
            result, why = judge(cfg, tensors, prompts, [(adapter, 1.0)])
            if why is None:
                break
            print(f"  {name}: seed {s} rejected ({why})")
        else:
            raise RuntimeError(f"{name}: no acceptable seed")
        res, note = result
        write_adapter(adapter, os.path.join(adapters_dir, file))
        made[name] = (adapter, "adapters/" + file)
        write_case(out, name, base, res, [(name, 1.0)], made)
        cases.append(name)
        print(f"{name:22s} {adapter.fmt:8s} {len(adapter.pairs):3d} modules, factor {adapter.factor:.4g}, seed {s}: {note}")
    for case, base, candidates in COMBINED:
        cfg, tensors, prompts = base_model(golden, base)
        for chosen in candidates:
            result, why = judge(cfg, tensors, prompts, [(made[a][0], s) for a, s in chosen])
            if why is None:
                break
            print(f"  {case}: scales {[s for _, s in chosen]} rejected ({why})")
        else:
            raise RuntimeError(f"{case}: no acceptable scales")
        write_case(out, case, base, result[0], chosen, made)
        cases.append(case)
        print(f"{case:22s} scales {[s for _, s in chosen]}: {result[1]}")
    with open(os.path.join(out, "cases.json"), "w") as f:
        f.write(json.dumps(cases, indent=1) + "\n")
    write_bad(os.path.join(out, "bad"), golden)


def write_bad(d, golden):
    """Adapters the reader must refuse, each for one reason, over the mm2-dense-f32 golden model."""
    os.makedirs(d, exist_ok=True)
    cfg, tensors, _ = base_model(golden, "mm2-dense-f32")
    m = g.load_model(cfg, tensors)
    good = upstream_adapter(m, 4, 21, dtype="F32").pairs
    q = "model.layers.0.self_attn.q_proj"
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))

    def save(name, sd):
        torch.save(sd, os.path.join(d, name))

    a, b = good[q]
    save("rank-mismatch.pth", {f"{q}.lora.A.weight": t(a), f"{q}.lora.B.weight": t(b[:, :3])})
    save("unknown-module.pth", {"model.layers.0.self_attn.x_proj.lora.A.weight": t(a),
                                "model.layers.0.self_attn.x_proj.lora.B.weight": t(b)})
    save("layer-out-of-range.pth", {"model.layers.5.self_attn.q_proj.lora.A.weight": t(a),
                                    "model.layers.5.self_attn.q_proj.lora.B.weight": t(b)})
    nan = b.copy()
    nan[3, 1] = np.nan
    save("nan.pth", {f"{q}.lora.A.weight": t(a), f"{q}.lora.B.weight": t(nan)})
    wide = np.random.RandomState(22).standard_normal((4, 2 * cfg.hidden))
    save("hidden-32.pth", {f"{q}.lora.A.weight": t(wide), f"{q}.lora.B.weight": t(np.zeros((2 * cfg.hidden, 4)))})
    save("not-only-tensors.pth", {f"{q}.lora.A.weight": t(a), f"{q}.lora.B.weight": t(b), "step": 1200})
    save("missing-b.pth", {f"{q}.lora.A.weight": t(a)})
    print(f"bad adapters in {d}: {sorted(os.listdir(d))}")


def check_cases(out):
    """Reads the written adapters back as files and recomputes every case's logits (1e-5)."""
    with open(os.path.join(out, "cases.json")) as f:
        cases = json.load(f)
    for case in cases:
        with open(os.path.join(out, case, "expected.json")) as f:
            exp = json.load(f)
        cfg, tensors, _ = base_model(os.path.dirname(out), exp["base"])
        uses = [(read_adapter(os.path.join(out, u["path"])), u["scale"]) for u in exp["adapters"]]
        m = apply(g.load_model(cfg, tensors), uses)
        for p in exp["prompts"]:
            ref = np.fromfile(os.path.join(out, case, p["logits_file"]), dtype="<f4").reshape(p["logits_shape"])
            diff = float(np.abs(g.full_logits(m, p["ids"]).numpy() - ref).max())
            assert diff <= 1e-5, f"{case}/{p['name']}: read back, the logits differ by {diff}"
    print(f"read back: {len(cases)} cases reproduce their logits")


def read_adapter(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "adapter_config.json")) as f:
            config = json.load(f)
        tensors, _, _ = g.read_safetensors(os.path.join(path, "adapter_model.safetensors"))
        r, alpha = config["r"], config["lora_alpha"]
        factor = alpha / (math.sqrt(r) if config.get("use_rslora") else r)
        pre, a_end, b_end = "base_model.model.", ".lora_A.weight", ".lora_B.weight"
    else:
        tensors = {k[7:] if k.startswith("module.") else k: v.float() for k, v in torch.load(path).items()}
        factor, pre, a_end, b_end = 1.0, "", ".lora.A.weight", ".lora.B.weight"
    pairs = {k[len(pre):-len(a_end)]: (v.numpy(), tensors[k[:-len(a_end)] + b_end].numpy())
             for k, v in tensors.items() if k.endswith(a_end)}
    return Adapter("read", pairs, factor)


def bench_adapter(args):
    """A random upstream adapter for a model of the given width (minimind-bench's random weights)."""
    rng = np.random.RandomState(args.seed)
    sd = {}
    for layer in range(args.layers):
        for module in args.modules.split(","):
            name = f"model.layers.{layer}.self_attn.{module}"
            sd[f"{name}.lora.A.weight"] = torch.from_numpy(0.02 * rng.standard_normal((args.rank, args.hidden))).half()
            sd[f"{name}.lora.B.weight"] = torch.from_numpy(0.02 * rng.standard_normal((args.hidden, args.rank))).half()
    torch.save(sd, args.bench_adapter)
    print(f"{args.bench_adapter}: rank {args.rank}, {len(sd) // 2} modules")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "lora"))
    ap.add_argument("--golden", default=os.path.join(here, "..", "tests", "data", "golden"))
    ap.add_argument("--bench-adapter", metavar="OUT")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--modules", default="q_proj,o_proj", help="attention projections of the square kind")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.bench_adapter:
        bench_adapter(args)
        return
    out = os.path.normpath(args.out)
    write_cases(out, os.path.normpath(args.golden))
    check_cases(out)


if __name__ == "__main__":
    main()
