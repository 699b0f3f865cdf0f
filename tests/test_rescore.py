"""Rescoring: cached LM scores, combination, grid tuning with known optima, WER == jiwer, outputs, CLI."""

import itertools
import json
import random
import sys
import types
from pathlib import Path

import jiwer
import pytest

from conftest import MIRROR
from slm_lm.bin import rescore as cli
from slm_lm.common.errors import InputError
from slm_lm.rescoring.nbest import Hypothesis, NbestSet, load_nbest, read_espnet_nbest
from slm_lm.rescoring.rescore import rescore
from slm_lm.rescoring.report import set_report
from slm_lm.scoring.cache import LMScoreCache, lm_scores
from slm_lm.rescoring.scored_set import am_score, build_scored_set, parse_am_weights
from slm_lm.rescoring.weight_search import Weights, parse_range, tune
from slm_lm.rescoring.wer import word_errors



class FakeLM:
    """A deterministic LM: -2 per word, -1 per word starting with `penalised` (records its calls)."""

    def __init__(self, penalised="Z", name=None, fail_after=None):
        self.penalised = penalised
        self.name = name or f"fake:{penalised}"
        self.calls: list[str] = []
        self.fail_after = fail_after

    def score(self, texts):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.extend(texts)
        return [-2.0 * len(t.split()) - sum(w.startswith(self.penalised) for w in t.split()) for t in texts]


def make_set(name, items):
    """items: {uttid: (ref, [(text, am score, {component: score}), ...])} -> NbestSet."""
    hyps = {
        u: [Hypothesis(i + 1, t, s, dict(c), where=f"{name}:{u}:{i + 1}") for i, (t, s, c) in enumerate(h)]
        for u, (_, h) in items.items()
    }
    return NbestSet(name, name, hyps, {u: r for u, (r, _) in items.items()})


def known_lambda_set(name="dev"):
    """WER is minimal exactly for lambda in (1.5, 2.5] with FakeLM("Z") and AM = the file score.

    Type A (LM fixes rank 1, switch when lambda > m): m = 0.5, 1.0, 1.5.
    Type B (LM breaks a correct rank 1, switch when lambda > m): m = 2.5, 3.0.
    """
    items = {}
    for i, m in enumerate([0.5, 1.0, 1.5]):
        items[f"a{i}"] = ("CAT SAT HERE", [("CAT ZAT HERE", 0.0, {}), ("CAT SAT HERE", -m, {})])
    for i, m in enumerate([2.5, 3.0]):
        items[f"b{i}"] = ("ZED RAN AWAY", [("ZED RAN AWAY", 0.0, {}), ("TED RAN AWAY", -m, {})])
    return make_set(name, items)


def scored(nbest, lms, am_weights=None):
    return build_scored_set(nbest, [lm_scores(lm, [h.text for v in nbest.hyps.values() for h in v],
                                              progress=False) for lm in lms], am_weights)


def test_known_lambda_is_found():
    s = scored(known_lambda_set(), [FakeLM()])
    result = tune([s], [parse_range("0:5:0.1")], [0.0])
    assert result.best == Weights((1.6,), 0.0)  # 1.5 ties (-> lower rank, wrong); 1.6..2.5 tie -> 1.6
    assert result.dev_wer == 0.0
    errors = {w.lambdas[0]: e for w, e in result.grid}
    assert [errors[x] for x in (0.0, 0.5, 0.6, 1.1, 1.6, 2.5, 2.6, 3.1, 5.0)] == [3, 3, 2, 1, 0, 0, 1, 2, 2]
    report = set_report(s, result.best, "dev")
    assert (report.wer_am, report.wer_file, report.wer_rescored, report.wer_oracle) == (20.0, 20.0, 0.0, 0.0)
    assert report.rel_vs_am == -100.0


def test_tuned_weights_are_applied_unchanged_to_test():
    dev = scored(known_lambda_set("dev"), [FakeLM()])
    # On this test set lambda = 1.6 fixes one utterance (m = 1.2) but not the other (m = 2.0).
    test = scored(make_set("test", {
        "t1": ("CAT SAT", [("CAT ZAT", 0.0, {}), ("CAT SAT", -1.2, {})]),
        "t2": ("CAT SAT", [("CAT ZAT", 0.0, {}), ("CAT SAT", -2.0, {})]),
    }), [FakeLM()])
    best = tune([dev], [parse_range("0:5:0.1")], [0.0]).best
    report = set_report(test, best, "test")
    assert (report.wer_am, report.wer_rescored) == (50.0, 25.0)


