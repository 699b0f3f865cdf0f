"""Time LM scoring of the unique hypothesis texts of an N-best set (default: dev_other 10-best).

Models are save_pretrained / ESPnet dirs (``--model DIR``) or random weights of a kind and size
(``--random-init slm:small``, needs ``--tokenizer DIR`` with ``bpe.model`` + ``tokens.txt``): speed does
not depend on the weights. Each model scores the same texts through ``slm_lm.scoring.scorer.Scorer``, as
``slm-rescore`` does. With ``--sample S`` only S texts drawn at random (seeded) are timed and the time
is scaled to all unique texts (marked '~'); MLM-PLL on a CPU needs this. ``--texts FILE`` times the texts
of a file instead (one a line, duplicates dropped; ``.xz`` read as lzma), e.g. the unique hypotheses of a
set written on a machine that has it. Example (BENCHMARKS.md)::

    .venv/bin/python local/benchmarks/bench_rescore_speed.py --tokenizer exp/bench_rescore/tok \\
        --random-init clm:small --random-init slm:small --random-init mlm:small \\
        --sample 500 --threads 2 --out exp/bench_rescore/speed.md
"""

import argparse
import json
import lzma
import platform
import random
import time
from pathlib import Path

import torch

from slm_lm import build_lm

from slm_lm.data import datasets
from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.common.fileio import write_atomic
from slm_lm.scoring.scorer import Scorer, load_scorer
from slm_lm.model.tokenizer import Tokenizer



def build_scorers(args) -> list[tuple[str, Scorer]]:
    """(label, scorer) for every --model and --random-init."""
    options = dict(device=args.device, dtype=args.dtype, max_tokens=args.max_tokens)
    out = [(Path(d).name, load_scorer(d, **options)) for d in args.model]
    if args.random_init:
        if not args.tokenizer:
            raise InputError("--random-init needs --tokenizer DIR (bpe.model + tokens.txt)")
        tokenizer = Tokenizer.from_dir(args.tokenizer)
        for spec in args.random_init:
            kind, _, size = spec.partition(":")
            torch.manual_seed(0)
            model = build_lm(kind, tokenizer.vocab_size, size or "small")
            scorer = Scorer(model, tokenizer, **options)
            out.append((f"{kind}:{size or 'small'} (random)", scorer))
    if not out:
        raise InputError("give at least one --model DIR or --random-init KIND:SIZE")
    return out


def unique_texts(args) -> tuple[list[str], str]:
    """(the sorted unique texts to time, where they come from) of --texts or of the N-best set."""
    if args.texts:
        opener = lzma.open if args.texts.endswith(".xz") else open
        try:
            with opener(args.texts, "rt", encoding="utf-8") as handle:
                texts = sorted({line.strip() for line in handle if line.strip()})
        except (OSError, lzma.LZMAError, UnicodeDecodeError) as e:
            raise InputError(f"{args.texts}: cannot read: {e}") from None
        if not texts:
            raise InputError(f"{args.texts}: no text to score")
        return texts, f"`{Path(args.texts).name}` ({len(texts)} unique texts)"
    nbest_dir = args.nbest_dir or datasets.require("librispeech-nbest") / "dev_other"
    nb = load_nbest(nbest_dir, nbest=args.nbest)
    texts = nb.unique_texts()
    return texts, (f"the unique hypothesis texts of `{Path(nbest_dir).name}` {args.nbest}-best "
                   f"({nb.n_hyps} hypotheses, {len(texts)} unique texts)")


def time_scorer(scorer: Scorer, texts: list[str], device: str) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) to score `texts`, after a short warm-up.

    CPU seconds (all threads) are less affected than wall time by other jobs on a shared machine.
    """
    scorer.score(texts[:8])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start, cpu_start = time.perf_counter(), time.process_time()
    scorer.score(texts, progress=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - cpu_start


def main(argv=None) -> None:
    """Entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nbest-dir", help="N-best set (default: dev_other of slm-data get librispeech-nbest)")
    p.add_argument("--nbest", type=int, default=10)
    p.add_argument("--texts", help="time the texts of this file (one a line; .xz: lzma) instead of an N-best set")
    p.add_argument("--model", action="append", default=[], help="model dir (repeatable)")
    p.add_argument("--random-init", action="append", default=[], help="KIND:SIZE with random weights (repeatable)")
    p.add_argument("--tokenizer", default=None, help="dir with bpe.model + tokens.txt for --random-init")
    p.add_argument("--sample", type=int, default=0, help="time S random unique texts and scale (0 = all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
                   help="the Scorer's dtype (autocast on CUDA)")
    p.add_argument("--max-tokens", type=int, default=8192, help="Scorer batch budget (padded tokens)")
    p.add_argument("--out", default=None, help="write the markdown table here (and .json beside it)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        unique, source = unique_texts(args)
        scorers = build_scorers(args)
    except InputError as err:
        fail("bench_rescore_speed", err)
    timed = unique
    if 0 < args.sample < len(unique):
        timed = random.Random(args.seed).sample(unique, args.sample)
    scale = len(unique) / len(timed)
    rows = []
    for label, scorer in scorers:
        seconds, cpu_seconds = time_scorer(scorer, timed, args.device)
        pieces = sum(len(ids) - 1 for ids in scorer.encode(timed))  # pieces + </s>
        params = sum(p.numel() for p in scorer.model.parameters())
        rows.append({"model": label, "kind": scorer.model.config.kind, "params_M": round(params / 1e6, 1),
                     "timed_texts": len(timed), "timed_tokens": pieces, "timed_s": round(seconds, 2),
                     "timed_cpu_s": round(cpu_seconds, 2),
                     "all_unique_s": round(seconds * scale, 1), "sent_per_s": round(len(timed) / seconds, 1)})
        print(json.dumps(rows[-1]), flush=True)
    base = next((r for r in rows if r["kind"] == "clm"), None)
    mark = "~" if scale > 1 else ""
    lines = [
        f"Scoring {source}; device {args.device}, {args.dtype}, {args.threads} threads, "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}; Scorer max_tokens "
        f"{args.max_tokens}." + (f" Timed {len(timed)} random texts (seed {args.seed}), scaled x{scale:.1f} (~)."
                                 if scale > 1 else ""),
        "",
        "| model | params (M) | timed texts | tokens | wall (s) | CPU (s) | all unique texts, wall (s) "
        "| sentences/s |" + (" wall / CLM | CPU / CLM |" if base else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else ""),
    ]
    for r in rows:
        ratio = ""
        if base:
            ratio = f" {r['timed_s'] / base['timed_s']:.1f}x | {r['timed_cpu_s'] / base['timed_cpu_s']:.1f}x |"
        lines.append(f"| {r['model']} | {r['params_M']} | {r['timed_texts']} | {r['timed_tokens']} | {r['timed_s']} "
                     f"| {r['timed_cpu_s']} | {mark}{r['all_unique_s']} | {r['sent_per_s']} |{ratio}")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        write_atomic(Path(args.out), table)
        write_atomic(Path(args.out).with_suffix(".json"), json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
