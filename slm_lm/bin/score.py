"""slm-score: score one sentence per line; writes TSV `line<TAB>score<TAB>n_tokens[<TAB>tokens]`.

The score is the natural-log probability of the sentence (its pieces and the end of sentence);
n_tokens counts those scored tokens. With --tokens a fourth column lists `piece:logprob` pairs.
The input is read and scored 10,000 lines at a time (memory stays bounded; rows keep the input order);
a summary line goes to stderr at the end.
"""
import argparse
import sys
import time

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import atomic_open, read_text_lines
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_file
from slm_lm.model.precision import DTYPE_CHOICES, device_option
from slm_lm.model.tokenizer import UNKNOWN_CHOICES


def parse_args(argv=None):
    p = Parser(prog="slm-score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="model directory (save_pretrained or ESPnet LM experiment), or hf-causal:DIR / hf-masked:DIR")
    p.add_argument("--input", default="-", help="text file, one sentence per line ('-' = stdin)")
    p.add_argument("--output", default="-", help="TSV output ('-' = stdout); written atomically")
    p.add_argument("--tokens", action="store_true", help="add a column of piece:logprob pairs")
    p.add_argument("--device", default="cpu", type=device_option("slm-score"))
    p.add_argument("--dtype", default="float32", choices=DTYPE_CHOICES, help="compute dtype (auto: bf16 where native)")
    p.add_argument("--max-tokens", type=number(int, 1), default=8192, help="padded tokens per batch")
    p.add_argument("--truncate", action="store_true", help="score only the first tokens of over-long sentences")
    p.add_argument("--unknown", default="error", choices=UNKNOWN_CHOICES, help="unknown characters: fail or map to <unk>")
    p.add_argument("--no-normalize", action="store_true", help="do not apply LibriSpeech-style normalisation")
    p.add_argument("--whole-words", action="store_true",
                   help="whole-word scoring: each piece without the later pieces of its own word (PLL-word-l2r)")
    p.add_argument("--case", choices=["as-is", "lower", "sentence"],
                   help="Hugging Face models only: re-case the input (e.g. 'sentence' for upper-case ASR text)")
    return p.parse_args(argv)


CHUNK = 10_000  # sentences scored (and held in memory) at a time


def read_chunks(path: str, size: int = CHUNK):
    """Lists of up to `size` lines (no line ends, a UTF-8 byte-order mark dropped), in file order."""
    chunk = []
    for _, line in read_text_lines(path):
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def format_rows(lines, scorer, with_tokens: bool, progress: bool, first: int = 1):
    """(TSV row, scored tokens) of each of `lines`, numbered from `first`."""
    if with_tokens:
        per_token = scorer.token_scores(lines, progress=progress)
        for line_number, pairs in enumerate(per_token, first):
            total = sum(lp for _, lp in pairs)
            tokens = " ".join(f"{piece}:{lp:.4f}" for piece, lp in pairs)
            yield f"{line_number}\t{total:.4f}\t{len(pairs)}\t{tokens}\n", len(pairs)
    else:
        for line_number, row in enumerate(scorer.logprobs(lines, progress=progress), first):
            yield f"{line_number}\t{float(row.double().sum()):.4f}\t{len(row)}\n", len(row)


def score_stream(args, scorer, out) -> tuple[int, int]:
    """Score the input chunk by chunk, writing rows to `out`; returns (sentences, scored tokens)."""
    sentences = tokens = 0
    for chunk in read_chunks(args.input):
        try:
            for row, n_tokens in format_rows(chunk, scorer, args.tokens, progress=len(chunk) > 100,
                                             first=sentences + 1):
                tokens += n_tokens
                out.write(row)
        except InputError as e:
            if e.index is None:
                raise
            raise InputError(str(e).replace(f"sentence {e.index}:", f"sentence {sentences + e.index}:", 1),
                             sentences + e.index) from None
        sentences += len(chunk)
    return sentences, tokens


def main(argv=None):
    args = parse_args(argv)
    from slm_lm.scoring.scorer import load_scorer

    started = time.time()
    try:
        if args.output != "-":
            check_no_overlap("--output", args.output, [args.input] if args.input != "-" else [])
            output = check_output_file("--output", args.output)  # a link is written through
        options = dict(device=args.device, dtype=args.dtype, max_tokens=args.max_tokens, truncate=args.truncate,
                       unknown=args.unknown)
        if args.no_normalize:
            options["normalize"] = False
        if args.whole_words:
            options["whole_words"] = True
        if args.case:
            options["case"] = args.case
        scorer = load_scorer(args.model, **options)
        if args.output == "-":
            counts = score_stream(args, scorer, sys.stdout)
        else:
            try:
                with atomic_open(output) as f:
                    counts = score_stream(args, scorer, f)
            except OSError as e:  # a read-only directory, a full disk
                raise InputError(f"{args.output}: cannot write the output: {e.strerror or e}") from None
    except InputError as e:
        where = f"{args.input}:{e.index + 1}: " if e.index is not None else ""
        fail("slm-score", f"{where}{e}")
    except OSError as e:
        fail("slm-score", e)
    print(f"slm-score: scored {counts[0]} sentences ({counts[1]} tokens) in {time.time() - started:.1f} s"
          + ("" if args.output == "-" else f"; wrote {args.output}"), file=sys.stderr)


if __name__ == "__main__":
    main()
