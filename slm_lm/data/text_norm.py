"""LibriSpeech-style text normalisation: upper case words of A-Z and apostrophes.

`normalize_librispeech` turns book text, BLiMP sentences or N-best hypotheses into the form of
LibriSpeech transcripts and ``librispeech-lm-norm.txt``.  The result contains only ``A-Z``,
``'`` and single spaces (no leading/trailing space); it may be empty.  Rules, in order:

* accents are folded with unicodedata (``é`` -> ``E``), ``æ/œ/ß/ø/ł/þ/ð`` spelt out, typographic
  quotes and dashes mapped to ASCII; any other non-ASCII character is removed;
* ``_italics_`` markers (underscores) are removed;
* titles and common abbreviations are spelt out as LibriSpeech readers say them: ``Mr.`` MISTER,
  ``Mrs.`` MISSUS, ``Dr.`` DOCTOR, ``St.`` SAINT before a capitalised word else STREET, ``Capt.``,
  ``Col.``, ``Gen.``, ``Lieut.``, ``Prof.``, ``Rev.``, ``Hon.``, ``Messrs.``, ``Mme.``, ``Mlle.``,
  ``Esq.``, ``Jr.``, ``Sr.``, ``etc.``/``&c.`` ET CETERA, ``i.e.``, ``e.g.``, ``&`` AND.  Undotted
  upper-case forms (``MR``) are left alone so already-normalised text is returned unchanged;
* numbers are spelt out: integers (``1,000`` ONE THOUSAND; British "AND": 130 ONE HUNDRED AND
  THIRTY), years 1100-1999 as pairs (1863 EIGHTEEN SIXTY THREE, 1800 EIGHTEEN HUNDRED),
  ordinals (``21st``, old style ``2d``/``3d``), decimals (``3.5`` THREE POINT FIVE), simple
  fractions (``1/2`` ONE HALF, ``3/4`` THREE QUARTERS), clock times (``7:30`` SEVEN THIRTY),
  ``$5``/``£5`` FIVE DOLLARS/POUNDS, ``%`` PERCENT; a number with a leading zero or more than 15
  digits is read digit by digit.  Roman numerals are left as letters;
* hyphens and dashes become spaces; every other character becomes a space; apostrophes are kept
  only inside words (leading/trailing ones, used as quotes, are removed).
"""

import re
import unicodedata

__all__ = ["normalize_librispeech", "number_to_words", "ordinal_to_words"]

_CLEAN = re.compile(r"[A-Z]+(?:'[A-Z]+)*(?: [A-Z]+(?:'[A-Z]+)*)*")

# Non-ASCII characters that NFKD does not reduce to ASCII letters, and typographic punctuation.
_TRANSLATE = str.maketrans({
    "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ß": "ss", "ø": "o", "Ø": "O", "ł": "l",
    "Ł": "L", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D", "đ": "d", "Đ": "D", "ı": "i",
    "\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u2032": "'", "`": "'", "\u00b4": "'",
    "\u201c": '"', "\u201d": '"', "\u2013": " ", "\u2014": " ", "\u2015": " ", "\u2012": " ",
    "\u2010": " ", "\u2011": " ", "\u2026": " ", "\u00a0": " ", "\u00a3": "\x01",
})

_ONES = ("ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE THIRTEEN FOURTEEN "
         "FIFTEEN SIXTEEN SEVENTEEN EIGHTEEN NINETEEN").split()
_TENS = "_ _ TWENTY THIRTY FORTY FIFTY SIXTY SEVENTY EIGHTY NINETY".split()
_SCALES = ((10**12, "TRILLION"), (10**9, "BILLION"), (10**6, "MILLION"), (1000, "THOUSAND"))
_ORDINAL_WORDS = {
    "ONE": "FIRST", "TWO": "SECOND", "THREE": "THIRD", "FIVE": "FIFTH", "EIGHT": "EIGHTH",
    "NINE": "NINTH", "TWELVE": "TWELFTH",
}


