#!/usr/bin/env python3
"""Training speed of slm vs clm vs mlm vs bilm vs tta at equal size: tokens/s of forward + backward + AdamW step.

Every kind trains on the same random batches (`<sos/eos> x <sos/eos>` rows of `--length` tokens,
`--tokens` tokens per batch). Kinds are measured round-robin, one step each per round, so changes in
machine load hit all kinds alike; the median step time of each kind is reported. Tokens/s counts the
input tokens of a batch (the same for every kind), so the numbers compare directly.
The paper's cost table puts SLM at about 3x a CLM's compute (target here: SLM >= 1/3.3 of CLM's tokens/s).

Example: python local/bench_train_speed.py --size mini --tokens 2048 --threads 2
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slm_lm import build_lm  # noqa: E402
from slm_lm.config import KINDS, SIZES  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated LM kinds")
    p.add_argument("--size", default="mini", choices=sorted(SIZES))
    p.add_argument("--vocab", type=int, default=5003, help="vocabulary size (BPE 5000 + specials)")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per batch (rows x length)")
    p.add_argument("--length", type=int, default=32, help="tokens per row, <sos/eos> included")
    p.add_argument("--steps", type=int, default=5, help="timed steps per kind")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per kind first")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the results here (atomically)")
    args = p.parse_args(argv)
    args.kinds = args.kinds.split(",")
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}; choose from {KINDS}")
    if args.tokens < args.length or args.length < 3:
        p.error("need --length >= 3 and --tokens >= --length")
    return args


def random_batch(vocab: int, rows: int, length: int, device, generator):
    """rows x length tokens: <sos/eos> ordinary pieces <sos/eos>, no padding."""
    tokens = torch.randint(2, vocab - 2, (rows, length), generator=generator)
    tokens[:, 0] = tokens[:, -1] = vocab - 1
    return tokens.to(device), torch.full((rows,), length, device=device)


def train_step(model, optimizer, tokens, lengths):
    loss_sum, n_predicted = model.loss(tokens, lengths)
    optimizer.zero_grad(set_to_none=True)
    (loss_sum / n_predicted).backward()
    optimizer.step()


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = args.tokens // args.length
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(args.vocab, rows, args.length, device, generator) for _ in range(4)]
    setups = {}
    for kind in args.kinds:
        torch.manual_seed(0)
        model = build_lm(kind, args.vocab, args.size, max_positions=max(512, args.length)).to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
        setups[kind] = (model, optimizer)
        for i in range(args.warmup):
            train_step(model, optimizer, *batches[i % len(batches)])
    times = {kind: [] for kind in args.kinds}
    for step in range(args.steps):
        for kind, (model, optimizer) in setups.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            train_step(model, optimizer, *batches[step % len(batches)])
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[kind].append(time.perf_counter() - start)
        print(f"round {step + 1}/{args.steps} done", file=sys.stderr, flush=True)
    tokens = rows * args.length
    results = []
    for kind, (model, _) in setups.items():
        seconds = statistics.median(times[kind])
        results.append(dict(kind=kind, params_m=sum(p.numel() for p in model.parameters()) / 1e6,
                            seconds_per_step=seconds, tokens_per_s=tokens / seconds))
    reference = next((r["tokens_per_s"] for r in results if r["kind"] == "clm"), None)
    print(f"size {args.size}, vocab {args.vocab}, {rows} x {args.length} = {tokens} tokens/batch, "
          f"{args.threads} threads, {args.device}, median of {args.steps} steps")
    print("| kind | params (M) | s/step | tokens/s | vs clm |")
    print("|---|---|---|---|---|")
    for r in results:
        r["vs_clm"] = r["tokens_per_s"] / reference if reference else None
        ratio = f"{r['vs_clm']:.2f} (1/{1 / r['vs_clm']:.2f})" if reference else "-"
        print(f"| {r['kind']} | {r['params_m']:.1f} | {r['seconds_per_step']:.3f} | {r['tokens_per_s']:.0f} | {ratio} |")
    if args.json:
        out = Path(args.json)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(vars(args), results=results), f, indent=2)
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
