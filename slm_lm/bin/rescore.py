"""slm-rescore: tune LM weights for N-best rescoring on dev set(s) and apply them to test set(s).

Example (the shared LibriSpeech 10-best lists, first-pass LM removed from the AM score)::

    slm-rescore --dev ../shared/data/librispeech_nbest/dev_clean \\
        --test ../shared/data/librispeech_nbest/dev_other --lm exp/lm/slm_small \\
        --nbest 10 --am-weights decoder=0.6,ctc=0.4 --lambda-range 0:5:0.1 \\
        --cache exp/lm_cache --out exp/rescore/slm_small_tune_clean

The first-pass LM's column of the lists as a second, jointly tuned LM: add ``--lm score:lm``.
"""

from __future__ import annotations

import argparse
import sys

from slm_lm.errors import InputError, fail
from slm_lm.nbest import load_nbest, normalize_nbest
from slm_lm.precision import DTYPE_CHOICES, device_option
from slm_lm.rescore import (
    LENGTH_NORMS,
    MAX_GRID_POINTS,
    SEARCHES,
    check_no_overlap,
    parse_am_weights,
    parse_length_norm,
    parse_range,
    rescore,
    score_column,
)


def _split(value: str | None) -> list[str]:
    return [] if not value else [v for v in value.split(",") if v]


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="slm-rescore", description=__doc__.split("\n\n")[0])
    p.add_argument("--dev", required=True, help="dev N-best input(s), comma-separated: ESPnet dir, .json or .tsv")
    p.add_argument("--test", default="", help="test N-best input(s), comma-separated")
    p.add_argument(
        "--dev-ref",
        default="",
        help="reference file(s) (.trn or Kaldi text) for --dev, comma-separated, in the same order; "
        "'-' or nothing = found with the data (references/ref_wer.trn, score_wer/ref.trn, JSON 'ref')",
    )
    p.add_argument("--test-ref", default="", help="reference file(s) for --test, like --dev-ref")
    p.add_argument(
        "--lm",
        required=True,
        action="append",
        help="LM spec (repeat the option, or comma-separate): a model for slm_lm.scorer.load_scorer, or "
        "score:NAME = the per-scorer column NAME of the N-best scores files (score:lm: the first-pass LM)",
    )
    p.add_argument("--nbest", type=int, default=None, help="use ranks 1..N (default: all)")
    p.add_argument(
        "--am-weights", default=None, help="AM = weighted per-scorer scores, e.g. decoder=0.6,ctc=0.4 "
        "(default: the file's total score)"
    )
    p.add_argument("--lambda-range", default="0:5:0.1", help="LM weight grid start:stop:step (default 0:5:0.1)")
    p.add_argument(
        "--beta-range", default="0", help="word bonus grid, e.g. --beta-range=-1:3:0.5 (default 0 = none)"
    )
    p.add_argument(
        "--length-norm",
        default="none",
        help=f"length normalisation of the LM scores as mlm-scoring does, one of {'/'.join(LENGTH_NORMS)} for "
        "all LMs or one per LM in --lm order, e.g. none,gnmt (default none)",
    )
    p.add_argument(
        "--ln-alpha-range", default="0:1:0.1", help="alpha grid of the length-normalised LMs (default 0:1:0.1)"
    )
    p.add_argument(
        "--search",
        default="auto",
        choices=SEARCHES,
        help="grid: every point; coordinate: coordinate descent; auto (default): grid up to --max-grid-points",
    )
    p.add_argument("--max-grid-points", type=int, default=MAX_GRID_POINTS, help="see --search")
    p.add_argument("--cache", default=None, help="LM score cache dir (default: OUT/lm_cache)")
    p.add_argument("--device", default=None, type=device_option("slm-rescore"),
                   help="device for the LMs (passed to load_scorer)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES, help="LM compute dtype (auto: bf16 where native)")
    p.add_argument("--truncate", action="store_true", help="score only the first tokens of over-long hypotheses")
    p.add_argument("--unknown", default="error", choices=["error", "unk"],
                   help="characters the LM's tokenizer does not know: fail (default) or map to <unk>")
    p.add_argument("--whole-words", action="store_true",
                   help="whole-word scoring: each piece without the later pieces of its own word (PLL-word-l2r)")
    p.add_argument("--no-normalize", action="store_true",
                   help="score and compute WER on the texts as they are (default: both on LibriSpeech-style "
                   "normalised text, upper case words and apostrophes)")
    p.add_argument("--out", required=True, help="output dir: RESULTS.md, PNG, tuning.json, <set>/1best_recog")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def _load_sets(paths: list[str], refs: list[str], option: str, nbest: int | None):
    if refs and len(refs) != len(paths):
        raise InputError(f"{option}-ref: {len(refs)} reference files for {len(paths)} {option} inputs")
    refs = refs or ["-"] * len(paths)
    return [load_nbest(p, None if r == "-" else r, nbest) for p, r in zip(paths, refs)]


def load_lms(specs: list[str], **scorer_options) -> list:
    """The LMs of the ``--lm`` specs: score columns, or models loaded with slm_lm.scorer.load_scorer."""
    lms = []
    for spec in specs:
        column = score_column(spec)
        if column is None:
            from slm_lm.scorer import load_scorer  # torch only when a model is used

            column = load_scorer(spec, **scorer_options)
        lms.append(column)
    return lms


def scorer_options(args: argparse.Namespace) -> dict:
    """The load_scorer options of the parsed command line (dtype, truncate, unknown, device, normalize,
    whole_words)."""
    options = {"dtype": args.dtype, "truncate": args.truncate, "unknown": args.unknown}
    if args.device:
        options["device"] = args.device
    if args.no_normalize:
        options["normalize"] = False
    if args.whole_words:
        options["whole_words"] = True
    return options


def _normalized(sets: list) -> list:
    """The sets with hypotheses and references normalised as the LM sees them; a hypothesis whose
    text normalises to nothing (e.g. another script) would get the empty sentence's score: an error."""
    from slm_lm.text_norm import normalize_librispeech

    out = []
    for nbest in sets:
        nbest, emptied = normalize_nbest(nbest, normalize_librispeech)
        if emptied:
            raise InputError(f"{emptied[0]}: hypothesis normalises to nothing ({len(emptied)} of {nbest.n_hyps} in "
                             f"set {nbest.name}); it would get the empty sentence's LM score. Check the text, or "
                             "pass --no-normalize (with --unknown unk for characters the LM does not know)")
        out.append(nbest)
    return out


def main(argv=None) -> None:
    """Entry point of ``slm-rescore``."""
    args = build_parser().parse_args(argv)
    try:
        lambda_grid = parse_range(args.lambda_range, "--lambda-range")
        beta_grid = parse_range(args.beta_range, "--beta-range")
        am_weights = parse_am_weights(args.am_weights) if args.am_weights else None
        specs = [spec for value in args.lm for spec in _split(value)]
        length_norm = parse_length_norm(args.length_norm, len(specs))
        alpha_grid = parse_range(args.ln_alpha_range, "--ln-alpha-range")
        dev = _load_sets(_split(args.dev), _split(args.dev_ref), "--dev", args.nbest)
        test = _load_sets(_split(args.test), _split(args.test_ref), "--test", args.nbest)
        if not args.no_normalize:
            dev, test = _normalized(dev), _normalized(test)
        check_no_overlap(args.out, [s.source for s in dev + test])
        scorers = load_lms(specs, **scorer_options(args))
        settings = {"command": "slm-rescore " + " ".join(sys.argv[1:] if argv is None else argv)}
        if args.nbest:
            settings["N-best"] = args.nbest
        result, reports = rescore(
            dev,
            test,
            scorers,
            args.out,
            am_weights=am_weights,
            lambda_grid=lambda_grid,
            beta_grid=beta_grid,
            cache_dir=args.cache or f"{args.out}/lm_cache",
            settings=settings,
            progress=not args.no_progress,
            length_norm=length_norm,
            alpha_grid=alpha_grid,
            search=args.search,
            max_grid_points=args.max_grid_points,
        )
    except InputError as err:
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
