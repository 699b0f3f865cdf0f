"""BLiMP (Warstadt et al. 2020): minimal-pair accuracy of a sentence scorer, per paradigm and in the
Transcormer paper's 12 phenomenon columns.

A pair is right when `sentence_good` scores strictly higher than `sentence_bad`; a tie (equal scores,
e.g. the 7 pairs whose two sentences are identical) counts as an error and is reported. Every
unique sentence is scored once (`slm_lm.scoring.cache.lm_scores`, optionally with a resumable on-disk
cache). Accuracies pool the pairs (all 67 paradigms have 1000 pairs, so pooled = mean of paradigms).
They are also split by length (`LENGTHS`): a summed log-prob favours the shorter sentence, so a pair whose
good sentence has fewer words than the bad one is easier for it than a pair where it has more.
"""
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.fileio import write_atomic
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.scoring.cache import LocatedScorer, lm_scores

PHENOMENA = ("Ana. agr", "Arg. str", "Binding", "Ctrl. rais.", "D-n agr", "Ellipsis", "Filler gap",
             "Irregular", "Island", "NPI", "Quantifiers", "S-v agr")
# The 13 `linguistics_term` values -> the paper's columns (s-selection is part of argument structure,
# as in the BLiMP paper).
TERM_TO_PHENOMENON = {
    "anaphor_agreement": "Ana. agr",
    "argument_structure": "Arg. str",
    "s-selection": "Arg. str",
    "binding": "Binding",
    "control_raising": "Ctrl. rais.",
    "determiner_noun_agreement": "D-n agr",
    "ellipsis": "Ellipsis",
    "filler_gap_dependency": "Filler gap",
    "irregular_forms": "Irregular",
    "island_effects": "Island",
    "npi_licensing": "NPI",
    "quantifiers": "Quantifiers",
    "subject_verb_agreement": "S-v agr",
}
# `field` is spelled two ways in the data.
FIELD_SPELLINGS = {"syntax/semantics": "syntax_semantics"}
# How the good sentence's word count compares with the bad one's.
LENGTHS = ("fewer words than", "as many words as", "more words than")
REQUIRED = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID")
# Published rows (Transcormer paper, Table "Results on BLiMP"): overall, then the 12 columns.
PUBLISHED = {
    "GPT-2 (345M)": (82.6, 99.4, 83.4, 77.8, 83.0, 96.3, 86.3, 81.3, 94.9, 71.7, 74.7, 74.1, 88.3),
    "BERT (base)": (84.2, 97.0, 80.0, 82.3, 79.6, 97.6, 89.4, 83.1, 96.5, 73.6, 84.7, 71.2, 92.4),
    "RoBERTa (base)": (85.4, 97.3, 83.5, 77.8, 81.9, 97.0, 91.4, 90.1, 96.2, 80.7, 81.0, 69.8, 91.9),
    "Transcormer (base)": (84.6, 98.1, 80.7, 83.2, 80.2, 96.0, 90.7, 84.1, 95.5, 74.3, 85.7, 73.4, 91.3),
    "Transcormer + BERT init": (85.0, 98.1, 80.0, 84.8, 79.2, 96.2, 89.3, 84.6, 96.1, 76.6, 87.8, 75.0, 91.7),
}


@dataclass
class Pair:
    """One minimal pair; `where` is `file:line`."""

    paradigm: str
    pair_id: str
    good: str
    bad: str
    term: str
    field: str
    where: str

    @property
    def length(self) -> str:
        """The good sentence has fewer, as many or more (whitespace-separated) words than the bad one."""
        good, bad = len(self.good.split()), len(self.bad.split())
        return LENGTHS[(good >= bad) + (good > bad)]


