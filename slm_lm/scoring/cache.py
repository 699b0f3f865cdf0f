"""Sentence scores with an on-disk cache: each unique text is scored once, and an interrupted run resumes.

Shared by N-best rescoring (`slm_lm.rescoring.rescore`), BLiMP (`slm_lm.evaluation.blimp`) and the recipe's
sharded scoring (`egs/librispeech_slm/local/score_nbest_lm.py`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.progress import progress_bar


class LMScoreCache:
    """Sentence scores of one model in ``<dir>/<model>-<hash>.jsonl``, keyed by exact text.

    The first line is ``{"model": name}``, then one ``[text, score]`` line per sentence. New scores are
    appended in one write under an exclusive lock, so concurrent runs can share a cache and a chunk costs
    O(its entries); a partial last line (a run killed mid-write) is ignored.
    """

    def __init__(self, cache_dir: str | Path, model_name: str):
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name)[:40]
        digest = hashlib.sha1(model_name.encode("utf-8")).hexdigest()[:16]
        self.path = Path(cache_dir) / f"{slug}-{digest}.jsonl"
        self.model_name = model_name
        self.scores: dict[str, float] = self._load()

    def _load(self) -> dict[str, float]:
        if not self.path.is_file():
            return {}
        try:
            lines = self.path.read_bytes().decode("utf-8").split("\n")[:-1]  # the last one is partial or ""
        except UnicodeDecodeError as err:
            raise InputError(f"{self.path}: corrupt LM score cache (not UTF-8: {err.reason})") from None
        scores: dict[str, float] = {}
        for lineno, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{self.path}:{lineno}: corrupt LM score cache ({err.msg}); delete the file") from None
            if lineno == 1:
                if not isinstance(row, dict) or "model" not in row:
                    raise InputError(f"{self.path}:1: not an LM score cache (want a {{'model': ...}} header line)")
                if row["model"] != self.model_name:
                    raise InputError(f"{self.path}: cache belongs to {row['model']!r}, not {self.model_name!r}")
                continue
            value = row[1] if isinstance(row, list) and len(row) == 2 and isinstance(row[0], str) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise InputError(f"{self.path}:{lineno}: corrupt LM score cache: want [text, finite score], got "
                                 f"{line[:80]!r}; delete the file to rescore")
            scores[row[0]] = float(value)
        return scores

    def add(self, scores: dict[str, float]) -> None:
        """Record new scores: appended to the file in one write under an exclusive lock."""
        self.scores.update(scores)
        data = "".join(json.dumps([t, v], ensure_ascii=False) + "\n" for t, v in scores.items()).encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                size = handle.seek(0, os.SEEK_END)
                if size:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":  # a run killed mid-write left a partial line: drop it
                        handle.seek(0)
                        handle.truncate(handle.read().rfind(b"\n") + 1)
                if handle.seek(0, os.SEEK_END) == 0:
                    data = json.dumps({"model": self.model_name}, ensure_ascii=False).encode("utf-8") + b"\n" + data
                handle.write(data)
                handle.flush()
        except OSError as err:
            raise InputError(f"{self.path}: cannot write the LM score cache: {os_problem(err, self.path)}") from None


class LocatedScorer:
    """Passes calls to ``scorer``; an InputError about one sentence is re-raised naming where it comes from.

    ``where`` maps each text to a description of its first occurrence (file:line, set/utterance/rank).
    """

    def __init__(self, scorer, where: dict[str, str]):
        self.scorer, self.where, self.name = scorer, where, scorer.name

    def score(self, sentences):
        try:
            return self.scorer.score(sentences)
        except InputError as e:
            if e.index is None:
                raise
            message = str(e).removeprefix(f"sentence {e.index}: ")
            raise InputError(f"{self.where[sentences[e.index]]}: {message}") from None


def lm_scores(
    scorer, texts, cache_dir: str | Path | None = None, chunk_size: int = 1000, progress: bool = True
) -> dict[str, float]:
    """Score each unique text once with ``scorer`` (``.name``, ``.score(list[str])``).

    With ``cache_dir`` the scores are saved after every chunk, so an interrupted run resumes and
    re-runs (other weights, other sets sharing texts) score nothing twice.
    """
    unique = sorted(set(texts), key=lambda t: (len(t), t))
    cache = LMScoreCache(cache_dir, scorer.name) if cache_dir is not None else None
    known = dict(cache.scores) if cache else {}
    todo = [t for t in unique if t not in known]
    with progress_bar(total=len(todo), desc=f"LM {scorer.name}", unit="sent", disable=not progress or not todo) as bar:
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            values = scorer.score(chunk)
            if len(values) != len(chunk):
                raise RuntimeError(f"LM {scorer.name} returned {len(values)} scores for {len(chunk)} texts")
            for text, value in zip(chunk, values):
                value = float(value)
                if not np.isfinite(value):
                    raise RuntimeError(f"LM {scorer.name} gave score {value} for {text!r}")
                known[text] = value
            if cache:
                cache.add({t: known[t] for t in chunk})
            bar.update(len(chunk))
    return {t: known[t] for t in unique}
