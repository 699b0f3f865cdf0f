"""N-best rescoring: score every hypothesis with the LMs, tune the weights on the dev sets, apply them to
the dev and test sets, write the reports.

The pieces: N-best lists (:mod:`slm_lm.rescoring.nbest`), the combined score
total = AM + sum_j lambda_j * LM_j / lp_j + beta * n_words (:mod:`slm_lm.rescoring.scored_set`), the search for
the weights with the lowest pooled dev WER (:mod:`slm_lm.rescoring.weight_search`), WER
(:mod:`slm_lm.rescoring.wer`, jiwer on whitespace-separated words) and the outputs
(:mod:`slm_lm.rescoring.report`). A word bonus per LM would add
nothing: sum_j lambda_j * b_j * n_words is one bonus, so the single beta serves all LMs.
"""

from pathlib import Path

from slm_lm.common.fileio import exclusive_dir_lock, new_directory
from slm_lm.common.outputs import check_no_overlap
from slm_lm.rescoring.nbest import NbestSet
from slm_lm.rescoring.report import (
    SetReport,
    check_cache,
    check_out_dir,
    check_set_names,
    set_report,
    write_outputs,
)
from slm_lm.rescoring.scored_set import ScoreColumn, build_scored_set
from slm_lm.rescoring.weight_search import (
    MAX_GRID_POINTS,
    TuneResult,
    length_norm_grids,
    parse_range,
    search_method,
    tune,
)
from slm_lm.scoring.cache import LocatedScorer, lm_scores


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
    inputs: list = (),
) -> tuple[TuneResult, list[SetReport]]:
    """Tune the weights on ``dev``, apply them to ``dev`` and ``test``, write all outputs to ``out_dir``.

    ``scorers``: models (``.name``, ``.score``) or :class:`ScoreColumn`; each text is scored once by
    each model and cached in ``cache_dir`` (:mod:`slm_lm.scoring.cache`). ``length_norm``: one kind per
    LM (default none); normalised LMs tune their alpha on ``alpha_grid`` (default 0:1:0.1). ``search``
    and ``max_grid_points``: see :func:`slm_lm.rescoring.weight_search.tune`. Writes the outputs with
    :func:`slm_lm.rescoring.report.write_outputs`; ``out_dir`` must not overlap any input: the sets'
    sources and ``inputs`` (other files read: reference files, models), nor the cache. A second run into
    the same ``out_dir`` while one is running is refused (:func:`slm_lm.common.fileio.exclusive_dir_lock`).
    """
    names = [s.name for s in dev + test]
    check_set_names(names)
    check_no_overlap("--out", out_dir, [s.source for s in dev + test] + [str(p) for p in inputs])
    check_cache(out_dir, cache_dir, names)
    check_out_dir(out_dir, names)
    with new_directory(out_dir), exclusive_dir_lock(out_dir, "slm-rescore"):  # one writer per output directory
        lambda_grid = lambda_grid if lambda_grid is not None else parse_range("0:5:0.1")
        beta_grid = beta_grid if beta_grid is not None else [0.0]
        kinds, alpha_grids = length_norm_grids(length_norm, len(scorers), alpha_grid)
        search_method([lambda_grid] * len(scorers), beta_grid, alpha_grids, search, max_grid_points)  # before scoring
        where = {}
        for s in dev + test:
            for uttid, hyps in s.hyps.items():
                for h in hyps:
                    where.setdefault(h.text, f"set {s.name}, utterance {uttid}, rank {h.rank} ({h.where})")
        texts = list(where)
        tables = [sc if isinstance(sc, ScoreColumn) else
                  lm_scores(LocatedScorer(sc, where), texts, cache_dir, progress=progress) for sc in scorers]
        lm_names = [sc.name for sc in scorers]
        dev_m = [build_scored_set(s, tables, am_weights, kinds) for s in dev]
        test_m = [build_scored_set(s, tables, am_weights, kinds) for s in test]
        result = tune(dev_m, [lambda_grid] * len(scorers), beta_grid, alpha_grids, search, max_grid_points)
        reports = [set_report(s, result.best, "dev") for s in dev_m]
        reports += [set_report(s, result.best, "test") for s in test_m]
        write_outputs(out_dir, dev_m, test_m, result, reports, lm_names, am_weights, settings, kinds=kinds,
                      lambda_grid=lambda_grid, beta_grid=beta_grid, alpha_grid=alpha_grid, alpha_grids=alpha_grids)
    return result, reports
