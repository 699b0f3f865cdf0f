"""Decontamination: drop the training sentences that share a word n-gram with excluded transcripts.

The transcripts (Kaldi ``text`` or sclite ``.trn``, normalised with `normalize_librispeech`) give an
`ExclusionSet` of word n-grams; `NgramFilter` checks the n-grams of a book's running word stream, so
n-grams across sentence boundaries count too: a sentence is contaminated when an excluded n-gram
overlaps it.  Transcripts with fewer than n words give no n-gram (their number is reported).
"""

import hashlib
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_text_lines, why_not
from slm_lm.data.text_norm import normalize_librispeech

__all__ = ["ExclusionSet", "NgramFilter", "load_exclusion"]


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
            raise InputError(f"{path}: {why_not(path, 'transcript file')}")
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
