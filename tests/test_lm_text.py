"""LM text preparation: book clean-up, sentence split, decontamination, report, resume, bad input."""
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import MIRROR
from slm_lm.bin import prepare_lm_text as cli
from slm_lm.common.errors import InputError
from slm_lm.data.decontaminate import NgramFilter, load_exclusion
from slm_lm.data.lm_text import PrepConfig, prepare_lm_text
from slm_lm.data.text_cleanup import book_sentences, split_sentences


BOOK = """Produced by Some Volunteer and the Online
Distributed Proofreading Team



THE TALE OF TWO DOGS

By A. N. Author

New York
1901



CHAPTER I.

THE BEGINNING


Mr. Smith walked to St. Paul's with J. R. Jones at 7:30 in the
morning. "Is it far?" he asked. "No," said Jones; "it is near."

[Illustration: The two dogs
at play.]

She had a dog--a small one--and it barked. [Footnote 1: A long note
that goes on

and on over two paragraphs.] The dog slept.[1]

"But, sir--"

Chapter II. The End

It was over. Oh.
"""

TRANSCRIPT = "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG AND RUNS AWAY FAST"


def write_book(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_split_sentences():
    assert split_sentences('Mr. Smith met Dr. Jones. "Hello!" he said. Then J. R. R. Tolkien left.') == [
        "Mr. Smith met Dr. Jones.", '"Hello!" he said.', "Then J. R. R. Tolkien left."]
    assert split_sentences("Is it? yes it is. Fine!") == ["Is it? yes it is.", "Fine!"]
    assert split_sentences('He said "Stop." Then he left... Ok') == ['He said "Stop."', "Then he left...", "Ok"]
    assert split_sentences("In 1863. 1864 came.") == ["In 1863.", "1864 came."]
    assert split_sentences("") == []


@pytest.mark.parametrize("name", ["book.txt", "book.txt.gz"])
def test_book_sentences_cleanup(tmp_path, name):
    path = write_book(tmp_path / name, BOOK)
    stats, problems = Counter(), []
    sentences = [s for _, s in book_sentences(path, stats, problems)]
    assert sentences == [
        "Mr. Smith walked to St. Paul's with J. R. Jones at 7:30 in the morning.",
        '"Is it far?" he asked.',
        '"No," said Jones; "it is near."',
        "She had a dog--a small one--and it barked.",
        "The dog slept.",
        '"But, sir--"',
        "It was over.",
        "Oh.",
    ]
    assert problems == []
    assert stats["paragraphs_dropped_front_matter"] == 1
    assert stats["paragraphs_dropped_no_lowercase"] == 2  # title, THE BEGINNING
    assert stats["paragraphs_dropped_heading"] == 2  # CHAPTER I., Chapter II. The End
    assert stats["paragraphs_dropped_bracket_block"] == 1  # the illustration (the footnote ends mid-paragraph)
    assert stats["paragraphs_dropped_no_final_punct"] == 2  # byline, New York 1901
    assert stats["words_in"] == len(BOOK.split())


def test_unclosed_block_is_reported(tmp_path):
    text = "[Footnote 1: never closed.\n\n" + "".join(f"Paragraph {i} is here.\n\n" for i in range(15))
    stats, problems = Counter(), []
    sentences = [s for _, s in book_sentences(write_book(tmp_path / "b.txt", text), stats, problems)]
    assert len(problems) == 1 and "b.txt:1: bracket block not closed" in problems[0]
    assert sentences == [f"Paragraph {i} is here." for i in range(10, 15)]


def test_ngram_filter_across_sentences(tmp_path):
    trn = tmp_path / "ref.trn"
    trn.write_text(f"{TRANSCRIPT}\t(spk-utt1)\nSHORT ONE\t(spk-utt2)\n", encoding="utf-8")
    exclusion = load_exclusion([trn], 10)
    assert exclusion.files[str(trn)] == {"utterances": 2, "ngrams": 4, "shorter_than_n": 1}
    f = NgramFilter(exclusion)
    released = []
    sentences = ["A B C D E F G H I J K L", "HE SAW THE QUICK BROWN FOX JUMPS", "OVER THE LAZY DOG AND SLEPT",
                 "NOTHING HERE AT ALL", "W X Y Z", "ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN"]
    for i, s in enumerate(sentences):
        released += f.feed(i, s.split())
    released += f.flush()
    assert [item for item, _ in released] == list(range(6))
    matched = {item: match for item, match in released if match}
    assert set(matched) == {1, 2}  # the 10-gram spans the sentence boundary
    assert matched[1] == ("THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG AND", str(trn), "spk-utt1")


def test_prepare_end_to_end(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    write_book(books / "b.txt.gz", BOOK)
    leak = "Then we saw it. The quick brown fox jumps over the lazy dog and sleeps, says he.\n"
    write_book(books / "a.txt", leak + "".join(f"Sentence number {i} is fine.\n\n" for i in range(20)))
    (books / "notes.md").write_text("ignored: not a book\n")
    kaldi = tmp_path / "text"
    kaldi.write_text(f"utt1 {TRANSCRIPT.lower()}\nutt2\n", encoding="utf-8")
    out = tmp_path / "out" / "train.txt"
    report = prepare_lm_text([books], out, [kaldi], PrepConfig(valid_every=5))
    train = out.read_text().splitlines()
    valid = (out.parent / "valid.txt").read_text().splitlines()
    totals = report["totals"]
    assert totals["sentences_dropped_contaminated"] == 1
    assert report["contaminated_per_file"] == {str(books / "a.txt"): 1}
    assert train[0] == "THEN WE SAW IT" and train[1] == "SENTENCE NUMBER ZERO IS FINE"
    assert "MISTER SMITH WALKED TO SAINT PAUL'S WITH J R JONES AT SEVEN THIRTY IN THE MORNING" in train + valid
    assert "OH" not in train + valid and totals["sentences_dropped_too_short"] >= 1
    assert len(valid) == (len(train) + len(valid)) // 5 == report["split"]["valid_sentences"]
    assert totals["sentences_out"] == len(train) + len(valid)
    assert totals["words_out"] == sum(len(s.split()) for s in train + valid)
    assert totals["sentences_in"] == totals["sentences_out"] + sum(
        v for k, v in totals.items() if k.startswith("sentences_dropped_"))
    rows = (out.parent / "train.contaminated.tsv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].split("\t")[:4] == [str(books / "a.txt"), "1", str(kaldi), "utt1"]
    saved = json.loads((out.parent / "train.report.json").read_text())
    assert saved["totals"] == totals and saved["exclusion"]["files"][str(kaldi)]["utterances"] == 2
    assert not (out.parent / "train.txt.parts").exists()
    # deterministic, and a second run with kept parts resumes every file with the same output
    first = out.read_bytes()
    prepare_lm_text([books], out, [kaldi], PrepConfig(valid_every=5), keep_parts=True)
    again = prepare_lm_text([books], out, [kaldi], PrepConfig(valid_every=5), keep_parts=True)
    assert again["files_resumed"] == 2 and out.read_bytes() == first
    # a changed setting is not resumed
    changed = prepare_lm_text([books], out, [kaldi], PrepConfig(valid_every=5, min_words=1))
    assert changed["files_resumed"] == 0 and "OH" in out.read_text().split("\n") + (
        out.parent / "valid.txt").read_text().split("\n")


def test_normalized_input(tmp_path):
    text = write_book(tmp_path / "lm-norm.txt", f"HELLO THERE MY FRIEND\nMr. Smith's 2 dogs ran\n\n{TRANSCRIPT}\n")
    trn = tmp_path / "r.trn"
    trn.write_text(f"{TRANSCRIPT} (x-1)\n", encoding="utf-8")
    out = tmp_path / "train.txt"
    report = prepare_lm_text([text], out, [trn], PrepConfig(valid_every=0), normalized=True)
    assert out.read_text().splitlines() == ["HELLO THERE MY FRIEND", "MISTER SMITH'S TWO DOGS RAN"]
    assert report["totals"]["lines_renormalized"] == 1
    assert report["totals"]["sentences_dropped_empty"] == 1
    assert report["totals"]["sentences_dropped_contaminated"] == 1
    assert (tmp_path / "valid.txt").read_text() == ""


def test_shared_book_overlapping_dev_clean_is_caught(tmp_path):
    """pg17208 (Mother Goose) shares a 10-gram with a real dev_clean transcript: exactly that sentence goes."""
    book = MIRROR / "text/gutenberg/pg17208.txt.gz"
    trn = MIRROR / "librispeech_nbest/dev_clean/references/ref_wer.trn"
    report = prepare_lm_text([book], tmp_path / "train.txt", [trn], PrepConfig(valid_every=0))
    assert report["contaminated_per_file"] == {str(book): 1}
    assert report["totals"]["sentences_out"] > 500
    row = (tmp_path / "train.contaminated.tsv").read_text().splitlines()[1].split("\t")
    assert row[3] == "6319-64726-6319-64726-0002"
    assert "THAT THE PRINCESS SHOULD PIERCE HER HAND WITH A SPINDLE" in row[5]
    train = (tmp_path / "train.txt").read_text()
    assert "PIERCE HER HAND WITH A SPINDLE AND DIE" not in train and "SPINDLE" in train
    # without the transcripts the sentence is kept
    prepare_lm_text([book], tmp_path / "all.txt", [], PrepConfig(valid_every=0), valid_out=tmp_path / "v.txt")
    assert row[5] + "\n" in (tmp_path / "all.txt").read_text()


def test_bad_input(tmp_path):
    trn = tmp_path / "ok.trn"
    trn.write_text(f"{TRANSCRIPT} (s-1)\n", encoding="utf-8")
    book = write_book(tmp_path / "b.txt", BOOK)
    out = tmp_path / "o" / "train.txt"
    with pytest.raises(InputError, match="missing.trn: transcript file not found"):
        prepare_lm_text([book], out, [tmp_path / "missing.trn"])
    bad_trn = tmp_path / "bad.trn"
    bad_trn.write_text(f"{TRANSCRIPT} (s-1)\nNO ID HERE\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.trn:2: not an sclite trn line"):
        prepare_lm_text([book], out, [bad_trn])
    empty = tmp_path / "empty_text"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="empty_text: no transcript lines"):
        prepare_lm_text([book], out, [empty])
    with pytest.raises(InputError, match="nope: no such file or directory"):
        prepare_lm_text([tmp_path / "nope"], out, [trn])
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(InputError, match="emptydir: no .txt or .txt.gz files"):
        prepare_lm_text([tmp_path / "emptydir"], out, [trn])
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Good line.\n\nCaf\xe9 is here.\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.txt:3: not UTF-8 text"):
        prepare_lm_text([latin1], out, [trn])
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(BOOK.encode())[:200])
    with pytest.raises(InputError, match=r"broken.txt.gz:\d+: cannot read"):
        prepare_lm_text([broken], out, [trn])
    with pytest.raises(InputError, match="min_words"):
        prepare_lm_text([book], out, [trn], PrepConfig(min_words=0))
    assert not out.exists()


def test_cli(tmp_path, capsys):
    book = write_book(tmp_path / "b.txt", BOOK)
    out = tmp_path / "train.txt"
    cli.main(["--books", str(book), "--out", str(out), "--valid-every", "0", "--min-words", "2"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["sentences_out"] == len(out.read_text().splitlines()) == 7
    with pytest.raises(SystemExit, match="error: .*missing.trn: transcript file not found"):
        cli.main(["--books", str(book), "--out", str(out), "--exclude", str(tmp_path / "missing.trn")])
