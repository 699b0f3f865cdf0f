"""Weight search: the LM weights, word bonus and length-penalty alphas that give the lowest pooled WER on
the dev sets (total word errors / total reference words), or the lowest loss of any other metric whose
per-hypothesis statistics add up over the sentences (e.g. -BLEU of the n-gram counts, :mod:`slm_lm.rescoring.bleu`).

Ties go to the smaller lambdas, then the smaller |beta|, then the smaller alphas. The search is exhaustive
over the grid, or block coordinate descent when the grid has more than ``max_grid_points`` points
(:func:`tune`).
"""

import itertools
import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from slm_lm.common.errors import InputError
from slm_lm.rescoring.scored_set import LENGTH_NORMS, ScoredSet
from slm_lm.rescoring.wer import wer_percent


MAX_RANGE_POINTS = 100_000


def parse_range(spec: str, option: str = "range") -> list[float]:
    """Parse ``start:stop:step`` (inclusive) or a single value or ``a,b,c`` into a list of finite floats, at
    most :data:`MAX_RANGE_POINTS` of them."""
    try:
        if ":" in spec:
            start, stop, step = (float(x) for x in spec.split(":"))
            values = [start, stop, step]
        else:
            values = [float(x) for x in spec.split(",")]
    except ValueError:
        raise InputError(
            f"{option}: cannot parse {spec!r} (want start:stop:step with step > 0, or values a,b,c)"
        ) from None
    if not all(math.isfinite(x) for x in values):
        raise InputError(f"{option}: {spec!r} holds a value that is not a finite number (nan or inf)")
    if ":" not in spec:
        count = len(values)
    elif step <= 0 or stop < start:
        raise InputError(f"{option}: cannot parse {spec!r} (want start:stop:step with step > 0 and stop >= start)")
    else:
        count = (stop - start) / step + 1
    if not math.isfinite(count) or count > MAX_RANGE_POINTS:
        many = f"{count:,.0f}" if math.isfinite(count) else "too many"
        raise InputError(f"{option}: {spec!r} gives {many} values, above the ceiling of {MAX_RANGE_POINTS:,}; "
                         "use a coarser step or a shorter range")
    if ":" not in spec:
        return values
    count = int(round((stop - start) / step)) + 1
    return [round(start + i * step, 10) for i in range(count) if start + i * step <= stop + 1e-9]


@dataclass
class Weights:
    """LM weights (one per LM), word bonus, and length-penalty alphas (one per LM; () = none)."""

    lambdas: tuple[float, ...]
    beta: float = 0.0
    alphas: tuple[float, ...] = ()


@dataclass
class TuneResult:
    """Outcome of the search: best weights, its pooled dev WER (None for another metric), every evaluated
    point's errors (or loss), and how the search went (method, points in the grid, points evaluated;
    coordinate descent: sweeps, start)."""

    best: Weights
    dev_wer: float | None
    dev_ref_words: int
    grid: list[tuple[Weights, float]]
    search: dict = field(default_factory=dict)


CHUNK_ELEMENTS = 1 << 20  # scores per vectorised block of grid_errors (8 MiB of float64)


