#!/usr/bin/env python3
"""MLM-k ablation (the Transcormer paper's table "sampling different k tokens"): an MLM scored with k
tokens masked per pass (k = 1, 2, 3, n/3, n/2; ceil(n/k) passes, or 3 and 2 passes), compared on
  - pseudo-perplexity on held-out sentences of --length pieces (0 = all sentences): exp of the mean
    negative PLL term over every scored token (pieces and the end of sentence);
  - N-best rescoring WER on the dev sets via slm_lm.rescoring.rescore. With two or more dev sets each set is
    scored with the weights tuned on the others (no set tunes its own lambda); with one set, tuned on
    itself (optimistic, marked in the table).
--also LABEL=SPEC adds other models (e.g. the SLM) as extra rows.

  N=$(slm-data path librispeech-nbest)   # the lists of `slm-data get librispeech-nbest`
  python local/analyses/mlm_k_ablation.py --model exp/mlm --text heldout.txt --out exp/mlm_k \
      --dev $N/dev_clean,$N/dev_other \
      --nbest 10 --am-weights decoder=0.6,ctc=0.4 --also SLM=exp/slm
Writes OUT/mlm_k_ablation.md and .json; LM scores are cached in OUT/lm_cache (resumable).
"""
import argparse
import json
import math
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.evaluation.analysis_inputs import exact_length, parse_models, read_sentences
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.rescoring.rescore import rescore
from slm_lm.rescoring.scored_set import parse_am_weights
from slm_lm.rescoring.weight_search import parse_range

DEFAULT_KS = "1,2,3,n/3,n/2"


def parse_k(value: str):
    """An int k >= 1 or the string 'n/m'."""
    if value.isdigit() and int(value) >= 1:
        return int(value)
    num, sep, den = value.partition("/")
    if num == "n" and sep and den.isdigit() and int(den) >= 1:
        return value
    raise InputError(f"--ks: {value!r} is not a positive integer or n/m")


def cost(k) -> str:
    """Forward passes per sentence of n pieces."""
    return "n" if k == 1 else (f"ceil(n/{k})" if isinstance(k, int) else k.partition("/")[2])


def pseudo_perplexity(scorer, sentences: list) -> float:
    """exp(-sum of log-probs / number of scored tokens)."""
    rows = scorer.logprobs(sentences, progress=True)
    total = sum(float(r.double().sum()) for r in rows)
    return math.exp(-total / sum(len(r) for r in rows))


def rescoring_wers(scorer, dev_sets: list, out: Path, args) -> dict:
    """{set name: (WER %, lambda)} with weights tuned on the other sets (or on itself when alone)."""
    results = {}
    for i, target in enumerate(dev_sets):
        tune_on = [s for j, s in enumerate(dev_sets) if j != i] or [target]
        test = [target] if len(dev_sets) > 1 else []
        result, reports = rescore(
            tune_on, test, [scorer], out / target.name, am_weights=args.am_weights,
            lambda_grid=args.lambda_grid, cache_dir=out.parent / "lm_cache", progress=True,
        )
        report = next(r for r in reports if r.name == target.name and r.role == ("test" if test else "dev"))
        results[target.name] = {"wer": report.wer_rescored, "wer_am": report.wer_am,
                                "lambda": result.best.lambdas[0], "tuned_on": [s.name for s in tune_on]}
    return results


def markdown(rows: list, dev_names: list, length: int, n_sentences: int) -> str:
    """The ablation table."""
    lines = ["# MLM-k ablation", "",
             f"Pseudo-perplexity on {n_sentences} held-out sentences"
             + (f" of {length} pieces" if length else "") + "; WER % after rescoring "
             "(each dev set with lambda tuned on the other dev sets"
             + (", * = tuned on itself" if len(dev_names) == 1 else "") + ").", ""]
    lines.append("| model | passes | PPPL | " + " | ".join(dev_names) + " |")
    lines.append("|---|---|---:|" + "---:|" * len(dev_names))
    if rows and dev_names:
        am = " | ".join(f"{rows[0]['wer'][n]['wer_am']:.2f}" for n in dev_names)
        lines.append(f"| baseline (no LM) | - | - | {am} |")
    star = "*" if len(dev_names) == 1 else ""
    for row in rows:
        wers = " | ".join(f"{row['wer'][n]['wer']:.2f}{star}" for n in dev_names)
        lines.append(f"| {row['label']} | {row['passes']} | {row['pppl']:.2f} | {wers} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="our mlm model (save_pretrained dir or ESPnet experiment)")
    p.add_argument("--ks", default=DEFAULT_KS, help=f"k values (default {DEFAULT_KS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the random position groups")
    p.add_argument("--also", action="append", default=[], help="LABEL=SPEC extra model rows (repeat)")
    p.add_argument("--text", required=True, help="held-out sentences: text file or .trn")
    p.add_argument("--length", type=int, default=20,
                   help="pieces per held-out sentence (0 = every non-blank line)")
    p.add_argument("--max-sentences", type=int, default=None)
    p.add_argument("--dev", default="", help="N-best dirs, comma-separated (ESPnet layout)")
    p.add_argument("--nbest", type=int, default=None, help="use ranks 1..N")
    p.add_argument("--am-weights", default=None, help="e.g. decoder=0.6,ctc=0.4 (default: file score)")
    p.add_argument("--lambda-range", default="0:5:0.1")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from slm_lm.model.kinds import MaskedLM
    from slm_lm.scoring.scorer import Scorer, load_scorer

    out = Path(args.out)
    try:
        ks = [parse_k(k.strip()) for k in args.ks.split(",") if k.strip()]
        args.am_weights = parse_am_weights(args.am_weights) if args.am_weights else None
        args.lambda_grid = parse_range(args.lambda_range, "--lambda-range")
        dev_sets = [load_nbest(d, nbest=args.nbest) for d in args.dev.split(",") if d]
        if not isinstance(Scorer.from_pretrained(args.model).model, MaskedLM):
            raise InputError(f"{args.model}: not an mlm model")
        models = [(f"MLM (k={k})", cost(k), Scorer.from_pretrained(args.model, device=args.device, mlm_k=k,
                                                                 truncate=True)) for k in ks]
        for _, _, scorer in models:
            scorer.model.seed = args.seed
        models += [(label, "-", load_scorer(spec, device=args.device, truncate=True))
                   for label, spec in parse_models(args.also)]
        sentences = read_sentences(args.text)
        if args.length:
            sentences = exact_length([m[2] for m in models], sentences, args.length, args.max_sentences)
        else:
            sentences = [s for s in sentences if s][: args.max_sentences]
        if not sentences:
            raise InputError(f"{args.text}: no held-out sentence of {args.length} pieces")
        rows = []
        for label, passes, scorer in models:
            print(f"== {label}")
            slug = "".join(c if c.isalnum() else "_" for c in label)
            wer = rescoring_wers(scorer, dev_sets, out / "rescore" / slug, args) if dev_sets else {}
            rows.append({"label": label, "passes": passes, "name": scorer.name,
                         "pppl": pseudo_perplexity(scorer, sentences), "wer": wer})
    except InputError as e:
        fail("mlm_k_ablation", e)
    names = [s.name for s in dev_sets]
    write_atomic(out / "mlm_k_ablation.json", json.dumps(
        {"held_out": {"text": args.text, "length": args.length, "sentences": len(sentences)}, "rows": rows}, indent=1))
    table = markdown(rows, names, args.length, len(sentences))
    write_atomic(out / "mlm_k_ablation.md", table)
    print(table)


if __name__ == "__main__":
    main()
