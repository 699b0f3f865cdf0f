"""Word error rate: each hypothesis aligned with its reference, corpus WER, ESPnet's WER columns, and the
paired bootstrap test of two systems' WER on the same utterances (Bisani and Ney, ICASSP 2004).

Words are whitespace-separated; the alignments are jiwer's. One implementation for slm-rescore, the
recipe's scoring and results (``score_wer.py``, ``make_results.py``) and slm-compare-wer.

Bootstrap: utterances are resampled with replacement; each resample gives both systems' WER on the same
utterances. The share of resamples in which system B has fewer word errors than system A is its
"probability of improvement"; the 2.5 and 97.5 percentiles of WER(B) - WER(A) give a 95 % interval.
"""

from dataclasses import dataclass

import jiwer
import numpy as np

from slm_lm.common.errors import InputError


@dataclass(frozen=True)
class Alignment:
    """Word counts of one hypothesis aligned with its reference."""

    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def errors(self) -> int:
        """Word errors: substitutions + deletions + insertions."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def ref_words(self) -> int:
        """Words of the reference."""
        return self.hits + self.substitutions + self.deletions


def align_words(refs: list[str], hyps: list[str]) -> list[Alignment]:
    """The alignment counts of each (reference, hypothesis) pair, via jiwer."""
    out = []
    for chunks in jiwer.process_words(refs, hyps).alignments:
        counts = {"equal": 0, "substitute": 0, "delete": 0, "insert": 0}
        for c in chunks:
            counts[c.type] += c.hyp_end_idx - c.hyp_start_idx if c.type == "insert" else c.ref_end_idx - c.ref_start_idx
        out.append(Alignment(counts["equal"], counts["substitute"], counts["delete"], counts["insert"]))
    return out


def word_errors(refs: list[str], hyps: list[str]) -> np.ndarray:
    """Word errors (substitutions + deletions + insertions) of each (ref, hyp) pair."""
    return np.array([a.errors for a in align_words(refs, hyps)], dtype=np.int64)


def align_transcripts(refs: dict[str, str], hyps: dict[str, str], where) -> list[Alignment]:
    """The alignment of each utterance's hypothesis with its reference, in sorted utterance order;
    ``where`` (the hypotheses' file) names an input error: other utterances than the references, an
    empty reference."""
    if set(refs) != set(hyps):
        odd = sorted(set(refs) ^ set(hyps))[:3]
        raise InputError(f"{where}: utterances differ from the references, e.g. {odd}")
    keys = sorted(refs)
    for k in keys:
        if not refs[k]:
            raise InputError(f"{where}: empty reference for {k}")
    return align_words([refs[k] for k in keys], [hyps[k] for k in keys])


def char_tokens(transcripts: dict[str, str]) -> dict[str, str]:
    """ESPnet's CER tokens (asr.sh's score_cer): each transcript as its characters separated by spaces, a
    space written ``<space>``, so that :func:`align_transcripts` and :func:`wer_columns` give the CER."""
    return {u: " ".join("<space>" if c == " " else c for c in " ".join(t.split())) for u, t in transcripts.items()}


def wer_percent(errors: int, ref_words: int) -> float:
    """Corpus WER in percent."""
    if ref_words <= 0:
        raise InputError("references contain no words: WER is undefined")
    return 100.0 * errors / ref_words


WER_COLUMNS = ("Snt", "Wrd", "Corr", "Sub", "Del", "Ins", "Err", "S.Err")


def wer_columns(alignments: list[Alignment]) -> dict:
    """ESPnet's WER columns (:data:`WER_COLUMNS`, percentages of the reference words / sentences)."""
    sub = sum(a.substitutions for a in alignments)
    dele = sum(a.deletions for a in alignments)
    ins = sum(a.insertions for a in alignments)
    cor = sum(a.hits for a in alignments)
    wrd = sub + dele + cor
    serr = sum(a.errors > 0 for a in alignments)
    pct = lambda x, n: 100.0 * x / n  # noqa: E731
    return {"Snt": len(alignments), "Wrd": wrd, "Corr": pct(cor, wrd), "Sub": pct(sub, wrd), "Del": pct(dele, wrd),
            "Ins": pct(ins, wrd), "Err": pct(sub + dele + ins, wrd), "S.Err": pct(serr, len(alignments))}


def wer_table(title: str, rows: list[tuple[str, dict]]) -> list[str]:
    """Lines of one ESPnet-style markdown WER table: a row (name, :func:`wer_columns`) per dataset."""
    out = [f"### {title}", "", "|dataset|" + "|".join(WER_COLUMNS) + "|", "|---|" + "---|" * len(WER_COLUMNS)]
    for name, c in rows:
        out.append(f"|{name}|{c['Snt']}|{c['Wrd']}|" + "|".join(f"{c[k]:.1f}" for k in WER_COLUMNS[2:]) + "|")
    return out + [""]


@dataclass(frozen=True)
class BootstrapResult:
    """Outcome of :func:`paired_bootstrap`."""

    wer_a: float  # WER % of each system on all utterances
    wer_b: float
    delta: float  # wer_b - wer_a, WER points (negative: B is better)
    ci_low: float  # 95 % interval of delta over the resamples
    ci_high: float
    p_b_better: float  # share of resamples where B has fewer errors than A
    samples: int


def paired_bootstrap(errors_a, errors_b, ref_words, samples: int = 10_000, seed: int = 0,
                     chunk: int = 500) -> BootstrapResult:
    """Compare two systems from their word errors and the reference word counts, one entry per utterance."""
    a, b, n = (np.asarray(x, dtype=np.int64) for x in (errors_a, errors_b, ref_words))
    if not (a.shape == b.shape == n.shape) or a.ndim != 1 or len(a) == 0:
        raise ValueError("errors_a, errors_b and ref_words need one entry per utterance, the same utterances")
    if n.sum() == 0:
        raise ValueError("the references have no words")
    rng = np.random.default_rng(seed)
    deltas, better = [], 0
    for start in range(0, samples, chunk):
        idx = rng.integers(0, len(a), size=(min(chunk, samples - start), len(a)))
        words = np.maximum(n[idx].sum(axis=1), 1)
        diff = b[idx].sum(axis=1) - a[idx].sum(axis=1)
        deltas.append(100.0 * diff / words)
        better += int((diff < 0).sum())
    deltas = np.concatenate(deltas)
    low, high = np.percentile(deltas, [2.5, 97.5])
    wer_a, wer_b = 100.0 * a.sum() / n.sum(), 100.0 * b.sum() / n.sum()
    return BootstrapResult(wer_a, wer_b, wer_b - wer_a, float(low), float(high), better / samples, samples)