def grid_stats(sets: list[ScoredSet], lambda_grids, beta_grid) -> list[tuple[Weights, list[np.ndarray]]]:
    """The summed statistics of the chosen hypotheses per set (:meth:`ScoredSet.hyp_stats`, [K] each) for
    every grid point (vectorised over blocks of the first LM's lambdas, each block at most
    :data:`CHUNK_ELEMENTS` scores, so memory does not grow with the grid)."""
    first = np.asarray(lambda_grids[0], dtype=float)
    out = []
    for beta in beta_grid:
        for rest in itertools.product(*lambda_grids[1:]):
            per_set = []
            for s in sets:
                base = s.am + beta * s.n_words
                for weight, lm in zip(rest, s.lm[1:]):
                    base = base + weight * lm
                table = s.hyp_stats()
                block = max(1, CHUNK_ELEMENTS // max(1, base.size))
                sums = [np.zeros((0, table.shape[2]), dtype=table.dtype)]
                for lo in range(0, len(first), block):
                    totals = base[None] + first[lo : lo + block, None, None] * s.lm[0][None]
                    chosen = np.argmax(totals, axis=2)  # [g, U]
                    sums.append(table[np.arange(table.shape[0])[None], chosen].sum(1))  # [g, K]
                per_set.append(np.concatenate(sums))
            for g, weight in enumerate(first):
                out.append((Weights((float(weight),) + tuple(rest), float(beta)), [e[g] for e in per_set]))
    return out


def grid_errors(sets: list[ScoredSet], lambda_grids, beta_grid) -> list[tuple[Weights, list[int]]]:
    """Word errors per set for every grid point (:func:`grid_stats` of sets that carry word errors)."""
    return [(w, [int(e[0]) for e in per_set]) for w, per_set in grid_stats(sets, lambda_grids, beta_grid)]


def word_error_loss(pooled: np.ndarray) -> int:
    """The loss of the default metric: the pooled word errors."""
    return int(pooled[0])


SEARCHES = ("auto", "grid", "coordinate")
MAX_GRID_POINTS = 50_000
MAX_SEARCH_POINTS = 1_000_000  # points a search may evaluate and record (a full grid: ~0.7 GB per million)


def _order(weights: Weights, errors: int):
    """Sort key of a search point: fewer errors, then smaller lambdas, |beta|, beta, alphas."""
    return (errors, weights.lambdas, abs(weights.beta), weights.beta, weights.alphas)


def _full_grid(sets, lambda_grids, beta_grid, alpha_grids, loss) -> list[tuple[Weights, float]]:
    """Pooled loss of every grid point (alphas outermost, the rest vectorised by grid_stats)."""
    out = []
    for alphas in itertools.product(*alpha_grids) if alpha_grids else [()]:
        normalised = [s.with_alphas(alphas) for s in sets]
        out += [(replace(w, alphas=alphas), loss(sum(e))) for w, e in grid_stats(normalised, lambda_grids, beta_grid)]
    return out


def _coordinate_descent(sets, lambda_grids, beta_grid, alpha_grids, loss) -> tuple[list[tuple[Weights, float]], dict]:
    """Block coordinate descent on the grid: from the smallest weights, set one block at a time to its
    best grid values with the others fixed (each LM's lambda, with its alpha when the LM is
    length-normalised: alpha matters only when lambda > 0; then beta); sweep until a sweep changes
    nothing, or until another sweep could take the points evaluated over MAX_SEARCH_POINTS (memory is
    bounded by the work; `converged` says which). Every move lowers (errors, tie order), so a converged
    descent ends at a point that no change of a single block improves, not necessarily the grid's best.
    Returns the evaluated points and the sweep count."""
    seen: dict[tuple, int] = {}

    def errors(w: Weights) -> int:
        key = (w.lambdas, w.beta, w.alphas)
        if key not in seen:
            seen[key] = loss(sum(s.stats_of(s.choose(w.lambdas, w.beta, w.alphas)) for s in sets))
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
    per_sweep = sum(len(candidates(start, j)) for j in range(len(lambda_grids) + 1))
    current, sweeps, moved = start, 0, True
    while moved and len(seen) + per_sweep <= MAX_SEARCH_POINTS:
        sweeps, moved = sweeps + 1, False
        for j in range(len(lambda_grids) + 1):
            best = min(candidates(current, j), key=lambda w: _order(w, errors(w)))
            if best != current:
                current, moved = best, True
    points = [(Weights(lam, beta, alphas), e) for (lam, beta, alphas), e in seen.items()]
    return points, {"sweeps": sweeps, "converged": not moved, "start": asdict(start)}


def search_method(lambda_grids, beta_grid, alpha_grids, search: str = "auto",
                  max_grid_points: int = MAX_GRID_POINTS) -> tuple[str, int]:
    """The search :func:`tune` runs (grid or coordinate) and the grid's size; InputError for an unknown
    search, or one that would evaluate more than MAX_SEARCH_POINTS points: the whole grid, or (coordinate
    descent) one sweep over every LM's lambdas (times its alphas) and the betas. Callers check it before
    scoring."""
    if search not in SEARCHES:
        raise InputError(f"--search: unknown search {search!r} (want one of {', '.join(SEARCHES)})")
    n_points = math.prod(len(g) for g in lambda_grids + (alpha_grids or [])) * len(beta_grid)
    method = search if search != "auto" else ("grid" if n_points <= max_grid_points else "coordinate")
    shape = " x ".join(f"{len(g):,}" for g in lambda_grids + (alpha_grids or []) + [beta_grid])
    if method == "grid" and n_points > MAX_SEARCH_POINTS:
        raise InputError(f"--search grid: {n_points:,} grid points ({shape} values of lambda per LM"
                         f"{', alpha per LM' if alpha_grids else ''} and beta), above the ceiling of "
                         f"{MAX_SEARCH_POINTS:,}; use coarser ranges or --search coordinate")
    sweep = sum(len(g) * (len(alpha_grids[j]) if alpha_grids else 1) for j, g in enumerate(lambda_grids))
    sweep += len(beta_grid)
    if method == "coordinate" and sweep > MAX_SEARCH_POINTS:
        raise InputError(f"--search coordinate: {sweep:,} points per sweep (each LM's lambdas"
                         f"{' times its alphas' if alpha_grids else ''}, and the betas), above the ceiling of "
                         f"{MAX_SEARCH_POINTS:,}; use coarser ranges")
    return method, n_points


def tune(
    dev_sets: list[ScoredSet],
    lambda_grids: list[list[float]],
    beta_grid: list[float],
    alpha_grids: list[list[float]] | None = None,
    search: str = "auto",
    max_grid_points: int = MAX_GRID_POINTS,
    loss=None,
) -> TuneResult:
    """Choose the weights minimising the pooled dev WER; ties -> smaller lambdas, |beta|, alphas.

    ``loss``: another metric to minimise, a function of the pooled per-hypothesis statistics of the sets
    (:meth:`ScoredSet.hyp_stats` summed over the chosen hypotheses and the sets); the grid then records
    each point's loss, and ``dev_wer`` is None.

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
    method, n_points = search_method(lambda_grids, beta_grid, alpha_grids, search, max_grid_points)
    ref_words = int(sum(s.ref_words.sum() for s in dev_sets))
    metric = loss or word_error_loss
    if method == "grid":
        grid, info = _full_grid(dev_sets, lambda_grids, beta_grid, alpha_grids, metric), {}
    else:
        grid, info = _coordinate_descent(dev_sets, lambda_grids, beta_grid, alpha_grids, metric)
    best_w, best_e = min(grid, key=lambda item: _order(*item))
    info = {"method": method, "requested": search, "max_grid_points": max_grid_points, "grid_points": n_points,
            "evaluated": len(grid), **info}
    return TuneResult(best_w, None if loss else wer_percent(best_e, ref_words), ref_words, grid, info)


DEFAULT_ALPHA_GRID = [round(0.1 * i, 10) for i in range(11)]


def length_norm_grids(length_norm, n_lms: int, alpha_grid) -> tuple[tuple[str, ...], list | None]:
    """(kind per LM, alpha grid per LM for :func:`tune`, or None when no LM is length-normalised);
    ``alpha_grid`` None = :data:`DEFAULT_ALPHA_GRID`."""
    kinds = tuple(length_norm) if length_norm else ("none",) * n_lms
    if len(kinds) != n_lms or any(k not in LENGTH_NORMS for k in kinds):
        raise InputError(f"length_norm: want one of {', '.join(LENGTH_NORMS)} per LM ({n_lms}), got {list(kinds)}")
    if all(k == "none" for k in kinds):
        return kinds, None
    grid = alpha_grid if alpha_grid is not None else DEFAULT_ALPHA_GRID
    return kinds, [list(grid) if k != "none" else [0.0] for k in kinds]
