"""Machine-translation N-best lists as :class:`slm_lm.rescoring.nbest.NbestSet`, with references from a plain text
file (line k = sentence k, counted from 0 as fairseq and Moses number them).

Formats:
- fairseq-generate output: ``H-<id>\\t<score>\\t<text>`` per hypothesis (best first), optional
  ``D-<id>\\t<score>\\t<detokenised text>`` and ``P-<id>\\t<positional scores>`` in the same order;
  ``S-``/``T-``/``A-``/``E-`` lines and log lines are not hypotheses and are passed over.
  Per-scorer scores: ``fairseq`` (the H- score, length-normalised by fairseq) and, with P- lines,
  ``positional`` (their sum: the unnormalised log-probability).
- Moses/Marian n-best: ``<id> ||| <text> ||| <features> ||| <total>[ ||| ...]``; per-scorer scores: each
  feature value, named ``NAME`` (``NAME.2``, ``NAME.3`` ... for a feature with several values).

The text of a hypothesis passes BPE removal as fairseq's ``--remove-bpe`` does (:data:`BPE_SYMBOLS`).
"""

import re
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import read_text_lines
from slm_lm.rescoring.nbest import Hypothesis, NbestSet, check_refs, parse_score
from slm_lm.rescoring.transcripts import require_file, single_spaced

_FAIRSEQ_LINE = re.compile(r"^([A-Z])-([0-9]+)\t(.*)$")
BPE_SYMBOLS = {"none": None, "subword_nmt": "@@ ", "sentencepiece": "\u2581"}
FORMATS = ("auto", "fairseq", "moses")
HYP_LINES = ("auto", "D", "H")


def remove_bpe(text: str, kind: str) -> str:
    """fairseq's post-processing of BPE: ``subword_nmt`` joins ``@@ `` continuations, ``sentencepiece``
    joins the pieces and turns ``\u2581`` into spaces, ``none`` leaves the text."""
    if kind == "subword_nmt":
        return single_spaced((text + " ").replace("@@ ", "").rstrip())
    if kind == "sentencepiece":
        return single_spaced(text.replace(" ", "").replace("\u2581", " "))
    if kind == "none":
        return text
    raise InputError(f"--remove-bpe: unknown kind {kind!r} (want one of {', '.join(BPE_SYMBOLS)})")


def _fairseq_lines(path: Path) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """{id: {"H"/"D"/"P": [(rest of line, where), ...]}} of a fairseq-generate output file."""
    rows: dict[str, dict[str, list]] = {}
    for lineno, line in read_text_lines(path):
        match = _FAIRSEQ_LINE.match(line)
        if match and match.group(1) in "HDP":
            kind, sent_id, rest = match.groups()
            rows.setdefault(str(int(sent_id)), {"H": [], "D": [], "P": []})[kind].append((rest, f"{path}:{lineno}"))
    return rows


def _scored_text(rest: str, where: str) -> tuple[float, str]:
    score, sep, text = rest.partition("\t")
    if not sep and not rest.strip():
        raise InputError(f"{where}: want <score><TAB><text> after the id")
    return parse_score(score, where), text


def read_fairseq(path: str | Path, hyp_lines: str = "auto", nbest: int | None = None) -> dict[str, list[Hypothesis]]:
    """Hypotheses of a fairseq-generate output: {sentence id: hypotheses best first}. ``hyp_lines``: the
    text of ``D`` (detokenised) or ``H`` lines; ``auto``: D where the file has D- lines, else H."""
    path = Path(path)
    require_file(path, "fairseq-generate output")
    rows = _fairseq_lines(path)
    if hyp_lines == "auto":
        hyp_lines = "D" if any(r["D"] for r in rows.values()) else "H"
    out = {}
    for sent_id, r in rows.items():
        first = (r["H"] or r["D"] or r["P"])[0][1]
        for kind in ("D", "P"):
            if (r[kind] or kind == hyp_lines) and len(r[kind]) != len(r["H"]):
                raise InputError(f"{first}: sentence {sent_id} has {len(r['H'])} H- lines and {len(r[kind])} "
                                 f"{kind}- lines (want one per hypothesis)")
        hyps = []
        for rank, (h_rest, where) in enumerate(r["H"][:nbest], 1):
            score, text = _scored_text(h_rest, where)
            if hyp_lines == "D":
                text = _scored_text(*r["D"][rank - 1])[1]
            scores = {"fairseq": score}
            if r["P"]:
                p_text, p_where = r["P"][rank - 1]
                scores["positional"] = sum(parse_score(v, p_where) for v in p_text.split())
            hyps.append(Hypothesis(rank, single_spaced(text), score, scores, where=where))
        out[sent_id] = hyps
    return out


