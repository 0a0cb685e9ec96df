#!/usr/bin/env python3
"""Writes tests/data/kquants/: float32 rows of 256 values with the edge cases of the K
quantizations and what llama.cpp's llama-quantize (no importance matrix) makes of them as Q4_K and
Q6_K, and the tensor types its Q4_K_M preset chooses for the published MiniMind shapes. gguf-py has
no K quantizers, so llama-quantize itself is the oracle: the rows are one tensor of a small F32
llama GGUF written with gguf-py, quantized with `--pure` (every matrix one type). The recipe and
the llama.cpp commit are in tests/data/kquants/README.md. Takes an existing llama-quantize; never
builds llama.cpp.

  python3 tools/make_kquant_vectors.py --gguf-py /path/to/llama.cpp/gguf-py \\
      --quantize /path/to/llama.cpp/build/bin/llama-quantize
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (configs and random weights)
import make_llamacpp_gguf  # noqa: E402  (an F32 GGUF as llama.cpp's tools expect it)

OUT = os.path.join(ROOT, "tests", "data", "kquants")
ROWS_TENSOR = ("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight")
# The published shapes (Config::minimind2_small() and Config::minimind3()).
SHAPES = {
    "minimind2-small": mg.mm2_config(512, 8, 8, 2, 1408, vocab=6400),
    "minimind-3": mg.mm3_config(768, 8, 8, 4, 96, 2432, vocab=6400),
}


def rows():
    """Rows of 256 values (one super-block each), each a case a K quantizer can get wrong."""
    rng = np.random.default_rng(4747)
    out = [np.zeros(256)]                                         # all zero
    b = np.zeros(256); b[77] = 0.5                                # one value: 15 zero sub-blocks
    out.append(b)
    out.append(np.full(256, 0.125))                               # constant positive: min clipped to 0
    out.append(np.full(256, -3.0))                                # constant negative
    out.append(np.abs(rng.standard_normal(256)) * 0.05)           # all positive
    out.append(-np.abs(rng.standard_normal(256)) * 0.05)          # all negative
    b = rng.standard_normal(256) * 0.02; b[3] = 1.0               # an outlier: small sub-block scales round to 0
    out.append(b)
    b = rng.standard_normal(256) * 0.02; b[200] = -1.5            # a negative outlier
    out.append(b)
    b = rng.standard_normal(256) * 0.02; b[32:64] = 0             # one zero sub-block of 32 (and two of 16)
    out.append(b)
    out.append(rng.standard_normal(256) * np.repeat(10.0 ** np.arange(-4, 4), 32))  # sub-blocks 1e-4 .. 1e3
    out.append(np.tile(np.arange(-8, 8, dtype=np.float64), 16))   # integers: ties in the level search
    out.append(np.tile(np.arange(-32, 32, dtype=np.float64), 4) * 0.5)  # halves
    out.append(np.tile([1.0, -1.0], 128))                         # alternating signs
    out.append(rng.standard_normal(256) * 1e-9)                   # scales far below f16's normal range
    out.append(rng.standard_normal(256) * 1e-30)                  # d and dmin round to 0 in f16
    out.append(rng.standard_normal(256) * 1e3)                    # large weights
    out.append(np.linspace(-1, 1, 256))                           # evenly spaced
    b = rng.standard_normal(256) * 0.02; b[::16] = 0.3            # an extreme in every sub-block of 16
    out.append(b)
    for scale in (0.005, 0.02, 0.05, 0.2, 1.0):                   # weights of a model's magnitudes
        out.extend(rng.standard_normal((6, 256)) * scale)
    out.extend(rng.standard_t(3, (8, 256)) * 0.02)                # heavy tails
    return np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1, 256) for x in out]).astype(np.float32)


def quantize(gguf, quantize_bin, source, out, preset, pure):
    args = [quantize_bin] + (["--pure"] if pure else []) + [source, out, preset]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {t.name: t for t in gguf.GGUFReader(out).tensors}


def main():
    args, gguf = make_llamacpp_gguf.llama_cpp_tools(__doc__.split("\n\n")[0])
    os.makedirs(OUT, exist_ok=True)
    x = rows()
    x.tofile(os.path.join(OUT, "input.f32"))
    with tempfile.TemporaryDirectory() as tmp:
        # A one-layer llama of rows of 256 whose ffn_up starts with the rows above.
        config = mg.mm2_config(256, 1, 4, 4, 256, vocab=64)
        tensors = {n: torch.from_numpy(a) for n, a in mg.draw_weights(mg.Cfg(config), 4748)}
        up = tensors[ROWS_TENSOR[0]].numpy().copy()
        up[: len(x)] = x
        tensors[ROWS_TENSOR[0]] = torch.from_numpy(up)
        source = os.path.join(tmp, "rows-f32.gguf")
        make_llamacpp_gguf.write(gguf, source, config, tensors, f16=False, name="kquant-rows")
        for preset, name in (("Q4_K_M", "q4_k"), ("Q6_K", "q6_k")):
            t = quantize(gguf, args.quantize, source, os.path.join(tmp, name + ".gguf"), preset, pure=True)[ROWS_TENSOR[1]]
            assert t.tensor_type.name == name.upper(), t.tensor_type.name
            np.ascontiguousarray(np.asarray(t.data)[: len(x)]).tofile(os.path.join(OUT, name + ".bin"))

        # The types of Q4_K_M for the published shapes (the values do not matter: zeros).
        types = {}
        for shape, config in SHAPES.items():
            zeros = {n: torch.zeros(a.shape) for n, a in mg.draw_weights(mg.Cfg(config), 0)}
            source = os.path.join(tmp, shape + "-f32.gguf")
            make_llamacpp_gguf.write(gguf, source, config, zeros, f16=False, name=shape)
            out = quantize(gguf, args.quantize, source, os.path.join(tmp, shape + "-q4_k_m.gguf"), "Q4_K_M", pure=False)
            types[shape] = [[t.name, [int(d) for d in t.shape], t.tensor_type.name] for t in out.values()]
            os.remove(source)
    with open(os.path.join(OUT, "q4_k_m_types.json"), "w") as f:
        f.write(json.dumps(types, indent=1) + "\n")


if __name__ == "__main__":
    main()
