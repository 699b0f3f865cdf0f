"""Book clean-up: a hard-wrapped book -> its raw sentences (before `normalize_librispeech`).

Per book (``.txt`` or ``.txt.gz``, UTF-8, hard-wrapped, paragraphs separated by blank lines), in order:

1. Paragraph clean-up.  Bracketed blocks ``[Illustration ...]``, ``[Footnote ...]``, ``[Sidenote ...]``,
   ``[Greek ...]``, ``[Transcriber's note ...]``, ``[Pg 12]``, ``[sic]`` ... are removed with their
   contents, also when they span several paragraphs (nesting is followed; a block still open after
   `MAX_BLOCK_PARAGRAPHS` paragraphs is closed there and reported); footnote marks ``[1]``, ``[A]``,
   ``[*]`` and page marks ``{12}`` are removed; other brackets keep their contents.  In paragraphs
   of at most `MAX_HEADING_PARAGRAPH_LINES` lines, leading lines that are chapter headings
   (``CHAPTER IV.``, ``Book II``, ``PREFACE``, ``THE END`` ...) are removed.  Whole paragraphs are
   dropped when they are front matter (``Produced by ...``, ``E-text prepared by ...``,
   ``Transcriber's note ...``) or have no lower-case letter (titles, tables of contents, section
   numbers).  When a paragraph does not end in punctuation (``. ! ? ; : ,`` or a dash, before
   closing quotes), its last, unfinished piece is dropped (title-page lines, bylines, dates,
   contents and index entries, text cut at a page break).
2. Sentence split of the paragraph (lines joined with spaces) after ``. ! ?`` (plus closing quotes)
   followed by a capital letter, a digit or an opening quote; not after a title (``Mr. Dr. St. ...``)
   or a single capital letter (an initial).
"""

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from slm_lm.common.fileio import read_text_lines

__all__ = ["book_sentences", "split_sentences"]

MAX_BLOCK_PARAGRAPHS = 10
MAX_HEADING_PARAGRAPH_LINES = 3

_BLOCK_LABELS = (
    "illustration|footnote|sidenote|greek|hebrew|arabic|transcriber|note|picture|pg|page|translator|"
    "author'?s note|editor'?s note|illegible|sic|_sic_|blank|en|decoration|music|image|figure|plate"
)
_BLOCK_START = re.compile(rf"\[\s*(?:{_BLOCK_LABELS})\b", re.IGNORECASE)
_BRACKET = re.compile(r"[\[\]]")
_MARKS = re.compile(r"\[(?:\d+|[A-Za-z]|\*+|[ivxlIVXL]+)\]|\{\d+\}")
_ROMAN = r"[IVXLCDM]+"
_NUMBER_WORD = (r"ONE|TWO|THREE|FOUR|FIVE|SIX|SEVEN|EIGHT|NINE|TEN|ELEVEN|TWELVE|FIRST|SECOND|THIRD|"
                r"FOURTH|FIFTH|SIXTH|SEVENTH|EIGHTH|NINTH|TENTH|LAST|THE FIRST|THE SECOND|THE LAST")
_HEADING_WORDS = r"CHAPTER|BOOK|PART|VOLUME|VOL\.|SECTION|STAVE|CANTO|LETTER|EPISODE|ACT|SCENE|FYTTE|CHAP\."
_HEADING = re.compile(
    rf"^\s*(?:(?:{_HEADING_WORDS})\s+(?:{_ROMAN}|\d+|{_NUMBER_WORD})\b[^a-z]{{0,3}}(?:.{{0,60}})"
    rf"|(?:PREFACE|INTRODUCTION|CONTENTS|APPENDIX|FOOTNOTES|PROLOGUE|EPILOGUE|INDEX|THE END|FINIS"
    rf"|ILLUSTRATIONS|POSTSCRIPT|CONCLUSION)\W*)$",
)
_HEADING_TITLE = re.compile(  # the same keywords in title case, e.g. "Chapter I. The Start"
    rf"^\s*(?:(?:Chapter|Book|Part|Volume|Vol\.|Section|Stave|Canto|Letter|Episode|Act|Scene|Chap\.)\s+"
    rf"(?:{_ROMAN}|\d+|{_NUMBER_WORD.title()})\b[^a-z]{{0,3}}(?:.{{0,60}})"
    rf"|(?:Preface|Introduction|Contents|Appendix|Footnotes|Prologue|Epilogue|Index|The End|Finis))\W*$",
)
_FRONT_MATTER = re.compile(
    r"^\W*(?:produced by|e-?text prepared by|e-?book prepared by|prepared by|transcribed (?:from|by)|"
    r"transcriber'?s? note|this (?:e-?)?text (?:was|is)|scanned by|proofread by|html version|"
    r"updated editions|release date|internet archive|digitized by|project gutenberg)",
    re.IGNORECASE,
)
_LOWER = re.compile(r"[a-z]")
_TERMINAL = re.compile(r"""(?:[.!?;:,\-\u2014\u2013]|\.\.\.)[\s"'\u2019\u201d)\]_*]*$""")
_BOUNDARY = re.compile(r"""([.!?]+)(["'\u2019\u201d)\]_]*)\s+(?=["'\u2018\u201c(\[_]*[A-Z0-9])""")
_LAST_WORD = re.compile(r"([A-Za-z]+)$")
NON_FINAL = frozenset(
    "Mr Mrs Dr St Messrs Mme Mlle Capt Col Gen Lieut Lt Prof Rev Hon Sgt Gov Maj No Nos Vol Ch Fig "
    "MR MRS DR ST MESSRS viz cf vs Mt Ft".split()
)



