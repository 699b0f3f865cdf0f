"""slm-simulate-nbest: the confusions mined from real lists, the lists simulated with them, and the command's
outputs read by slm-mwer-train's reader."""
import importlib.util
from collections import Counter
from pathlib import Path

import pytest

from slm_lm.bin import simulate_nbest
from slm_lm.common.fileio import read_json
from slm_lm.rescoring.confusions import Simulator, mine_confusions, word_edits
from slm_lm.rescoring.nbest import Hypothesis, NbestSet, load_nbest
from slm_lm.rescoring.wer import word_errors


def nbest_set(refs: dict, hyps: dict) -> NbestSet:
    return NbestSet("toy", "toy", {u: [Hypothesis(r, t, 0.0) for r, t in enumerate(ts, 1)] for u, ts in hyps.items()},
                    refs)


def test_word_edits_and_their_counts_per_hypothesis():
    """Each hypothesis counts each distinct edit once; the reference itself adds nothing."""
    assert word_edits("A B C", "A X C") == [("S", "B", "X")]
    assert word_edits("A B C", "A C") == [("D", "B", "")]
    assert word_edits("A B C", "A B C D") == [("I", "", "D")]
    real = nbest_set({"u1": "A B C", "u2": "B B"},
                     {"u1": ["A B C", "A X C", "A X C D", "A C"], "u2": ["X X", "B"]})
    assert mine_confusions([real]) == Counter({("S", "B", "X"): 3, ("I", "", "D"): 1, ("D", "B", ""): 2})


def test_simulated_lists_hold_the_sentence_and_distinct_variants_made_of_mined_edits():
    """Every list: the sentence once, `n` other distinct hypotheses, each 1-3 word errors away, and every edit
    jiwer finds in them one of the mined confusions (substitutions only here, so the alignment is unambiguous),
    drawn by count, the rare ones too."""
    mined = Counter({("S", "CAT", "HAT"): 5, ("S", "CAT", "BAT"): 1, ("S", "SAT", "SET"): 3,
                     ("S", "MAT", "MATT"): 2, ("S", "THE", "A"): 2})
    simulator = Simulator(mined, seed=3)
    sentence = "THE CAT SAT ON A MAT"
    seen = Counter()
    for _ in range(50):
        hyps = simulator.nbest(sentence, 7)
        assert hyps.count(sentence) == 1 and len(set(hyps)) == 8
        errors = sorted(word_errors([sentence] * 8, hyps))
        assert errors[0] == 0 and 1 <= errors[1] and errors[-1] <= 3
        for hyp in hyps:
            edits = word_edits(sentence, hyp)
            assert set(edits) <= set(mined), (hyp, edits)
            seen.update(edits)
    assert seen[("S", "CAT", "HAT")] > seen[("S", "CAT", "BAT")] > 0
    assert simulator.nbest("NOTHING HERE IS CONFUSED", 3) is None
    assert Simulator(Counter({("S", "CAT", "HAT"): 1}), seed=0).nbest("THE CAT", 2) is None  # one variant only


def test_deletions_and_insertions_are_drawn_too():
    simulator = Simulator(Counter({("D", "THE", ""): 4, ("I", "", "UH"): 2, ("S", "CAT", "HAT"): 1}), seed=0)
    hyps = [h for _ in range(30) for h in simulator.nbest("THE CAT SAT", 3)]
    assert any(h.split()[0] in ("CAT", "HAT") for h in hyps)  # THE deleted
    assert any("UH" in h.split() for h in hyps)
    assert max(word_errors(["THE CAT SAT"] * len(hyps), hyps)) <= 3


def test_the_same_seed_gives_the_same_lists():
    mined = Counter({("S", "CAT", "HAT"): 5, ("S", "SAT", "SET"): 3, ("D", "THE", ""): 4, ("I", "", "UH"): 2})
    first = [Simulator(mined, seed=1).nbest("THE CAT SAT", 3) for _ in range(3)]
    assert first == [Simulator(mined, seed=1).nbest("THE CAT SAT", 3) for _ in range(3)]
    assert first != [Simulator(mined, seed=2).nbest("THE CAT SAT", 3) for _ in range(3)]


@pytest.fixture
def real_lists(tmp_path):
    """A TSV N-best set with references whose errors are the confusions CAT/HAT, SAT/SET, DOG/FROG and a deleted
    THE."""
    rows = [("u1", "THE CAT SAT"), ("u1", "THE HAT SAT"), ("u1", "CAT SET"), ("u2", "A DOG"), ("u2", "A FROG")]
    ranks = Counter()
    lines = []
    for uttid, text in rows:
        ranks[uttid] += 1
        lines.append(f"{uttid}\t{ranks[uttid]}\t-1.0\t{text}\n")
    (tmp_path / "real.tsv").write_text("".join(lines))
    (tmp_path / "real.ref").write_text("u1 THE CAT SAT\nu2 A DOG\n")
    (tmp_path / "text.txt").write_text("the cat sat on the mat.\nThe hat is red\nNo confusion here\n"
                                       "the cat sat on the mat.\nA cat and the dog sat\n")
    return tmp_path


