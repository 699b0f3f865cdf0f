#!/usr/bin/env python3
"""How fine-tuning moved an LM's sentence scores inside N-best lists: per word error and per word.

  N=$(slm-data path librispeech-nbest)
  python local/analyses/score_shift.py --set $N/dev_other --nbest 10 --base clm-books \
      --tuned exp/mwer/clm_hard_clean/model --cache exp/sim/lm_cache

Within each list, the change of every hypothesis's score (tuned - base, nats) is centred on the list's mean, and
so are its word errors and its number of words; one least-squares fit over every hypothesis of the sets gives the
change per word error (negative: errors cost more than before) and per word (positive: words cost less). Also
printed: the mean change, the spread of the centred change, and each model's mean within-list spread of scores.
A change per word is what a word bonus (`slm-rescore --beta-range`) can also give; a change per error is not.
"""
import argparse

import numpy as np

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import number
from slm_lm.rescoring.inputs import load_nbest_sets, normalized_sets
from slm_lm.rescoring.scored_set import build_scored_set
from slm_lm.scoring.cache import lm_scores
from slm_lm.scoring.scorer import load_scorer

PROG = "score_shift"


def centred(values: np.ndarray, real: np.ndarray) -> np.ndarray:
    """[U, N] `values` minus their mean over each row's real entries (0 at padding)."""
    mean = np.where(real, values, 0.0).sum(1, keepdims=True) / real.sum(1, keepdims=True)
    return np.where(real, values - mean, 0.0)


def shift(base: np.ndarray, tuned: np.ndarray, errors: np.ndarray, n_words: np.ndarray, real: np.ndarray) -> dict:
    """How `tuned` scores [U, N] differ from `base` scores of the same hypotheses, within lists of >= 2 of them."""
    real = real & (real.sum(1, keepdims=True) >= 2)
    keep = real.any(1)
    base, tuned, errors, n_words, real = (a[keep] for a in (base, tuned, errors, n_words, real))
    change = centred(tuned - base, real)
    design = np.stack([centred(errors.astype(float), real)[real], centred(n_words.astype(float), real)[real]], 1)
    (per_error, per_word), *_ = np.linalg.lstsq(design, change[real], rcond=None)
    spread = [float(np.mean([row[r].std() for row, r in zip(scores, real)])) for scores in (base, tuned)]
    return {"lists": int(keep.sum()), "mean_change": float((tuned - base)[real].mean()),
            "change_spread": float(change[real].std()), "per_error": float(per_error),
            "per_word": float(per_word), "base_spread": spread[0], "tuned_spread": spread[1]}


def main(argv=None) -> None:
    """Entry point: print the table of `shift` for each tuned model on each set."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", required=True, help="an N-best input slm-rescore reads (repeatable)")
    p.add_argument("--ref", action="append", default=[],
                   help="reference files, one per --set in order (-: found with the data)")
    p.add_argument("--nbest", type=number(int, 1), default=None, help="use ranks 1..N (default: all)")
    p.add_argument("--base", required=True, help="the model before fine-tuning (a shipped name or a directory)")
    p.add_argument("--tuned", action="append", required=True, help="a fine-tuned model (repeatable)")
    p.add_argument("--cache", default=None, help="LM score cache directory, as slm-rescore's --cache")
    args = p.parse_args(argv)
    try:
        sets = normalized_sets(load_nbest_sets(args.set, args.ref, "--set", args.nbest))
        for nbest in sets:
            if all(len(hyps) < 2 for hyps in nbest.hyps.values()):
                raise InputError(f"{nbest.source}: no list of two hypotheses or more")
        texts = sorted({h.text for s in sets for hyps in s.hyps.values() for h in hyps})
        specs = dict.fromkeys([args.base] + args.tuned)  # each model scored once
        tables = {spec: lm_scores(load_scorer(spec), texts, args.cache) for spec in specs}
    except (InputError, OSError) as err:
        fail(PROG, err)
    rows = []
    for nbest in sets:
        scored = build_scored_set(nbest, [tables[spec] for spec in [args.base] + args.tuned])  # errors counted once
        real = np.isfinite(scored.am)
        for k, spec in enumerate(args.tuned, start=1):
            s = shift(scored.lm[0], scored.lm[k], scored.errors, scored.n_words, real)
            rows.append(f"| {nbest.name} | {spec} | {s['lists']} | {s['mean_change']:+.3f} | "
                        f"{s['change_spread']:.3f} | {s['per_error']:+.3f} | {s['per_word']:+.3f} | "
                        f"{s['base_spread']:.3f} → {s['tuned_spread']:.3f} |")
    print("| set | tuned model | lists | mean change | spread of the change | per word error | per word | "
          "score spread, base → tuned |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