def read_paradigm(path, limit: int | None = None) -> list:
    """The pairs of one `<paradigm>.jsonl` file (the first `limit` ones), every line checked."""
    path = Path(path)
    pairs, seen = [], {}
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {os_problem(e, path)}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    for number, line in enumerate(lines, 1):
        if limit is not None and len(pairs) == limit:
            break
        where = f"{path}:{number}"
        if not line.strip():
            raise InputError(f"{where}: empty line")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"{where}: expected a JSON object")
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise InputError(f"{where}: missing field(s) {missing}")
        for key in ("sentence_good", "sentence_bad"):
            if not isinstance(record[key], str) or not record[key].strip():
                raise InputError(f"{where}: {key} must be a non-empty string")
            if not normalize_librispeech(record[key]):
                raise InputError(f"{where}: {key} {record[key][:80]!r} normalises to nothing (no words); it would "
                                 "be scored as the empty sentence")
        for key in ("field", "linguistics_term", "UID"):
            if not isinstance(record[key], str):
                raise InputError(f"{where}: {key} must be a string, got {type(record[key]).__name__} "
                                 f"{json.dumps(record[key])[:80]}")
        if not isinstance(record["pairID"], (str, int)) or isinstance(record["pairID"], bool):
            raise InputError(f"{where}: pairID must be a string or an integer, got {type(record['pairID']).__name__}")
        if record["UID"] != path.stem:
            raise InputError(f"{where}: UID {record['UID']!r} differs from the file name {path.stem!r}")
        if record["linguistics_term"] not in TERM_TO_PHENOMENON:
            raise InputError(f"{where}: unknown linguistics_term {record['linguistics_term']!r}; "
                             f"known: {sorted(TERM_TO_PHENOMENON)}")
        if pairs and record["linguistics_term"] != pairs[0].term:
            raise InputError(f"{where}: linguistics_term {record['linguistics_term']!r} differs from "
                             f"{pairs[0].term!r} on line 1 (one phenomenon per paradigm)")
        pair_id = str(record["pairID"])
        if pair_id in seen:
            raise InputError(f"{where}: duplicate pairID {pair_id} (first on line {seen[pair_id]})")
        seen[pair_id] = number
        field = FIELD_SPELLINGS.get(record["field"], record["field"])
        pairs.append(Pair(path.stem, pair_id, record["sentence_good"], record["sentence_bad"],
                          record["linguistics_term"], field, where))
    if not pairs:
        raise InputError(f"{path}: no pairs")
    return pairs


