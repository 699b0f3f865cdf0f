"""slm-zero-shot: zero-shot classification by ranking the label words filled into patterns, scored by an LM.

Example (the two SST-2 patterns of the Transcormer paper; GLUE's SST-2 dev.tsv has labels 0 and 1)::

    slm-zero-shot --data dev.tsv --labels 0=negative,1=positive \\
        --pattern "The sentiment of {text} is {label}." --pattern "{text} is a {label} sentiment." \\
        --model slm-books --out exp/sst2/predictions.tsv

Prints the accuracy of each pattern, plain and calibrated by the pattern's score with an empty text.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail, os_problem
from slm_lm.common.fileio import write_atomic
from slm_lm.common.options import Parser
from slm_lm.common.outputs import check_output_file
from slm_lm.evaluation.zero_shot import (
    check_pattern,
    classify,
    parse_label_words,
    predictions_tsv,
    read_examples,
    sentences,
)
from slm_lm.model.precision import DTYPE_CHOICES, device_option
from slm_lm.model.tokenizer import UNKNOWN_CHOICES
from slm_lm.scoring.cache import LocatedScorer, lm_scores

PROG = "slm-zero-shot"


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="labelled texts: .jsonl ({'text': ..., 'label': ...} per line) "
                   "or TSV (text<TAB>label, an optional header line)")
    p.add_argument("--labels", required=True, help="label words: label=word,... (e.g. 0=negative,1=positive), or "
                   "word,... when the data's labels are the words")
    p.add_argument("--pattern", required=True, action="append",
                   help="a pattern with one {text} and one {label} slot (repeat for several)")
    p.add_argument("--model", required=True, help="model spec (shipped name, model dir, hf-causal:DIR, hf-masked:DIR)")
    p.add_argument("--out", required=True, help="predictions TSV: one row per example and pattern")
    p.add_argument("--cache", default=None, help="score cache dir, the same as slm-rescore's --cache (default: none)")
    p.add_argument("--device", default=None, type=device_option(PROG), help="device for the model")
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES, help="compute dtype (auto: bf16 where native)")
    p.add_argument("--unknown", default="error", choices=UNKNOWN_CHOICES,
                   help="characters the model's tokenizer does not know: fail (default) or map to <unk>")
    p.add_argument("--no-normalize", action="store_true",
                   help="score the sentences as they are (default: as the model was trained)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def main(argv=None) -> None:
    """Entry point of ``slm-zero-shot``."""
    args = build_parser().parse_args(argv)
    try:
        if Path(args.out).resolve() == Path(args.data).resolve():
            raise InputError(f"--out {args.out} is the --data file: it would be replaced; choose another name")
        out = check_output_file("--out", args.out)  # before any scoring: not a directory, nor under a file
        patterns = [check_pattern(p) for p in args.pattern]
        words = parse_label_words(args.labels)
        examples = read_examples(args.data)
        where = sentences(examples, patterns, words)
        from slm_lm.scoring.scorer import load_scorer  # torch only once the inputs are read

        options = {"dtype": args.dtype, "unknown": args.unknown, **({"device": args.device} if args.device else {})}
        if args.no_normalize:
            options["normalize"] = False
        scorer = load_scorer(args.model, **options)
        table = lm_scores(LocatedScorer(scorer, where), list(where), args.cache, progress=not args.no_progress)
        results = classify(examples, patterns, words, table)
        try:
            write_atomic(out, predictions_tsv(examples, results, list(words)))
        except OSError as err:
            raise InputError(f"--out {args.out}: cannot write the predictions: {os_problem(err, out)}") from None
    except (InputError, OSError) as err:
        fail(PROG, err)
    print(f"{len(examples)} examples, labels {', '.join(f'{k}={v}' for k, v in words.items())}, model {scorer.name}")
    print("| pattern | accuracy % | calibrated % |")
    print("|---|---:|---:|")
    for r in results:
        print(f"| {r.pattern} | {r.accuracy(examples):.1f} | {r.accuracy(examples, calibrated=True):.1f} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
