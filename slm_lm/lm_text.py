"""LM training text: books -> normalised sentences, length filters, decontamination, train/valid split.

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
3. `normalize_librispeech` on each sentence (numbers spelt out, see `slm_lm.text_norm`).
4. Decontamination: a sentence is dropped when a word n-gram (n=10) of the book's running word stream
   that overlaps it equals an n-gram of an excluded transcript, so n-grams across sentence boundaries
   count too.  Transcripts with fewer than n words give no n-gram (their number is reported).
5. Length filter on words: `min_words` (3: drops fragments such as "YES SIR") and `max_words` (100:
   very long sentences, mostly lists and run-on 18th-century prose, cost a lot to train on).
   A sentence is counted under the first failing check in the order empty, contaminated, too_short,
   too_long.

With ``normalized=True`` the input is already one normalised sentence per line (e.g.
``librispeech-lm-norm.txt``): steps 1-2 are skipped and each line is a sentence (a line that is not
clean is normalised again).  Kept sentences are numbered over the whole corpus (files sorted by path);
every `valid_every`-th goes to the validation file.  Each input file is processed into a part file
under ``<out>.parts/`` first, so an interrupted run resumes at the first unfinished file.
"""

import gzip
import hashlib
import json
import re
import shutil
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from tqdm import tqdm

from slm_lm.errors import InputError
from slm_lm.fileio import atomic_open
from slm_lm.text_norm import normalize_librispeech

__all__ = [
    "PrepConfig", "ExclusionSet", "NgramFilter", "book_sentences", "split_sentences",
    "load_exclusion", "prepare_lm_text", "read_text_lines",
]

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


@dataclass
class PrepConfig:
    """Settings of the text preparation; they are part of the resume fingerprint."""

    ngram: int = 10
    min_words: int = 3
    max_words: int = 100
    valid_every: int = 1000

    def check(self) -> None:
        """Raise InputError on settings that cannot work."""
        if self.ngram < 1:
            raise InputError(f"ngram must be >= 1, got {self.ngram}")
        if not 1 <= self.min_words <= self.max_words:
            raise InputError(f"need 1 <= min_words <= max_words, got {self.min_words}, {self.max_words}")
        if self.valid_every < 0:
            raise InputError(f"valid_every must be >= 0 (0: no validation set), got {self.valid_every}")


# ----------------------------------------------------------------------------------------- reading
def read_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without newline) of a UTF-8 text file, gzip if named *.gz; errors -> InputError."""
    path = Path(path)
    try:
        handle = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror or e}") from None
    number = 0
    try:
        with handle:
            for number, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte {e.start})") from None
                yield number, line.rstrip("\r\n")
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}:{number + 1}: cannot read: {e}") from None


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


# ------------------------------------------------------------------------------ decontamination
@dataclass
class ExclusionSet:
    """Word n-grams of excluded transcripts: n-gram -> (file, utterance id) where first seen."""

    n: int
    ngrams: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # file -> {utterances, ngrams, shorter_than_n}
    digest: str = ""


def _transcript_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, utterance id, words) of a Kaldi `text` file or an sclite `.trn` file."""
    trn = path.suffix == ".trn"
    for number, line in read_text_lines(path):
        if not line.strip():
            continue
        if trn:
            m = re.fullmatch(r"(.*?)\s*\(([^()\s]+)\)\s*", line)
            if not m:
                raise InputError(f"{path}:{number}: not an sclite trn line 'words (utterance-id)': {line[:80]!r}")
            yield number, m.group(2), m.group(1)
        else:
            uttid, _, words = line.strip().partition(" ")
            yield number, uttid, words


def load_exclusion(paths: list[Path], n: int) -> ExclusionSet:
    """Read transcripts (Kaldi text or .trn) and index their normalised word n-grams."""
    result = ExclusionSet(n=n)
    digest = hashlib.sha1(f"n={n}".encode())
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: transcript file not found")
        info = Counter()
        for number, uttid, text in _transcript_lines(path):
            words = normalize_librispeech(text).split()
            info["utterances"] += 1
            digest.update(f"{uttid}\t{' '.join(words)}\n".encode())
            if len(words) < n:
                info["shorter_than_n"] += 1
            for i in range(len(words) - n + 1):
                gram = tuple(words[i:i + n])
                if gram not in result.ngrams:
                    result.ngrams[gram] = (str(path), uttid)
                    info["ngrams"] += 1
        if not info["utterances"]:
            raise InputError(f"{path}: no transcript lines")
        result.files[str(path)] = dict(info)
    result.digest = digest.hexdigest()
    return result


