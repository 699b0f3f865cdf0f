#!/usr/bin/env python3
"""bf16 against fp32 sentence scores: per kind, the largest and the mean |difference| per sentence (nats).

Each kind is built at `--size` with random weights (seed 0: parity is a property of the arithmetic, not of
training) and scores the same held-out sentences (the first `--sentences` of DATA/valid.ids.xz, decoded)
through `Scorer` twice: in float32, then under bf16 autocast.

  python local/benchmarks/bf16_parity.py --data exp/gpu/data --device cuda --size small --sentences 200 \
      --json parity.json
"""
import argparse
import json
from pathlib import Path

import torch

from slm_lm import build_lm
from slm_lm.common.fileio import write_atomic
from slm_lm.model.config import KINDS, SIZES
from slm_lm.model.tokenizer import Tokenizer
from slm_lm.pretrain import load_corpus
from slm_lm.scoring.scorer import Scorer


def compare(full: list, half: list) -> dict:
    """Summary of |bf16 - fp32| over sentences (nats), with the relative difference |d| / |fp32 score|."""
    diffs = [abs(a - b) for a, b in zip(full, half)]
    return {"sentences": len(diffs), "mean_score": sum(full) / len(full), "max_abs_diff": max(diffs),
            "mean_abs_diff": sum(diffs) / len(diffs),
            "max_rel_diff": max(d / max(abs(a), 1e-9) for d, a in zip(diffs, full))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="directory with valid.ids.xz, bpe.model, tokens.txt")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    tokenizer = Tokenizer.from_dir(args.data)
    sentences = [tokenizer.decode(s) for s in load_corpus(Path(args.data) / "valid.ids.xz")[: args.sentences]]
    results = {}
    for kind in args.kinds.split(","):
        torch.manual_seed(0)
        model = build_lm(kind, tokenizer.vocab_size, size=args.size)
        scores = {dtype: Scorer(model, tokenizer, device=args.device, dtype=dtype, truncate=True).score(sentences)
                  for dtype in ("float32", "bfloat16")}
        results[kind] = compare(scores["float32"], scores["bfloat16"])
    print(f"bf16 vs fp32 sentence scores, {args.size} models (random weights, seed 0), {args.device}, "
          f"first {len(sentences)} sentences of {args.data}/valid.ids.xz")
    print("| kind | sentences | mean fp32 score (nats) | max abs diff (nats) | mean abs diff | max rel diff |")
    print("|---|---|---|---|---|---|")
    for kind, r in results.items():
        print(f"| {kind} | {r['sentences']} | {r['mean_score']:.2f} | {r['max_abs_diff']:.4f} | "
              f"{r['mean_abs_diff']:.4f} | {r['max_rel_diff']:.2e} |")
    if args.json:
        write_atomic(args.json, json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
