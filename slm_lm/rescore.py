"""N-best rescoring: score combination, grid tuning on dev, WER and reports.

total = AM + sum_j lambda_j * LM_j / lp_j + beta * n_words, where AM is the file's total score or a
weighted sum of its per-scorer components (e.g. ``0.6*decoder + 0.4*ctc`` removes the first-pass LM of
the shared lists). An LM is a model (each text scored once and cached, `slm_lm.score_cache`) or a
per-scorer column of the N-best lists (spec ``score:NAME``, e.g. ``score:lm``, the first-pass LM).
lp_j = 1 unless LM j is length-normalised as mlm-scoring does (:func:`length_penalty`, its alpha tuned
like the weights). A word bonus per LM would add nothing: sum_j lambda_j * b_j * n_words is one bonus,
so the single beta serves all LMs.

The weights are chosen on the dev sets by the lowest pooled WER (total word errors / total reference
words); ties go to the smaller lambdas, then the smaller |beta|, then the smaller alphas. The search is
exhaustive over the grid, or coordinate descent when the grid has more than ``max_grid_points``
points (:func:`tune`). Within an utterance, ties between hypotheses go to the better (lower) original
rank. WER is computed with jiwer on whitespace-separated words.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import jiwer
import numpy as np

from slm_lm.errors import InputError
from slm_lm.fileio import replace_dir, save_png, write_atomic
from slm_lm.nbest import Hypothesis, NbestSet
from slm_lm.score_cache import LocatedScorer, lm_scores


def parse_range(spec: str, option: str = "range") -> list[float]:
    """Parse ``start:stop:step`` (inclusive) or a single value or ``a,b,c`` into a list of floats."""
    try:
        if ":" in spec:
            start, stop, step = (float(x) for x in spec.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            if count > 100_000:
                raise ValueError
            return [round(start + i * step, 10) for i in range(count) if start + i * step <= stop + 1e-9]
        return [float(x) for x in spec.split(",")]
    except ValueError:
        raise InputError(
            f"{option}: cannot parse {spec!r} (want start:stop:step with step > 0, or values a,b,c)"
        ) from None


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
    return weights


def am_score(hyp: Hypothesis, am_weights: dict[str, float] | None) -> float:
    """The acoustic score of a hypothesis: its total score, or the weighted per-scorer components."""
    if not am_weights:
        return hyp.score
    missing = [k for k in am_weights if k not in hyp.scores]
    if missing:
        have = ", ".join(sorted(hyp.scores)) or "none (no scores file?)"
        raise InputError(f"{hyp.where}: no per-scorer score {missing[0]!r}; have {have}")
    return sum(w * hyp.scores[k] for k, w in am_weights.items())


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
            have = ", ".join(sorted(hyp.scores)) or "none (no scores file?)"
            raise InputError(f"{hyp.where}: no per-scorer score {self.column!r} for LM {self.name!r}; have {have}")
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


# ----------------------------------------------------------------------------------------------
# Matrices, WER, tuning


def word_errors(refs: list[str], hyps: list[str]) -> np.ndarray:
    """Word errors (substitutions + deletions + insertions) of each (ref, hyp) pair, via jiwer."""
    out = jiwer.process_words(refs, hyps)
    errors = np.zeros(len(refs), dtype=np.int64)
    for i, chunks in enumerate(out.alignments):
        for c in chunks:
            if c.type in ("substitute", "delete"):
                errors[i] += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                errors[i] += c.hyp_end_idx - c.hyp_start_idx
    return errors


@dataclass
class ScoredSet:
    """An N-best set as padded [utterance, rank] matrices (padding: am = -inf, others 0)."""

    name: str
    uttids: list[str]
    texts: list[list[str]]
    am: np.ndarray  # [U, N]
    lm: np.ndarray  # [L, U, N]
    n_words: np.ndarray  # [U, N]
    errors: np.ndarray  # [U, N] word errors against the reference
    ref_words: np.ndarray  # [U]
    length_norm: tuple[str, ...] = ()  # per LM: none | gnmt | length; () = none

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


def build_scored_set(nbest: NbestSet, lm_tables: list, am_weights=None, length_norm=()) -> ScoredSet:
    """Turn an :class:`NbestSet` and per-LM {text: score} tables (or :class:`ScoreColumn`) into a
    :class:`ScoredSet`; ``length_norm``: one kind per LM (see :func:`length_penalty`) or ()."""
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
    errors[rows, cols] = word_errors(pair_refs, pair_hyps)
    ref_words = np.array([len(nbest.refs[u].split()) for u in uttids], dtype=np.int64)
    return ScoredSet(nbest.name, uttids, texts, am, lm, n_words, errors, ref_words, tuple(length_norm))


def wer_percent(errors: int, ref_words: int) -> float:
    """Corpus WER in percent."""
    if ref_words <= 0:
        raise InputError("references contain no words: WER is undefined")
    return 100.0 * errors / ref_words


@dataclass
class Weights:
    """LM weights (one per LM), word bonus, and length-penalty alphas (one per LM; () = none)."""

    lambdas: tuple[float, ...]
    beta: float = 0.0
    alphas: tuple[float, ...] = ()


@dataclass
class TuneResult:
    """Outcome of the search: best weights, its pooled dev WER, every evaluated point's errors, and how
    the search went (method, points in the grid, points evaluated; coordinate descent: sweeps, start)."""

    best: Weights
    dev_wer: float
    dev_ref_words: int
    grid: list[tuple[Weights, int]]
    search: dict = field(default_factory=dict)


def _grid_errors(sets: list[ScoredSet], lambda_grids, beta_grid) -> list[tuple[Weights, list[int]]]:
    """Errors per set for every grid point (vectorised over the first LM's lambdas)."""
    first = np.asarray(lambda_grids[0], dtype=float)
    out = []
    for beta in beta_grid:
        for rest in itertools.product(*lambda_grids[1:]):
            per_set = []
            for s in sets:
                base = s.am + beta * s.n_words
                for weight, lm in zip(rest, s.lm[1:]):
                    base = base + weight * lm
                totals = base[None] + first[:, None, None] * s.lm[0][None]
                chosen = np.argmax(totals, axis=2)  # [G, U]
                per_set.append(np.take_along_axis(s.errors[None], chosen[..., None], 2)[..., 0].sum(1))
            for g, weight in enumerate(first):
                out.append((Weights((float(weight),) + tuple(rest), float(beta)), [int(e[g]) for e in per_set]))
    return out


SEARCHES = ("auto", "grid", "coordinate")
MAX_GRID_POINTS = 50_000


def _order(weights: Weights, errors: int):
    """Sort key of a search point: fewer errors, then smaller lambdas, |beta|, beta, alphas."""
    return (errors, weights.lambdas, abs(weights.beta), weights.beta, weights.alphas)


def _full_grid(sets, lambda_grids, beta_grid, alpha_grids) -> list[tuple[Weights, int]]:
    """Pooled errors of every grid point (alphas outermost, the rest vectorised by _grid_errors)."""
    out = []
    for alphas in itertools.product(*alpha_grids) if alpha_grids else [()]:
        normalised = [s.with_alphas(alphas) for s in sets]
        out += [(replace(w, alphas=alphas), sum(e)) for w, e in _grid_errors(normalised, lambda_grids, beta_grid)]
    return out


def _coordinate_descent(sets, lambda_grids, beta_grid, alpha_grids) -> tuple[list[tuple[Weights, int]], dict]:
    """Block coordinate descent on the grid: from the smallest weights, set one block at a time to its
    best grid values with the others fixed (each LM's lambda, with its alpha when the LM is
    length-normalised: alpha matters only when lambda > 0; then beta); sweep until a sweep changes
    nothing. Every move lowers (errors, tie order), so it ends at a point that no change of a single
    block improves, not necessarily the grid's best. Returns the evaluated points and the sweep count."""
    seen: dict[tuple, int] = {}

    def errors(w: Weights) -> int:
        key = (w.lambdas, w.beta, w.alphas)
        if key not in seen:
            seen[key] = sum(s.errors_of(s.choose(w.lambdas, w.beta, w.alphas)) for s in sets)
        return seen[key]

    def candidates(w: Weights, j: int):
        if j == len(lambda_grids):
            return [replace(w, beta=b) for b in beta_grid]
        alphas = alpha_grids[j] if alpha_grids else [None]
        return [
            replace(w, lambdas=w.lambdas[:j] + (lam,) + w.lambdas[j + 1 :],
                    alphas=w.alphas if a is None else w.alphas[:j] + (a,) + w.alphas[j + 1 :])
            for lam, a in itertools.product(lambda_grids[j], alphas)
        ]

    start = Weights(
        tuple(min(g) for g in lambda_grids),
        min(beta_grid, key=lambda b: (abs(b), b)),
        tuple(min(g) for g in alpha_grids) if alpha_grids else (),
    )
    current, sweeps, moved = start, 0, True
    while moved:
        sweeps, moved = sweeps + 1, False
        for j in range(len(lambda_grids) + 1):
            best = min(candidates(current, j), key=lambda w: _order(w, errors(w)))
            if best != current:
                current, moved = best, True
    points = [(Weights(lam, beta, alphas), e) for (lam, beta, alphas), e in seen.items()]
    return points, {"sweeps": sweeps, "start": asdict(start)}


def tune(
    dev_sets: list[ScoredSet],
    lambda_grids: list[list[float]],
    beta_grid: list[float],
    alpha_grids: list[list[float]] | None = None,
    search: str = "auto",
    max_grid_points: int = MAX_GRID_POINTS,
) -> TuneResult:
    """Choose the weights minimising the pooled dev WER; ties -> smaller lambdas, |beta|, alphas.

    ``alpha_grids``: per LM, the length-penalty alphas to try ([0.0] for an LM not normalised); None =
    no length normalisation. ``search``: ``grid`` evaluates every point, ``coordinate`` runs
    :func:`_coordinate_descent` (block coordinate descent), ``auto`` = grid up to ``max_grid_points``
    points, else coordinate.
    """
    if not dev_sets:
        raise InputError("tuning needs at least one dev set")
    n_lms = dev_sets[0].lm.shape[0]
    if len(lambda_grids) != n_lms or n_lms == 0:
        raise InputError(f"need one lambda grid per LM ({n_lms}), got {len(lambda_grids)}")
    if alpha_grids is not None and len(alpha_grids) != n_lms:
        raise InputError(f"need one alpha grid per LM ({n_lms}), got {len(alpha_grids)}")
    if search not in SEARCHES:
        raise InputError(f"--search: unknown search {search!r} (want one of {', '.join(SEARCHES)})")
    n_points = math.prod(len(g) for g in lambda_grids + (alpha_grids or [])) * len(beta_grid)
    method = search if search != "auto" else ("grid" if n_points <= max_grid_points else "coordinate")
    ref_words = int(sum(s.ref_words.sum() for s in dev_sets))
    if method == "grid":
        grid, info = _full_grid(dev_sets, lambda_grids, beta_grid, alpha_grids), {}
    else:
        grid, info = _coordinate_descent(dev_sets, lambda_grids, beta_grid, alpha_grids)
    best_w, best_e = min(grid, key=lambda item: _order(*item))
    info = {"method": method, "requested": search, "max_grid_points": max_grid_points, "grid_points": n_points,
            "evaluated": len(grid), **info}
    return TuneResult(best_w, wer_percent(best_e, ref_words), ref_words, grid, info)


@dataclass
class SetReport:
    """WERs (percent) of one set: AM-only, the file's own 1-best, rescored, oracle."""

    name: str
    role: str
    n_utts: int
    n_hyps: int
    ref_words: int
    wer_am: float
    wer_file: float
    wer_rescored: float
    wer_oracle: float

    @property
    def rel_vs_am(self) -> float | None:
        """Relative WER change of rescoring against the AM-only 1-best, percent (negative = better)."""
        return None if self.wer_am == 0 else 100.0 * (self.wer_rescored - self.wer_am) / self.wer_am

    @property
    def rel_vs_file(self) -> float | None:
        """Relative WER change against the file's own 1-best, percent."""
        return None if self.wer_file == 0 else 100.0 * (self.wer_rescored - self.wer_file) / self.wer_file


def evaluate(s: ScoredSet, weights: Weights, role: str) -> SetReport:
    """WERs of a set under the given weights, with AM-only, file 1-best and oracle for comparison."""
    words = int(s.ref_words.sum())
    zero = (0.0,) * s.lm.shape[0]
    oracle = np.where(np.isfinite(s.am), s.errors, np.iinfo(np.int64).max).min(axis=1).sum()
    return SetReport(
        name=s.name,
        role=role,
        n_utts=len(s.uttids),
        n_hyps=int(np.isfinite(s.am).sum()),
        ref_words=words,
        wer_am=wer_percent(s.errors_of(s.choose(zero, 0.0)), words),
        wer_file=wer_percent(s.errors_of(np.zeros(len(s.uttids), dtype=np.int64)), words),
        wer_rescored=wer_percent(s.errors_of(s.choose(weights.lambdas, weights.beta, weights.alphas)), words),
        wer_oracle=wer_percent(int(oracle), words),
    )


# ----------------------------------------------------------------------------------------------
# Outputs


def write_1best(s: ScoredSet, weights: Weights, lm_names: list[str], out_dir: str | Path) -> Path:
    """Write the rescored 1-best as ESPnet ``1best_recog/{text,score,scores}`` under ``out_dir``."""
    folder = Path(out_dir) / "1best_recog"
    totals = s.totals(weights.lambdas, weights.beta, weights.alphas)
    chosen = np.argmax(totals, axis=1)  # as ScoredSet.choose
    text, score, scores = [], [], []
    for u, (uttid, r) in enumerate(zip(s.uttids, chosen)):
        text.append(f"{uttid} {s.texts[u][r]}".rstrip())
        score.append(f"{uttid} {float(totals[u, r])!r}")
        parts = {"am": float(s.am[u, r]), **{n: float(s.lm[j, u, r]) for j, n in enumerate(lm_names)}}
        parts.update(n_words=int(s.n_words[u, r]), rank=int(r) + 1)
        scores.append(f"{uttid} {json.dumps(parts, ensure_ascii=False)}")
    for name, lines in (("text", text), ("score", score), ("scores", scores)):
        write_atomic(folder / name, "\n".join(lines) + "\n")
    return folder


def _fmt_rel(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def _describe_lm(j: int, name: str, weights: Weights, length_norm) -> str:
    text = f"- LM {j + 1}: `{name}`, lambda = {weights.lambdas[j]:g}"
    kind = length_norm[j] if length_norm else "none"
    if kind != "none":
        text += f", length-normalised ({kind}, alpha = {weights.alphas[j]:g})"
    return text


def results_markdown(
    reports: list[SetReport], weights: Weights, lm_names: list[str], settings: dict, length_norm=()
) -> str:
    """The RESULTS.md text: settings, chosen weights and a WER table per set."""
    lines = ["# N-best rescoring results", ""]
    lines += [f"- {k}: `{v}`" for k, v in settings.items()]
    lines += [_describe_lm(j, n, weights, length_norm) for j, n in enumerate(lm_names)]
    lines += [f"- word bonus beta = {weights.beta:g}", ""]
    lines += [
        "WER % (jiwer, whitespace words; relative change of the rescored WER in the last two columns)",
        "",
        "| set | role | utts | hyps | AM-only 1-best | file 1-best | rescored | oracle | rel. vs AM-only "
        "| rel. vs file 1-best |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        lines.append(
            f"| {r.name} | {r.role} | {r.n_utts} | {r.n_hyps} | {r.wer_am:.2f} | {r.wer_file:.2f} "
            f"| {r.wer_rescored:.2f} | {r.wer_oracle:.2f} | {_fmt_rel(r.rel_vs_am)} | {_fmt_rel(r.rel_vs_file)} |"
        )
    return "\n".join(lines) + "\n"


def plot_dev_wer(path: str | Path, dev_sets: list[ScoredSet], result: TuneResult, lambda_grid) -> None:
    """PNG of dev WER against the first LM's lambda (other weights at their chosen values).

    Dashed lines: WER of each dev set's own 1-best (the file's rank 1) for reference.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rest, beta = result.best.lambdas[1:], result.best.beta
    curves = _grid_errors(dev_sets, [lambda_grid] + [[w] for w in rest], [beta])
    xs = [w.lambdas[0] for w, _ in curves]
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, s in enumerate(dev_sets):
        words = int(s.ref_words.sum())
        line = ax.plot(xs, [100.0 * e[i] / words for _, e in curves], label=s.name)[0]
        file_wer = wer_percent(s.errors_of(np.zeros(len(s.uttids), dtype=np.int64)), words)
        ax.axhline(file_wer, color=line.get_color(), linestyle="--", alpha=0.6, label=f"{s.name} file 1-best")
    if len(dev_sets) > 1:
        ax.plot(xs, [100.0 * sum(e) / result.dev_ref_words for _, e in curves], "k-", label="pooled")
    ax.axvline(result.best.lambdas[0], color="grey", linestyle=":", label=f"chosen {result.best.lambdas[0]:g}")
    ax.set_xlabel("LM weight lambda")
    ax.set_ylabel("dev WER (%)")
    ax.set_title(f"dev WER vs lambda (beta = {beta:g})")
    ax.grid(alpha=0.3)
    ax.legend()
    save_png(fig, path)


def _describe_grid(grid: list[float]) -> str:
    if len(grid) < 6:
        return ", ".join(f"{x:g}" for x in grid)
    return f"{grid[0]:g}..{grid[-1]:g} ({len(grid)} values)"


DEFAULT_ALPHA_GRID = [round(0.1 * i, 10) for i in range(11)]


def _length_norm_grids(length_norm, n_lms: int, alpha_grid) -> tuple[tuple[str, ...], list | None]:
    """(kind per LM, alpha grid per LM or None when no LM is length-normalised)."""
    kinds = tuple(length_norm) if length_norm else ("none",) * n_lms
    if len(kinds) != n_lms or any(k not in LENGTH_NORMS for k in kinds):
        raise InputError(f"length_norm: want one of {', '.join(LENGTH_NORMS)} per LM ({n_lms}), got {list(kinds)}")
    if all(k == "none" for k in kinds):
        return kinds, None
    grid = alpha_grid if alpha_grid is not None else DEFAULT_ALPHA_GRID
    return kinds, [list(grid) if k != "none" else [0.0] for k in kinds]


def _describe_search(info: dict) -> str:
    text = f"{info['method']}: {info['evaluated']} of {info['grid_points']} grid points evaluated"
    if info["method"] == "coordinate":
        text += f" in {info['sweeps']} sweeps"
    if info["requested"] == "auto":
        text += f" (auto: grid up to {info['max_grid_points']} points)"
    return text


def rescore(
    dev: list[NbestSet],
    test: list[NbestSet],
    scorers: list,
    out_dir: str | Path,
    am_weights: dict[str, float] | None = None,
    lambda_grid: list[float] | None = None,
    beta_grid: list[float] | None = None,
    cache_dir: str | Path | None = None,
    settings: dict | None = None,
    progress: bool = True,
    length_norm: list[str] | None = None,
    alpha_grid: list[float] | None = None,
    search: str = "auto",
    max_grid_points: int = MAX_GRID_POINTS,
) -> tuple[TuneResult, list[SetReport]]:
    """Tune the weights on ``dev``, apply them to ``dev`` and ``test``, write all outputs to ``out_dir``.

    ``scorers``: models (``.name``, ``.score``) or :class:`ScoreColumn`. ``length_norm``: one kind per
    LM (default none); normalised LMs tune their alpha on ``alpha_grid`` (default 0:1:0.1). ``search``
    and ``max_grid_points``: see :func:`tune`.
    Writes ``<out>/<set>/1best_recog/``, ``RESULTS.md``, ``dev_wer_vs_lambda.png``, ``tuning.json``: into
    a temporary directory first, which then replaces ``out_dir`` (see :func:`slm_lm.fileio.replace_dir`).
    ``out_dir`` must not overlap any input.
    """
    names = [s.name for s in dev + test]
    if len(set(names)) != len(names):
        raise InputError(f"set names must be unique, got {names}")
    for name in names:
        if not _SAFE_NAME.fullmatch(name):
            raise InputError(f"set name {name!r} is not a safe directory name (letters, digits, '.', '_', '-')")
    check_no_overlap(out_dir, [s.source for s in dev + test])
    lambda_grid = lambda_grid if lambda_grid is not None else parse_range("0:5:0.1")
    beta_grid = beta_grid if beta_grid is not None else [0.0]
    out_dir = Path(out_dir)
    where = {}
    for s in dev + test:
        for uttid, hyps in s.hyps.items():
            for h in hyps:
                where.setdefault(h.text, f"set {s.name}, utterance {uttid}, rank {h.rank} ({h.where})")
    texts = list(where)
    tables = [sc if isinstance(sc, ScoreColumn) else
              lm_scores(LocatedScorer(sc, where), texts, cache_dir, progress=progress) for sc in scorers]
    lm_names = [sc.name for sc in scorers]
    kinds, alpha_grids = _length_norm_grids(length_norm, len(scorers), alpha_grid)
    dev_m = [build_scored_set(s, tables, am_weights, kinds) for s in dev]
    test_m = [build_scored_set(s, tables, am_weights, kinds) for s in test]
    result = tune(dev_m, [lambda_grid] * len(scorers), beta_grid, alpha_grids, search, max_grid_points)
    reports = [evaluate(s, result.best, "dev") for s in dev_m]
    reports += [evaluate(s, result.best, "test") for s in test_m]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.", suffix=".tmp"))
    try:
        _write_outputs(staging, dev_m, test_m, result, reports, lm_names, am_weights, settings, kinds=kinds,
                       lambda_grid=lambda_grid, beta_grid=beta_grid, alpha_grid=alpha_grid, alpha_grids=alpha_grids)
        replace_dir(staging, out_dir, stale=_previous_outputs(out_dir) | set(names))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result, reports


OUTPUT_FILES = ("RESULTS.md", "dev_wer_vs_lambda.png", "tuning.json")
_SAFE_NAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]+")


def check_no_overlap(out_dir: str | Path, inputs: list[str]) -> None:
    """InputError unless ``out_dir`` is outside every input path and contains none of them."""
    out = Path(out_dir).resolve()
    for source in inputs:
        path = Path(source).resolve()
        if out == path or path in out.parents or out in path.parents:
            raise InputError(f"--out {out_dir} overlaps the input {source}: outputs must never replace or sit "
                             "inside an input, or contain one; choose another output directory")


def _previous_outputs(out_dir: Path) -> set[str]:
    """Names of the outputs of an earlier run in ``out_dir`` (replaced as a whole by this run)."""
    names = set(OUTPUT_FILES)
    try:
        names |= {s["name"] for s in json.loads((out_dir / "tuning.json").read_text(encoding="utf-8"))["sets"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return names


def _write_outputs(out_dir, dev_m, test_m, result, reports, lm_names, am_weights, settings, *, kinds,
                   lambda_grid, beta_grid, alpha_grid, alpha_grids) -> None:
    """Write the 1-best lists, RESULTS.md, the dev WER plot and tuning.json into ``out_dir``."""
    for s in dev_m + test_m:
        write_1best(s, result.best, lm_names, out_dir / s.name)
    settings = {
        **(settings or {}),
        "AM score": " + ".join(f"{w:g}*{k}" for k, w in am_weights.items()) if am_weights else "file score",
        "lambda grid": _describe_grid(lambda_grid),
        "beta grid": _describe_grid(beta_grid),
        **({"alpha grid": _describe_grid(alpha_grid or DEFAULT_ALPHA_GRID)} if alpha_grids else {}),
        "search": _describe_search(result.search),
        "tuned on": "+".join(s.name for s in dev_m) + f" (pooled dev WER {result.dev_wer:.2f})",
    }
    write_atomic(out_dir / "RESULTS.md", results_markdown(reports, result.best, lm_names, settings, kinds))
    plot_dev_wer(out_dir / "dev_wer_vs_lambda.png", [s.with_alphas(result.best.alphas) for s in dev_m], result,
                 lambda_grid)
    record = {
        "lm": lm_names,
        "am_weights": am_weights,
        "length_norm": list(kinds),
        "search": result.search,
        "best": asdict(result.best),
        "dev_wer": result.dev_wer,
        "sets": [{**asdict(r), "rel_vs_am": r.rel_vs_am, "rel_vs_file": r.rel_vs_file} for r in reports],
        "grid": [
            {**asdict(w), "dev_errors": e, "dev_wer": wer_percent(e, result.dev_ref_words)} for w, e in result.grid
        ],
    }
    write_atomic(out_dir / "tuning.json", json.dumps(record, indent=1))
