"""N-best lists: data classes and readers for the supported on-disk formats.

Formats:
- ESPnet: ``<k>best_recog/{text,score[,scores][,token]}`` for k = 1..K, either directly in a directory,
  under ``raw_hypotheses/`` (with ``references/ref_wer.trn`` beside it), or split over ESPnet's
  ``logdir/output.<job>/`` folders. ``score`` values may be plain floats or ``tensor(-1.23)``;
  ``scores`` lines are ``uttid {"decoder": "tensor(-0.9)", "ctc": ..., ...}``.
- References: Kaldi ``text`` or sclite ``.trn`` (read by :mod:`slm_lm.rescoring.transcripts`).
- mlm-scoring JSON: ``{"utt": {"ref": "...", "hyp_1": {"score": s, "text": t}, ...}, ...}``.
- TSV: ``uttid<TAB>rank<TAB>score<TAB>text`` (an optional header line ``uttid rank score text``).

Every problem (missing file, duplicate id, unparsable score, hypotheses without a reference or the
other way round, gaps in the ranks) raises :class:`slm_lm.common.errors.InputError` naming file and line.
Empty hypotheses are valid.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import decode_utf8
from slm_lm.rescoring.transcripts import read_keyed, read_located_refs, read_nonblank_lines, require_file, single_spaced

_RANK_DIR = re.compile(r"^([1-9][0-9]*)best_recog$")
_TENSOR = re.compile(r"^tensor\(\s*\[?\s*([^,\])\s]+)\s*\]?\s*(?:,[^)]*)?\)$")
TSV_HEADER = ["uttid", "rank", "score", "text"]


@dataclass
class Hypothesis:
    """One hypothesis: 1-based rank, text (may be empty), total score, per-scorer scores."""

    rank: int
    text: str
    score: float
    scores: dict[str, float] = field(default_factory=dict)
    where: str = field(default="", compare=False)  # "file:line" it was read from, for messages

    @property
    def n_words(self) -> int:
        """Number of whitespace-separated words."""
        return len(self.text.split())


@dataclass
class NbestSet:
    """A named set of N-best lists with one reference per utterance (same utterance ids)."""

    name: str
    source: str
    hyps: dict[str, list[Hypothesis]]
    refs: dict[str, str]

    @property
    def n_hyps(self) -> int:
        """Total number of hypotheses."""
        return sum(len(h) for h in self.hyps.values())

    def unique_texts(self) -> list[str]:
        """The hypothesis texts, each once, sorted (what rescoring scores)."""
        return sorted({h.text for hyps in self.hyps.values() for h in hyps})


def parse_score(value, where: str) -> float:
    """Parse a score given as a number, ``"-1.5"`` or ``"tensor(-1.5[, device=...])"``."""
    if isinstance(value, bool):
        raise InputError(f"{where}: score {value!r} is not a number")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        text = value.strip()
        match = _TENSOR.match(text)
        if match:
            text = match.group(1)
        try:
            result = float(text)
        except ValueError:
            raise InputError(f"{where}: cannot parse score {value!r}") from None
    else:
        raise InputError(f"{where}: score {value!r} is not a number")
    if not math.isfinite(result):
        raise InputError(f"{where}: score {value!r} is not finite")
    return result


def _select_ranks(ranks: list[int], nbest: int | None, source: Path) -> list[int]:
    if nbest is not None and nbest < 1:
        raise InputError(f"nbest must be >= 1, got {nbest}")
    if not ranks:
        raise InputError(f"{source}: no <k>best_recog directories")
    if ranks != list(range(1, len(ranks) + 1)):
        missing = sorted(set(range(1, ranks[-1] + 1)) - set(ranks))
        names = ", ".join(f"{k}best_recog" for k in missing[:5])
        raise InputError(f"{source}: rank directories are not 1..K, missing {names}")
    if nbest is None:
        return ranks
    if nbest > len(ranks):
        raise InputError(f"{source}: asked for {nbest}-best but only {len(ranks)} ranks exist")
    return ranks[:nbest]


def _rank_dirs(folder: Path) -> dict[int, Path]:
    found = {}
    for child in folder.iterdir():
        match = _RANK_DIR.match(child.name)
        if match and child.is_dir():
            found[int(match.group(1))] = child
    return found


def _read_rank_dir(folder: Path, rank: int) -> dict[str, Hypothesis]:
    """Hypotheses of one ``<k>best_recog`` directory, checking that its files list the same ids."""
    text_path, token_path = folder / "text", folder / "token"
    if text_path.is_file():
        texts = {k: (single_spaced(v), w) for k, (v, w) in read_keyed(text_path).items()}
    elif token_path.is_file():  # ESPnet without a detokenised text: join sentencepiece pieces
        texts = {
            k: (single_spaced("".join(v.split()).replace("\u2581", " ")), w)
            for k, (v, w) in read_keyed(token_path).items()
        }
    else:
        raise InputError(f"{text_path}: hypothesis file not found (no text or token file)")
    score_path = folder / "score"
    require_file(score_path, "score file")
    raw_scores = read_keyed(score_path)
    _same_ids(texts, raw_scores, text_path, score_path)
    comps: dict[str, tuple[str, str]] = {}
    scores_path = folder / "scores"
    if scores_path.is_file():
        comps = read_keyed(scores_path)
        _same_ids(texts, comps, text_path, scores_path)
    out = {}
    for uttid, (text, where) in texts.items():
        score = parse_score(raw_scores[uttid][0], raw_scores[uttid][1])
        parts = {}
        if uttid in comps:
            parts = _parse_components(*comps[uttid])
        out[uttid] = Hypothesis(rank=rank, text=text, score=score, scores=parts, where=where)
    return out


def _parse_components(value: str, where: str) -> dict[str, float]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: per-scorer scores are not a JSON object ({err.msg})") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: per-scorer scores are not a JSON object")
    return {str(k): parse_score(v, f"{where}: scorer {k!r}") for k, v in obj.items()}


def _same_ids(a: dict, b: dict, a_path: Path, b_path: Path) -> None:
    for uttid in a:
        if uttid not in b:
            raise InputError(f"{a[uttid][1]}: utterance {uttid!r} has no line in {b_path}")
    for uttid in b:
        if uttid not in a:
            raise InputError(f"{b[uttid][1]}: utterance {uttid!r} has no line in {a_path}")


def espnet_hypothesis_dirs(path: str | Path) -> list[Path]:
    """Directories holding ``<k>best_recog/`` for an ESPnet-style path (see module doc)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: directory not found")
    if (path / "raw_hypotheses").is_dir():
        return [path / "raw_hypotheses"]
    if _rank_dirs(path):
        return [path]
    jobs = sorted(p for p in (path / "logdir").glob("output.*") if p.is_dir() and _rank_dirs(p))
    if jobs:
        return _last_run(path / "logdir", jobs)
    raise InputError(f"{path}: no <k>best_recog directories (nor raw_hypotheses/ or logdir/output.*/)")


