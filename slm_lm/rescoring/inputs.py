"""The command-line inputs of N-best rescoring, shared by slm-rescore and the tools that take its options
(slm-lm-combination, slm-pairwise-preference; slm-rescore-mt takes the LM, weight and scorer options): the
options, the N-best sets (loaded and normalised as the LM sees them) and the LMs of the ``--lm`` specs.
"""

import argparse

from slm_lm.common.errors import InputError
from slm_lm.common.options import Parser, number
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.model.precision import DTYPE_CHOICES, device_option
from slm_lm.model.tokenizer import UNKNOWN_CHOICES
from slm_lm.rescoring.nbest import NbestSet, load_nbest, normalize_nbest
from slm_lm.rescoring.scored_set import LENGTH_NORMS, parse_am_weights, parse_length_norm, score_column
from slm_lm.rescoring.weight_search import MAX_GRID_POINTS, SEARCHES, parse_range


def comma_list(value: str | None) -> list[str]:
    """The non-empty items of a comma-separated option value (none for None or "")."""
    return [] if not value else [v for v in value.split(",") if v]


def rescore_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """slm-rescore's command-line options."""
    p = Parser(prog=prog, description=description)
    p.add_argument("--dev", required=True, help="dev N-best input(s), comma-separated: ESPnet dir, .json or .tsv")
    p.add_argument("--test", default="", help="test N-best input(s), comma-separated")
    p.add_argument(
        "--dev-ref",
        default="",
        help="reference file(s) (.trn or Kaldi text) for --dev, comma-separated, in the same order; "
        "'-' or nothing = found with the data (references/ref_wer.trn, score_wer/ref.trn, JSON 'ref')",
    )
    p.add_argument("--test-ref", default="", help="reference file(s) for --test, like --dev-ref")
    add_lm_option(p)
    p.add_argument("--nbest", type=number(int, 1), default=None, help="use ranks 1..N (default: all)")
    p.add_argument(
        "--am-weights", default=None, help="AM = weighted per-scorer scores, e.g. decoder=0.6,ctc=0.4 "
        "(default: the file's total score)"
    )
    add_weight_options(p, "0:5:0.1")
    add_scorer_options(p, prog)
    p.add_argument("--no-normalize", action="store_true",
                   help="score and compute WER on the texts as they are (default: both on LibriSpeech-style "
                   "normalised text, upper case words and apostrophes)")
    p.add_argument("--out", required=True, help="output dir: RESULTS.md, PNG, tuning.json, <set>/1best_recog")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def add_lm_option(p: argparse.ArgumentParser) -> None:
    """The repeatable ``--lm`` option."""
    p.add_argument(
        "--lm",
        required=True,
        action="append",
        help="LM spec (repeat the option, or comma-separate): a model for slm_lm.scoring.scorer.load_scorer, or "
        "score:NAME = the per-scorer column NAME of the N-best scores files (score:lm: the first-pass LM)",
    )


def add_weight_options(p: argparse.ArgumentParser, lambda_range: str, beta_range: str = "0") -> None:
    """The weight grids and the search (read by :func:`tuning_options`, with ``--am-weights``)."""
    p.add_argument("--lambda-range", default=lambda_range,
                   help=f"LM weight grid start:stop:step (default {lambda_range})")
    p.add_argument("--beta-range", default=beta_range,
                   help=f"word bonus grid, e.g. --beta-range=-1:3:0.5 (default {beta_range}; 0 = none)")
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
    p.add_argument("--max-grid-points", type=number(int, 1, MAX_GRID_POINTS), default=MAX_GRID_POINTS, help="see --search")


def add_scorer_options(p: argparse.ArgumentParser, prog: str) -> None:
    """The score cache and how the LMs run (read by :func:`scorer_options`, with ``--no-normalize``)."""
    p.add_argument("--cache", default=None, help="LM score cache dir (default: OUT/lm_cache)")
    p.add_argument("--device", default=None, type=device_option(prog), help="device for the LMs (passed to load_scorer)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES,
                   help="LM compute dtype (auto: bf16 where native)")
    p.add_argument("--truncate", action="store_true", help="score only the first tokens of over-long hypotheses")
    p.add_argument("--unknown", default="error", choices=UNKNOWN_CHOICES,
                   help="characters the LM's tokenizer does not know: fail (default) or map to <unk>")
    p.add_argument("--whole-words", action="store_true",
                   help="whole-word scoring: each piece without the later pieces of its own word (PLL-word-l2r)")


def tuning_options(args: argparse.Namespace, n_lms: int) -> dict:
    """The :func:`slm_lm.rescoring.rescore.rescore` keyword arguments of the parsed weight and search options: AM
    weights, the lambda, beta and alpha grids, the length normalisation per LM, the search."""
    return {
        "lambda_grid": parse_range(args.lambda_range, "--lambda-range"),
        "beta_grid": parse_range(args.beta_range, "--beta-range"),
        "am_weights": parse_am_weights(args.am_weights) if args.am_weights else None,
        "length_norm": parse_length_norm(args.length_norm, n_lms),
        "alpha_grid": parse_range(args.ln_alpha_range, "--ln-alpha-range"),
        "search": args.search,
        "max_grid_points": args.max_grid_points,
    }


def lm_specs(values: list[str]) -> list[str]:
    """The LM specs of the repeated, comma-separated ``--lm`` values, in order."""
    return [spec for value in values for spec in comma_list(value)]


def load_nbest_sets(paths: list[str], refs: list[str], option: str, nbest: int | None) -> list[NbestSet]:
    """The N-best sets of ``option`` (e.g. ``--dev``); ``refs``: none, or one reference file per set
    (``-`` = the references found with the data)."""
    if refs and len(refs) != len(paths):
        raise InputError(f"{option}-ref: {len(refs)} reference files for {len(paths)} {option} inputs")
    refs = refs or ["-"] * len(paths)
    return [load_nbest(p, None if r == "-" else r, nbest) for p, r in zip(paths, refs)]


def normalized_sets(sets: list[NbestSet]) -> list[NbestSet]:
    """The sets with hypotheses and references normalised as the LM sees them; a hypothesis whose
    text normalises to nothing (e.g. another script) would get the empty sentence's score: an error."""
    out = []
    for nbest in sets:
        nbest, emptied = normalize_nbest(nbest, normalize_librispeech)
        if emptied:
            raise InputError(f"{emptied[0]}: hypothesis normalises to nothing ({len(emptied)} of {nbest.n_hyps} in "
                             f"set {nbest.name}); it would get the empty sentence's LM score. Check the text, or "
                             "pass --no-normalize (with --unknown unk for characters the LM does not know)")
        out.append(nbest)
    return out


def load_lms(specs: list[str], **scorer_options) -> list:
    """The LMs of the ``--lm`` specs: score columns, or models loaded with slm_lm.scoring.scorer.load_scorer."""
    lms = []
    for spec in specs:
        column = score_column(spec)
        if column is None:
            from slm_lm.scoring.scorer import load_scorer  # torch only when a model is used

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
