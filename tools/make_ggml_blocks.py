#!/usr/bin/env python3
"""Writes tests/data/ggml_blocks/: for each ggml quantization llama-quantize's presets write
(Q4_0 ... IQ4_XS), random blocks with the edge cases forced in, and what llama.cpp's gguf-py
(`gguf.quants.dequantize`) makes of them, as the oracle test_ggml_quants.cpp compares with bit
for bit. The recipe is in tests/data/ggml_blocks/README.md.

  python3 tools/make_ggml_blocks.py --gguf-py /path/to/llama.cpp/gguf-py
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = "tests/data/ggml_blocks"

# Type name -> byte offsets of the block's float16 scales (d first, then m / dmin if any).
SCALES = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}

# Finite float16 scales worth covering: zeros of both signs, the smallest and largest subnormal,
# the smallest normal, one, negatives, the largest finite values.
EDGE_SCALES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x1234, 0x9234]


def make_blocks(name, type_size, rng):
    """Random blocks, then blocks whose bytes (scales aside) are all 0x00, all 0xFF, and a ramp
    through every byte value (so every 2/3/4/5/6-bit code occurs at every position class),
    each with every edge scale."""
    n_random = 96
    blocks = rng.integers(0, 256, size=(n_random, type_size), dtype=np.uint8)
    patterns = [np.zeros(type_size, np.uint8), np.full(type_size, 0xFF, np.uint8),
                (np.arange(type_size) * 1).astype(np.uint8), (np.arange(type_size) * 37 + 11).astype(np.uint8)]
    edge = []
    for p in patterns:
        for s in EDGE_SCALES:
            b = p.copy()
            for k, at in enumerate(SCALES[name]):
                # The second scale (m, dmin) takes the edge values in the other order.
                v = s if k == 0 else EDGE_SCALES[(EDGE_SCALES.index(s) + 5) % len(EDGE_SCALES)]
                b[at:at + 2] = np.frombuffer(np.uint16(v).tobytes(), np.uint8)
            edge.append(b)
    blocks = np.concatenate([blocks, np.stack(edge)])
    # Random blocks keep random scales, but finite ones (a non-finite scale is refused at load).
    for at in SCALES[name]:
        h = blocks[:, at:at + 2].copy().view(np.uint16)
        bad = (h & 0x7C00) == 0x7C00
        h[bad] &= 0xBFFF
        blocks[:, at:at + 2] = h.view(np.uint8)
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import gguf
    from gguf.quants import dequantize

    out = os.path.join(ROOT, OUT)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(43)
    for name in SCALES:
        qtype = gguf.GGMLQuantizationType[name]
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        blocks = make_blocks(name, type_size, rng)
        values = dequantize(blocks.reshape(1, -1), qtype).astype(np.float32)
        assert values.size == blocks.shape[0] * block_size, name
        assert np.isfinite(values).all(), name
        blocks.tofile(os.path.join(out, name.lower() + ".blocks"))
        values.tofile(os.path.join(out, name.lower() + ".f32"))


if __name__ == "__main__":
    main()