def _job_index(p: Path) -> int:
    """N of ``output.N`` (or ``keys.N``, ``keys.N.scp``); -1 for another name."""
    parts = p.name.split(".")
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1


def _last_run(logdir: Path, jobs: list[Path]) -> list[Path]:
    """The ``output.N`` dirs of the last decoding run in ``logdir``. asr.sh writes ``keys.1.scp`` ..
    ``keys.<nj>.scp`` anew for each run and leaves those of an earlier run with more jobs: the last run's
    jobs are 1..n, n the last index from 1 on whose key file is not older than ``keys.1``'s. Without key
    files, every ``output.N`` counts."""
    keys = {_job_index(p): p for p in logdir.glob("keys.*") if _job_index(p) > 0}
    if 1 not in keys:
        return jobs
    first, n = keys[1].stat().st_mtime, 1
    while n + 1 in keys and keys[n + 1].stat().st_mtime >= first:
        n += 1
    return [p for p in jobs if 0 < _job_index(p) <= n]


def read_espnet_nbest(path: str | Path, nbest: int | None = None) -> dict[str, list[Hypothesis]]:
    """Read ESPnet N-best output -> {uttid: hypotheses ordered by rank}.

    Utterances may have fewer than ``nbest`` hypotheses (ESPnet writes what the beam found), but ranks
    must be contiguous from 1; ``nbest`` larger than the number of rank directories is an error.
    """
    out: dict[str, list[Hypothesis]] = {}
    for folder in espnet_hypothesis_dirs(path):
        dirs = _rank_dirs(folder)
        part: dict[str, list[Hypothesis]] = {}
        for rank in _select_ranks(sorted(dirs), nbest, folder):
            for uttid, hyp in _read_rank_dir(dirs[rank], rank).items():
                have = part.setdefault(uttid, [])
                if len(have) != rank - 1:
                    raise InputError(
                        f"{hyp.where}: utterance {uttid!r} has rank {rank} but no rank {len(have) + 1}"
                    )
                have.append(hyp)
        for uttid, hyps in part.items():
            if uttid in out:
                hint = ""
                if folder.parent.name == "logdir":
                    hint = (f"; {folder.parent} holds the shards of more than one decoding run: remove the "
                            "output.N dirs of the earlier run (e.g. those with N above the last run's job count, "
                            "whose keys.N.scp are older than keys.1.scp)")
                raise InputError(
                    f"{hyps[0].where}: duplicate id {uttid!r} (also at {out[uttid][0].where}){hint}"
                )
            out[uttid] = hyps
    return out


