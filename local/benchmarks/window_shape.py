#!/usr/bin/env python3
"""The model shape a training window of `--minutes` should train, from the measured speed of slm-pretrain's step.

Reads the JSON of `bench_pretrain_step.py` runs (`--speed`, one or more): per kind, the model FLOP/s (6 x
parameters x tokens/s) of slm-pretrain's faster step (packed or compiled) at the widest shape measured.
Taking that rate as the same at every size, a model of N parameters trains T(N) = rate x seconds / 6N tokens
in the window. The shape wanted trains about `--tokens-per-parameter` tokens per parameter (T = 20 N:
N = sqrt(rate x seconds / 120)), unless that is more than `--passes` passes over the corpus
(`--corpus-tokens`, by default the corpus the measured runs trained on): then the corpus binds, and N grows
until T is those passes. The shape is the one of the family d_model = 64 x layers, heads d_model / 64, d_ff
4 x d_model (the trained 6 x 384 is one) whose parameters come nearest to N.

Example: python local/benchmarks/window_shape.py --speed exp/gpu/run/step_*.json --minutes 3
"""
import argparse
import json
import math
from pathlib import Path

from slm_lm.model.config import LMConfig
from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import number


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--speed", nargs="+", required=True, help="JSON files of bench_pretrain_step.py --json")
    p.add_argument("--minutes", type=number(float, above=0), required=True, help="training minutes of the window")
    p.add_argument("--corpus-tokens", type=number(int, 1),
                   help="tokens of one pass over the corpus (default: the corpus the --speed runs trained on)")
    p.add_argument("--tokens-per-parameter", type=number(float, above=0), default=20.0)
    p.add_argument("--passes", type=number(float, above=0), default=4.0, help="most passes over the corpus")
    p.add_argument("--vocab", type=number(int, 1), default=5003)
    return p.parse_args(argv)


def fastest(paths: list) -> tuple:
    """(per kind: the result (a row of bench_pretrain_step's JSON) of the largest model, its faster packed path; the
    tokens of one pass over the corpus the first run trained on)."""
    best, corpus_tokens = {}, None
    for path in paths:
        try:
            saved = json.loads(Path(path).read_text())
            rows, corpus_tokens = saved["results"], corpus_tokens or saved.get("corpus_tokens")
            for row in (r for r in rows if r["path"] != "padded"):  # the steps slm-pretrain runs
                key = (row["params"], row["model_tflops"])
                if row["kind"] not in best or key > (best[row["kind"]]["params"], best[row["kind"]]["model_tflops"]):
                    best[row["kind"]] = row
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not the JSON of bench_pretrain_step.py: {e}") from None
    if not best:
        raise InputError(f"{' '.join(map(str, paths))}: no measured step")
    return best, corpus_tokens


def family_shape(parameters: float, vocab: int) -> dict:
    """The shape of the family (d_model = 64 x layers) whose parameters come nearest to `parameters`."""
    def shape(layers):
        d = 64 * layers
        return dict(n_layers=layers, d_model=d, n_heads=layers, d_ff=4 * d)

    def count(layers):
        return LMConfig(kind="clm", vocab_size=vocab, max_positions=256, **shape(layers)).approximate_parameters()

    layers = min(range(2, 25), key=lambda n: abs(math.log(count(n) / parameters)))  # up to 24 x 1536
    return dict(shape(layers), parameters=count(layers))


def plan(rate_tflops: float, seconds: float, corpus_tokens: int, per_parameter: float, passes: float, vocab: int):
    """The parameters wanted, what binds, and the nearest family shape with the tokens it trains."""
    flops = rate_tflops * 1e12 * seconds
    wanted = math.sqrt(flops / (6 * per_parameter))
    binds = "tokens per parameter"
    if per_parameter * wanted > passes * corpus_tokens:
        wanted, binds = flops / (6 * passes * corpus_tokens), f"{passes:g} passes over the corpus"
    shape = family_shape(wanted, vocab)
    tokens = flops / (6 * shape["parameters"])
    return dict(wanted=wanted, binds=binds, shape=shape, tokens=tokens, passes=tokens / corpus_tokens,
                tokens_per_parameter=tokens / shape["parameters"])


def main(argv=None):
    args = parse_args(argv)
    try:
        best, corpus_tokens = fastest(args.speed)
    except InputError as e:
        fail("window_shape", e)
    corpus_tokens = args.corpus_tokens or corpus_tokens
    if not corpus_tokens:
        fail("window_shape", f"{args.speed[0]}: no corpus_tokens recorded; give --corpus-tokens")
    print(f"{args.minutes:g} training minutes, a corpus of {corpus_tokens:,} tokens, about "
          f"{args.tokens_per_parameter:g} tokens per parameter and at most {args.passes:g} passes")
    print("| kind | measured at | model TFLOP/s | parameters wanted | bound by | shape (layers x d_model) | parameters "
          "| tokens | passes | tokens/parameter |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, row in best.items():
        p = plan(row["model_tflops"], 60 * args.minutes, corpus_tokens, args.tokens_per_parameter, args.passes,
                 args.vocab)
        s = p["shape"]
        print(f"| {kind} | {row['params'] / 1e6:.1f}M, {row['path']} | {row['model_tflops']:.3g} | "
              f"{p['wanted'] / 1e6:.3g}M | {p['binds']} | {s['n_layers']} x {s['d_model']} | "
              f"{s['parameters'] / 1e6:.3g}M | {p['tokens'] / 1e6:.3g}M | {p['passes']:.3g} | "
              f"{p['tokens_per_parameter']:.3g} |")


if __name__ == "__main__":
    main()
