"""slm-rescore with score columns as LMs, joint tuning (grid and coordinate descent) and per-LM length
normalisation; the shared lists' own total score reproduced from their per-scorer columns."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import jiwer
import numpy as np
import pytest

from conftest import MIRROR
from slm_lm.bin import lm_combination, pairwise_preference, subset_nbest
from slm_lm.bin import rescore as cli
from slm_lm.common.errors import InputError
from slm_lm.rescoring.nbest import load_nbest, read_espnet_nbest
from slm_lm.rescoring.rescore import rescore
from slm_lm.rescoring.report import set_report
from slm_lm.scoring.cache import lm_scores
from slm_lm.rescoring.scored_set import (
    ScoreColumn,
    build_scored_set,
    length_penalty,
    parse_am_weights,
    parse_length_norm,
    score_column,
)
from slm_lm.rescoring.weight_search import Weights, parse_range, tune
from test_rescore import FakeLM, known_lambda_set, make_set, random_set, scored, write_tsv  # noqa: I001

ROOT = Path(__file__).resolve().parents[1]
SHARED = MIRROR / "librispeech_nbest"

AM = "decoder=0.6,ctc=0.4"


@pytest.fixture(scope="module")
def shared_slices(tmp_path_factory):
    """Every 10th utterance of the shared dev_clean and dev_other lists (271 + 287 utterances)."""
    out = tmp_path_factory.mktemp("slices")
    for name in ("dev_clean", "dev_other"):
        subset_nbest.main([str(SHARED / name), str(out / name), "--every", "10"])
    return out


def test_score_column_reproduces_the_files_total_score(shared_slices):
    """0.6*decoder + 0.4*ctc + 0.6*score:lm == the file's score (to its 4 printed decimals), rank 1 wins."""
    for name in ("dev_clean", "dev_other"):
        nb = load_nbest(shared_slices / name, nbest=10)
        s = build_scored_set(nb, [ScoreColumn("lm")], parse_am_weights(AM))
        file_score = np.array([[h.score for h in nb.hyps[u]] for u in s.uttids])
        assert np.abs(s.totals((0.6,), 0.0) - file_score).max() < 2.5e-4
        assert s.choose((0.6,), 0.0).tolist() == [0] * len(s.uttids)
        report = set_report(s, Weights((0.6,)), "dev")
        assert report.wer_rescored == report.wer_file and report.wer_rescored != report.wer_am
        refs = [nb.refs[u] for u in s.uttids]
        assert report.wer_file == pytest.approx(100 * jiwer.wer(refs, [nb.hyps[u][0].text for u in s.uttids]))
        assert s.choose((0.3,), 0.0).tolist() != [0] * len(s.uttids)  # the check can fail