def default_ref_path(path: str | Path) -> Path | None:
    """The reference file that belongs to an ESPnet-style directory, if one is there.

    ``references/ref_wer.trn`` (the lists of `slm-data get librispeech-nbest`) or ``score_wer/ref.trn``
    (ESPnet's scoring output).
    ESPnet's decode-dir ``text`` is *not* used: it holds the 1-best hypotheses, not references.
    """
    path = Path(path)
    for candidate in (path / "references" / "ref_wer.trn", path / "score_wer" / "ref.trn"):
        if candidate.is_file():
            return candidate
    return None


def _json_line(raw: str, key: str) -> int:
    pos = raw.find(json.dumps(key))
    return raw.count("\n", 0, pos) + 1 if pos >= 0 else 1


def _no_duplicate_keys(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise InputError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def read_mlm_json(path: str | Path, nbest: int | None = None):
    """Read the mlm-scoring JSON format -> (hyps {uttid: [Hypothesis]}, refs {uttid: text}).

    ``hyp_<k>`` keys must be numbered 1..K per utterance; ``nbest`` keeps ranks 1..nbest.
    """
    path = Path(path)
    require_file(path, "N-best JSON file")
    raw = decode_utf8(path, path.read_bytes())
    try:
        data = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    except InputError as err:
        raise InputError(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}:1: top level must be an object {{uttid: {{...}}}}")
    if nbest is not None and nbest < 1:
        raise InputError(f"nbest must be >= 1, got {nbest}")
    hyps: dict[str, list[Hypothesis]] = {}
    refs: dict[str, str] = {}
    for uttid, entry in data.items():
        where = f"{path}:{_json_line(raw, uttid)}: utterance {uttid!r}"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: value must be an object")
        if not isinstance(entry.get("ref"), str):
            raise InputError(f"{where}: missing reference ('ref' string)")
        refs[uttid] = single_spaced(entry["ref"])
        ranks = {}
        for key, value in entry.items():
            if key == "ref":
                continue
            match = re.fullmatch(r"hyp_([1-9][0-9]*)", key)
            if not match:
                raise InputError(f"{where}: unexpected key {key!r} (want 'ref' or 'hyp_<k>')")
            if not isinstance(value, dict) or not isinstance(value.get("text"), str):
                raise InputError(f"{where}: {key} needs a 'text' string and a 'score'")
            if "score" not in value:
                raise InputError(f"{where}: {key} has no 'score'")
            ranks[int(match.group(1))] = (value, key)
        if not ranks:
            raise InputError(f"{where}: no hypotheses (hyp_1 ...)")
        if sorted(ranks) != list(range(1, len(ranks) + 1)):
            raise InputError(f"{where}: hypothesis keys are not hyp_1..hyp_{len(ranks)}")
        hyps[uttid] = [
            Hypothesis(
                rank=rank,
                text=single_spaced(ranks[rank][0]["text"]),
                score=parse_score(ranks[rank][0]["score"], f"{where}, {ranks[rank][1]}"),
                where=f"{where}, {ranks[rank][1]}",
            )
            for rank in sorted(ranks)
            if nbest is None or rank <= nbest
        ]
    if nbest is not None and hyps and max(len(h) for h in hyps.values()) < nbest:
        raise InputError(f"{path}: asked for {nbest}-best but no utterance has that many hypotheses")
    return hyps, refs


def read_tsv(path: str | Path, nbest: int | None = None) -> dict[str, list[Hypothesis]]:
    """Read ``uttid<TAB>rank<TAB>score<TAB>text`` lines -> {uttid: hypotheses ordered by rank}."""
    path = Path(path)
    require_file(path, "N-best TSV file")
    if nbest is not None and nbest < 1:
        raise InputError(f"nbest must be >= 1, got {nbest}")
    rows: dict[str, dict[int, Hypothesis]] = {}
    for index, (lineno, line) in enumerate(read_nonblank_lines(path)):
        where = f"{path}:{lineno}"
        fields = line.split("\t")
        if index == 0 and [f.strip().lower() for f in fields] == TSV_HEADER:
            continue
        if len(fields) == 3:  # empty hypothesis written without a trailing tab
            fields.append("")
        if len(fields) != 4:
            raise InputError(f"{where}: expected 4 tab-separated fields (uttid, rank, score, text)")
        uttid, rank_text, score_text, text = (f.strip() for f in fields)
        if not uttid:
            raise InputError(f"{where}: empty utterance id")
        try:
            rank = int(rank_text)
        except ValueError:
            raise InputError(f"{where}: rank {rank_text!r} is not an integer") from None
        if rank < 1:
            raise InputError(f"{where}: rank must be >= 1, got {rank}")
        per_utt = rows.setdefault(uttid, {})
        if rank in per_utt:
            raise InputError(
                f"{where}: duplicate rank {rank} for {uttid!r} (first at {per_utt[rank].where})"
            )
        per_utt[rank] = Hypothesis(rank, single_spaced(text), parse_score(score_text, where), where=where)
    out = {}
    for uttid, per_utt in rows.items():
        if sorted(per_utt) != list(range(1, len(per_utt) + 1)):
            first = per_utt[min(per_utt)].where
            raise InputError(f"{first}: ranks of {uttid!r} are not 1..{len(per_utt)}: {sorted(per_utt)}")
        out[uttid] = [per_utt[r] for r in sorted(per_utt) if nbest is None or r <= nbest]
    if nbest is not None and out and max(len(h) for h in out.values()) < nbest:
        raise InputError(f"{path}: asked for {nbest}-best but no utterance has that many hypotheses")
    return out


def check_refs(
    hyps: dict[str, list[Hypothesis]], refs: dict[str, tuple[str, str]], source: str, ref_source: str
) -> None:
    """Every utterance must have hypotheses and a reference (refs values are (text, where))."""
    for uttid, hyp_list in hyps.items():
        if uttid not in refs:
            raise InputError(f"{hyp_list[0].where}: utterance {uttid!r} has no reference in {ref_source}")
        if not hyp_list:
            raise InputError(f"{source}: utterance {uttid!r} has no hypotheses")
    for uttid, (_, where) in refs.items():
        if uttid not in hyps:
            raise InputError(f"{where}: reference {uttid!r} has no hypotheses in {source}")


def load_nbest(
    path: str | Path, ref: str | Path | None = None, nbest: int | None = None, name: str | None = None
) -> NbestSet:
    """Load one N-best set from a directory (ESPnet), ``.json`` (mlm-scoring) or ``.tsv`` file.

    ``ref`` (``.trn`` or Kaldi ``text``) overrides the references found with the data
    (:func:`default_ref_path` for directories, ``ref`` fields in JSON). TSV input needs ``ref``.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: N-best input not found")
    json_refs = None
    if path.is_dir():
        hyps = read_espnet_nbest(path, nbest)
        set_name = path.name
    elif path.suffix == ".json":
        hyps, json_refs = read_mlm_json(path, nbest)
        set_name = path.name[: -len(".json")]
    elif path.suffix == ".tsv":
        hyps = read_tsv(path, nbest)
        set_name = path.stem
    else:
        raise InputError(f"{path}: unknown N-best format (want a directory, .json or .tsv)")
    if not hyps:
        raise InputError(f"{path}: no hypotheses")
    ref_path = Path(ref) if ref is not None else (default_ref_path(path) if path.is_dir() else None)
    if ref_path is not None:
        refs = read_located_refs(ref_path, hyps.keys())
        ref_source = str(ref_path)
    elif json_refs is not None:
        refs = {k: (v, hyps[k][0].where) for k, v in json_refs.items()}
        ref_source = str(path)
    else:
        raise InputError(f"{path}: no references found; give a reference file (.trn or Kaldi text)")
    check_refs(hyps, refs, str(path), ref_source)
    return NbestSet(
        name=name or set_name,
        source=str(path),
        hyps=hyps,
        refs={k: refs[k][0] for k in hyps},
    )


def normalize_nbest(nbest: NbestSet, normalize) -> tuple[NbestSet, list[str]]:
    """A copy with every hypothesis and reference passed through ``normalize`` (str -> str), so that
    WER and the LM see the same text; also the places (``where``) of non-empty hypotheses that
    normalise to nothing."""
    emptied = []
    hyps = {}
    for uttid, hyp_list in nbest.hyps.items():
        hyps[uttid] = []
        for h in hyp_list:
            text = normalize(h.text)
            if h.text.strip() and not text:
                emptied.append(h.where)
            hyps[uttid].append(Hypothesis(h.rank, text, h.score, h.scores, h.where))
    refs = {uttid: normalize(text) for uttid, text in nbest.refs.items()}
    return NbestSet(nbest.name, nbest.source, hyps, refs), emptied