def _below_thousand(n: int) -> str:
    words = []
    if n >= 100:
        words.append(_ONES[n // 100] + " HUNDRED")
        n %= 100
        if n:
            words.append("AND")
    if n >= 20:
        words.append(_TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10]))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def number_to_words(n: int) -> str:
    """Spell a non-negative integer below 10**15: 2305 -> 'TWO THOUSAND THREE HUNDRED AND FIVE'."""
    if not 0 <= n < 10**15:
        raise ValueError(f"number out of range for spelling: {n}")
    words = []
    for value, name in _SCALES:
        if n >= value:
            words.append(_below_thousand(n // value) + " " + name)
            n %= value
    if n or not words:
        if words and n < 100:
            words.append("AND")
        words.append(_below_thousand(n))
    return " ".join(words)


def ordinal_to_words(n: int) -> str:
    """Spell an ordinal: 21 -> 'TWENTY FIRST', 100 -> 'ONE HUNDREDTH'."""
    words = number_to_words(n).split(" ")
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("Y"):
        words[-1] = last[:-1] + "IETH"
    else:
        words[-1] = last + "TH"
    return " ".join(words)


def _year_to_words(n: int) -> str:
    hi, lo = divmod(n, 100)
    if lo == 0:
        return number_to_words(hi) + " HUNDRED"
    if lo < 10:
        return number_to_words(hi) + " O " + _ONES[lo]
    return number_to_words(hi) + " " + number_to_words(lo)


def _digits_to_words(digits: str) -> str:
    return " ".join(_ONES[int(d)] for d in digits)


def _integer_words(digits: str) -> str:
    digits = digits.replace(",", "")
    if (digits.startswith("0") and len(digits) > 1) or len(digits) > 15:
        return _digits_to_words(digits)
    return number_to_words(int(digits))


def _plain_number(m: re.Match) -> str:
    text = m.group(0)
    if "," not in text and len(text) == 4 and 1100 <= int(text) <= 1999:
        return " " + _year_to_words(int(text)) + " "
    return " " + _integer_words(text) + " "


def _currency(m: re.Match) -> str:
    symbol, whole, cents = m.group(1), m.group(2), m.group(3)
    if symbol == "\x01":  # pound sign, marked by _TRANSLATE
        unit = "POUND" if whole == "1" else "POUNDS"
        return f" {_integer_words(whole)} {unit} " + (f"{_integer_words(cents[1:])} " if cents else "")
    unit = "DOLLAR" if whole == "1" else "DOLLARS"
    text = f" {_integer_words(whole)} {unit} "
    if cents:
        text += f"AND {_integer_words(cents[1:].lstrip('0') or '0')} CENTS "
    return text


def _ordinal(m: re.Match) -> str:
    digits = m.group(1)
    if digits.startswith("0") or len(digits) > 15:
        return " " + _digits_to_words(digits) + " "
    return " " + ordinal_to_words(int(digits)) + " "


_FRACTION_NAMES = {2: ("HALF", "HALVES"), 4: ("QUARTER", "QUARTERS")}


def _fraction(m: re.Match) -> str:
    num, den = int(m.group(1)), int(m.group(2))
    if den == 0 or den > 100 or num > 100:  # not a simple fraction (e.g. a date 12/1901)
        return f" {_integer_words(m.group(1))} {_integer_words(m.group(2))} "
    if den == 1:
        return " " + number_to_words(num) + " OVER ONE "
    single, plural = _FRACTION_NAMES.get(den, (ordinal_to_words(den), ordinal_to_words(den) + "S"))
    return f" {number_to_words(num)} {single if num == 1 else plural} "


def _decimal(m: re.Match) -> str:
    return f" {_integer_words(m.group(1))} POINT {_digits_to_words(m.group(2))} "


def _clock(m: re.Match) -> str:
    hour, minute = int(m.group(1)), int(m.group(2))
    if minute == 0:
        return f" {number_to_words(hour)} O'CLOCK "
    if minute < 10:
        return f" {number_to_words(hour)} O {_ONES[minute]} "
    return f" {number_to_words(hour)} {number_to_words(minute)} "


def _saint_or_street(m: re.Match) -> str:
    return " SAINT " if m.group(1) else " STREET "


_NUMBER_RULES = (
    (re.compile(r"(\x01|\$)\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d{1,2})?(?!\d)"), _currency),
    (re.compile(r"(?<![\d.])(\d{1,2}):([0-5]\d)(?![\d:])"), _clock),
    (re.compile(r"(?<![\d/])(\d+)/(\d+)(?![\d/])"), _fraction),
    (re.compile(r"(\d+)\.(\d+)"), _decimal),
    (re.compile(r"(\d+)(?:st|nd|rd|th|ST|ND|RD|TH)\b"), _ordinal),
    (re.compile(r"(?<!\d)(\d*[02-9][23]|[23])[dD]\b"), _ordinal),
    (re.compile(r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"), _plain_number),
)

_I = re.IGNORECASE
_ABBREVIATIONS = (
    (re.compile(r"\bMrs\b\.?|\b(?:MRS|mrs)\."), " MISSUS "),
    (re.compile(r"\bMr\b\.?|\b(?:MR|mr)\."), " MISTER "),
    (re.compile(r"\bDr\b\.?|\b(?:DR|dr)\."), " DOCTOR "),
    (re.compile(r"(?:\bSt\b\.?|\b(?:ST|st)\.)(?=(\s+[A-Z])?)"), _saint_or_street),
    (re.compile(r"\bMessrs\b\.?|\bMESSRS\.", _I), " MESSIEURS "),
    (re.compile(r"\bMme\b\.?|\bMME\.", _I), " MADAME "),
    (re.compile(r"\bMlle\b\.?|\bMLLE\.", _I), " MADEMOISELLE "),
    (re.compile(r"\bCapt\.", _I), " CAPTAIN "),
    (re.compile(r"\bCol\.", _I), " COLONEL "),
    (re.compile(r"\bGen\.(?=\s+[A-Z])"), " GENERAL "),
    (re.compile(r"\bLieut\.|\bLt\.", _I), " LIEUTENANT "),
    (re.compile(r"\bProf\.", _I), " PROFESSOR "),
    (re.compile(r"\bRev\.", _I), " REVEREND "),
    (re.compile(r"\bHon\.", _I), " HONOURABLE "),
    (re.compile(r"\bEsq\.", _I), " ESQUIRE "),
    (re.compile(r"\bJr\.", _I), " JUNIOR "),
    (re.compile(r"\bSr\.", _I), " SENIOR "),
    (re.compile(r"&c\b\.?|\betc\b\.?", _I), " ET CETERA "),
    (re.compile(r"\bi\.\s?e\.", _I), " THAT IS "),
    (re.compile(r"\be\.\s?g\.", _I), " FOR EXAMPLE "),
    (re.compile(r"&"), " AND "),
    (re.compile(r"%"), " PERCENT "),
)
# Abbreviation rules only run when a trigger is present (keeps the common path fast).
_ABBREV_TRIGGER = re.compile(
    r"[&%]|\b(?:mrs?|dr|st|messrs|mme|mlle|capt|col|gen|lieut|lt|prof|rev|hon|esq|[js]r|etc|i\.\s?e|e\.\s?g)\b",
    _I)
_DIGIT = re.compile(r"[0-9]")
_WORD = re.compile(r"[A-Z]+(?:'+[A-Z]+)*")
_APOSTROPHES = re.compile(r"'+")


def _fold_non_ascii(text: str) -> str:
    text = text.translate(_TRANSLATE)
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if ch.isascii())


def normalize_librispeech(text: str) -> str:
    """Normalise text LibriSpeech-style; the result has only A-Z, apostrophes and single spaces."""
    if _CLEAN.fullmatch(text):
        return text
    if not text.isascii():
        text = _fold_non_ascii(text)
    text = text.replace("_", " ")
    if _ABBREV_TRIGGER.search(text):
        for pattern, repl in _ABBREVIATIONS:
            text = pattern.sub(repl, text)
    if _DIGIT.search(text):
        for pattern, repl in _NUMBER_RULES:
            text = pattern.sub(repl, text)
    result = " ".join(_WORD.findall(text.upper()))
    return _APOSTROPHES.sub("'", result) if "''" in result else result
