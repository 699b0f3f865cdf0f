"""Kaldi and sclite text files: ``key value`` tables (``text``, ``wav.scp``, ``utt2spk``, ...) and sclite
``.trn`` transcripts (``WORDS\\t(spk-uttid)``).

Every problem (missing file, not UTF-8, duplicate id, a line that is not a trn line) raises
:class:`slm_lm.common.errors.InputError` naming file and line. Empty values (empty transcripts) are valid.
"""

import re
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import atomic_open, decode_utf8, why_not

_TRN_LINE = re.compile(r"^(.*)\(([^()\s]+)\)\s*$")


def require_file(path: Path, what: str) -> None:
    """InputError ``<path>: <what> not found`` (or ``is a directory, not a <what>``, ...) unless ``path`` is a
    regular file."""
    if not Path(path).is_file():
        raise InputError(f"{path}: {why_not(path, what)}")


def read_nonblank_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line without newline) for the non-blank lines of a UTF-8 file."""
    text = decode_utf8(path, path.read_bytes())
    return [(i, line.rstrip("\r")) for i, line in enumerate(text.split("\n"), 1) if line.strip()]


def single_spaced(text: str) -> str:
    """The words of ``text`` joined by single spaces."""
    return " ".join(text.split())


def read_keyed(path: Path) -> dict[str, tuple[str, str]]:
    """Kaldi-style ``key value`` file -> {key: (value, "file:line")}; duplicate keys are errors."""
    require_file(path, "file")
    out: dict[str, tuple[str, str]] = {}
    for lineno, line in read_nonblank_lines(path):
        parts = line.strip().split(maxsplit=1)
        key = parts[0]
        where = f"{path}:{lineno}"
        if key in out:
            raise InputError(f"{where}: duplicate id {key!r} (first at {out[key][1]})")
        out[key] = (parts[1].strip() if len(parts) > 1 else "", where)
    return out


def read_table(path: str | Path) -> dict[str, str]:
    """Read a Kaldi-style ``key value`` file (wav.scp, utt2spk, ...) -> {key: value}; values may be empty."""
    return {k: v for k, (v, _) in read_keyed(Path(path)).items()}


def read_text(path: str | Path) -> dict[str, str]:
    """Read a Kaldi ``text`` file (``uttid WORDS``) -> {uttid: text}; empty texts are kept."""
    return {k: single_spaced(v) for k, (v, _) in read_keyed(Path(path)).items()}


def parse_trn_line(line: str) -> tuple[str, str] | None:
    """(words, trn id) of an sclite line ``WORDS (id)``; None if the line is not one."""
    match = _TRN_LINE.match(line)
    return (single_spaced(match.group(1)), match.group(2)) if match else None


def trn_uttid(trn_id: str, known: set[str] | None) -> str | None:
    """Utterance id of a trn id ``<spk>-<uttid>`` (or ``<uttid>``).

    With ``known`` ids: the id itself or its ``-``-separated suffix that is known (None if neither).
    Without: the id less its ``<spk>-`` prefix when the rest starts with the speaker id (Kaldi utterance
    ids start with their speaker id, so ESPnet writes ``<spk>-<spk><rest>``), else the id as it is.
    """
    if known is not None:
        if trn_id in known:
            return trn_id
        for pos, char in enumerate(trn_id):
            if char == "-" and trn_id[pos + 1 :] in known:
                return trn_id[pos + 1 :]
        return None
    for pos, char in enumerate(trn_id):
        if char == "-":
            spk, rest = trn_id[:pos], trn_id[pos + 1 :]
            if rest == spk or rest.startswith(spk + "-") or rest.startswith(spk + "_"):
                return rest
    return trn_id


def _read_trn(path: Path, uttids=None) -> dict[str, tuple[str, str]]:
    """sclite trn -> {uttid: (text, where)}, mapping ``spk-uttid`` ids onto ``uttids`` when given."""
    require_file(path, "reference file")
    known = set(uttids) if uttids is not None else None
    out: dict[str, tuple[str, str]] = {}
    for lineno, line in read_nonblank_lines(path):
        where = f"{path}:{lineno}"
        parsed = parse_trn_line(line)
        if parsed is None:
            raise InputError(f"{where}: not a trn line 'TEXT (id)': {line[:80]!r}")
        text, trn_id = parsed
        uttid = trn_uttid(trn_id, known)
        if uttid is None:
            raise InputError(f"{where}: reference {trn_id!r} matches no hypothesis utterance id")
        if uttid in out:
            raise InputError(f"{where}: duplicate id {uttid!r} (first at {out[uttid][1]})")
        out[uttid] = (text, where)
    return out


def read_trn(path: str | Path, uttids=None) -> dict[str, str]:
    """Read an sclite ``.trn`` file -> {uttid: text}.

    The ``(spk-uttid)`` ids are mapped to the given ``uttids`` (exact or ``-``-separated suffix);
    without ``uttids`` the ``<spk>-`` prefix is removed when the rest starts with the speaker id.
    """
    return {k: v for k, (v, _) in _read_trn(Path(path), uttids).items()}


def read_located_refs(path: str | Path, uttids=None) -> dict[str, tuple[str, str]]:
    """References of a ``.trn`` file or (any other name) a Kaldi ``text`` file -> {uttid: (text, "file:line")}."""
    path = Path(path)
    if path.suffix == ".trn":
        return _read_trn(path, uttids)
    return {k: (single_spaced(v), w) for k, (v, w) in read_keyed(path).items()}


def read_refs(path: str | Path, uttids=None) -> dict[str, str]:
    """Read references from a ``.trn`` file or (any other name) a Kaldi ``text`` file."""
    return {k: v for k, (v, _) in read_located_refs(path, uttids).items()}


def write_table(path, rows) -> None:
    """Write `key value` lines (a Kaldi table: wav.scp, text, utt2spk, spk2utt) atomically."""
    with atomic_open(path) as f:
        for key, value in rows:
            f.write(f"{key} {value}\n")
