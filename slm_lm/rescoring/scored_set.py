"""N-best sets as score matrices: each hypothesis's acoustic score, LM scores, word count and word errors
as padded [utterance, rank] arrays, and the combined score

    total = AM + sum_j lambda_j * LM_j / lp_j + beta * n_words,

where AM is the file's total score or a weighted sum of its per-scorer components (e.g.
``0.6*decoder + 0.4*ctc`` removes the first-pass LM of the lists of `slm-data get librispeech-nbest`). An LM
is a {text: score} table (a model's scores) or a per-scorer column of the N-best lists (spec ``score:NAME``,
e.g. ``score:lm``, the first-pass LM). lp_j = 1 unless LM j is length-normalised as mlm-scoring does
(:func:`length_penalty`). Within an utterance, ties between hypotheses go to the better (lower) original
rank.
"""

import math
from dataclasses import dataclass, replace

import numpy as np

from slm_lm.common.errors import InputError
from slm_lm.rescoring.nbest import Hypothesis, NbestSet
from slm_lm.rescoring.wer import word_errors


def parse_am_weights(spec: str) -> dict[str, float]:
    """Parse ``decoder=0.6,ctc=0.4`` into {scorer name: weight}."""
    weights = {}
    for item in spec.split(","):
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            weights[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"--am-weights: cannot parse {item!r} (want name=weight,...)") from None
        if not math.isfinite(weights[name.strip()]):
            raise InputError(f"--am-weights: {item!r}: the weight is not a finite number (nan or inf)")
    return weights


def am_score(hyp: Hypothesis, am_weights: dict[str, float] | None) -> float:
    """The acoustic score of a hypothesis: its total score, or the weighted per-scorer components."""
    if not am_weights:
        return hyp.score
    missing = [k for k in am_weights if k not in hyp.scores]
    if missing:
        hint = "" if hyp.scores else ("; slm-am-scores writes them from the ASR model, or without --am-weights "
                                      "the AM score is that total")
        raise InputError(no_score_message(hyp, repr(missing[0])) + hint)
    return sum(w * hyp.scores[k] for k, w in am_weights.items())


def no_score_message(hyp: Hypothesis, what: str) -> str:
    """The error for a per-scorer score `what` that a hypothesis lacks: the scores it has, or that its N-best
    has none (stock ESPnet `asr_inference` writes only the total `score`, no `scores` file)."""
    if hyp.scores:
        return f"{hyp.where}: no per-scorer score {what}; have {', '.join(sorted(hyp.scores))}"
    return (f"{hyp.where}: no per-scorer score {what}: the N-best has only the total score, no 'scores' file "
            "(ESPnet's asr_inference writes none)")


SCORE_COLUMN = "score:"


@dataclass(frozen=True)
class ScoreColumn:
    """An LM whose scores are a per-scorer column of the N-best lists (LM spec ``score:NAME``).

    Read per hypothesis, not per text: two hypotheses with the same words but different tokens carry
    different first-pass LM scores.
    """

    column: str

    @property
    def name(self) -> str:
        """The LM spec, ``score:NAME``."""
        return SCORE_COLUMN + self.column

    def value(self, hyp: Hypothesis) -> float:
        """The column's score of one hypothesis."""
        if self.column not in hyp.scores:
            raise InputError(no_score_message(hyp, f"{self.column!r} for LM {self.name!r}"))
        return hyp.scores[self.column]


def score_column(spec: str) -> ScoreColumn | None:
    """The :class:`ScoreColumn` of an LM spec ``score:NAME``; None for any other spec (a model)."""
    if not spec.startswith(SCORE_COLUMN):
        return None
    column = spec[len(SCORE_COLUMN) :].strip()
    if not column:
        raise InputError(f"--lm {spec!r}: no column name (want score:NAME, e.g. score:lm)")
    return ScoreColumn(column)


LENGTH_NORMS = ("none", "gnmt", "length")


def parse_length_norm(spec: str, n_lms: int) -> list[str]:
    """``gnmt`` (all LMs) or ``none,gnmt,...`` (one per LM, in --lm order) -> list of kinds."""
    kinds = [k.strip() for k in spec.split(",")]
    bad = [k for k in kinds if k not in LENGTH_NORMS]
    if bad:
        raise InputError(f"--length-norm: unknown kind {bad[0]!r} (want one of {', '.join(LENGTH_NORMS)})")
    if len(kinds) == 1:
        return kinds * n_lms
    if len(kinds) != n_lms:
        raise InputError(f"--length-norm: {len(kinds)} kinds for {n_lms} LMs (give one, or one per LM)")
    return kinds