def test_word_bonus_and_ties_to_smaller_weights():
    # LM is constant (no "Q" words... all texts have the same length per utterance? no: use a zero LM)
    class ZeroLM(FakeLM):
        def score(self, texts):
            return [0.0] * len(texts)

    s = scored(make_set("dev", {
        "u1": ("A B C", [("A B", 0.0, {}), ("A B C", -0.5, {})]),  # needs beta > 0.5
        "u2": ("D E", [("D E", 0.0, {}), ("D E F", -1.2, {})]),  # broken for beta > 1.2
    }), [ZeroLM(name="zero")])
    result = tune([s], [parse_range("0:2:0.5")], parse_range("-1:2:0.1"))
    assert result.best == Weights((0.0,), 0.6)  # every lambda ties -> 0; beta 0.6..1.2 tie -> 0.6
    assert result.dev_wer == 0.0


def test_hypothesis_ties_go_to_lower_rank():
    s = scored(make_set("dev", {"u": ("B", [("A", -1.0, {}), ("B", -1.0, {})])}), [FakeLM()])
    assert set_report(s, Weights((0.0,)), "dev").wer_rescored == 100.0


def test_am_weights_select_components():
    nb = make_set("dev", {"u": ("B", [("A", -1.0, {"decoder": -5.0, "ctc": -1.0, "lm": 9}),
                                      ("B", -2.0, {"decoder": -1.0, "ctc": -1.0, "lm": 1})])})
    weights = parse_am_weights("decoder=0.6,ctc=0.4")
    assert weights == {"decoder": 0.6, "ctc": 0.4}
    assert am_score(nb.hyps["u"][0], weights) == pytest.approx(-3.4)
    assert am_score(nb.hyps["u"][0], None) == -1.0
    s = scored(nb, [FakeLM()], weights)
    assert set_report(s, Weights((0.0,)), "dev").wer_am == 0.0  # picks B on decoder/ctc alone
    with pytest.raises(InputError, match=r"dev:u:1: no per-scorer score 'attention'"):
        am_score(nb.hyps["u"][0], {"attention": 1.0})
    stock = make_set("dev", {"u": ("A", [("A", -1.0, {})])})  # ESPnet's asr_inference: the total score only
    with pytest.raises(InputError, match=r"^dev:u:1: no per-scorer score 'decoder': the N-best has only the total score, "
                       r"no 'scores' file \(ESPnet's asr_inference writes none\); slm-am-scores writes them from the "
                       r"ASR model, or without --am-weights the AM score is that total$"):
        am_score(stock.hyps["u"][0], weights)
    for bad in ["decoder", "decoder=x", "=1"]:
        with pytest.raises(InputError, match="--am-weights"):
            parse_am_weights(bad)


def test_parse_range():
    assert parse_range("0:5:0.1")[:3] == [0.0, 0.1, 0.2] and parse_range("0:5:0.1")[-1] == 5.0
    assert len(parse_range("0:5:0.1")) == 51
    assert parse_range("0:2:0.05")[-1] == 2.0 and len(parse_range("0:2:0.05")) == 41
    assert parse_range("-1:1:0.5") == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert parse_range("0.3") == [0.3] and parse_range("0,1.5") == [0.0, 1.5]
    for bad in ["5:0:1", "0:1:0", "0:1", "a:b:c", ""]:
        with pytest.raises(InputError, match="--lambda-range"):
            parse_range(bad, "--lambda-range")


def random_set(seed, n_utts=30, n_hyps=4):
    rng = random.Random(seed)
    vocab = ["ZA", "ZB", "QA", "QB", "C", "D", "E"]
    items = {}
    for u in range(n_utts):
        ref = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 6)))
        hyps = [(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 6))), -rng.random() * 5, {})
                for _ in range(rng.randint(1, n_hyps))]
        items[f"u{u:02d}"] = (ref, hyps)
    return make_set(f"r{seed}", items)