def _paragraphs(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of each blank-line-separated paragraph."""
    start, block = 0, []
    for number, line in lines:
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


# ---------------------------------------------------------------------------- paragraph clean-up
def _strip_blocks(text: str, depth: int) -> tuple[str, int]:
    """Remove labelled bracket blocks; `depth` > 0 means a block is open from earlier paragraphs."""
    kept, pos = [], 0
    while pos < len(text):
        if depth == 0:
            m = _BLOCK_START.search(text, pos)
            if not m:
                kept.append(text[pos:])
                break
            kept.append(text[pos:m.start()])
            depth, pos = 1, m.end()
        else:
            m = _BRACKET.search(text, pos)
            if not m:
                break
            depth += 1 if m.group() == "[" else -1
            pos = m.end()
    return "".join(kept), depth


def split_sentences(text: str) -> list[str]:
    """Split running text after . ! ? that are followed by a capital, digit or opening quote."""
    sentences, start = [], 0
    for m in _BOUNDARY.finditer(text):
        if m.group(1) == "." and not m.group(2):
            last = _LAST_WORD.search(text, max(start, m.start() - 12), m.start())
            if last and (last.group(1) in NON_FINAL or (len(last.group(1)) == 1 and last.group(1).isupper())):
                continue
        sentence = text[start:m.end()].strip()
        if sentence:
            sentences.append(sentence)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def _is_heading(line: str) -> bool:
    return bool(_HEADING.match(line) or _HEADING_TITLE.match(line))


def book_sentences(path: Path, stats: Counter, problems: list) -> Iterator[tuple[int, str]]:
    """(line number, raw sentence) of a book after paragraph clean-up; counts drops in `stats`."""
    depth, open_since, open_paragraphs = 0, 0, 0
    for number, lines in _paragraphs(read_text_lines(path)):
        stats["paragraphs_in"] += 1
        raw_words = sum(len(line.split()) for line in lines)
        stats["words_in"] += raw_words
        was_open = depth > 0
        text, depth = _strip_blocks("\n".join(lines), depth)
        if depth:
            open_paragraphs = open_paragraphs + 1 if was_open else 1
            open_since = open_since if was_open else number
            if open_paragraphs > MAX_BLOCK_PARAGRAPHS:
                problems.append(f"{path}:{open_since}: bracket block not closed after "
                                f"{MAX_BLOCK_PARAGRAPHS} paragraphs; closed at line {number}")
                depth = 0
        kept_lines = [line for line in text.split("\n") if line.strip()]
        headings = 0
        if len(kept_lines) <= MAX_HEADING_PARAGRAPH_LINES:
            while headings < len(kept_lines) and _is_heading(kept_lines[headings]):
                headings += 1
        text = _MARKS.sub("", " ".join(line.strip() for line in kept_lines[headings:])).strip()
        sentences = []
        if not text:
            reason = "heading" if headings else "bracket_block"
        elif not _LOWER.search(text):
            reason = "no_lowercase"
        elif _FRONT_MATTER.match(text):
            reason = "front_matter"
        else:
            reason, sentences = None, split_sentences(text)
            if not _TERMINAL.search(text):
                # The last piece is unfinished (a title, byline, contents or index entry, or text cut
                # at a page break); sentences before it are complete and kept.
                stats["words_dropped_no_final_punct"] += len(sentences.pop().split())
                if not sentences:
                    stats["paragraphs_dropped_no_final_punct"] += 1
                    continue
        if reason:
            stats[f"paragraphs_dropped_{reason}"] += 1
            stats[f"words_dropped_{reason}"] += raw_words
            continue
        for sentence in sentences:
            yield number, sentence
    if depth:
        problems.append(f"{path}:{open_since}: bracket block still open at the end of the book")