def run(real_lists, *more):
    d = real_lists
    simulate_nbest.main(["--confusions", str(d / "real.tsv"), "--confusions-ref", str(d / "real.ref"),
                         "--text", str(d / "text.txt"), "--variants", "2", "--out", str(d / "out"), *more])


def test_the_command_writes_lists_slm_mwer_train_reads(real_lists, capsys):
    """Normalised, each sentence once (the repeated line is one list), those with too few confusions left out
    and counted, references and lists in the formats of --train/--train-ref, the record."""
    run(real_lists)
    out = real_lists / "out"
    assert "2 lists of 3 hypotheses (2 of 4 sentences with too few confusions)" in capsys.readouterr().out
    nbest = load_nbest(out / "nbest.tsv", out / "ref.txt")
    refs = sorted(nbest.refs.values())
    assert refs == ["A CAT AND THE DOG SAT", "THE CAT SAT ON THE MAT"]
    for uttid, hyps in nbest.hyps.items():
        assert uttid.startswith("sim00000-") and [h.rank for h in hyps] == [1, 2, 3]
        assert [h.text for h in hyps].count(nbest.refs[uttid]) == 1 and {h.score for h in hyps} == {0.0}
    record = read_json(out / "simulate.json")
    assert record["lists"] == 2 and record["sentences_read"] == 4 and record["sentences_without_list"] == 2
    assert (out / "confusions.tsv").read_text().splitlines()[0] == "op\tref\thyp\tcount"
    before = (out / "nbest.tsv").read_text()
    run(real_lists)  # an earlier run's outputs are replaced: the same seed, the same lists
    assert (out / "nbest.tsv").read_text() == before


def test_more_lists_than_the_text_gives_is_an_error(real_lists, capsys):
    with pytest.raises(SystemExit) as stop:
        run(real_lists, "--lists", "3")
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("slm-simulate-nbest: error: --lists 3: the text gives only 2 lists (2 of 4 sentences have too "
                   "few confusions for 2 variants)")
    assert not (real_lists / "out").exists()


def load_select_script():
    path = Path(__file__).resolve().parents[1] / "local" / "analyses" / "select_hard_negatives.py"
    spec = importlib.util.spec_from_file_location("select_hard_negatives", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hard_negatives_keep_the_reference_and_the_variants_scored_highest(real_lists, capsys):
    """Scores as slm-score writes them (here: more words score higher, then the text's own order decides), the
    reference kept, the --keep best variants kept, a short scores file refused with nothing written."""
    run(real_lists, "--variants", "3")
    capsys.readouterr()
    out = real_lists / "out"
    rows = [line.split("\t") for line in (out / "nbest.tsv").read_text().splitlines()]
    score = {text: len(text.split()) + sorted(t for *_, t in rows).index(text) / 100 for *_, text in rows}
    (real_lists / "scores").write_text("".join(f"{n}\t{score[t]}\t5\n" for n, (*_, t) in enumerate(rows, 1)))
    select = load_select_script()
    select.main(["--lists", str(out), "--scores", str(real_lists / "scores"), "--keep", "2",
                 "--out", str(real_lists / "hard")])
    hard = load_nbest(real_lists / "hard" / "nbest.tsv", real_lists / "hard" / "ref.txt")
    beaten = 0
    for uttid, hyps in hard.hyps.items():
        ref = hard.refs[uttid]
        variants = sorted((r[3] for r in rows if r[0] == uttid and r[3] != ref), key=score.get, reverse=True)
        assert sorted(h.text for h in hyps) == sorted([ref] + variants[:2])
        beaten += score[variants[0]] > score[ref]
    assert f"2 lists of 3 hypotheses; the LM scored a variant above the reference in {beaten} " in \
        capsys.readouterr().out
    (real_lists / "short").write_text("1\t-1.0\t5\n")
    with pytest.raises(SystemExit) as stop:
        select.main(["--lists", str(out), "--scores", str(real_lists / "short"), "--out", str(real_lists / "x")])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == (f"select_hard_negatives: error: {real_lists / 'short'}: 1 lines, "
                                               f"fewer than {out / 'nbest.tsv'}'s")
    assert not (real_lists / "x").exists()
