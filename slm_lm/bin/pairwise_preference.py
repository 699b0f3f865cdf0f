"""slm-pairwise-preference: which hypothesis does an LM prefer, on the pairs that decide N-best rescoring?

Per set and LM:

  fix:   utterances whose AM-best hypothesis has more word errors than the list's best (oracle) one: how
         often the LM alone scores that oracle hypothesis (the one the AM likes most, if several) above
         the AM-best one;
  break: utterances whose AM-best hypothesis is already an oracle one: how often the LM scores the AM's
         best worse hypothesis above it.

An LM that helps rescoring fixes often and breaks seldom. Unlike WER after rescoring this needs no
weight tuning, so LMs compare on their scores alone.

  NBEST=$(slm-data path librispeech-nbest)   # the lists of `slm-data get librispeech-nbest`
  slm-pairwise-preference --set "$NBEST/dev_clean" --set "$NBEST/dev_other" --lm SLM=slm-books --lm CLM=clm-books \\
      --lm "first-pass LM=score:lm" --nbest 10 --am-weights decoder=0.6,ctc=0.4 \\
      --cache exp/pretrain/eval/lm_cache --out exp/pretrain/eval/pairwise.md

--lm is LABEL=SPEC or SPEC (a model as slm-rescore's --lm takes it, or score:NAME, a per-scorer column of
the lists). Texts are normalised as slm-rescore normalises them, so its --cache is shared.
"""
import argparse
import shlex
import sys
from pathlib import Path

import numpy as np

from slm_lm.common.errors import InputError, fail, os_problem
from slm_lm.common.fileio import write_atomic
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_file
from slm_lm.rescoring.inputs import load_lms, load_nbest_sets, normalized_sets
from slm_lm.rescoring.scored_set import ScoreColumn, build_scored_set, parse_am_weights
from slm_lm.scoring.cache import lm_scores


def preferences(scored, j: int) -> dict:
    """{"fix": (wins, pairs), "break": (losses, pairs)} of LM `j` of a ScoredSet (see module docstring)."""
    fix, brk = [0, 0], [0, 0]
    for u in range(len(scored.uttids)):
        valid = np.isfinite(scored.am[u])
        am, lm, errors = scored.am[u][valid], scored.lm[j, u][valid], scored.errors[u][valid]
        best = int(np.argmax(am))
        if errors[best] > errors.min():
            oracle = np.flatnonzero(errors == errors.min())
            other = int(oracle[np.argmax(am[oracle])])
            fix[0] += lm[other] > lm[best]
            fix[1] += 1
        else:
            worse = np.flatnonzero(errors > errors[best])
            if worse.size:
                other = int(worse[np.argmax(am[worse])])
                brk[0] += lm[other] > lm[best]
                brk[1] += 1
    return {"fix": tuple(fix), "break": tuple(brk)}


def _labelled(value: str) -> tuple[str, str]:
    label, sep, spec = value.partition("=")
    return (label, spec) if sep else (value, value)


def main(argv=None) -> None:
    """Entry point of ``slm-pairwise-preference``: writes the table to --out and prints it."""
    parser = Parser(prog="slm-pairwise-preference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", required=True, help="an N-best set (as slm-rescore's --dev)")
    parser.add_argument("--lm", action="append", required=True, help="LABEL=SPEC or SPEC (repeat)")
    parser.add_argument("--nbest", type=number(int, 1), default=10)
    parser.add_argument("--am-weights", default="", help="e.g. decoder=0.6,ctc=0.4 (default: the file score)")
    parser.add_argument("--cache", help="LM score cache directory (shared with slm-rescore)")
    parser.add_argument("--out", required=True, help="markdown table to write")
    args = parser.parse_args(argv)
    try:
        labels, specs = zip(*(_labelled(v) for v in args.lm))
        sets = normalized_sets(load_nbest_sets(args.set, [], "--set", args.nbest))
        inputs = [s.source for s in sets] + [p for p in specs if Path(p).exists()] + ([args.cache] if args.cache else [])
        check_no_overlap("--out", args.out, inputs)
        out = check_output_file("--out", args.out)
        lms = load_lms(list(specs))
        am_weights = parse_am_weights(args.am_weights) if args.am_weights else None
        texts = [h.text for nbest in sets for hyps in nbest.hyps.values() for h in hyps]
        tables = [lm if isinstance(lm, ScoreColumn) else lm_scores(lm, texts, args.cache, progress=False)
                  for lm in lms]
        scored = [build_scored_set(nbest, tables, am_weights) for nbest in sets]
    except (InputError, OSError) as err:
        fail("slm-pairwise-preference", err)
    header = "| LM | " + " | ".join(f"{s.name}: fix (LM prefers the oracle hyp) | "
                                     f"{s.name}: break (LM prefers a worse hyp)" for s in scored) + " |"
    lines = [header, "|---|" + "---:|---:|" * len(scored)]
    for j, label in enumerate(labels):
        cells = []
        for s in scored:
            p = preferences(s, j)
            cells += [f"{100 * w / max(n, 1):.1f} % of {n}" for w, n in (p["fix"], p["break"])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    command = "slm-pairwise-preference " + shlex.join(sys.argv[1:] if argv is None else argv)
    footer = f"AM = {args.am_weights or 'the file score'}, {args.nbest}-best. `{command}`"
    table = "\n".join(lines + ["", footer]) + "\n"
    try:
        write_atomic(out, table)
    except OSError as err:
        fail("slm-pairwise-preference", f"--out {args.out}: cannot write: {os_problem(err, args.out)}")
    print(table, end="")


if __name__ == "__main__":
    main()