def _features(text: str, where: str) -> dict[str, float]:
    """Moses feature values ``LM0= -12.3 TM0= -1 -2`` -> {"LM0": -12.3, "TM0": -1, "TM0.2": -2}."""
    scores, name, count = {}, None, 0
    for token in text.split():
        if token.endswith("="):
            name, count = token[:-1], 0
            continue
        if name is None:
            raise InputError(f"{where}: feature value {token!r} before any feature name (want NAME= values)")
        count += 1
        scores[name if count == 1 else f"{name}.{count}"] = parse_score(token, where)
    return scores


def read_moses(path: str | Path, nbest: int | None = None) -> dict[str, list[Hypothesis]]:
    """Hypotheses of a Moses/Marian n-best list: {sentence id: hypotheses in file order}."""
    path = Path(path)
    require_file(path, "Moses n-best list")
    out: dict[str, list[Hypothesis]] = {}
    for lineno, line in read_text_lines(path):
        where = f"{path}:{lineno}"
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("|||")]
        if len(fields) < 4:
            raise InputError(f"{where}: want 'id ||| hypothesis ||| features ||| total score'")
        if not fields[0].isdigit():
            raise InputError(f"{where}: sentence id {fields[0]!r} is not a number")
        hyps = out.setdefault(str(int(fields[0])), [])
        score = parse_score(fields[3], where)
        if nbest is None or len(hyps) < nbest:
            hyps.append(Hypothesis(len(hyps) + 1, single_spaced(fields[1]), score, _features(fields[2], where),
                                   where=where))
    return out


def detect_format(path: Path) -> str:
    """``moses`` when a line of the file holds `` ||| ``, else ``fairseq``."""
    for _, line in read_text_lines(path):
        if "|||" in line:
            return "moses"
        if _FAIRSEQ_LINE.match(line):
            return "fairseq"
    return "fairseq"


def read_plain_refs(path: str | Path) -> dict[str, tuple[str, str]]:
    """References of a plain text file, one per line: {"0": (text, where), "1": ...}."""
    path = Path(path)
    require_file(path, "reference file")
    return {str(lineno - 1): (single_spaced(line), f"{path}:{lineno}") for lineno, line in read_text_lines(path)}


def load_mt_nbest(path: str | Path, ref: str | Path, fmt: str = "auto", hyp_lines: str = "auto",
                  bpe: str = "subword_nmt", nbest: int | None = None) -> NbestSet:
    """One MT N-best set named after the file's stem; every sentence needs hypotheses and a reference
    line, and the other way round. ``bpe``: :func:`remove_bpe` on the hypotheses (references are as in
    ``ref``)."""
    path = Path(path)
    require_file(path, "N-best file")
    if nbest is not None and nbest < 1:
        raise InputError(f"--nbest: must be >= 1, got {nbest}")
    if fmt not in FORMATS or hyp_lines not in HYP_LINES:
        raise InputError(f"unknown format {fmt!r} or hypothesis lines {hyp_lines!r}")
    fmt = detect_format(path) if fmt == "auto" else fmt
    hyps = read_moses(path, nbest) if fmt == "moses" else read_fairseq(path, hyp_lines, nbest)
    if not hyps:
        raise InputError(f"{path}: no hypotheses (want fairseq-generate H- lines or Moses 'id ||| text ||| ...')")
    refs = read_plain_refs(ref)
    check_refs(hyps, refs, str(path), str(ref))
    hyps = {k: [Hypothesis(h.rank, remove_bpe(h.text, bpe), h.score, h.scores, h.where) for h in v]
            for k, v in sorted(hyps.items(), key=lambda item: int(item[0]))}
    return NbestSet(name=path.stem, source=str(path), hyps=hyps, refs={k: refs[k][0] for k in hyps})
