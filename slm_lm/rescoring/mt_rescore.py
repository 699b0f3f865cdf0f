"""Machine-translation N-best reranking for corpus BLEU: N-best rescoring (:mod:`slm_lm.rescoring.rescore`'s score
cache, weights total = MT + sum_j lambda_j * LM_j / lp_j + beta * words and weight search, output
directory) with sacrebleu's corpus BLEU (:mod:`slm_lm.rescoring.bleu`) as the metric tuned on dev, and per set the
baseline (MT score alone), rescored and oracle BLEU and sacrebleu's paired bootstrap of rescored against
baseline.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from slm_lm.common.fileio import exclusive_dir_lock, write_atomic
from slm_lm.common.outputs import check_no_overlap
from slm_lm.rescoring import bleu
from slm_lm.rescoring.nbest import NbestSet
from slm_lm.rescoring.report import check_cache, check_out_dir, check_set_names, install_outputs
from slm_lm.rescoring.scored_set import ScoreColumn, ScoredSet, build_scored_set
from slm_lm.rescoring.weight_search import TuneResult, Weights, length_norm_grids, search_method, tune
from slm_lm.scoring.cache import LocatedScorer, lm_scores


@dataclass
class BleuReport:
    """BLEU of one set: baseline (the MT score's 1-best), rescored, N-best oracle; the rescored system's
    paired bootstrap against the baseline (sacrebleu: bootstrap mean, 95 % interval half-width, p-value)."""

    name: str
    role: str
    sentences: int
    hyps: int
    baseline: float
    rescored: float
    oracle: float
    bootstrap_mean: float
    bootstrap_ci: float
    p_value: float


def chosen_texts(s: ScoredSet, chosen) -> list[str]:
    """The texts of the chosen hypothesis of each sentence, in sentence order."""
    return [texts[int(r)] for texts, r in zip(s.texts, chosen)]


def bleu_report(s: ScoredSet, refs: list[str], weights: Weights, role: str, metric, samples: int):
    """(:class:`BleuReport`, rescored 1-best, baseline 1-best, bootstrap signature) of one set."""
    zero = (0.0,) * s.lm.shape[0]
    base = chosen_texts(s, s.choose(zero, 0.0))
    rescored = chosen_texts(s, s.choose(weights.lambdas, weights.beta, weights.alphas))
    oracle = chosen_texts(s, bleu.oracle_choice(metric, refs, s.texts))
    signature, rows = bleu.paired_test(metric, refs, [("baseline", base), ("rescored", rescored)], samples)
    _, _, mean, ci, p_value = rows[1]
    report = BleuReport(s.name, role, len(s.uttids), int(np.isfinite(s.am).sum()), rows[0][1], rows[1][1],
                        metric.corpus_score(oracle, [refs]).score, float(mean), float(ci), float(p_value))
    return report, rescored, base, signature


def results_markdown(reports: list[BleuReport], weights: Weights, lm_names, settings: dict, signature: str) -> str:
    """The RESULTS.md text: settings, chosen weights, a BLEU table per set."""
    lines = ["# MT N-best reranking results", ""]
    lines += [f"- {k}: `{v}`" for k, v in settings.items()]
    lines += [f"- LM {j + 1}: `{n}`, lambda = {weights.lambdas[j]:g}"
              + (f", alpha = {weights.alphas[j]:g}" if weights.alphas else "") for j, n in enumerate(lm_names)]
    lines += [f"- word bonus beta = {weights.beta:g}", f"- sacrebleu: `{signature}`", ""]
    lines += [
        "Corpus BLEU (sacrebleu). Bootstrap: rescored against baseline, sacrebleu's paired bootstrap "
        "(mean, 95 % interval, p-value).",
        "",
        "| set | role | sentences | hyps | baseline | rescored | oracle | bootstrap mean ± 95 % | p |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r.name} | {r.role} | {r.sentences} | {r.hyps} | {r.baseline:.2f} | {r.rescored:.2f} | "
              f"{r.oracle:.2f} | {r.bootstrap_mean:.2f} ± {r.bootstrap_ci:.2f} | {r.p_value:.4f} |" for r in reports]
    return "\n".join(lines) + "\n"


def rerank_mt(dev: list[NbestSet], test: list[NbestSet], scorers: list, out_dir: str | Path, metric,
              am_weights=None, lambda_grid=None, beta_grid=None, cache_dir=None, settings=None, progress=True,
              length_norm=None, alpha_grid=None, search="auto", max_grid_points=50_000, inputs=(),
              bootstrap_samples: int = 1000) -> tuple[TuneResult, list[BleuReport], str]:
    """Tune the weights for the pooled corpus BLEU of ``dev`` (sacrebleu ``metric``), apply them to ``dev``
    and ``test``, write ``RESULTS.md``, ``tuning.json`` and ``<set>/{rescored,baseline}.txt`` (one line per
    sentence) to ``out_dir``. The options are :func:`slm_lm.rescoring.rescore.rescore`'s."""
    names = [s.name for s in dev + test]
    check_set_names(names)
    check_no_overlap("--out", out_dir, [s.source for s in dev + test] + [str(p) for p in inputs])
    check_cache(out_dir, cache_dir, names)
    check_out_dir(out_dir, names)
    with exclusive_dir_lock(out_dir, "slm-rescore-mt"):
        kinds, alpha_grids = length_norm_grids(length_norm, len(scorers), alpha_grid)
        search_method([lambda_grid] * len(scorers), beta_grid, alpha_grids, search, max_grid_points)  # before scoring
        for s in dev + test:
            bleu.check_bootstrap(bootstrap_samples, len(s.hyps), s.name)
        where = {}
        for s in dev + test:
            for sent_id, hyps in s.hyps.items():
                for h in hyps:
                    where.setdefault(h.text, f"set {s.name}, sentence {sent_id}, rank {h.rank} ({h.where})")
        tables = [sc if isinstance(sc, ScoreColumn) else
                  lm_scores(LocatedScorer(sc, where), list(where), cache_dir, progress=progress) for sc in scorers]
        stats = lambda refs, hyps: bleu.hyp_stats(metric, refs, hyps)  # noqa: E731
        dev_m = [build_scored_set(s, tables, am_weights, kinds, stats) for s in dev]
        test_m = [build_scored_set(s, tables, am_weights, kinds, stats) for s in test]
        result = tune(dev_m, [lambda_grid] * len(scorers), beta_grid, alpha_grids, search, max_grid_points,
                      loss=bleu.bleu_loss(metric))
        outputs, signature = [], ""
        for role, sets, scored in (("dev", dev, dev_m), ("test", test, test_m)):
            for s, m in zip(sets, scored):
                refs = [s.refs[k] for k in m.uttids]
                report, rescored, base, signature = bleu_report(m, refs, result.best, role, metric, bootstrap_samples)
                outputs.append((report, rescored, base))
        reports = [o[0] for o in outputs]
        lm_names = [sc.name for sc in scorers]
        best = result.best
        dev_bleu = bleu.corpus_bleu(metric, sum(m.stats_of(m.choose(best.lambdas, best.beta, best.alphas))
                                                for m in dev_m)).score
        settings = {**(settings or {}),
                    "MT score": " + ".join(f"{w:g}*{k}" for k, w in am_weights.items()) if am_weights else "file score",
                    "tuned on": "+".join(s.name for s in dev) + f" (pooled dev BLEU {dev_bleu:.2f})"}

        def write(staging: Path) -> None:
            for report, rescored, base in outputs:
                write_atomic(staging / report.name / "rescored.txt", "".join(t + "\n" for t in rescored))
                write_atomic(staging / report.name / "baseline.txt", "".join(t + "\n" for t in base))
            write_atomic(staging / "RESULTS.md", results_markdown(reports, result.best, lm_names, settings, signature))
            record = {"lm": lm_names, "am_weights": am_weights, "length_norm": list(kinds), "search": result.search,
                      "best": asdict(result.best), "sacrebleu": signature, "sets": [asdict(r) for r in reports],
                      "grid": [{**asdict(w), "dev_bleu": -loss} for w, loss in result.grid]}
            write_atomic(staging / "tuning.json", json.dumps(record, indent=1))

        install_outputs(out_dir, names, write)
    return result, reports, signature
