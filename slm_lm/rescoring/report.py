"""The outputs of N-best rescoring: each set's WERs (AM-only, the file's 1-best, rescored, oracle), the
rescored 1-best lists, RESULTS.md, the dev WER plot and tuning.json, and the output directory they go to
(never overlapping an input; only an earlier run's outputs there are replaced).
"""

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import save_png, write_atomic
from slm_lm.common.outputs import check_output_dir, finish_interrupted, staged_outputs
from slm_lm.rescoring.scored_set import ScoredSet
from slm_lm.rescoring.weight_search import DEFAULT_ALPHA_GRID, MAX_SEARCH_POINTS, TuneResult, Weights, grid_errors
from slm_lm.rescoring.wer import wer_percent


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


def set_report(s: ScoredSet, weights: Weights, role: str) -> SetReport:
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


PLOT_POINTS = 201


def plot_lambdas(lambda_grid, chosen: float, points: int = PLOT_POINTS) -> list[float]:
    """The lambdas the dev WER curve is drawn at: the grid, or on a finer grid ``points`` of its values,
    evenly spaced, with its ends and the chosen lambda (the plot's work stays small whatever the grid)."""
    grid = sorted(lambda_grid)
    if len(grid) <= points:
        return grid
    picked = {grid[int(i)] for i in np.linspace(0, len(grid) - 1, points).round()}
    return sorted(picked | {chosen})


def plot_dev_wer(path: str | Path, dev_sets: list[ScoredSet], result: TuneResult, lambda_grid) -> None:
    """PNG of dev WER against the first LM's lambda (other weights at their chosen values), at most
    :data:`PLOT_POINTS` lambdas of ``lambda_grid`` (:func:`plot_lambdas`).

    Dashed lines: WER of each dev set's own 1-best (the file's rank 1) for reference.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rest, beta = result.best.lambdas[1:], result.best.beta
    curves = grid_errors(dev_sets, [plot_lambdas(lambda_grid, result.best.lambdas[0])] + [[w] for w in rest],
                         [beta])
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


def _describe_search(info: dict) -> str:
    text = f"{info['method']}: {info['evaluated']} of {info['grid_points']} grid points evaluated"
    if info["method"] == "coordinate":
        text += f" in {info['sweeps']} sweeps"
        if not info["converged"]:
            text += f", stopped before converging: another sweep would pass the ceiling of {MAX_SEARCH_POINTS:,} points"
    if info["requested"] == "auto":
        text += f" (auto: grid up to {info['max_grid_points']} points)"
    return text


OUTPUT_FILES = ("RESULTS.md", "dev_wer_vs_lambda.png", "tuning.json")
CACHE_DIR = "lm_cache"  # the default score cache, OUT/lm_cache: written in place, never replaced
_SAFE_NAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]+")


def check_set_names(names: list[str]) -> None:
    """InputError unless the set names are unique and safe directory names (each set gets OUT/<name>/)
    that are not the name of another output."""
    if len(set(names)) != len(names):
        raise InputError(f"set names must be unique, got {names}")
    for name in names:
        if not _SAFE_NAME.fullmatch(name):
            raise InputError(f"set name {name!r} is not a safe directory name (letters, digits, '.', '_', '-')")
        if name in OUTPUT_FILES or name == CACHE_DIR or name.startswith(".slm-rescore."):
            raise InputError(f"set name {name!r} is the name of another output in --out; rename the input")


def check_cache(out_dir: str | Path, cache_dir: str | Path | None, set_names=()) -> None:
    """InputError unless the score cache ``cache_dir`` (read and written in place) is outside ``out_dir``,
    or inside it where no output of this run goes (e.g. the default OUT/lm_cache), and a directory that can
    be written (not a file nor under one)."""
    if cache_dir is None:
        return
    out, cache = Path(out_dir).resolve(), Path(cache_dir).resolve()
    if out not in cache.parents:  # one inside --out (the default OUT/lm_cache): --out's check names the problem
        check_output_dir("--cache", cache_dir, (), (), "slm-rescore")
    if cache == out or cache in out.parents:
        raise InputError(f"--cache {cache_dir}: --out {out_dir} is the cache or inside it; choose another "
                         "output directory")
    if out in cache.parents and cache.relative_to(out).parts[0] in set(OUTPUT_FILES) | set(set_names):
        raise InputError(f"--cache {cache_dir}: inside the output {out / cache.relative_to(out).parts[0]} "
                         "that this run replaces; choose another cache directory")


def _previous_outputs(out_dir: Path) -> set[str] | None:
    """Names of the outputs of an earlier run in ``out_dir`` (its files and the sets its tuning.json
    lists); None when ``out_dir`` holds no tuning.json of slm-rescore."""
    try:
        record = json.loads((out_dir / "tuning.json").read_text(encoding="utf-8"))
        names = {s["name"] for s in record["sets"]}
        if not isinstance(record.get("grid"), list) or "best" not in record:
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return set(OUTPUT_FILES) | {n for n in names if isinstance(n, str) and _SAFE_NAME.fullmatch(n)}


def check_out_dir(out_dir: str | Path, set_names) -> set[str]:
    """The entries of ``out_dir`` an earlier slm-rescore run wrote (this run may replace them); InputError
    where :func:`slm_lm.common.outputs.check_output_dir` refuses ``out_dir`` or it holds a tuning.json that is not
    slm-rescore's. What a killed run left there is finished or undone first."""
    out = Path(out_dir)
    finish_interrupted(out, "slm-rescore")
    own = (_previous_outputs(out) if out.is_dir() else None) or set()
    if not own and os.path.lexists(out / "tuning.json"):
        raise InputError(f"{out / 'tuning.json'}: not a tuning.json of slm-rescore, and this run would replace "
                         "it; move it away or choose another --out")
    check_output_dir("--out", out, (*OUTPUT_FILES, *set_names), own, "slm-rescore")
    return own


def _write_files(out_dir, dev_m, test_m, result, reports, lm_names, am_weights, settings, *, kinds,
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


def write_outputs(out_dir: str | Path, dev_m, test_m, result, reports, lm_names, am_weights, settings, *, kinds,
                  lambda_grid, beta_grid, alpha_grid, alpha_grids) -> None:
    """Write ``<out>/<set>/1best_recog/``, ``RESULTS.md``, ``dev_wer_vs_lambda.png`` and ``tuning.json`` with
    :func:`install_outputs`."""
    install_outputs(out_dir, [s.name for s in dev_m + test_m], lambda staging: _write_files(
        staging, dev_m, test_m, result, reports, lm_names, am_weights, settings, kinds=kinds,
        lambda_grid=lambda_grid, beta_grid=beta_grid, alpha_grid=alpha_grid, alpha_grids=alpha_grids))


def install_outputs(out_dir: str | Path, set_names: list[str], write) -> None:
    """Have ``write(staging)`` write a run's outputs (files of :data:`OUTPUT_FILES`, one folder per set)
    into a temporary directory in ``out_dir``, whose entries then replace those of an earlier run there
    (:func:`slm_lm.common.outputs.staged_outputs`). Other entries of ``out_dir`` (the user's, ``lm_cache``) are
    never moved or deleted; an entry of an output's name that an earlier run did not write is refused
    (:func:`check_out_dir`); on any failure ``out_dir`` is as it was."""
    out_dir = Path(out_dir)
    own = check_out_dir(out_dir, set_names)
    with staged_outputs("--out", out_dir, (*OUTPUT_FILES, *set_names), own, "slm-rescore") as staging:
        write(staging)
