#!/usr/bin/env python3
"""Tokens per second of the minimind module against the C++ program minimind-bench and against a
PyTorch model on the same checkpoint, one thread each, in alternating rounds (so a busy machine
slows all of them alike).

  prefill: a forward pass over a P-token prompt from an empty cache, the last position's logits
           (m.logits(ids, all_positions=False); minimind-bench's pp<P>); also m.logits(ids) with
           every position's logits [P, vocab], against PyTorch's forward, which computes them all
  decode:  N new tokens one at a time through the KV cache (m.generate(..., ignore_eos=True),
           timed in Python around the call, text included; minimind-bench's tg<N>; PyTorch: the
           same greedy loop over its KV cache)

The PyTorch model is tools/make_golden.py's (the reference the golden logits come from: upstream's
forward pass, the KV cache grown by torch.cat as upstream's is) under torch.set_num_threads(1).
Debian's torch links the system libblas.so.3, the reference BLAS unless another is chosen; to give
it OpenBLAS (libopenblas0-openmp) for this process only, as tools/make_demo.sh does, run with
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=1.

With --pairs N, N single runs of minimind-bench and of the module follow, alternating, and the
median of their paired ratios is printed: on a shared machine the comparison to quote.

  PYTHONPATH=build/python /usr/bin/python3 python/examples/speed.py --model DIR --bench build/bin/minimind-bench --pairs 12
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import minimind

ROOT = pathlib.Path(__file__).resolve().parents[2]


def rate(tokens, seconds):
    return tokens / seconds


def median_rate(fn, tokens, reps):
    fn()  # warm-up, as minimind-bench does
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return rate(tokens, statistics.median(times))


def bench_cpp(bench, model, dtype, p, n, reps):
    out = subprocess.run([bench, "--model", str(model), "--dtype", dtype, "-t", "1", "-p", str(p), "-n", str(n), "-r", str(reps), "--json"],
                         capture_output=True, check=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {row["test"]: row for row in rows}


def torch_model(model_dir):
    import torch
    sys.path.insert(0, str(ROOT / "tools"))
    import make_golden as reference
    torch.set_num_threads(1)
    config = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    tensors, _, _ = reference.read_safetensors(pathlib.Path(model_dir) / "model.safetensors")
    return torch, reference.load_model(reference.Cfg(config), tensors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint directory (config.json, model.safetensors, tokenizer.json)")
    parser.add_argument("--dtype", default="f32", help="weights held as (minimind.load's dtype, minimind-bench's --dtype)")
    parser.add_argument("--bench", help="minimind-bench to compare with")
    parser.add_argument("--torch", action="store_true", help="also time the PyTorch model")
    parser.add_argument("-p", type=int, default=128)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-r", type=int, default=5, help="repetitions per measurement (median)")
    parser.add_argument("--torch-r", type=int, default=1, help="repetitions of the PyTorch measurements (it is slow)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=0, help="then this many single runs of minimind-bench and the module, alternating")
    args = parser.parse_args()

    m = minimind.load(args.model, dtype=args.dtype, threads=1)
    vocab = m.config["vocab_size"]
    prompt = [(i * 7919 + 13) % vocab for i in range(args.p)]
    text_ok = m.tokenizer is not None
    if args.torch:
        torch, reference = torch_model(args.model)

    def torch_prefill():
        with torch.no_grad():
            reference(prompt)

    def torch_decode():
        with torch.no_grad():
            logits, cache = reference(prompt[:1])
            for _ in range(args.n - 1):
                logits, cache = reference([int(torch.argmax(logits[-1]))], cache)

    def python_decode():
        if text_ok:
            m.generate(prompt[:1], max_new_tokens=args.n, temperature=0, ignore_eos=True)
        else:
            m.generate_ids(prompt[:1], max_new_tokens=args.n, temperature=0, ignore_eos=True)

    for round_ in range(args.rounds):
        row = {}
        if args.bench:
            cpp = bench_cpp(args.bench, args.model, args.dtype, args.p, args.n, args.r)
            row["cpp pp"] = cpp[f"pp{args.p}"]["tokens_per_s_median"]
            row["cpp tg"] = cpp[f"tg{args.n}"]["tokens_per_s_median"]
        row["py pp"] = median_rate(lambda: m.logits(prompt, all_positions=False), args.p, args.r)
        row["py pp all rows"] = median_rate(lambda: m.logits(prompt), args.p, args.r)
        row["py tg"] = median_rate(python_decode, args.n, args.r)
        row["py tg (C++ clock)"] = m.last_stats["decode_tokens_per_second"]
        if args.torch:
            row["torch pp all rows"] = median_rate(torch_prefill, args.p, args.torch_r)
            row["torch tg"] = median_rate(torch_decode, args.n, args.torch_r)
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
        ratios = []
        if args.bench:
            ratios += [f"py/cpp pp {row['py pp'] / row['cpp pp']:.3f}", f"py/cpp tg {row['py tg'] / row['cpp tg']:.3f}"]
        if args.torch:
            ratios += [f"py/torch pp {row['py pp all rows'] / row['torch pp all rows']:.2f}",
                       f"py/torch tg {row['py tg'] / row['torch tg']:.2f}"]
        if ratios:
            print("         " + ", ".join(ratios), flush=True)

    # Pairs: one run of each side at a time, the order alternating, so that both meet the same
    # moment of a shared machine; the median of the pairs' ratios is the comparison to quote.
    if args.bench and args.pairs:
        paired = {"pp": [], "tg": []}
        for i in range(args.pairs):
            def cpp_run():
                cpp = bench_cpp(args.bench, args.model, args.dtype, args.p, args.n, 1)
                return cpp[f"pp{args.p}"]["tokens_per_s_median"], cpp[f"tg{args.n}"]["tokens_per_s_median"]

            def py_run():
                return (median_rate(lambda: m.logits(prompt, all_positions=False), args.p, 1),
                        median_rate(python_decode, args.n, 1))

            cpp, py = (cpp_run(), py_run()) if i % 2 == 0 else reversed((py_run(), cpp_run()))
            paired["pp"].append(py[0] / cpp[0])
            paired["tg"].append(py[1] / cpp[1])
        for test, ratios in paired.items():
            ratios.sort()
            print(f"module/minimind-bench {test} over {args.pairs} pairs: median {statistics.median(ratios):.3f}, "
                  f"range {ratios[0]:.3f}-{ratios[-1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
