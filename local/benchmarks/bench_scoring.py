"""Scoring speed of slm / mlm (PLL) / clm / bilm / tta at equal size: latency (batch 1) and throughput.

Prints the paper-style latency table and the ratios MLM/SLM and SLM/CLM measured in this run (and
TTA/SLM, TTA/CLM when tta is among the kinds).
Weights are random: speed does not depend on them. Example (the BENCHMARKS.md run):

    .venv/bin/python local/benchmarks/bench_scoring.py --sizes small,base --lengths 10,100,500 --threads 2

MLM-PLL scores n masked copies of an n-token sentence in chunks of `--mlm-max-tokens` tokens. With
`--mlm-sample-chunks C`, only C chunks are timed and the time is scaled by the number of chunks (all
chunks have the same shape, so cost is linear in them); such cells are marked with '~'. The kinds are
timed interleaved, call by call, so that a changing load on a shared machine affects them alike.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch

from slm_lm import build_lm
from slm_lm.model.backbone import padded_sentences
from slm_lm.model.kinds import MaskedLM, gather_logprobs
from slm_lm.pretrain.throughput import synchronize


def sentences(n_tokens: int, batch: int, vocab: int, generator) -> tuple:
    """`batch` random sentences of n_tokens pieces, as `<s> x </s>` rows."""
    tokens = torch.randint(2, vocab - 2, (batch, n_tokens + 2), generator=generator)
    tokens[:, 0] = tokens[:, -1] = vocab - 1
    return tokens, torch.full((batch,), n_tokens + 2)


def timer(model, tokens, lengths, sample_chunks: int):
    """(call, scale, exact): one scoring call of the batch, and the factor that turns its time into the
    batch's time. For MLM with `sample_chunks`, the call runs only that many PLL chunks (all chunks have the
    same shape, so cost is linear in them) and `scale` is chunks / sample_chunks."""
    if not (isinstance(model, MaskedLM) and sample_chunks):
        return (lambda: model.token_logprobs(tokens, lengths)), 1.0, True
    b, t = tokens.shape
    per_chunk = max(1, model.max_tokens // t)
    n_chunks = math.ceil(int((lengths - 1).sum()) / per_chunk)
    if n_chunks <= sample_chunks:
        return (lambda: model.token_logprobs(tokens, lengths)), 1.0, True
    rows = torch.arange(per_chunk, device=tokens.device) % b
    positions = 1 + torch.arange(per_chunk, device=tokens.device) % (t - 1)
    masks = torch.zeros(per_chunk, t, dtype=torch.bool, device=tokens.device)
    masks[torch.arange(per_chunk), positions] = True

    def sampled():
        for _ in range(sample_chunks):
            copies = tokens[rows].masked_fill(masks, model.config.mask_id)
            h = model.encode(copies, padded_sentences(lengths[rows], t))
            gather_logprobs(model.head(h[masks]), tokens[rows][masks])

    return sampled, n_chunks / sample_chunks, False


def run(args):
    """Time every kind on the same batches. Kinds are interleaved call by call (kind A, kind B, ...,
    repeated), so that load changes on a shared machine hit all kinds alike and the ratios stay fair."""
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    kinds = args.kinds.split(",")
    results = []
    for size in args.sizes.split(","):
        models = {}
        for kind in kinds:
            torch.manual_seed(0)
            models[kind] = build_lm(kind, args.vocab, size=size, max_positions=max(args.lengths) + 2).to(device).eval()
            if isinstance(models[kind], MaskedLM):
                models[kind].max_tokens = args.mlm_max_tokens
        for n in args.lengths:
            for mode in args.modes:
                batch = 1 if mode == "latency" else max(1, args.batch_tokens // (n + 2))
                tokens, lengths = sentences(n, batch, args.vocab, generator)
                tokens, lengths = tokens.to(device), lengths.to(device)
                timers = {k: timer(m, tokens, lengths, args.mlm_sample_chunks) for k, m in models.items()}
                times = {k: [] for k in kinds}
                with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                    for kind in kinds:  # warm-up
                        timers[kind][0]()
                    for _ in range(args.repeats):
                        for kind in kinds:
                            synchronize(device)
                            start = time.perf_counter()
                            timers[kind][0]()
                            synchronize(device)
                            times[kind].append(time.perf_counter() - start)
                for kind in kinds:
                    _, scale, exact = timers[kind]
                    seconds = statistics.median(times[kind]) * scale
                    row = dict(size=size, kind=kind, n=n, mode=mode, batch=batch, seconds=seconds, exact=exact,
                               sentences_per_s=batch / seconds)
                    results.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    return results


def fmt_time(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def report(results, args) -> str:
    get = {(r["size"], r["kind"], r["n"], r["mode"]): r for r in results}
    lines = [
        f"device={args.device} threads={args.threads} dtype={args.dtype} vocab={args.vocab} torch={torch.__version__}",
        "",
        "Latency, batch 1 (median of %d runs; '~' = MLM extrapolated from sampled chunks)" % args.repeats,
        "",
        "| size | model | " + " | ".join(f"n={n}" for n in args.lengths) + " |",
        "|---|---|" + "---|" * len(args.lengths),
    ]
    kinds = args.kinds.split(",")
    for size in args.sizes.split(","):
        for kind in kinds:
            cells = []
            for n in args.lengths:
                r = get[(size, kind, n, "latency")]
                cells.append(("~" if not r["exact"] else "") + fmt_time(r["seconds"]))
            lines.append(f"| {size} | {kind} | " + " | ".join(cells) + " |")
    if "throughput" not in args.modes:
        return "\n".join(lines + ratio_lines(get, args, kinds))
    lines += ["", "Throughput, sentences/s (batches of about %d tokens)" % args.batch_tokens, "",
              "| size | model | " + " | ".join(f"n={n}" for n in args.lengths) + " |",
              "|---|---|" + "---|" * len(args.lengths)]
    for size in args.sizes.split(","):
        for kind in kinds:
            cells = []
            for n in args.lengths:
                r = get[(size, kind, n, "throughput")]
                cells.append(("~" if not r["exact"] else "") + f"{r['sentences_per_s']:.3g}")
            lines.append(f"| {size} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ratio_lines(get, args, kinds))


def ratio_lines(get, args, kinds) -> list:
    """MLM/SLM and SLM/CLM (and TTA/SLM, TTA/CLM) time per sentence, for every size, mode and length measured."""
    lines = []
    if {"slm", "mlm", "clm"} <= set(kinds):
        tta = "tta" in kinds
        lines += ["", "Ratios of time per sentence (targets: MLM/SLM >= 0.9*n/3; SLM/CLM <= 3.3)", "",
                  "| size | mode | n | MLM/SLM | 0.9*n/3 | SLM/CLM |" + (" TTA/SLM | TTA/CLM |" if tta else ""),
                  "|---|---|---|---|---|---|" + ("---|---|" if tta else "")]
        for size in args.sizes.split(","):
            for mode in args.modes:
                for n in args.lengths:
                    def per_sentence(kind):
                        r = get[(size, kind, n, mode)]
                        return r["seconds"] / r["batch"]
                    slm, clm = per_sentence("slm"), per_sentence("clm")
                    line = (f"| {size} | {mode} | {n} | {per_sentence('mlm') / slm:.1f} | {0.9 * n / 3:.1f} | "
                            f"{slm / clm:.2f} |")
                    if tta:
                        line += f" {per_sentence('tta') / slm:.2f} | {per_sentence('tta') / clm:.2f} |"
                    lines.append(line)
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kinds", default="slm,mlm,clm,bilm,tta")
    p.add_argument("--sizes", default="small,base")
    p.add_argument("--lengths", default="10,100,500", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--modes", default="latency,throughput", type=lambda s: s.split(","),
                   help="latency (batch 1) and/or throughput (batches of --batch-tokens)")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--mlm-max-tokens", type=int, default=16384)
    p.add_argument("--mlm-sample-chunks", type=int, default=0, help="time only this many PLL chunks (0 = all)")
    p.add_argument("--json", help="also write the raw measurements here")
    p.add_argument("--from-json", help="print the tables of a run saved with --json (no measuring)")
    args = p.parse_args(argv)
    if args.from_json:
        saved = json.loads(open(args.from_json).read())
        print(report(saved["results"], argparse.Namespace(**saved["args"])))
        return
    results = run(args)
    text = report(results, args)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "table": text}, f, indent=1)


if __name__ == "__main__":
    main()
