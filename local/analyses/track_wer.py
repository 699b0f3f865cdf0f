#!/usr/bin/env python3
"""WER along a training run: rescore the dev 10-best sets with every model whose scores the GPU session's
track stage returned (track_scores.tsv.xz), the LM weight tuned on one dev set and applied to the other.

    mkdir -p exp/gpu/returned && cat OUT/models.tar.* | tar -x -C exp/gpu/returned
    .venv/bin/python local/analyses/track_wer.py --returned exp/gpu/returned --out exp/gpu/track

Prints, and writes to OUT/track.md, a row per model: kind, updates, training minutes and validation CE (its
KIND/curve.tsv row), and each dev set's WER with the weight tuned on the other set; with --first-pass, also
with the lists' first-pass LM (score:lm) tuned jointly. The rescoring is slm-rescore's (`slm_lm.rescoring.rescore`),
reading the returned scores instead of a model; its outputs go to OUT/<model>/tune_<dev set>/.
"""
import argparse
import lzma
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.data import datasets
from slm_lm.rescoring.inputs import normalized_sets
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.rescoring.rescore import rescore
from slm_lm.rescoring.scored_set import ScoreColumn, parse_am_weights
from slm_lm.rescoring.weight_search import parse_range

TABLE = "track_scores.tsv.xz"
DEV_SETS = ("dev_clean", "dev_other")


class ReturnedScores:
    """An LM whose sentence scores are one column of the track table: `.name` and `.score` as a model's."""

    def __init__(self, name: str, scores: dict, source: Path):
        self.name, self.scores, self.source = name, scores, source

    def score(self, sentences: list) -> list:
        for i, text in enumerate(sentences):
            if text not in self.scores:
                raise InputError(f"sentence {i}: {self.source} has no score of {self.name} for {text!r}", index=i)
        return [self.scores[text] for text in sentences]


def read_table(path: Path) -> dict:
    """{column name: {text: score}} of the track table."""
    try:
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            header, *rows = handle.read().splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: not there (the track stage's table, in the returned models.tar)") from None
    except (OSError, lzma.LZMAError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    names = header.split("\t")[1:]
    if header.split("\t")[0] != "text" or not names:
        raise InputError(f"{path}:1: want the header `text<TAB>KIND-UPDATES...`")
    table = {name: {} for name in names}
    for lineno, row in enumerate(rows, 2):
        text, *values = row.split("\t")
        try:
            numbers = [float(v) for v in values]
        except ValueError:
            numbers = []
        if len(numbers) != len(names):
            raise InputError(f"{path}:{lineno}: want a text and {len(names)} scores")
        for name, value in zip(names, numbers):
            table[name][text] = value
    return table


def read_curve(path: Path) -> dict:
    """{updates: (minutes, valid CE)} of a run's curve.tsv."""
    try:
        header, *rows = path.read_text(encoding="utf-8").splitlines()
        return {int(r.split("\t")[1]): (float(r.split("\t")[0]), float(r.split("\t")[4])) for r in rows}
    except FileNotFoundError:
        raise InputError(f"{path}: not there (each run's curve.tsv is in the returned models.tar)") from None
    except (OSError, ValueError, IndexError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a curve.tsv of slm-pretrain: {e}") from None


def both_ways(sets: list, lms: list, out: Path, args) -> tuple[list, list, list]:
    """Per set: its WER with the weights tuned on the other set, those weights, and its AM-only WER."""
    wers, weights, am = [], [], []
    for dev, test in (sets, sets[::-1]):
        result, reports = rescore([dev], [test], lms, out / f"tune_{dev.name}", am_weights=args.am_weights,
                                  lambda_grid=args.lambda_grid, progress=False)
        wers.append(reports[1].wer_rescored)
        weights.append(" / ".join(f"{x:g}" for x in result.best.lambdas))
        am.append(reports[1].wer_am)
    return wers[::-1], weights[::-1], am[::-1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--returned", required=True, help="the untarred models.tar: track_scores.tsv.xz, KIND/curve.tsv")
    p.add_argument("--nbest", help="a folder with dev_clean/ and dev_other/ (default: slm-data's librispeech-nbest)")
    p.add_argument("--out", required=True, help="OUT/track.md and every rescoring run's outputs")
    p.add_argument("--first-pass", action="store_true", help="also tune each model jointly with score:lm")
    p.add_argument("--am-weights", default="decoder=0.6,ctc=0.4",
                   help="as slm-rescore's (default: the lists' decoding)")
    p.add_argument("--lambda-range", default="0:5:0.1", help="LM weight grid start:stop:step")
    args = p.parse_args(argv)
    try:
        args.am_weights = parse_am_weights(args.am_weights)
        args.lambda_grid = parse_range(args.lambda_range, "--lambda-range")
        returned, out = Path(args.returned), Path(args.out)
        table = read_table(returned / TABLE)
        nbest = Path(args.nbest) if args.nbest else datasets.require("librispeech-nbest")
        sets = normalized_sets([load_nbest(nbest / name, nbest=10) for name in DEV_SETS])
        curves = {kind: read_curve(returned / kind / "curve.tsv") for kind in sorted({n.split("-")[0] for n in table})}
        first_pass = ScoreColumn("lm")
        wers, weights, am = both_ways(sets, [first_pass], out / "first-pass", args)
        rows = [f"| AM only | | | | {am[0]:.2f} | {am[1]:.2f} |" + (" |" if args.first_pass else ""),
                f"| score:lm (first pass) | | | | {wers[0]:.2f} ({weights[0]}) | {wers[1]:.2f} ({weights[1]}) |"
                + (" |" if args.first_pass else "")]
        for name, scores in table.items():
            kind, updates = name.split("-")
            minutes, ce = curves[kind].get(int(updates), (float("nan"), float("nan")))
            lm = ReturnedScores(name, scores, returned / TABLE)
            wers, weights, _ = both_ways(sets, [lm], out / name, args)
            row = (f"| {kind} | {updates} | {minutes:.2f} | {ce:.3f} | {wers[0]:.2f} ({weights[0]}) | "
                   f"{wers[1]:.2f} ({weights[1]}) |")
            if args.first_pass:
                joint, joint_weights, _ = both_ways(sets, [lm, first_pass], out / f"{name}+score_lm", args)
                row += f" {joint[0]:.2f} / {joint[1]:.2f} ({joint_weights[0]}; {joint_weights[1]}) |"
            rows.append(row)
            print(row, flush=True)
    except InputError as e:
        fail("track_wer", e)
    head = ["| model | updates | minutes | valid CE | dev_clean WER (λ from dev_other) | dev_other WER (λ from dev_clean) |"
            + (" with score:lm, dev_clean / dev_other (λ) |" if args.first_pass else ""),
            "|---|---:|---:|---:|---|---|" + ("---|" if args.first_pass else "")]
    text = "\n".join(head + rows) + "\n"
    write_atomic(out / "track.md", text)
    print(text)


if __name__ == "__main__":
    main()