class NgramFilter:
    """Streaming check of consecutive sentences against an ExclusionSet.

    `feed(item, words)` returns the items that no later n-gram can reach any more, each as
    (item, match) with match None or (ngram text, transcript file, utterance id); `flush()` returns
    the rest.  N-grams run over the concatenated words of all sentences fed since the last flush.
    """

    def __init__(self, exclusion: ExclusionSet):
        self.n = exclusion.n
        self.ngrams = exclusion.ngrams
        self.pending: deque = deque()  # [sequence number, item, match]
        self.tail: list = []  # last n-1 words
        self.owners: list = []  # sequence number of each tail word
        self.seq = 0

    def feed(self, item, words: list) -> list:
        """Add the next sentence (`words`, non-empty); return the items now settled, in order."""
        seq = self.seq
        self.seq += 1
        self.pending.append([seq, item, None])
        if self.ngrams:
            stream = self.tail + words
            owners = self.owners + [seq] * len(words)
            n = self.n
            for i in range(len(stream) - n + 1):
                gram = tuple(stream[i:i + n])
                source = self.ngrams.get(gram)
                if source is not None:
                    hit = set(owners[i:i + n])
                    for entry in self.pending:
                        if entry[0] in hit and entry[2] is None:
                            entry[2] = (" ".join(gram), *source)
            keep = n - 1
            self.tail, self.owners = (stream[-keep:], owners[-keep:]) if keep else ([], [])
        oldest = self.owners[0] if self.owners else self.seq
        released = []
        while self.pending and self.pending[0][0] < oldest:
            _, item_, match = self.pending.popleft()
            released.append((item_, match))
        return released

    def flush(self) -> list:
        """End of the stream (a file): return all items still pending, in order."""
        released = [(item, match) for _, item, match in self.pending]
        self.pending.clear()
        self.tail, self.owners = [], []
        return released


# ----------------------------------------------------------------------------------- one file
def _normalized_sentences(path: Path, stats: Counter) -> Iterator[tuple[int, str]]:
    for number, line in read_text_lines(path):
        stats["words_in"] += len(line.split())
        yield number, line


def _process_file(path: Path, normalized: bool, exclusion: ExclusionSet, config: PrepConfig,
                  part: Path) -> dict:
    """Prepare one input file into `part` (one sentence a line); returns its statistics."""
    stats, problems, matches = Counter(), [], []
    ngram_filter = NgramFilter(exclusion)

    def keep(released, handle):
        for (number, sentence, n_words), match in released:
            if match is not None:
                reason = "contaminated"
                matches.append([str(path), number, match[1], match[2], match[0], sentence])
            elif n_words < config.min_words:
                reason = "too_short"
            elif n_words > config.max_words:
                reason = "too_long"
            else:
                handle.write(sentence + "\n")
                stats["sentences_out"] += 1
                stats["words_out"] += n_words
                continue
            stats[f"sentences_dropped_{reason}"] += 1
            stats[f"words_dropped_{reason}"] += n_words

    source = (_normalized_sentences(path, stats) if normalized else book_sentences(path, stats, problems))
    with atomic_open(part) as handle:
        for number, raw in source:
            sentence = normalize_librispeech(raw)
            stats["sentences_in"] += 1
            if normalized and sentence != raw:
                stats["lines_renormalized"] += 1
            if not sentence:
                stats["sentences_dropped_empty"] += 1
                continue
            words = sentence.split(" ")
            stats["sentence_words_in"] += len(words)
            keep(ngram_filter.feed((number, sentence, len(words)), words), handle)
        keep(ngram_filter.flush(), handle)
    return {"stats": dict(stats), "problems": problems, "matches": matches}


# --------------------------------------------------------------------------------- whole corpus
def _input_files(inputs: list[Path]) -> list[Path]:
    files = []
    for item in inputs:
        item = Path(item)
        if item.is_dir():
            found = [p for p in item.iterdir() if p.name.endswith((".txt", ".txt.gz")) and p.is_file()]
            if not found:
                raise InputError(f"{item}: no .txt or .txt.gz files in this directory")
            files.extend(found)
        elif item.is_file():
            files.append(item)
        else:
            raise InputError(f"{item}: no such file or directory")
    return sorted(files, key=str)


def _check_outputs_outside_inputs(inputs: list[Path], outputs: list[Path]) -> None:
    """Outputs may neither be an input (book or exclusion) file nor lie inside an input directory (a second
    run would read its own train.txt/valid.txt back as books, leaking validation text into training)."""
    for item in inputs:
        item = Path(item).resolve()
        for output in outputs:
            resolved = Path(output).resolve()
            if resolved == item or item in resolved.parents:
                where = "an input file" if resolved == item else f"inside the input directory {item}"
                raise InputError(f"{output} is {where}: write the outputs outside the books and --exclude inputs")


