"""normalize_librispeech: LibriSpeech-style upper-case words; numbers, abbreviations, accents."""
import gzip
import re
from pathlib import Path

import pytest

from conftest import MIRROR
from slm_lm.data.text_norm import normalize_librispeech, number_to_words, ordinal_to_words

CLEAN = re.compile(r"(?:[A-Z']+(?: [A-Z']+)*)?")


@pytest.mark.parametrize("text, expected", [
    ("Hello, world!", "HELLO WORLD"),
    ("_Don't_ say 'hello'--it's the boys' fault!", "DON'T SAY HELLO IT'S THE BOYS FAULT"),
    ("a well-known  man", "A WELL KNOWN MAN"),
    ("café naïve Æsop œuvre Straße", "CAFE NAIVE AESOP OEUVRE STRASSE"),
    ("\u201cYes,\u201d she said\u2014\u2018no\u2019\u2026", "YES SHE SAID NO"),
    ("Mr. Smith and Mrs. Brown met Dr Watson", "MISTER SMITH AND MISSUS BROWN MET DOCTOR WATSON"),
    ("St. Paul lived in Baker St. then", "SAINT PAUL LIVED IN BAKER STREET THEN"),
    ("Capt. Hook, Col. Mustard, &c.", "CAPTAIN HOOK COLONEL MUSTARD ET CETERA"),
    ("bread & butter, i.e. food", "BREAD AND BUTTER THAT IS FOOD"),
    ("In 1863 and 1800 and 1905", "IN EIGHTEEN SIXTY THREE AND EIGHTEEN HUNDRED AND NINETEEN O FIVE"),
    ("2024 men", "TWO THOUSAND AND TWENTY FOUR MEN"),
    ("1,200 acres", "ONE THOUSAND TWO HUNDRED ACRES"),
    ("the 21st and the 2d and 100th", "THE TWENTY FIRST AND THE SECOND AND ONE HUNDREDTH"),
    ("$5.50 or \u00a3100 or 1 pound", "FIVE DOLLARS AND FIFTY CENTS OR ONE HUNDRED POUNDS OR ONE POUND"),
    ("3/4 and 1/2 and 2/3", "THREE QUARTERS AND ONE HALF AND TWO THIRDS"),
    ("at 7:30 or 7:00 or 7:05", "AT SEVEN THIRTY OR SEVEN O'CLOCK OR SEVEN O FIVE"),
    ("3.14 and 50% and 007", "THREE POINT ONE FOUR AND FIFTY PERCENT AND ZERO ZERO SEVEN"),
    ("12d. paid", "TWELVE D PAID"),
    ("[Illustration] * * * -- 123 ###", "ILLUSTRATION ONE HUNDRED AND TWENTY THREE"),
    ("don''t", "DON'T"),
    ("", ""),
    ("   ", ""),
    ("MR SMITH'S DOG", "MR SMITH'S DOG"),  # already normalised text is left as it is
])
def test_normalize_examples(text, expected):
    assert normalize_librispeech(text) == expected


def test_number_words():
    assert number_to_words(0) == "ZERO"
    assert number_to_words(115) == "ONE HUNDRED AND FIFTEEN"
    assert number_to_words(1_000_001) == "ONE MILLION AND ONE"
    assert number_to_words(2_305_040) == "TWO MILLION THREE HUNDRED AND FIVE THOUSAND AND FORTY"
    assert ordinal_to_words(1) == "FIRST" and ordinal_to_words(12) == "TWELFTH"
    assert ordinal_to_words(40) == "FORTIETH" and ordinal_to_words(103) == "ONE HUNDRED AND THIRD"
    with pytest.raises(ValueError):
        number_to_words(-1)
    # more than 15 digits are read one by one
    assert normalize_librispeech("1234567890123456") == " ".join(
        "ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE ZERO ONE TWO THREE FOUR FIVE SIX".split())


def test_real_book_lines_give_clean_idempotent_output():
    lines = gzip.open(MIRROR / "text/gutenberg/pg2485.txt.gz", "rt", encoding="utf-8").read().splitlines()
    assert len(lines) > 1000
    for line in lines[:3000]:
        out = normalize_librispeech(line)
        assert CLEAN.fullmatch(out), (line, out)
        assert normalize_librispeech(out) == out


def test_transcripts_are_unchanged_but_for_quote_apostrophes():
    trn = MIRROR / "librispeech_nbest/dev_clean/references/ref_wer.trn"
    texts = [line.split("\t")[0] for line in trn.read_text(encoding="utf-8").splitlines()]
    assert len(texts) == 2703
    changed = {t: normalize_librispeech(t) for t in texts if normalize_librispeech(t) != t}
    # the only change: a trailing apostrophe (a closing quote in the book) is removed
    assert changed == {"A BIRD IN THE HAND IS WORTH TWO IN A BUSH' AND IT WILL BE SOMETHING TO HAVE BY US":
                       "A BIRD IN THE HAND IS WORTH TWO IN A BUSH AND IT WILL BE SOMETHING TO HAVE BY US"}
