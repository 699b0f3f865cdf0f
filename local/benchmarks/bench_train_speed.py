#!/usr/bin/env python3
"""Training speed of slm vs clm vs mlm vs bilm vs tta at equal size: tokens/s of forward + backward + AdamW step.

Every kind trains on the same random batches (`<sos/eos> x <sos/eos>` rows of `--length` tokens,
`--tokens` tokens per batch). Kinds are measured round-robin, one step each per round, so changes in
machine load hit all kinds alike; the median step time of each kind is reported. Tokens/s counts the
input tokens of a batch (the same for every kind), so the numbers compare directly.
The paper's cost table puts SLM at about 3x a CLM's compute (target here: SLM >= 1/3.3 of CLM's tokens/s).

Model FLOP/s = 6 x parameters x tokens/s (the dense-transformer rule for forward + backward; it leaves out
attention scores and the SLM's extra streams, so it is the same "useful work" yardstick for every kind and
undercounts the hardware FLOPs of the SLM). MFU = model FLOP/s / the peak of a square matmul of
`--matmul-size` in the step's dtype, measured in the same run (0: not measured).

`--dtype float32,bfloat16` times every kind in both dtypes, round-robin in one run (each dtype has its
own copy of the same initial weights), and adds the column "vs float32": the bf16 speed-up measured
side by side.

Example: python local/benchmarks/bench_train_speed.py --size mini --tokens 2048 --threads 2
         python local/benchmarks/bench_train_speed.py --device cuda --dtype bfloat16 --size small --tokens 16384 \
             --length 128 --matmul-size 8192
"""
import argparse
import json
import statistics
import sys
import time

import torch

from slm_lm import build_lm
from slm_lm.model.config import KINDS
from slm_lm.common.fileio import write_atomic
from slm_lm.pretrain.throughput import (add_shape_options, kind_list, matmul_tflops, random_batch, shape_overrides,
                               synchronize, train_step)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kinds", type=kind_list, default=",".join(KINDS), help="comma-separated LM kinds")
    add_shape_options(p, size="mini")
    p.add_argument("--vocab", type=int, default=5003, help="vocabulary size (BPE 5000 + specials)")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per batch (rows x length)")
    p.add_argument("--length", type=int, default=32, help="tokens per row, <sos/eos> included")
    p.add_argument("--steps", type=int, default=5, help="timed steps per kind")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per kind first")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32",
                   help="autocast dtype, float32 (none) or bfloat16; comma-separated to interleave several")
    p.add_argument("--matmul-size", type=int, default=2048, help="n of the n x n matmul peak for MFU (0: skip)")
    p.add_argument("--json", help="also write the results here (atomically)")
    args = p.parse_args(argv)
    args.dtypes = args.dtype.split(",")
    if not args.dtypes or set(args.dtypes) - {"float32", "bfloat16"} or len(set(args.dtypes)) < len(args.dtypes):
        p.error(f"--dtype {args.dtype!r}: give float32 and/or bfloat16, comma-separated, each once")
    if args.tokens < args.length or args.length < 3:
        p.error("need --length >= 3 and --tokens >= --length")
    args.shape = shape_overrides(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = args.tokens // args.length
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(args.vocab, rows, args.length, device, generator) for _ in range(4)]
    setups = {}
    for kind in args.kinds:
        for name in args.dtypes:
            torch.manual_seed(0)
            model = build_lm(kind, args.vocab, args.size, max_positions=max(512, args.length), **args.shape)
            model = model.to(device).train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
            setups[kind, name] = (model, optimizer, getattr(torch, name))
            for i in range(args.warmup):
                train_step(model, optimizer, *batches[i % len(batches)], getattr(torch, name))
    times = {key: [] for key in setups}
    for step in range(args.steps):
        for key, (model, optimizer, dtype) in setups.items():
            synchronize(device)
            start = time.perf_counter()
            train_step(model, optimizer, *batches[step % len(batches)], dtype)
            synchronize(device)
            times[key].append(time.perf_counter() - start)
        print(f"round {step + 1}/{args.steps} done", file=sys.stderr, flush=True)
    tokens = rows * args.length
    peaks = {name: matmul_tflops(args.matmul_size, getattr(torch, name), device) if args.matmul_size else None
             for name in args.dtypes}
    results = []
    for (kind, name), (model, _, _) in setups.items():
        seconds = statistics.median(times[kind, name])
        params = sum(p.numel() for p in model.parameters())
        model_tflops = 6 * params * tokens / seconds / 1e12
        results.append(dict(kind=kind, dtype=name, params_m=params / 1e6, seconds_per_step=seconds,
                            tokens_per_s=tokens / seconds, model_tflops=model_tflops,
                            mfu=model_tflops / peaks[name] if peaks[name] else None))
    speed = {(r["kind"], r["dtype"]): r["tokens_per_s"] for r in results}
    first = args.dtypes[0]
    for r in results:
        r["vs_clm"] = r["tokens_per_s"] / speed["clm", r["dtype"]] if ("clm", r["dtype"]) in speed else None
        r["vs_" + first] = r["tokens_per_s"] / speed[r["kind"], first]
    several = len(args.dtypes) > 1
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    measured = [f"{name} {args.matmul_size}^2 matmul peak {peaks[name]:.3g} TFLOP/s" for name in args.dtypes
                if peaks[name]]
    shape = "".join(f", {k} {v}" for k, v in args.shape.items())
    print(f"size {args.size}{shape}, vocab {args.vocab}, {rows} x {args.length} = {tokens} tokens/batch, "
          f"{args.threads} threads, {args.device} ({device_name}), {args.dtype}, median of {args.steps} steps"
          + (", dtypes interleaved" if several else "") + "; "
          + ("; ".join(measured) if measured else "no matmul peak measured"))
    print("| kind |" + (" dtype |" if several else "") + " params (M) | s/step | tokens/s | vs clm |"
          " model TFLOP/s (6*N*tokens/s) | MFU |" + (f" vs {first} |" if several else ""))
    print("|---|" + ("---|" if several else "") + "---|---|---|---|---|---|" + ("---|" if several else ""))
    for r in results:
        ratio = f"{r['vs_clm']:.2f} (1/{1 / r['vs_clm']:.2f})" if r["vs_clm"] else "-"
        mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] else "-"
        print(f"| {r['kind']} |" + (f" {r['dtype']} |" if several else "")
              + f" {r['params_m']:.1f} | {r['seconds_per_step']:.3f} | {r['tokens_per_s']:.0f} | {ratio} | "
              f"{r['model_tflops']:.3g} | {mfu} |" + (f" {r['vs_' + first]:.2f} |" if several else ""))
    if args.json:
        write_atomic(args.json, json.dumps(dict(vars(args), device_name=device_name, matmul_peak_tflops=peaks[first],
                                                matmul_peaks_tflops=peaks, results=results), indent=2))


if __name__ == "__main__":
    main()
