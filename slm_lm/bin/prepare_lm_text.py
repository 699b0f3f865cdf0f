"""slm-prepare-lm-text: books (or normalised text) -> LM training/validation sentences + report."""

import json

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.data.lm_text import PrepConfig, prepare_lm_text


def _paths(value: str) -> list:
    return [item for item in value.split(",") if item]


def main(argv=None):
    defaults = PrepConfig()
    parser = Parser(prog="slm-prepare-lm-text", description=__doc__)
    parser.add_argument("--books", required=True, nargs="+", type=_paths,
                        help="directories of .txt/.txt.gz books and/or files (comma or space separated)")
    parser.add_argument("--normalized", action="store_true",
                        help="inputs are already one normalised sentence per line (librispeech-lm-norm.txt)")
    parser.add_argument("--exclude", nargs="*", type=_paths, default=[],
                        help="dev/test transcripts (Kaldi text or sclite .trn) whose word n-grams are removed")
    parser.add_argument("--ngram", type=number(int, 1), default=defaults.ngram, help="decontamination n-gram order")
    parser.add_argument("--min-words", type=number(int, 1), default=defaults.min_words)
    parser.add_argument("--max-words", type=number(int, 1), default=defaults.max_words)
    parser.add_argument("--valid-every", type=number(int, 0), default=defaults.valid_every,
                        help="every N-th kept sentence goes to the validation file (0: none)")
    parser.add_argument("--out", required=True, help="training text (one sentence a line)")
    parser.add_argument("--valid-out", help="validation text (default: valid.txt next to --out)")
    parser.add_argument("--report", help="JSON report (default: <out stem>.report.json)")
    parser.add_argument("--keep-parts", action="store_true", help="keep the per-file part files")
    args = parser.parse_args(argv)
    config = PrepConfig(ngram=args.ngram, min_words=args.min_words, max_words=args.max_words,
                        valid_every=args.valid_every)
    try:
        report = prepare_lm_text(
            [p for group in args.books for p in group], args.out, [p for group in args.exclude for p in group],
            config, normalized=args.normalized, valid_out=args.valid_out, report=args.report,
            keep_parts=args.keep_parts)
    except (InputError, OSError) as e:
        fail("slm-prepare-lm-text", e)
    totals, split = report["totals"], report["split"]
    print(json.dumps({
        "files": len(report["inputs"]), "words_in": totals.get("words_in", 0),
        "sentences_in": totals.get("sentences_in", 0), "sentences_out": totals.get("sentences_out", 0),
        "words_out": totals.get("words_out", 0),
        "dropped": {k[len("sentences_dropped_"):]: v for k, v in totals.items() if k.startswith("sentences_dropped_")},
        "contaminated_per_file": report["contaminated_per_file"], **split,
        "problems": len(report["problems"]), "seconds": report["seconds"],
    }, indent=1))


if __name__ == "__main__":
    main()
