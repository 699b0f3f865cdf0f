#!/usr/bin/env python3
"""Every verse of the mini corpus's dev and test books (Joshua, Mark, Judges, Luke) as Kaldi text.

Pass it to `slm-prepare-lm-text --exclude` so that book text used to pre-train an LM shares no 10-gram
with the mini recipe's dev/test sentences (the Gutenberg books include Bible passages).
Usage: python local/analyses/mini_heldout_text.py OUT.txt [--bible bible]      (needs Debian's bible-kjv)
"""
import argparse

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.data.bible import DEV_BOOKS, TEST_BOOKS, read_bible
from slm_lm.data.text_norm import normalize_librispeech


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--bible", default="bible", help="the bible-kjv command")
    args = parser.parse_args(argv)
    try:
        verses = read_bible(args.bible)
    except InputError as e:
        fail("mini_heldout_text.py", e)
    lines, counts = [], {}
    for book, chapter, text in verses:
        if book in DEV_BOOKS + TEST_BOOKS:
            counts[book] = counts.get(book, 0) + 1
            words = normalize_librispeech(text)
            if words:
                lines.append(f"{book}-{chapter}-{counts[book]} {words}\n")
    write_atomic(args.out, "".join(lines))
    print(f"wrote {args.out}: {len(lines)} verses of {', '.join(DEV_BOOKS + TEST_BOOKS)}")


if __name__ == "__main__":
    main()
