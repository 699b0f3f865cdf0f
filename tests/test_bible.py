"""slm_lm.data.bible (the mini corpus's text) and local/analyses/mini_heldout_text.py, which writes its dev/test
books."""
import subprocess
import sys
from pathlib import Path

import pytest

from slm_lm.common.errors import InputError
from slm_lm.data.bible import DEV_BOOKS, TEST_BOOKS, read_bible

SCRIPT = Path(__file__).resolve().parents[1] / "local" / "analyses" / "mini_heldout_text.py"


def fake_bible(tmp_path, lines: list) -> str:
    command = tmp_path / "bible"
    command.write_text("#!/bin/sh\ncat <<'END'\n" + "\n".join(lines) + "\nEND\n")
    command.chmod(0o755)
    return str(command)


def test_a_missing_or_wrong_bible_command_is_one_input_error(tmp_path):
    with pytest.raises(InputError, match="no-such-bible: not found; install Debian's bible-kjv"):
        read_bible(str(tmp_path / "no-such-bible"))
    with pytest.raises(InputError, match=r"`:2: unexpected line 'Genesis'"):
        read_bible(fake_bible(tmp_path, ["Gen1:1 In the beginning God created the heaven and the earth.", "Genesis"]))
    with pytest.raises(InputError, match="only 1 verses, expected ~31102"):
        read_bible(fake_bible(tmp_path, ["1Sm3:10 And the LORD came, and stood."]))


def test_a_verse_is_its_book_chapter_and_text(tmp_path):
    verses = ["1Sm3:10 And the LORD came, and stood.", "Mark1:1 The beginning of the gospel."] * 15000
    assert read_bible(fake_bible(tmp_path, verses))[:2] == [("1Sm", 3, "And the LORD came, and stood."),
                                                           ("Mark", 1, "The beginning of the gospel.")]


def test_the_held_out_text_holds_every_verse_of_the_dev_and_test_books(tmp_path):
    out = tmp_path / "heldout.txt"
    subprocess.run([sys.executable, str(SCRIPT), str(out)], check=True, capture_output=True)
    books = {line.split("-", 1)[0] for line in out.read_text().splitlines()}
    assert books == set(DEV_BOOKS + TEST_BOOKS)
    assert len(out.read_text().splitlines()) == sum(1 for book, _, _ in read_bible("bible") if book in books)