def test_grid_search_matches_brute_force_and_jiwer():
    """Vectorised tuning vs a plain loop with jiwer on the chosen texts, 2 LMs + word bonus."""
    nbests = [random_set(1), random_set(2)]
    lms = [FakeLM("Z"), FakeLM("Q")]
    sets = [scored(nb, lms) for nb in nbests]
    grids = [parse_range("0:2:0.5"), parse_range("0:1:0.5")]
    betas = [-1.0, 0.0, 1.0]
    result = tune(sets, grids, betas)
    lm_of = [{t: lm.score([t])[0] for nb in nbests for v in nb.hyps.values() for t in (h.text for h in v)}
             for lm in lms]
    refs = [nb.refs[u] for nb in nbests for u in nb.hyps]

    def choose(lambdas, beta):
        out = []
        for nb in nbests:
            for hyps in nb.hyps.values():
                totals = [h.score + beta * len(h.text.split()) + sum(w * t[h.text] for w, t in zip(lambdas, lm_of))
                          for h in hyps]
                out.append(hyps[totals.index(max(totals))].text)
        return out

    brute = []
    for l1, l2, beta in itertools.product(*grids, betas):
        wer = jiwer.wer(refs, choose((l1, l2), beta))
        brute.append((round(wer, 12), (l1, l2), abs(beta), beta))
    best = min(brute)
    assert result.best == Weights(best[1], best[3])
    assert result.dev_wer == pytest.approx(100 * best[0])
    assert len(result.grid) == len(brute)
    for s, nb in zip(sets, nbests):  # per-set WER of the chosen weights == jiwer on the chosen texts
        chosen = s.choose(result.best.lambdas, result.best.beta)
        texts = [s.texts[u][r] for u, r in enumerate(chosen)]
        expect = 100 * jiwer.wer([nb.refs[u] for u in s.uttids], texts)
        assert set_report(s, result.best, "dev").wer_rescored == pytest.approx(expect, abs=1e-9)


def test_word_errors_match_jiwer_including_empty_hypotheses():
    refs, hyps = ["A B C", "A B", "X", "A B C D"], ["A X C E", "", "X", "B D"]
    errors = word_errors(refs, hyps)
    assert errors.tolist() == [2, 2, 0, 2]
    assert errors.sum() / 10 == pytest.approx(jiwer.wer(refs, hyps))


def test_lm_scores_each_unique_text_once_and_cache(tmp_path):
    dev, test = known_lambda_set("dev"), known_lambda_set("test")
    texts = [h.text for s in (dev, test) for v in s.hyps.values() for h in v]
    assert len(texts) == 20 and len(set(texts)) == 4
    lm = FakeLM()
    first = lm_scores(lm, texts, tmp_path / "cache", progress=False)
    assert sorted(lm.calls) == sorted(set(texts))
    assert first["CAT ZAT HERE"] == -7.0
    again = FakeLM()  # same name -> cached, nothing is scored twice
    assert lm_scores(again, texts, tmp_path / "cache", progress=False) == first and again.calls == []
    other = FakeLM("Q")  # another model has its own cache file
    lm_scores(other, texts, tmp_path / "cache", progress=False)
    assert len(other.calls) == 4 and len(list((tmp_path / "cache").glob("*.jsonl"))) == 2


