"""slm-rescore: tune LM weights for N-best rescoring on dev set(s) and apply them to test set(s).

Example (the LibriSpeech 10-best lists of `slm-data get librispeech-nbest`, first-pass LM removed from the
AM score)::

    NBEST=$(slm-data path librispeech-nbest)
    slm-rescore --dev "$NBEST/dev_clean" --test "$NBEST/dev_other" --lm exp/lm/slm_small \\
        --nbest 10 --am-weights decoder=0.6,ctc=0.4 --lambda-range 0:5:0.1 \\
        --cache exp/lm_cache --out exp/rescore/slm_small_tune_clean

The first-pass LM's column of the lists as a second, jointly tuned LM: add ``--lm score:lm``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.rescore import rescore
from slm_lm.rescoring.scored_set import score_column
from slm_lm.rescoring.inputs import (
    comma_list,
    lm_specs,
    load_lms,
    load_nbest_sets,
    normalized_sets,
    rescore_parser,
    scorer_options,
    tuning_options,
)
from slm_lm.common.outputs import check_no_overlap
from slm_lm.rescoring.report import check_cache, check_out_dir, check_set_names


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    return rescore_parser("slm-rescore", __doc__.split("\n\n")[0])


def read_inputs(args: argparse.Namespace, specs: list[str]) -> list[str]:
    """The files read besides the N-best inputs: the reference files and the models given as paths."""
    refs = [r for r in comma_list(args.dev_ref) + comma_list(args.test_ref) if r != "-"]
    return refs + [spec for spec in specs if score_column(spec) is None and Path(spec).exists()]


def main(argv=None) -> None:
    """Entry point of ``slm-rescore``."""
    args = build_parser().parse_args(argv)
    try:
        specs = lm_specs(args.lm)
        tuning = tuning_options(args, len(specs))
        dev = load_nbest_sets(comma_list(args.dev), comma_list(args.dev_ref), "--dev", args.nbest)
        test = load_nbest_sets(comma_list(args.test), comma_list(args.test_ref), "--test", args.nbest)
        if not args.no_normalize:
            dev, test = normalized_sets(dev), normalized_sets(test)
        names = [s.name for s in dev + test]
        check_set_names(names)
        inputs = read_inputs(args, specs)
        check_no_overlap("--out", args.out, [s.source for s in dev + test] + inputs)
        cache = args.cache or f"{args.out}/lm_cache"
        check_cache(args.out, cache, names)
        check_out_dir(args.out, names)
        scorers = load_lms(specs, **scorer_options(args))
        settings = {"command": "slm-rescore " + " ".join(sys.argv[1:] if argv is None else argv)}
        if args.nbest:
            settings["N-best"] = args.nbest
        result, reports = rescore(dev, test, scorers, args.out, cache_dir=cache, settings=settings,
                                  progress=not args.no_progress, inputs=inputs, **tuning)
    except (InputError, OSError) as err:
        fail("slm-rescore", err)
    w = result.best
    alphas = f", alpha = {', '.join(f'{x:g}' for x in w.alphas)}" if w.alphas else ""
    print(f"chosen lambda = {', '.join(f'{x:g}' for x in w.lambdas)}, beta = {w.beta:g}{alphas}")
    print(f"search: {result.search['method']}, {result.search['evaluated']} of {result.search['grid_points']} "
          "grid points evaluated")
    for r in reports:
        print(
            f"{r.name} ({r.role}): AM-only {r.wer_am:.2f}  file 1-best {r.wer_file:.2f}  "
            f"rescored {r.wer_rescored:.2f}  oracle {r.wer_oracle:.2f}"
        )
    print(f"wrote {args.out}/RESULTS.md")


if __name__ == "__main__":
    main()
