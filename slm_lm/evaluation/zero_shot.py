"""Zero-shot classification as ranking: fill a pattern such as ``{text} is a {label} sentiment.`` with a
text and each label word, score every filled sentence with an LM, and predict the label of the highest
score. Calibrated: the score minus that of the pattern with an empty text and the same label word (the
LM's prior for the label word in the pattern).
"""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_text_lines
from slm_lm.rescoring.transcripts import single_spaced

TEXT_SLOT, LABEL_SLOT = "{text}", "{label}"
TEXT_KEYS = ("text", "sentence")


@dataclass
class Example:
    """One labelled text and where it was read."""

    text: str
    label: str
    where: str


def read_examples(path: str | Path) -> list[Example]:
    """Labelled texts of a ``.jsonl`` file (``{"text" or "sentence": ..., "label": ...}`` per line) or a TSV
    (``text<TAB>label``; a header line ``sentence<TAB>label`` or ``text<TAB>label``, as GLUE's SST-2, is
    passed over)."""
    path = Path(path)
    examples = []
    for lineno, line in read_text_lines(path):
        where = f"{path}:{lineno}"
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{where}: not JSON ({err.msg})") from None
            key = next((k for k in TEXT_KEYS if isinstance(row, dict) and k in row), None)
            if key is None or "label" not in row:
                raise InputError(f"{where}: want an object with 'text' (or 'sentence') and 'label'")
            text, label = row[key], row["label"]
            if not isinstance(text, str) or isinstance(label, (dict, list)) or label is None:
                raise InputError(f"{where}: want a string text and a string or number label")
            examples.append(Example(single_spaced(text), str(label), where))
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise InputError(f"{where}: want 2 tab-separated fields (text, label), got {len(fields)}")
        if not examples and fields[0].strip().lower() in TEXT_KEYS and fields[1].strip().lower() == "label":
            continue
        examples.append(Example(single_spaced(fields[0]), fields[1].strip(), where))
    if not examples:
        raise InputError(f"{path}: no labelled texts")
    return examples


def parse_label_words(spec: str) -> dict[str, str]:
    """``0=negative,1=positive`` ({data label: word}) or ``negative,positive`` (the labels are the words)."""
    words = {}
    for item in (i.strip() for i in spec.split(",")):
        label, sep, word = item.partition("=")
        label, word = label.strip(), (word if sep else label).strip()
        if not label or not word:
            raise InputError(f"--labels: cannot parse {item!r} (want label=word,... or word,...)")
        if label in words:
            raise InputError(f"--labels: label {label!r} given twice")
        words[label] = word
    if len(words) < 2:
        raise InputError(f"--labels: {spec!r}: want at least two labels")
    return words


def check_pattern(pattern: str) -> str:
    """The pattern, if it holds each of ``{text}`` and ``{label}`` once."""
    for slot in (TEXT_SLOT, LABEL_SLOT):
        if pattern.count(slot) != 1:
            raise InputError(f"--pattern {pattern!r}: want {slot} exactly once")
    return pattern


def fill(pattern: str, text: str, word: str) -> str:
    """The pattern with its slots filled (single-spaced, so an empty text leaves no double space); the label
    first, so a text that holds ``{label}`` stays as it is."""
    return single_spaced(pattern.replace(LABEL_SLOT, word).replace(TEXT_SLOT, text))


@dataclass
class PatternResult:
    """Per example: the scores [examples, labels], the predicted and the calibrated predicted label."""

    pattern: str
    scores: np.ndarray
    empty_scores: np.ndarray
    predicted: list[str]
    calibrated: list[str]

    def accuracy(self, examples: list[Example], calibrated: bool = False) -> float:
        """Percent of examples whose (calibrated) prediction is the gold label."""
        predicted = self.calibrated if calibrated else self.predicted
        return 100.0 * sum(p == e.label for p, e in zip(predicted, examples)) / len(examples)


def sentences(examples: list[Example], patterns: list[str], words: dict[str, str]) -> dict[str, str]:
    """Every sentence to score ({sentence: where it comes from}): each pattern filled with each example and
    label word, and with the empty text and each label word."""
    where = {}
    for pattern in patterns:
        for word in words.values():
            where.setdefault(fill(pattern, "", word), f"pattern {pattern!r} with an empty text")
            for e in examples:
                where.setdefault(fill(pattern, e.text, word), e.where)
    return where


def classify(examples: list[Example], patterns: list[str], words: dict[str, str], table: dict[str, float]):
    """A :class:`PatternResult` per pattern from the sentence scores ``table`` (ties: the first label)."""
    unknown = [e for e in examples if e.label not in words]
    if unknown:
        raise InputError(f"{unknown[0].where}: label {unknown[0].label!r} is not one of --labels "
                         f"({', '.join(words)}; {len(unknown)} such examples)")
    labels = list(words)
    results = []
    for pattern in patterns:
        scores = np.array([[table[fill(pattern, e.text, words[lab])] for lab in labels] for e in examples])
        empty = np.array([table[fill(pattern, "", words[lab])] for lab in labels])
        results.append(PatternResult(pattern, scores, empty, [labels[i] for i in scores.argmax(1)],
                                     [labels[i] for i in (scores - empty).argmax(1)]))
    return results


def predictions_tsv(examples: list[Example], results: list[PatternResult], labels: list[str]) -> str:
    """One row per example and pattern: where, pattern, gold, predicted, calibrated, the score per label."""
    head = ["where", "pattern", "gold", "predicted", "calibrated"] + [f"score_{lab}" for lab in labels]
    rows = ["\t".join(head)]
    for r in results:
        for e, pred, cal, scores in zip(examples, r.predicted, r.calibrated, r.scores):
            rows.append("\t".join([e.where, r.pattern, e.label, pred, cal] + [f"{s:.4f}" for s in scores]))
    return "\n".join(rows) + "\n"
