#!/usr/bin/env python3
"""Writes tests/data/quants/: float32 inputs with the edge cases of block quantization, and what
llama.cpp's gguf-py (`gguf.quants.quantize`) makes of them in each type the writer produces. The
recipe and the llama.cpp commit are in tests/data/quants/README.md.

  PYTHONPATH=/path/to/llama.cpp/gguf-py python3 tools/make_quant_vectors.py
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "data", "quants")
TYPES = {"f16": T.F16, "bf16": T.BF16, "q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1,
         "q5_0": T.Q5_0, "q5_1": T.Q5_1}


def blocks():
    """Blocks of 32 values, each a case a quantizer can get wrong."""
    rng = np.random.default_rng(47)
    out = [np.zeros(32)]                                          # all zero: d = 0, id = 0
    b = np.full(32, 0.25); b[5] = 127.0; b[6:20] = np.arange(14) + 0.5  # q8_0: d = 1, ties at .5
    out.append(b)
    b = np.arange(32) * 0.5 - 8.0                                 # q4_0 / q5_0: d = 1 or 0.5, x * id + 8.5 on integers
    out.append(b)
    b = rng.standard_normal(32); b[3] = 3.0; b[9] = -3.0           # equal magnitudes: the first sets the sign
    out.append(b)
    b = rng.standard_normal(32); b[0] = -4.0                       # a negative extreme
    out.append(b)
    out.append(rng.standard_normal(32) * 1e-6)                    # d below f16's normal range
    out.append(rng.standard_normal(32) * 1e-41)                   # float32 subnormals
    out.append(rng.standard_normal(32) * 1e7)                     # d beyond f16's range (inf)
    out.append(np.full(32, -2.5))                                 # constant: max == min
    b = np.linspace(-1, 3, 32)                                    # q4_1 / q5_1 level boundaries
    out.append(b)
    # f16 / bf16 rounding: halfway cases, overflow, signed zero, NaN and inf.
    h = np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 65520.0, 65519.0, -0.0, np.inf, -np.inf,
                  np.nan, 2**-25, 2**-24 * 1.5, 6.1e-5, 1e-45, -1e-45, 3.4e38], dtype=np.float64)
    out.append(np.concatenate([h, -h[:16]]))
    for scale in (0.02, 0.1, 1.0, 30.0):                          # weights of a model's magnitudes
        out.extend(rng.standard_normal((4, 32)) * scale)
    return np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1, 32) for x in out]).astype(np.float32)


def main():
    os.makedirs(OUT, exist_ok=True)
    x = blocks()
    rows = x.reshape(-1, 32)  # a block a row
    rows.tofile(os.path.join(OUT, "input.f32"))
    finite = np.isfinite(rows).all(axis=1)
    for name, qtype in TYPES.items():
        # The block quantizers get the finite rows only (NaN and inf have no defined block).
        data = rows if qtype in (T.F16, T.BF16) else rows[finite]
        with np.errstate(all="ignore"):
            q = quantize(data, qtype)
        np.ascontiguousarray(q).tofile(os.path.join(OUT, name + ".bin"))
    np.array(finite, dtype=np.uint8).tofile(os.path.join(OUT, "finite_rows.u8"))


if __name__ == "__main__":
    main()