def test_cli_fixed_weights_reproduce_the_file_1best(shared_slices, tmp_path, capsys):
    dev, test = shared_slices / "dev_clean", shared_slices / "dev_other"
    out = tmp_path / "out"
    cli.main(["--dev", str(dev), "--test", str(test), "--lm", "score:lm", "--nbest", "10", "--am-weights", AM,
              "--lambda-range", "0.6", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "chosen lambda = 0.6, beta = 0" in printed
    for line in printed.splitlines()[2:4]:
        file_wer, rescored = line.split("file 1-best ")[1].split()[0], line.split("rescored ")[1].split()[0]
        assert file_wer == rescored, line
    for name in ("dev_clean", "dev_other"):
        back = read_espnet_nbest(out / name)
        nb = load_nbest(shared_slices / name, nbest=10)
        assert {u: h[0].text for u, h in back.items()} == {u: h[0].text for u, h in nb.hyps.items()}
        assert all(h[0].scores["rank"] == 1 and abs(h[0].score - nb.hyps[u][0].score) < 2.5e-4
                   for u, h in back.items())
    assert not (out / "lm_cache").exists() or not list((out / "lm_cache").iterdir())  # nothing was scored


def test_score_column_is_read_per_hypothesis_and_errors_name_the_line(tmp_path):
    nb = make_set("dev", {"u": ("A B", [("A B", -1.0, {"lm": -3.0}), ("A B", -1.5, {"lm": -1.0})])})
    s = build_scored_set(nb, [ScoreColumn("lm")])
    assert s.lm[0].tolist() == [[-3.0, -1.0]]  # same text, different first-pass LM scores
    assert score_column("score:lm") == ScoreColumn("lm") and score_column("exp/lm/slm") is None
    with pytest.raises(InputError, match="no column name"):
        score_column("score:")
    with pytest.raises(InputError, match=r"dev:u:1: no per-scorer score 'ngram' for LM 'score:ngram'; have lm"):
        build_scored_set(nb, [ScoreColumn("ngram")])
    path, ref = write_tsv(tmp_path / "dev.tsv", known_lambda_set())  # TSV has no per-scorer scores
    with pytest.raises(SystemExit, match=r"dev.tsv:1: no per-scorer score 'lm'.*only the total score, no 'scores' file \(ESPnet's asr_inference writes none\)$"):
        cli.main(["--dev", str(path), "--dev-ref", str(ref), "--lm", "score:lm", "--out", str(tmp_path / "o")])


def with_lm_column(nbest, seed):
    """The set with a random 'lm' column per hypothesis."""
    rng = np.random.default_rng(seed)
    for hyps in nbest.hyps.values():
        for h in hyps:
            h.scores["lm"] = float(-rng.random() * 10)
    return nbest


def build(nb, lms, **options):
    """A ScoredSet with models scored here and ScoreColumns read from the lists."""
    texts = [h.text for v in nb.hyps.values() for h in v]
    tables = [lm if isinstance(lm, ScoreColumn) else lm_scores(lm, texts, progress=False) for lm in lms]
    return build_scored_set(nb, tables, **options)


def test_joint_grid_tuning_of_a_model_and_a_column_matches_brute_force():
    nbests = [with_lm_column(random_set(5), 0), with_lm_column(random_set(6), 1)]
    sets = [build(nb, [FakeLM("Z"), ScoreColumn("lm")]) for nb in nbests]
    grids, betas = [parse_range("0:2:0.5"), parse_range("0:1.5:0.5")], [-1.0, 0.0, 1.0]
    result = tune(sets, grids, betas, search="grid")
    refs = [nb.refs[u] for nb in nbests for u in nb.hyps]
    fake = FakeLM("Z")
    brute = []
    for l1, l2, beta in itertools.product(*grids, betas):
        texts = []
        for nb in nbests:
            for hyps in nb.hyps.values():
                totals = [h.score + beta * h.n_words + l1 * fake.score([h.text])[0] + l2 * h.scores["lm"]
                          for h in hyps]
                texts.append(hyps[totals.index(max(totals))].text)
        brute.append((round(jiwer.wer(refs, texts), 12), (l1, l2), abs(beta), beta))
    best = min(brute)
    assert result.best == Weights(best[1], best[3]) and result.dev_wer == pytest.approx(100 * best[0])
    assert result.search["method"] == "grid" and result.search["evaluated"] == len(brute) == 5 * 4 * 3


def test_coordinate_descent_ends_at_a_coordinatewise_optimum():
    nbests = [with_lm_column(random_set(s, n_utts=60, n_hyps=6), s) for s in (7, 8)]
    sets = [build(nb, [FakeLM("Z"), FakeLM("Q"), ScoreColumn("lm")]) for nb in nbests]
    grids, betas = [parse_range("0:2:0.25")] * 3, parse_range("-1:1:0.5")
    full = tune(sets, grids, betas, search="grid")
    result = tune(sets, grids, betas, max_grid_points=100)  # auto -> coordinate (3645 points > 100)
    assert result.search["method"] == "coordinate" and result.search["requested"] == "auto"
    assert result.search["grid_points"] == 9 * 9 * 9 * 5 and result.search["evaluated"] < 9 * 9 * 9 * 5 / 4
    errors = dict(((w.lambdas, w.beta), e) for w, e in full.grid)
    best_errors = errors[(result.best.lambdas, result.best.beta)]
    assert result.dev_wer == pytest.approx(100 * best_errors / full.dev_ref_words)
    assert best_errors >= errors[(full.best.lambdas, full.best.beta)]
    for j, value in itertools.product(range(3), grids[0]):  # no single lambda change improves it
        lambdas = list(result.best.lambdas)
        lambdas[j] = value
        assert errors[(tuple(lambdas), result.best.beta)] >= best_errors
    assert all(errors[(result.best.lambdas, b)] >= best_errors for b in betas)
    assert tune(sets, grids, betas).search["method"] == "grid"  # 3645 <= the default limit


def test_coordinate_descent_is_exact_for_one_lm():
    s = scored(known_lambda_set(), [FakeLM()])
    grid = tune([s], [parse_range("0:5:0.1")], [0.0], search="grid")
    coord = tune([s], [parse_range("0:5:0.1")], [0.0], search="coordinate")
    assert coord.best == grid.best == Weights((1.6,), 0.0) and coord.search["sweeps"] == 2


def test_length_penalty_follows_mlm_scoring():
    words = np.array([0, 2, 9])
    length = words + 1  # words + end of sentence
    for alpha in (0.0, 0.6, 1.0):  # mlm-scoring loaders.Hypotheses._generate_ln, 'gnmt'
        assert length_penalty("gnmt", alpha, words) == pytest.approx((5 + length) ** alpha / (5 + 1) ** alpha)
    assert length_penalty("length", 1.0, words).tolist() == length.tolist()  # mlm-scoring 'length'
    assert length_penalty("length", 0.5, words) == pytest.approx(np.sqrt(length))
    assert length_penalty("none", 0.7, words).tolist() == [1.0, 1.0, 1.0]
    assert parse_length_norm("gnmt", 2) == ["gnmt", "gnmt"]
    assert parse_length_norm("none,length", 2) == ["none", "length"]
    with pytest.raises(InputError, match="unknown kind 'ln'"):
        parse_length_norm("ln", 1)
    with pytest.raises(InputError, match="2 kinds for 3 LMs"):
        parse_length_norm("none,gnmt", 3)


def length_set():
    """The raw LM prefers the short wrong hypothesis; per |Y| (words + 1) it prefers the right one:
    normalised with 'length', rank 2 wins iff 0.5 * lambda > 0.2 (alpha = 1) or 0.11 * lambda > 0.2 (0.5)."""
    return make_set("dev", {"u": ("A B C D", [("A B", 0.0, {"lm": -6.0}), ("A B C D", -0.2, {"lm": -7.5})])})


def test_length_normalisation_is_tuned_on_dev(tmp_path, capsys):
    nb = length_set()
    raw = build_scored_set(nb, [ScoreColumn("lm")])
    assert tune([raw], [parse_range("0:3:0.1")], [0.0]).dev_wer == 50.0  # no lambda helps without it
    s = build_scored_set(nb, [ScoreColumn("lm")], length_norm=["length"])
    result = tune([s], [parse_range("0:3:0.1")], [0.0], [[0.0, 0.5, 1.0]])
    assert result.best == Weights((0.5,), 0.0, (1.0,)) and result.dev_wer == 0.0
    errors = {(w.lambdas, w.alphas): e for w, e in result.grid}
    assert errors[((0.4,), (1.0,))] == 2 and errors[((1.9,), (0.5,))] == 0 and errors[((1.8,), (0.5,))] == 2
    coord = tune([s], [parse_range("0:3:0.1")], [0.0], [[0.0, 0.5, 1.0]], search="coordinate")
    assert coord.dev_wer == 0.0
    # the CLI: default unchanged (no normalisation), --length-norm tunes alpha and reports it
    nb_path = tmp_path / "dev"
    for r, (text, score, comps) in enumerate([("A B", 0.0, -6.0), ("A B C D", -0.2, -7.5)], 1):
        d = nb_path / f"{r}best_recog"
        d.mkdir(parents=True)
        (d / "text").write_text(f"u {text}\n")
        (d / "score").write_text(f"u tensor({score})\n")
        (d / "scores").write_text(f'u {{"lm": "tensor({comps})"}}\n')
    ref = tmp_path / "ref.txt"
    ref.write_text("u A B C D\n")
    base = ["--dev", str(nb_path), "--dev-ref", str(ref), "--lm", "score:lm", "--lambda-range", "0:3:0.1",
            "--no-progress"]
    cli.main(base + ["--out", str(tmp_path / "plain")])
    plain = json.loads((tmp_path / "plain" / "tuning.json").read_text())
    assert plain["length_norm"] == ["none"] and plain["best"]["alphas"] == [] and plain["dev_wer"] == 50.0
    capsys.readouterr()
    cli.main(base + ["--length-norm", "length", "--ln-alpha-range", "0:1:0.5", "--out", str(tmp_path / "ln")])
    assert "chosen lambda = 0.5, beta = 0, alpha = 1" in capsys.readouterr().out
    record = json.loads((tmp_path / "ln" / "tuning.json").read_text())
    assert record["length_norm"] == ["length"] and record["best"] == {"lambdas": [0.5], "beta": 0.0, "alphas": [1.0]}
    assert "length-normalised (length, alpha = 1)" in (tmp_path / "ln" / "RESULTS.md").read_text()
    with pytest.raises(SystemExit, match="--length-norm: 2 kinds for 1 LMs"):
        cli.main(base + ["--length-norm", "none,gnmt", "--out", str(tmp_path / "bad")])


def test_cli_lm_option_repeats_and_reports_the_search(tmp_path, monkeypatch, capsys):
    import types

    fake_module = types.ModuleType("slm_lm.scoring.scorer")
    fake_module.load_scorer = lambda spec, **options: FakeLM(spec)
    monkeypatch.setitem(sys.modules, "slm_lm.scoring.scorer", fake_module)
    nb = make_set("dev", {u: (ref, [(t, s, {"lm": lm}) for t, s, lm in hyps]) for u, (ref, hyps) in {
        "a": ("CAT SAT", [("CAT ZAT", 0.0, -1.0), ("CAT SAT", -1.0, -1.0)]),
        "b": ("DOG RAN", [("DOG RAN", 0.0, -4.0), ("DOG RUN", -0.5, -1.0)]),
    }.items()})
    out = tmp_path / "out"
    rescore([nb], [], [FakeLM("Z"), ScoreColumn("lm")], out, lambda_grid=parse_range("0:2:0.5"),
            beta_grid=[0.0], cache_dir=tmp_path / "cache", progress=False, search="coordinate")
    record = json.loads((out / "tuning.json").read_text())
    assert record["lm"] == ["fake:Z", "score:lm"] and record["search"]["method"] == "coordinate"
    assert record["dev_wer"] == 0.0 and len(record["grid"]) == record["search"]["evaluated"]
    assert "- search: `coordinate:" in (out / "RESULTS.md").read_text()
    # the same through the CLI, with --lm given twice (a model and a column)
    dev_dir = tmp_path / "dev"
    for r in (1, 2):
        d = dev_dir / f"{r}best_recog"
        d.mkdir(parents=True)
        (d / "text").write_text("".join(f"{u} {h[r - 1].text}\n" for u, h in nb.hyps.items()))
        (d / "score").write_text("".join(f"{u} {h[r - 1].score}\n" for u, h in nb.hyps.items()))
        (d / "scores").write_text("".join(f'{u} {{"lm": {h[r - 1].scores["lm"]}}}\n' for u, h in nb.hyps.items()))
    ref = tmp_path / "ref"
    ref.write_text("a CAT SAT\nb DOG RAN\n")
    cli.main(["--dev", str(dev_dir), "--dev-ref", str(ref), "--lm", "Z", "--lm", "score:lm", "--lambda-range",
              "0:2:0.5", "--out", str(tmp_path / "cli"), "--no-progress"])
    printed = capsys.readouterr().out
    assert "search: grid, 25 of 25 grid points evaluated" in printed
    assert json.loads((tmp_path / "cli" / "tuning.json").read_text())["best"]["lambdas"] == record["best"]["lambdas"]


def test_combination_table_on_the_shared_slices(shared_slices, tmp_path, monkeypatch, capsys):
    """Four rows (AM only, each LM, both), each cell = the test WER of a run tuned on the other set."""
    import types

    fake_module = types.ModuleType("slm_lm.scoring.scorer")
    fake_module.load_scorer = lambda spec, **options: FakeLM(spec)
    monkeypatch.setitem(sys.modules, "slm_lm.scoring.scorer", fake_module)
    clean, other = shared_slices / "dev_clean", shared_slices / "dev_other"
    out = tmp_path / "table"
    lm_combination.main(["--dev", f"{clean},{other}", "--lm", "score:lm", "--lm", "S", "--nbest", "10",
                                 "--am-weights", AM, "--lambda-range", "0:2:0.1", "--out", str(out),
                                 "--no-progress"])
    table = (out / "combination.md").read_text()
    assert capsys.readouterr().out.endswith(table)
    rows = [line.split(" | ") for line in table.splitlines()[2:6]]
    assert [r[0] for r in rows] == ["| AM only", "| AM + score:lm", "| AM + S", "| AM + score:lm + S"]
    for row, slug in zip(rows[1:], ["am+score_lm", "am+S", "am+score_lm+S"]):
        for cell, dev, test in ((row[1], "dev_clean", "dev_other"), (row[2].rstrip(" |"), "dev_other", "dev_clean")):
            record = json.loads((out / slug / f"tune_{dev}" / "tuning.json").read_text())
            report = next(s for s in record["sets"] if s["name"] == test)
            lambdas = " / ".join(f"{x:g}" for x in record["best"]["lambdas"])
            assert cell == f"{report['wer_rescored']:.2f} (λ = {lambdas})"
            assert record["lm"] == {"am+score_lm": ["score:lm"], "am+S": ["fake:S"]}.get(slug, ["score:lm", "fake:S"])
    am_only = {s["name"]: s["wer_am"] for s in json.loads((out / "am+S" / "tune_dev_clean" / "tuning.json")
                                                         .read_text())["sets"]}
    assert rows[0][1:] == [f"{am_only['dev_other']:.2f}", f"{am_only['dev_clean']:.2f} |"]
    # the score:lm row is what slm-rescore itself gives
    cli.main(["--dev", str(clean), "--test", str(other), "--lm", "score:lm", "--nbest", "10", "--am-weights", AM,
              "--lambda-range", "0:2:0.1", "--out", str(tmp_path / "direct"), "--no-progress"])
    direct = json.loads((tmp_path / "direct" / "tuning.json").read_text())
    assert rows[1][1].startswith(f"{direct['sets'][1]['wer_rescored']:.2f} (λ = {direct['best']['lambdas'][0]:g})")
    with pytest.raises(SystemExit, match="exactly two sets"):
        lm_combination.main(["--dev", str(clean), "--lm", "score:lm", "--out", str(out)])


def test_pairwise_preference_counts_the_pairs_that_decide_rescoring(shared_slices, tmp_path, monkeypatch, capsys):
    """fix: the LM prefers the oracle hypothesis to a wrong AM-best one; break: it prefers the AM's best
    worse hypothesis to a right AM-best one; one-hypothesis lists and ties give no pair."""
    import types

    from slm_lm.rescoring.nbest import Hypothesis, NbestSet

    hyps = {"u1": [Hypothesis(1, "A C", -1.0), Hypothesis(2, "A B", -2.0)],           # AM wrong, oracle 2nd
            "u2": [Hypothesis(1, "X Y", -1.0), Hypothesis(2, "X Z", -2.0), Hypothesis(3, "W Z", -3.0)],  # AM right
            "u3": [Hypothesis(1, "P", -1.0)]}                                          # no pair
    nbest = NbestSet("toy", "toy", hyps, {"u1": "A B", "u2": "X Y", "u3": "P"})
    likes_errors = {"A C": -1.0, "A B": -5.0, "X Y": -5.0, "X Z": -1.0, "W Z": -9.0, "P": -1.0}
    likes_refs = {t: -v for t, v in likes_errors.items()}
    toy = build_scored_set(nbest, [likes_errors, likes_refs])
    assert pairwise_preference.preferences(toy, 0) == {"fix": (0, 1), "break": (1, 1)}
    assert pairwise_preference.preferences(toy, 1) == {"fix": (1, 1), "break": (0, 1)}
    # on the shared slices, the first-pass LM column through the command line, beside a model-like LM
    fake_module = types.ModuleType("slm_lm.scoring.scorer")
    fake_module.load_scorer = lambda spec, **options: FakeLM(spec)
    monkeypatch.setitem(sys.modules, "slm_lm.scoring.scorer", fake_module)
    clean, other = shared_slices / "dev_clean", shared_slices / "dev_other"
    out = tmp_path / "pairs.md"
    pairwise_preference.main(["--set", str(clean), "--set", str(other), "--lm", "first pass=score:lm",
                              "--lm", "S", "--nbest", "10", "--am-weights", AM, "--out", str(out)])
    table = out.read_text()
    assert capsys.readouterr().out == table
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table.splitlines()[2:4]}
    assert list(rows) == ["first pass", "S"]
    for i, name in enumerate(("dev_clean", "dev_other")):
        direct = build_scored_set(load_nbest(shared_slices / name, nbest=10), [ScoreColumn("lm")],
                                  parse_am_weights(AM))
        wins = pairwise_preference.preferences(direct, 0)
        for k, key in enumerate(("fix", "break")):
            won, pairs = wins[key]
            assert pairs > 20 and rows["first pass"][2 * i + k].rstrip(" |") == f"{100 * won / pairs:.1f} % of {pairs}"
            assert rows["S"][2 * i + k].endswith(f"of {pairs}") or rows["S"][2 * i + k].endswith(f"of {pairs} |")
    with pytest.raises(SystemExit, match="N-best input not found"):
        pairwise_preference.main(["--set", str(tmp_path / "missing"), "--lm", "score:lm", "--out", str(out)])


@pytest.mark.parametrize("module,prog", [("rescore", "slm-rescore"), ("compare_wer", "slm-compare-wer"),
                                         ("lm_combination", "slm-lm-combination"),
                                         ("pairwise_preference", "slm-pairwise-preference"),
                                         ("subset_nbest", "slm-subset-nbest")])
def test_rescoring_commands_answer_help(module, prog):
    run = subprocess.run([sys.executable, "-m", f"slm_lm.bin.{module}", "--help"], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0 and run.stdout.startswith(f"usage: {prog} "), run.stderr


def test_subset_of_a_missing_set_is_one_line_and_status_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "slm_lm.bin.subset_nbest", str(tmp_path / "none"),
                          str(tmp_path / "x"), "--every", "2"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and not (tmp_path / "x").exists()
    assert run.stderr.strip() == (f"slm-subset-nbest: error: {tmp_path}/none/raw_hypotheses/1best_recog/text: not found "
                                  "(want SRC_DIR/raw_hypotheses/<k>best_recog/ and SRC_DIR/references/ref_wer.trn)")


def test_coordinate_descent_stops_at_the_ceiling_on_the_points_it_evaluates(monkeypatch):
    """The ceiling bounds the points recorded over all sweeps, not per sweep: a descent that would pass it
    stops after its last whole sweep and says it did not converge."""
    from slm_lm.rescoring import weight_search
    from slm_lm.rescoring.report import _describe_search

    nbests = [with_lm_column(random_set(s, n_utts=60, n_hyps=6), s) for s in (7, 8)]
    sets = [build(nb, [FakeLM("Z"), FakeLM("Q"), ScoreColumn("lm")]) for nb in nbests]
    grids, betas = [parse_range("0:2:0.25")] * 3, parse_range("-1:1:0.5")
    free = tune(sets, grids, betas, search="coordinate")
    assert free.search["converged"] and free.search["sweeps"] >= 2
    per_sweep = 3 * 9 + 5
    monkeypatch.setattr(weight_search, "MAX_SEARCH_POINTS", per_sweep + 1)
    capped = tune(sets, grids, betas, search="coordinate")
    assert capped.search["evaluated"] <= per_sweep + 1 < free.search["evaluated"]
    assert capped.search["sweeps"] == 1 and not capped.search["converged"]
    assert "stopped before converging" in _describe_search(capped.search)
