"""Markdown table of the equal-budget comparison written by local/analyses/compare_lms.sh.

Usage: python local/analyses/compare_table.py OUT_DIR
"""
import argparse
import json
import math
from pathlib import Path

from slm_lm.common.errors import InputError, fail

KINDS = ("slm", "clm", "mlm", "bilm", "tta")


def heldout(path: Path):
    """(nats per token, perplexity) from an slm-score TSV (line, score, n_tokens)."""
    total = tokens = 0.0
    for line in path.read_text().splitlines():
        _, score, n = line.split("\t")[:3]
        total += float(score)
        tokens += int(n)
    return -total / tokens, math.exp(-total / tokens)


def parameters(model_dir: Path) -> float:
    """Millions of parameters of an LM experiment directory."""
    from slm_lm.scoring.scorer import Scorer

    return sum(p.numel() for p in Scorer.from_pretrained(model_dir).model.parameters()) / 1e6


def comparison_table(out: Path) -> str:
    """The table of every kind evaluated under `out` (compare_lms.sh's OUT_DIR), with the AM-only baselines."""
    rows = ["| LM | params (M) | held-out CE (nats/token) | PPL | BLiMP (%) | dev_clean WER (λ from dev_other) | "
            "dev_other WER (λ from dev_clean) |", "|---|---|---|---|---|---|---|"]
    baselines = {}  # AM-only / file / oracle WERs: the same for every LM
    for kind in KINDS:
        ev = out / "eval" / kind
        needed = [ev / "heldout.tsv", ev / "blimp" / "blimp_results.json"] + \
            [ev / f"tune_{dev}" / "tuning.json" for dev in ("dev_clean", "dev_other")]
        missing = [str(p.relative_to(out)) for p in needed if not p.exists()]
        if missing:  # an evaluation still running (or not started) gets a row saying so
            rows.append(f"| {kind} | not evaluated yet: {', '.join(missing)} missing | | | | | |")
            continue
        ce, ppl = heldout(ev / "heldout.tsv")
        blimp = json.loads((ev / "blimp" / "blimp_results.json").read_text())["overall"]
        cells = {}
        for dev, test in (("dev_other", "dev_clean"), ("dev_clean", "dev_other")):
            tuning = json.loads((ev / f"tune_{dev}" / "tuning.json").read_text())
            report = next(s for s in tuning["sets"] if s["name"] == test)
            cells[test] = f"{report['wer_rescored']:.2f} (λ={tuning['best']['lambdas'][0]:g})"
            baselines[test] = report
        ppl_note = " (pseudo)" if kind == "mlm" else ""
        rows.append(f"| {kind} | {parameters(out / 'models' / kind):.2f} | {ce:.3f} | {ppl:.1f}{ppl_note} | {blimp:.1f} | "
                    f"{cells['dev_clean']} | {cells['dev_other']} |")
    if not baselines:
        raise InputError(f"{out}: no finished evaluation under eval/")
    rows.append(f"| AM only (no LM) | | | | | {baselines['dev_clean']['wer_am']:.2f} | {baselines['dev_other']['wer_am']:.2f} |")
    rows.append(f"| their first-pass LM (file score) | | | | | {baselines['dev_clean']['wer_file']:.2f} | "
                f"{baselines['dev_other']['wer_file']:.2f} |")
    rows.append(f"| oracle (10-best) | | | | | {baselines['dev_clean']['wer_oracle']:.2f} | "
                f"{baselines['dev_other']['wer_oracle']:.2f} |")
    return "\n".join(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="compare_lms.sh's OUT_DIR (with eval/ and models/)")
    args = p.parse_args(argv)
    try:
        print(comparison_table(args.out))
    except InputError as e:
        fail("compare_table", e)


if __name__ == "__main__":
    main()
