"""Paired bootstrap test of two systems' WER on the same utterances (Bisani and Ney, ICASSP 2004).

Utterances are resampled with replacement; each resample gives both systems' WER on the same
utterances. The share of resamples in which system B has fewer word errors than system A is its
"probability of improvement"; the 2.5 and 97.5 percentiles of WER(B) - WER(A) give a 95 % interval.
"""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BootstrapResult:
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