def load_blimp(data_dir, paradigms=None, limit: int | None = None) -> dict:
    """{paradigm: pairs} for every `*.jsonl` in `data_dir` (or the named `paradigms`), sorted."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"{data_dir}: BLiMP data directory not found")
    files = sorted(data_dir.glob("*.jsonl"))
    if paradigms:
        known = {f.stem: f for f in files}
        unknown = [p for p in paradigms if p not in known]
        if unknown:
            raise InputError(f"{data_dir}: no paradigm file(s) {unknown}")
        files = [known[p] for p in sorted(set(paradigms))]
    if not files:
        raise InputError(f"{data_dir}: no *.jsonl paradigm files")
    return {f.stem: read_paradigm(f, limit) for f in files}


def score_blimp(scorer, data: dict, cache_dir=None, progress: bool = True) -> dict:
    """Score every unique sentence once and judge each pair; returns the results dictionary."""
    where = {}
    for pairs in data.values():
        for p in pairs:
            where.setdefault(p.good, p.where)
            where.setdefault(p.bad, p.where)
    scores = lm_scores(LocatedScorer(scorer, where), list(where), cache_dir=cache_dir, chunk_size=4000, progress=progress)
    paradigms = []
    for name, pairs in data.items():
        correct, ties = 0, []
        by_length = {length: {"pairs": 0, "correct": 0} for length in LENGTHS}
        for p in pairs:
            good, bad = scores[p.good], scores[p.bad]
            right = int(good > bad)
            correct += right
            by_length[p.length]["pairs"] += 1
            by_length[p.length]["correct"] += right
            if good == bad:
                ties.append({"pairID": p.pair_id, "identical": p.good == p.bad, "where": p.where})
        paradigms.append({
            "paradigm": name,
            "linguistics_term": pairs[0].term,
            "phenomenon": TERM_TO_PHENOMENON[pairs[0].term],
            "field": Counter(p.field for p in pairs).most_common(1)[0][0],
            "pairs": len(pairs),
            "correct": int(correct),
            "accuracy": 100.0 * correct / len(pairs),
            "ties": ties,
            "by_length": by_length,
        })
    return summarize(paradigms, scorer.name)


def summarize(paradigms: list, model: str) -> dict:
    """Overall, per-phenomenon and per-length accuracy (pooled pairs) from per-paradigm results."""
    def pooled(rows):
        pairs = sum(r["pairs"] for r in rows)
        return 100.0 * sum(r["correct"] for r in rows) / pairs if pairs else None

    lengths = {length: [r["by_length"][length] for r in paradigms] for length in LENGTHS}
    ties = [dict(t, paradigm=r["paradigm"]) for r in paradigms for t in r["ties"]]
    return {
        "model": model,
        "paradigms": len(paradigms),
        "pairs": sum(r["pairs"] for r in paradigms),
        "overall": pooled(paradigms),
        "phenomena": {ph: pooled([r for r in paradigms if r["phenomenon"] == ph]) for ph in PHENOMENA},
        "by_length": {length: {"pairs": sum(r["pairs"] for r in rows), "accuracy": pooled(rows)}
                      for length, rows in lengths.items()},
        "ties": {"count": len(ties), "identical_sentences": sum(t["identical"] for t in ties), "pairs": ties},
        "per_paradigm": paradigms,
    }


def results_markdown(results: dict, label: str) -> str:
    """The paper's table: our row (12 phenomenon columns) above the published rows."""
    def cell(value):
        return "–" if value is None else f"{value:.1f}"

    header = "| Model | Overall | " + " | ".join(PHENOMENA) + " |"
    lines = [
        "# BLiMP results",
        "",
        f"Model `{results['model']}`: {results['paradigms']} paradigms, {results['pairs']} pairs. Accuracy % "
        "(good sentence scored strictly higher). Ties count as errors: "
        f"{results['ties']['count']} ties, {results['ties']['identical_sentences']} of them pairs of identical "
        "sentences.",
        "",
        header,
        "|---" * (len(PHENOMENA) + 2) + "|",
        f"| {label} | {cell(results['overall'])} | " + " | ".join(cell(results["phenomena"][p]) for p in PHENOMENA) + " |",
    ]
    lines += [f"| {name} (paper) | " + " | ".join(cell(v) for v in row) + " |" for name, row in PUBLISHED.items()]
    lines += ["", "## By length", "", "A summed log-prob favours the shorter sentence of a pair.", "",
              "| the good sentence has | pairs | accuracy |", "|---|---:|---:|"]
    lines += [f"| {length} the bad one | {row['pairs']} | {cell(row['accuracy'])} |"
              for length, row in results["by_length"].items()]
    lines += ["", "## Per paradigm", "", "| paradigm | phenomenon | pairs | accuracy | ties |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['paradigm']} | {r['phenomenon']} | {r['pairs']} | {r['accuracy']:.1f} | {len(r['ties'])} |"
              for r in results["per_paradigm"]]
    return "\n".join(lines) + "\n"


def write_results(results: dict, out_dir, label: str) -> None:
    """Write `blimp_paradigms.json`, `blimp_results.json` and `blimp_results.md` (atomically)."""
    out_dir = Path(out_dir)
    summary = {k: v for k, v in results.items() if k != "per_paradigm"}
    write_atomic(out_dir / "blimp_paradigms.json", json.dumps(results["per_paradigm"], indent=1))
    write_atomic(out_dir / "blimp_results.json", json.dumps(summary, indent=1))
    write_atomic(out_dir / "blimp_results.md", results_markdown(results, label))