def test_interrupted_scoring_resumes(tmp_path):
    texts = [""] + [" ".join([f"W{i}"] * (1 + i % 3)) for i in range(1, 10)]  # 10 unique, one empty
    broken = FakeLM(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        lm_scores(broken, texts, tmp_path, chunk_size=3, progress=False)
    assert len(LMScoreCache(tmp_path, broken.name).scores) == 3  # first chunk was saved
    resumed = FakeLM()
    scores = lm_scores(resumed, texts, tmp_path, chunk_size=3, progress=False)
    assert len(resumed.calls) == 7 and set(scores) == set(texts)
    cache_file = LMScoreCache(tmp_path, resumed.name).path
    cache_file.write_text('{"model": "fake:Z"}\n["A", -1.0\n["B", -2.0]\n')
    with pytest.raises(InputError, match=r"\.jsonl:2: corrupt LM score cache"):
        LMScoreCache(tmp_path, resumed.name)
    cache_file.write_text('{"model": "other"}\n')
    with pytest.raises(InputError, match="cache belongs to 'other'"):
        LMScoreCache(tmp_path, resumed.name)


def test_rescore_writes_outputs(tmp_path):
    dev, test = known_lambda_set("dev"), random_set(3)
    result, reports = rescore([dev], [test], [FakeLM()], tmp_path / "out", lambda_grid=parse_range("0:5:0.1"),
                              cache_dir=tmp_path / "cache", progress=False)
    assert result.best.lambdas == (1.6,)
    assert [(r.name, r.role) for r in reports] == [("dev", "dev"), ("r3", "test")]
    out = tmp_path / "out"
    table = (out / "RESULTS.md").read_text()
    assert "| dev | dev | 5 | 10 | 20.00 | 20.00 | 0.00 | 0.00 | -100.0% | -100.0% |" in table
    assert f"| r3 | test | 30 | {test.n_hyps} | {reports[1].wer_am:.2f} |" in table
    assert (out / "dev_wer_vs_lambda.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "tuning.json").read_text())
    assert record["best"] == {"lambdas": [1.6], "beta": 0.0, "alphas": []} and len(record["grid"]) == 51
    assert record["search"]["method"] == "grid" and record["length_norm"] == ["none"]
    back = read_espnet_nbest(out / "r3")  # the 1-best is readable ESPnet output
    s = scored(test, [FakeLM()])
    chosen = s.choose((1.6,), 0.0)
    assert [back[u][0].text for u in s.uttids] == [s.texts[i][r] for i, r in enumerate(chosen)]
    assert back["u00"][0].scores["rank"] == chosen[0] + 1
    with pytest.raises(InputError, match="set names must be unique"):
        rescore([dev], [known_lambda_set("dev")], [FakeLM()], tmp_path / "o2", progress=False)


def write_tsv(path: Path, nbest: NbestSet):
    path.write_text("".join(f"{u}\t{h.rank}\t{h.score}\t{h.text}\n" for u, v in nbest.hyps.items() for h in v))
    ref = path.with_suffix(".ref")
    ref.write_text("".join(f"{u} {t}\n" for u, t in nbest.refs.items()))
    return path, ref


def test_cli(tmp_path, monkeypatch, capsys):
    fake_module = types.ModuleType("slm_lm.scoring.scorer")
    fake_module.load_scorer = lambda spec, **options: FakeLM(spec)
    monkeypatch.setitem(sys.modules, "slm_lm.scoring.scorer", fake_module)
    dev, dev_ref = write_tsv(tmp_path / "dev.tsv", known_lambda_set())
    test, test_ref = write_tsv(tmp_path / "test.tsv", random_set(4))
    out = tmp_path / "out"
    cli.main(["--dev", str(dev), "--dev-ref", str(dev_ref), "--test", str(test), "--test-ref", str(test_ref),
              "--lm", "Z", "--nbest", "2", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "chosen lambda = 1.6, beta = 0" in printed
    assert "dev (dev): AM-only 20.00  file 1-best 20.00  rescored 0.00  oracle 0.00" in printed
    assert (out / "RESULTS.md").is_file() and (out / "test" / "1best_recog" / "text").is_file()
    assert list((out / "lm_cache").glob("*.jsonl"))
    with pytest.raises(SystemExit, match="--lambda-range"):
        cli.main(["--dev", str(dev), "--dev-ref", str(dev_ref), "--lm", "Z", "--out", str(out),
                  "--lambda-range", "5:0:1"])
    with pytest.raises(SystemExit, match="--dev-ref: 2 reference files for 1"):
        cli.main(["--dev", str(dev), "--dev-ref", f"{dev_ref},{dev_ref}", "--lm", "Z", "--out", str(out)])
    with pytest.raises(SystemExit, match="dev.tsv: no references"):
        cli.main(["--dev", str(dev), "--lm", "Z", "--out", str(out)])


def test_shared_dev_clean_10best_reproduces_readme_figures():
    """Readers + WER on the real lists: AM-only 1.87, with their LM 1.70, oracle 0.70 (data README)."""
    nb = load_nbest(MIRROR / "librispeech_nbest" / "dev_clean", nbest=10)
    assert (len(nb.hyps), nb.n_hyps) == (2703, 27030)
    s = build_scored_set(nb, [], parse_am_weights("decoder=0.6,ctc=0.4"))
    r = set_report(s, Weights(()), "dev")
    assert (round(r.wer_am, 2), round(r.wer_file, 2), round(r.wer_oracle, 2)) == (1.87, 1.70, 0.70)
    refs = [nb.refs[u] for u in s.uttids]
    chosen = s.choose((), 0.0)
    assert r.wer_am == pytest.approx(100 * jiwer.wer(refs, [s.texts[u][c] for u, c in enumerate(chosen)]))
    assert r.wer_file == pytest.approx(100 * jiwer.wer(refs, [nb.hyps[u][0].text for u in s.uttids]))
    assert r.n_hyps == 27030
    for u in range(0, len(s.uttids), 97):  # the error matrix against jiwer, one pair at a time
        for rank, hyp in enumerate(nb.hyps[s.uttids[u]]):
            pair = jiwer.process_words(refs[u], hyp.text)
            assert s.errors[u, rank] == pair.substitutions + pair.deletions + pair.insertions


def big_scored_set(n_utts, n_hyps, seed=0):
    """A ScoredSet of random scores and errors (no texts needed by the search or the plot)."""
    import numpy as np

    from slm_lm.rescoring.scored_set import ScoredSet

    rng = np.random.default_rng(seed)
    shape = (n_utts, n_hyps)
    return ScoredSet("big", [f"u{u}" for u in range(n_utts)], [[""] * n_hyps for _ in range(n_utts)],
                     -rng.random(shape) * 10, -rng.random((1,) + shape) * 10, rng.integers(1, 20, shape).astype(float),
                     rng.integers(0, 5, shape), np.full(n_utts, 20, dtype=np.int64))


def test_dev_wer_plot_of_a_fine_lambda_grid_evaluates_a_few_hundred_points(tmp_path, monkeypatch):
    """--lambda-range 0:5:0.0001 (50,001 lambdas): the search goes coordinate-wise; the plot draws its
    curve at no more than PLOT_POINTS lambdas (it used to build a [50001, U, N] array: 10 GiB on dev_clean)."""
    import tracemalloc

    from slm_lm.rescoring import report as rescore_report

    dev = big_scored_set(100, 10)
    grid = parse_range("0:5:0.0001", "--lambda-range")
    result = tune([dev], [grid], [0.0], max_grid_points=1000)
    assert result.search["method"] == "coordinate"
    evaluated = []
    real = rescore_report.grid_errors

    def counting(sets, lambda_grids, beta_grid):
        evaluated.append(len(lambda_grids[0]))
        return real(sets, lambda_grids, beta_grid)

    monkeypatch.setattr(rescore_report, "grid_errors", counting)
    rescore_report.plot_dev_wer(tmp_path / "warm.png", [dev], result, [0.0, 1.0])  # matplotlib's imports
    evaluated.clear()
    tracemalloc.start()
    rescore_report.plot_dev_wer(tmp_path / "plot.png", [dev], result, grid)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(evaluated) <= rescore_report.PLOT_POINTS + 1, evaluated
    assert peak < 30e6, peak  # a full grid here: 50,001 x 100 x 10 float64 = 400 MB
    assert (tmp_path / "plot.png").stat().st_size > 0
    assert result.best.lambdas[0] in rescore_report.plot_lambdas(grid, result.best.lambdas[0])


def test_grid_errors_memory_is_bounded_by_blocks_not_the_grid():
    import tracemalloc

    from slm_lm.rescoring.weight_search import CHUNK_ELEMENTS, grid_errors

    dev = big_scored_set(500, 10, seed=1)
    grid = [0.001 * i for i in range(2000)]
    tracemalloc.start()
    points = grid_errors([dev], [grid], [0.5])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(points) == 2000
    for i in (0, 208, 209, 210, 1000, 1999):  # across the blocks' edges
        assert points[i] == (Weights((grid[i],), 0.5), [dev.errors_of(dev.choose((grid[i],), 0.5))])
    assert peak < 4 * 8 * CHUNK_ELEMENTS + 5e6, peak  # one block at a time; all at once: 2000 x 500 x 10 x 8 = 80 MB
