"""slm-score: score one sentence per line; writes TSV `line<TAB>score<TAB>n_tokens[<TAB>tokens]`.

The score is the natural-log probability of the sentence (its pieces and the end of sentence);
n_tokens counts those scored tokens. With --tokens a fourth column lists `piece:logprob` pairs.
"""
import argparse
import sys
from pathlib import Path

from slm_lm.errors import InputError
from slm_lm.fileio import atomic_open


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="slm-score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="model directory (save_pretrained or ESPnet LM experiment), or hf-causal:DIR / hf-masked:DIR")
    p.add_argument("--input", default="-", help="text file, one sentence per line ('-' = stdin)")
    p.add_argument("--output", default="-", help="TSV output ('-' = stdout); written atomically")
    p.add_argument("--tokens", action="store_true", help="add a column of piece:logprob pairs")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-tokens", type=int, default=8192, help="padded tokens per batch")
    p.add_argument("--truncate", action="store_true", help="score only the first tokens of over-long sentences")
    p.add_argument("--unknown", default="error", choices=["error", "unk"], help="unknown characters: fail or map to <unk>")
    p.add_argument("--no-normalize", action="store_true", help="do not apply LibriSpeech-style normalisation")
    p.add_argument("--case", choices=["as-is", "lower", "sentence"],
                   help="Hugging Face models only: re-case the input (e.g. 'sentence' for upper-case ASR text)")
    return p.parse_args(argv)


def read_lines(path: str) -> list:
    if path == "-":
        return sys.stdin.read().splitlines()
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read input: {e}") from None


def format_rows(lines, scorer, with_tokens: bool, progress: bool):
    if with_tokens:
        per_token = scorer.token_scores(lines, progress=progress)
        for number, pairs in enumerate(per_token, 1):
            total = sum(lp for _, lp in pairs)
            tokens = " ".join(f"{piece}:{lp:.4f}" for piece, lp in pairs)
            yield f"{number}\t{total:.4f}\t{len(pairs)}\t{tokens}\n"
    else:
        for number, row in enumerate(scorer.logprobs(lines, progress=progress), 1):
            yield f"{number}\t{float(row.double().sum()):.4f}\t{len(row)}\n"


def main(argv=None):
    args = parse_args(argv)
    from slm_lm.scorer import load_scorer

    try:
        lines = read_lines(args.input)
        options = dict(device=args.device, dtype=args.dtype, max_tokens=args.max_tokens, truncate=args.truncate,
                       unknown=args.unknown)
        if args.no_normalize:
            options["normalize"] = False
        if args.case:
            options["case"] = args.case
        scorer = load_scorer(args.model, **options)
        rows = list(format_rows(lines, scorer, args.tokens, progress=len(lines) > 100))
    except InputError as e:
        where = f"{args.input}:{e.index + 1}: " if e.index is not None else ""
        sys.exit(f"slm-score: error: {where}{e}")
    if args.output == "-":
        sys.stdout.writelines(rows)
        return
    with atomic_open(args.output) as f:
        f.writelines(rows)


if __name__ == "__main__":
    main()