def length_penalty(kind: str, alpha: float, n_words) -> np.ndarray:
    """mlm-scoring's length penalty lp that an LM score is divided by, with |Y| = words + 1 (the end of
    sentence; words, not LM tokens, so every LM and score column has the same lengths):
    ``gnmt``: ((5 + |Y|) / 6) ** alpha (mlm-scoring ``--ln-type gnmt --ln alpha``), ``length``:
    |Y| ** alpha (mlm-scoring ``--ln-type length`` is alpha = 1), ``none``: 1. alpha = 0 gives 1 too.
    """
    length = np.asarray(n_words, dtype=float) + 1.0
    if kind == "none" or alpha == 0:
        return np.ones_like(length)
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "length":
        return length**alpha
    raise InputError(f"unknown length normalisation {kind!r} (want one of {', '.join(LENGTH_NORMS)})")


@dataclass
class ScoredSet:
    """An N-best set as padded [utterance, rank] matrices (padding: am = -inf, others 0)."""

    name: str
    uttids: list[str]
    texts: list[list[str]]
    am: np.ndarray  # [U, N]
    lm: np.ndarray  # [L, U, N]
    n_words: np.ndarray  # [U, N]
    errors: np.ndarray  # [U, N] word errors against the reference (zeros when ``stats`` is given)
    ref_words: np.ndarray  # [U]
    length_norm: tuple[str, ...] = ()  # per LM: none | gnmt | length; () = none
    stats: np.ndarray | None = None  # [U, N, K] another metric's additive statistics per hypothesis

    def hyp_stats(self) -> np.ndarray:
        """The statistics per hypothesis that the weight search adds up, [U, N, K]: ``stats``, or the word
        errors (K = 1)."""
        return self.stats if self.stats is not None else self.errors[..., None]

    def stats_of(self, chosen: np.ndarray) -> np.ndarray:
        """The summed statistics [K] of the chosen hypotheses."""
        return self.hyp_stats()[np.arange(len(chosen)), chosen].sum(0)

    def with_alphas(self, alphas) -> "ScoredSet":
        """This set with each LM's scores divided by its length penalty at ``alphas`` (() = as is)."""
        if not any(alphas):
            return self
        lm = self.lm.copy()
        for j, (kind, alpha) in enumerate(zip(self.length_norm, alphas)):
            lm[j] = lm[j] / length_penalty(kind, alpha, self.n_words)
        return replace(self, lm=lm, length_norm=())

    def totals(self, lambdas, beta: float, alphas=()) -> np.ndarray:
        """Combined scores [U, N] for the given LM weights, word bonus and length-penalty alphas."""
        total = self.am + beta * self.n_words
        for weight, lm in zip(lambdas, self.with_alphas(alphas).lm):
            total = total + weight * lm
        return total

    def choose(self, lambdas, beta: float, alphas=()) -> np.ndarray:
        """Index of the chosen hypothesis per utterance (ties -> lower original rank)."""
        return np.argmax(self.totals(lambdas, beta, alphas), axis=1)

    def errors_of(self, chosen: np.ndarray) -> int:
        """Total word errors of the chosen hypotheses."""
        return int(self.errors[np.arange(len(chosen)), chosen].sum())


def build_scored_set(nbest: NbestSet, lm_tables: list, am_weights=None, length_norm=(), hyp_stats=None) -> ScoredSet:
    """Turn an :class:`NbestSet` and per-LM {text: score} tables (or :class:`ScoreColumn`) into a
    :class:`ScoredSet`; ``length_norm``: one kind per LM (see :func:`length_penalty`) or ().
    ``hyp_stats``: instead of word errors, another metric's statistics, a function (references,
    hypotheses) -> [pairs, K] array (e.g. :func:`slm_lm.rescoring.bleu.hyp_stats`)."""
    uttids = list(nbest.hyps)
    width = max(len(h) for h in nbest.hyps.values())
    shape = (len(uttids), width)
    am = np.full(shape, -np.inf)
    lm = np.zeros((len(lm_tables),) + shape)
    n_words = np.zeros(shape)
    errors = np.zeros(shape, dtype=np.int64)
    pair_refs, pair_hyps, pair_pos = [], [], []
    texts = []
    for u, uttid in enumerate(uttids):
        hyps = nbest.hyps[uttid]
        texts.append([h.text for h in hyps])
        for r, hyp in enumerate(hyps):
            am[u, r] = am_score(hyp, am_weights)
            for j, table in enumerate(lm_tables):
                lm[j, u, r] = table.value(hyp) if isinstance(table, ScoreColumn) else table[hyp.text]
            n_words[u, r] = hyp.n_words
            pair_refs.append(nbest.refs[uttid])
            pair_hyps.append(hyp.text)
            pair_pos.append((u, r))
    rows, cols = np.array(pair_pos).T
    stats = None
    if hyp_stats is None:
        errors[rows, cols] = word_errors(pair_refs, pair_hyps)
    else:
        values = np.asarray(hyp_stats(pair_refs, pair_hyps))
        stats = np.zeros(shape + values.shape[1:], dtype=values.dtype)
        stats[rows, cols] = values
    ref_words = np.array([len(nbest.refs[u].split()) for u in uttids], dtype=np.int64)
    return ScoredSet(nbest.name, uttids, texts, am, lm, n_words, errors, ref_words, tuple(length_norm), stats)
