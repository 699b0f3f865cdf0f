"""The King James Bible that the recipe's offline mini corpus is made of, for the repository's scripts only
(egs/librispeech_slm/local/mini_corpus.py, local/analyses/mini_heldout_text.py): its verses as Debian's
bible-kjv prints them, and the books the mini corpus holds out for dev and test."""
import re
import subprocess

from slm_lm.common.errors import InputError

DEV_BOOKS = ["Josh", "Mark"]  # book names as `bible -f` abbreviates them
TEST_BOOKS = ["Jdgs", "Luke"]
# `bible -f` prints one verse a line: "1Sm3:10 And the LORD came, ..."
VERSE = re.compile(r"^(?P<book>[1-3]?[A-Za-z]+)(?P<chapter>\d+):(?P<verse>\d+) (?P<text>.+)$")


def read_bible(bible_cmd):
    """Return [(book, chapter, verse_text)] for the whole KJV as printed by `bible`."""
    try:
        out = subprocess.run([bible_cmd, "-f", "-l100000", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError as e:
        raise InputError(f"{bible_cmd}: not found; install Debian's bible-kjv "
                         "(egs/librispeech_slm/local/setup_mini.sh does it)") from e
    verses = []
    for lineno, line in enumerate(out.splitlines(), 1):
        m = VERSE.match(line)
        if not m:
            raise InputError(f"output of `{bible_cmd}`, line {lineno}: unexpected line {line!r}")
        verses.append((m.group("book"), int(m.group("chapter")), m.group("text")))
    if len(verses) < 30000:
        raise InputError(f"output of `{bible_cmd}`: only {len(verses)} verses, expected ~31102")
    return verses
