"""WER (slm_lm.rescoring.wer): alignment counts equal to jiwer's, ESPnet's columns, the paired bootstrap comparison
and its command line (slm-compare-wer)."""
import subprocess
import sys
from pathlib import Path

import jiwer
import numpy as np
import pytest

from slm_lm.common.errors import InputError
from slm_lm.rescoring.wer import align_transcripts, align_words, paired_bootstrap, wer_columns, wer_table, word_errors

REPO = Path(__file__).resolve().parents[1]


def test_alignment_counts_are_jiwers_pair_by_pair():
    """One batched jiwer call gives each pair the counts of its own alignment; empty hypotheses count as deletions."""
    rng = np.random.default_rng(0)
    vocab = ["A", "B", "C", "D"]
    refs = [" ".join(rng.choice(vocab, rng.integers(1, 8))) for _ in range(200)]
    hyps = [" ".join(rng.choice(vocab, rng.integers(0, 8))) for _ in range(200)]
    for r, h, a in zip(refs, hyps, align_words(refs, hyps)):
        o = jiwer.process_words(r, h) if h else None
        expect = (o.hits, o.substitutions, o.deletions, o.insertions) if o else (0, 0, len(r.split()), 0)
        assert (a.hits, a.substitutions, a.deletions, a.insertions) == expect
        assert a.ref_words == len(r.split())
    assert word_errors(refs, hyps).tolist() == [a.errors for a in align_words(refs, hyps)]
    assert word_errors(refs, hyps).sum() == round(jiwer.wer(refs, hyps) * sum(len(r.split()) for r in refs))


def test_espnet_columns_and_table():
    refs, hyps = {"u1": "A B C D", "u2": "E F"}, {"u1": "A X C D Y", "u2": "E F"}
    c = wer_columns(align_transcripts(refs, hyps, "hyp.txt"))
    assert (c["Snt"], c["Wrd"]) == (2, 6)
    assert (c["Corr"], c["Sub"], c["Del"], c["Ins"]) == pytest.approx((500 / 6, 100 / 6, 0.0, 100 / 6))
    assert (c["Err"], c["S.Err"]) == pytest.approx((200 / 6, 50.0))
    assert wer_table("WER, x", [("Sum/Avg", c)])[-2] == "|Sum/Avg|2|6|83.3|16.7|0.0|16.7|33.3|50.0|"
    with pytest.raises(InputError, match="hyp.txt: utterances differ from the references"):
        align_transcripts(refs, {"u1": "A"}, "hyp.txt")
    with pytest.raises(InputError, match="hyp.txt: empty reference for u2"):
        align_transcripts({"u1": "A", "u2": ""}, {"u1": "A", "u2": "B"}, "hyp.txt")


def test_a_system_better_on_every_utterance_is_always_better():
    r = paired_bootstrap([2] * 50, [1] * 50, [10] * 50, samples=2000)
    assert (r.wer_a, r.wer_b, r.delta) == pytest.approx((20.0, 10.0, -10.0))
    assert r.p_b_better == 1.0
    assert r.ci_low == pytest.approx(-10.0) and r.ci_high == pytest.approx(-10.0)


def test_a_tie_in_total_is_not_significant():
    # B is one error better on half of the utterances and one worse on the other half.
    a = np.array([1, 0] * 100)
    b = np.array([0, 1] * 100)
    r = paired_bootstrap(a, b, [10] * 200, samples=4000, seed=1)
    assert r.delta == 0.0
    assert r.ci_low < 0 < r.ci_high
    assert 0.35 < r.p_b_better < 0.65


def test_interval_and_probability_follow_the_resampled_difference():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 300)
    b = np.maximum(a - (rng.random(300) < 0.1), 0)  # B fixes an error in about 10 % of utterances
    n = rng.integers(5, 20, 300)
    r = paired_bootstrap(a, b, n, samples=3000, seed=2)
    assert r.delta == pytest.approx(100 * (b.sum() - a.sum()) / n.sum())
    assert r.ci_low <= r.delta <= r.ci_high < 0
    assert r.p_b_better > 0.99
    assert paired_bootstrap(a, b, n, samples=3000, seed=2) == r  # the seed fixes the resamples


def test_mismatched_inputs_are_errors():
    with pytest.raises(ValueError, match="one entry per utterance"):
        paired_bootstrap([1, 2], [1], [3, 3])
    with pytest.raises(ValueError, match="no words"):
        paired_bootstrap([0], [0], [0])


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "slm_lm.bin.compare_wer", *args],
                          capture_output=True, text=True, cwd=REPO)


def test_command_line_table_matches_jiwer(tmp_path):
    refs = {f"u{i}": "THE CAT SAT ON THE MAT" for i in range(20)}
    good = {u: t for u, t in refs.items()}
    good["u0"] = "THE CAT SAT ON A MAT"
    bad = {u: "THE CAT SAT ON MAT" for u in refs}
    ref = _write(tmp_path / "text", [f"{u} {t}" for u, t in refs.items()])
    a = _write(tmp_path / "a", [f"{u} {t}" for u, t in bad.items()])
    b = _write(tmp_path / "b", [f"{u} {t}" for u, t in good.items()])
    out = _run("--ref", ref, "--hyp", f"base={a}", "--hyp", f"new={b}", "--samples", "500")
    assert out.returncode == 0, out.stderr
    keys = sorted(refs)
    wer_a = 100 * jiwer.wer([refs[k] for k in keys], [bad[k] for k in keys])
    wer_b = 100 * jiwer.wer([refs[k] for k in keys], [good[k] for k in keys])
    assert f"| base | {wer_a:.3f} | | |" in out.stdout
    assert f"| new | {wer_b:.3f} | {wer_b - wer_a:+.3f} (" in out.stdout
    assert out.stdout.splitlines()[3].endswith("| 1.000 |")
    assert "20 utterances, 120 reference words; paired bootstrap, 500 resamples" in out.stdout


def test_command_line_rejects_a_system_missing_an_utterance(tmp_path):
    ref = _write(tmp_path / "text", ["u1 A B", "u2 C D"])
    a = _write(tmp_path / "a", ["u1 A B", "u2 C D"])
    b = _write(tmp_path / "b", ["u1 A B"])
    out = _run("--ref", ref, "--hyp", f"a={a}", "--hyp", f"b={b}")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"slm-compare-wer: error: {b}: no hypothesis for 'u2' (1 missing, 0 extra ids)"
    out = _run("--ref", ref, "--hyp", f"a={a}")
    assert out.returncode == 2 and "at least two systems" in out.stderr