def _code_digest() -> str:
    sources = [Path(__file__), Path(__file__).with_name("text_norm.py")]
    return hashlib.sha1(b"".join(p.read_bytes() for p in sources)).hexdigest()


def prepare_lm_text(inputs: list[Path], out: Path, exclude: list[Path] = (), config: PrepConfig = None,
                    normalized: bool = False, valid_out: Path = None, report: Path = None,
                    keep_parts: bool = False) -> dict:
    """Prepare LM training text from books (or normalised text) into `out` and `valid_out`.

    Writes `out`, `valid_out` (default: valid.txt next to `out`), a JSON report (default:
    <out stem>.report.json) and the contaminated sentences as TSV (<out stem>.contaminated.tsv), all
    atomically; returns the report.
    """
    started = time.time()
    config = config or PrepConfig()
    config.check()
    out = Path(out)
    valid_out = Path(valid_out) if valid_out else out.with_name("valid.txt")
    report = Path(report) if report else out.with_name(out.stem + ".report.json")
    contaminated_tsv = out.with_name(out.stem + ".contaminated.tsv")
    if len({out.resolve(), valid_out.resolve(), report.resolve(), contaminated_tsv.resolve()}) < 4:
        raise InputError(f"output, validation and report paths must differ: {out}, {valid_out}, {report}")
    _check_outputs_outside_inputs([*inputs, *exclude], [out, valid_out, report, contaminated_tsv])
    files = _input_files(inputs)
    exclusion = load_exclusion(list(exclude), config.ngram)
    fingerprint = {"config": asdict(config), "normalized": normalized, "exclusion": exclusion.digest,
                   "code": _code_digest()}
    parts_dir = out.with_name(out.name + ".parts")
    parts_dir.mkdir(parents=True, exist_ok=True)

    results, resumed = [], 0
    progress = tqdm(files, desc="prepare LM text", unit="file")
    totals = Counter()
    for index, path in enumerate(progress):
        part = parts_dir / f"{index:06d}.txt"
        meta = parts_dir / f"{index:06d}.json"
        stat = path.stat()
        key = {**fingerprint, "file": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        result = None
        if meta.is_file() and part.is_file():
            saved = json.loads(meta.read_text(encoding="utf-8"))
            if saved.get("key") == key:
                result, resumed = saved, resumed + 1
        if result is None:
            result = {"key": key, **_process_file(path, normalized, exclusion, config, part)}
            with atomic_open(meta) as handle:
                json.dump(result, handle)
        results.append(result)
        totals.update(result["stats"])
        progress.set_postfix(sentences=totals["sentences_out"], contaminated=totals["sentences_dropped_contaminated"])

    counts = Counter()
    with atomic_open(out) as train, atomic_open(valid_out) as valid:
        for index, _ in enumerate(tqdm(results, desc="merge parts", unit="file")):
            with open(parts_dir / f"{index:06d}.txt", encoding="utf-8") as handle:
                for sentence in handle:
                    counts["kept"] += 1
                    if config.valid_every and counts["kept"] % config.valid_every == 0:
                        valid.write(sentence)
                        counts["valid_sentences"] += 1
                        counts["valid_words"] += sentence.count(" ") + 1
                    else:
                        train.write(sentence)
                        counts["train_sentences"] += 1
                        counts["train_words"] += sentence.count(" ") + 1
    with atomic_open(contaminated_tsv) as handle:
        handle.write("file\tline\ttranscript_file\tutterance_id\tngram\tsentence\n")
        for result in results:
            for row in result["matches"]:
                handle.write("\t".join(str(x) for x in row) + "\n")

    summary = {
        "inputs": [str(p) for p in files],
        "normalized_input": normalized,
        "config": asdict(config),
        "outputs": {"train": str(out), "valid": str(valid_out), "contaminated": str(contaminated_tsv)},
        "totals": dict(sorted(totals.items())),
        "split": dict(counts),
        "exclusion": {"n": exclusion.n, "files": exclusion.files, "distinct_ngrams": len(exclusion.ngrams)},
        "contaminated_per_file": {r["key"]["file"]: r["stats"].get("sentences_dropped_contaminated", 0)
                                  for r in results if r["stats"].get("sentences_dropped_contaminated")},
        "per_file": {r["key"]["file"]: r["stats"] for r in results},
        "problems": [p for r in results for p in r["problems"]],
        "files_resumed": resumed,
        "seconds": round(time.time() - started, 1),
    }
    with atomic_open(report) as handle:
        json.dump(summary, handle, indent=1)
    if not keep_parts:
        shutil.rmtree(parts_dir)
    return summary
