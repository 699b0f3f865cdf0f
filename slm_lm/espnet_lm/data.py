"""Plain text (one sentence per line) -> ESPnet LM data: `text` (`uttid sentence`) and `text_shape`.

`text_shape` lines are `uttid n_pieces`, the lengths ESPnet's batch samplers read; the pieces are
counted with the same sentencepiece model ESPnet's preprocessor uses, so no collect-stats pass is needed.
"""
from pathlib import Path

import sentencepiece as spm

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import atomic_open, read_text_lines
from slm_lm.common.options import Parser
from slm_lm.common.outputs import check_no_overlap
from slm_lm.common.progress import progress_bar


def write_espnet_text(sentences, out_dir, bpemodel, prefix: str = "utt") -> int:
    """Write `out_dir/text` and `out_dir/text_shape` from a one-sentence-per-line file; returns lines.

    Utterance ids are `<prefix><line number, 9 digits>`. Empty lines or lines that are not UTF-8 raise
    `InputError` naming the line (a byte-order mark is dropped); both files are written atomically.
    """
    sentences, out_dir = Path(sentences), Path(out_dir)
    for name in ("text", "text_shape"):
        check_no_overlap("OUT_DIR", out_dir / name, [sentences])
    try:
        processor = spm.SentencePieceProcessor(model_file=str(bpemodel))
    except (OSError, RuntimeError) as e:
        raise InputError(f"{bpemodel}: cannot load the sentencepiece model: {e}") from None
    count = 0
    with atomic_open(out_dir / "text") as text, atomic_open(out_dir / "text_shape") as shape, \
            progress_bar(read_text_lines(sentences), desc=f"{sentences.name} -> ESPnet text", unit=" lines") as lines:
        for count, line in lines:
            line = " ".join(line.split())
            if not line:
                raise InputError(f"{sentences}:{count}: empty line")
            uttid = f"{prefix}{count:09d}"
            text.write(f"{uttid} {line}\n")
            shape.write(f"{uttid} {len(processor.encode(line))}\n")
    return count


def main(argv=None):
    """CLI: python -m slm_lm.espnet_lm.data SENTENCES OUT_DIR --bpemodel BPE [--prefix P]."""
    p = Parser(prog="slm_lm.espnet_lm.data", description=__doc__)
    p.add_argument("sentences", help="plain text, one sentence per line")
    p.add_argument("out_dir", help="writes OUT_DIR/text and OUT_DIR/text_shape")
    p.add_argument("--bpemodel", required=True, help="sentencepiece model (the one given to lm_train)")
    p.add_argument("--prefix", default="utt", help="utterance-id prefix")
    args = p.parse_args(argv)
    try:
        n = write_espnet_text(args.sentences, args.out_dir, args.bpemodel, args.prefix)
    except InputError as e:
        fail("slm_lm.espnet_lm.data", e)
    print(f"{n} utterances -> {args.out_dir}/text, {args.out_dir}/text_shape")


if __name__ == "__main__":
    main()
