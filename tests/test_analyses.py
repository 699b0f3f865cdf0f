"""Smoke tests of the analysis scripts on tiny random models: CE by position, MLM-k ablation, and the
Hugging Face baselines through slm-blimp."""
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_hf import make_gpt2_dir

from conftest import MIRROR
from slm_lm import build_lm
from slm_lm.bin import blimp as blimp_cli
from slm_lm.model.bpe import train_bpe
from slm_lm.scoring.scorer import Scorer

ROOT = Path(__file__).resolve().parents[1]
NBEST = MIRROR / "librispeech_nbest"


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "local" / "analyses" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nbest_slice(source: Path, dest: Path, n_utts: int, n_best: int) -> Path:
    """The first `n_utts` utterances and `n_best` ranks of an ESPnet N-best set, same layout."""
    ids = [line.split()[0] for line in (source / "raw_hypotheses/1best_recog/text").read_text().splitlines()[:n_utts]]
    for rank in range(1, n_best + 1):
        folder = dest / "raw_hypotheses" / f"{rank}best_recog"
        folder.mkdir(parents=True)
        for name in ("text", "score", "scores"):
            lines = (source / "raw_hypotheses" / f"{rank}best_recog" / name).read_text().splitlines()
            (folder / name).write_text("\n".join(line for line in lines if line.split(" ", 1)[0] in ids) + "\n")
    refs = (source / "references/ref_wer.trn").read_text().splitlines()
    (dest / "references").mkdir()
    (dest / "references/ref_wer.trn").write_text("\n".join(r for r in refs if any(f"-{i})" in r for i in ids)) + "\n")
    return dest


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyses")
    refs = [line.split("\t")[0] for line in (NBEST / "dev_clean/references/ref_wer.trn").read_text().splitlines()]
    (root / "train.txt").write_text("\n".join(refs[:300] + ["THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG'S BACK"]))
    (root / "heldout.txt").write_text("\n".join(refs[300:340]) + "\n")
    tokenizer = train_bpe(root / "train.txt", root / "bpe", vocab_size=200)
    models = {}
    for i, kind in enumerate(("clm", "mlm", "bilm", "slm")):
        torch.manual_seed(i)
        Scorer(build_lm(kind, tokenizer.vocab_size, size="tiny", max_positions=128), tokenizer).save_pretrained(root / kind)
        models[kind] = root / kind
    dev = [nbest_slice(NBEST / s, root / "nbest" / s, n_utts=4, n_best=3) for s in ("dev_clean", "dev_other")]
    return {"root": root, "tokenizer": tokenizer, "models": models, "dev": dev,
            "heldout": root / "heldout.txt", "sentences": refs[300:340]}


def common_length(setup):
    """A piece count that several held-out sentences have."""
    lengths = [len(setup["tokenizer"].encode(s)) for s in setup["sentences"]]
    return max(set(lengths), key=lambda n: (lengths.count(n), -n))


def test_position_ce_plot(setup, tmp_path, capsys):
    script = load_script("plot_position_ce")
    length = common_length(setup)
    args = [f"--model={label}={setup['models'][kind]}" for label, kind in
            (("CLM", "clm"), ("MLM", "mlm"), ("Bi-LM", "bilm"), ("SLM", "slm"))]
    script.main(args + ["--text", str(setup["heldout"]), "--length", str(length), "--out", str(tmp_path)])
    rows = [line.split("\t") for line in (tmp_path / "position_ce.tsv").read_text().splitlines()]
    assert rows[0] == ["position", "CLM", "MLM", "Bi-LM", "SLM"]
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(1, length + 1)] + ["</s>"]
    chosen = [s for s in setup["sentences"] if len(setup["tokenizer"].encode(s)) == length]
    slm = Scorer.from_pretrained(setup["models"]["slm"])
    expected = -torch.stack(slm.logprobs(chosen)).double().mean(0)
    assert [float(r[4]) for r in rows[1:]] == pytest.approx(expected.tolist(), abs=1e-3)
    assert (tmp_path / "position_ce.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{len(chosen)} sentences of {length} pieces" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no sentence has exactly 999 pieces"):
        script.main(args + ["--text", str(setup["heldout"]), "--length", "999", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--model 'SLM': expected LABEL=SPEC"):
        script.main(["--model", "SLM", "--text", str(setup["heldout"]), "--out", str(tmp_path)])


def test_mlm_k_ablation(setup, tmp_path):
    script = load_script("mlm_k_ablation")
    length = common_length(setup)
    script.main([
        "--model", str(setup["models"]["mlm"]), "--ks", "1,2,n/2", "--also", f"SLM={setup['models']['slm']}",
        "--text", str(setup["heldout"]), "--length", str(length),
        "--dev", ",".join(map(str, setup["dev"])), "--am-weights", "decoder=0.6,ctc=0.4",
        "--lambda-range", "0:2:0.5", "--out", str(tmp_path),
    ])
    result = json.loads((tmp_path / "mlm_k_ablation.json").read_text())
    labels = [r["label"] for r in result["rows"]]
    assert labels == ["MLM (k=1)", "MLM (k=2)", "MLM (k=n/2)", "SLM"]
    assert [r["passes"] for r in result["rows"]] == ["n", "ceil(n/2)", "2", "-"]
    chosen = [s for s in setup["sentences"] if len(setup["tokenizer"].encode(s)) == length]
    assert result["held_out"]["sentences"] == len(chosen)
    mlm = Scorer.from_pretrained(setup["models"]["mlm"])
    rows = mlm.logprobs(chosen)
    pppl = math.exp(-sum(float(r.sum()) for r in rows) / sum(len(r) for r in rows))
    assert result["rows"][0]["pppl"] == pytest.approx(pppl, rel=1e-5)
    assert len({round(r["pppl"], 6) for r in result["rows"]}) == 4  # k changes the estimate
    for row in result["rows"]:
        assert set(row["wer"]) == {"dev_clean", "dev_other"}
        assert row["wer"]["dev_clean"]["tuned_on"] == ["dev_other"]
        assert row["wer"]["dev_other"]["tuned_on"] == ["dev_clean"]
        assert all(0 <= w["wer"] < 100 for w in row["wer"].values())
    table = (tmp_path / "mlm_k_ablation.md").read_text()
    assert "| MLM (k=n/2) | 2 |" in table and "| baseline (no LM) | - | - |" in table


def test_blimp_with_a_hugging_face_baseline(tmp_path, capsys):
    gpt2 = make_gpt2_dir(tmp_path / "gpt2", n_positions=128)
    out = tmp_path / "out"
    blimp_cli.main(["--model", f"hf-causal:{gpt2}", "--data", str(MIRROR / "blimp"), "--paradigms",
                    "passive_1,wh_island", "--limit", "5", "--case", "lower", "--out", str(out), "--no-progress"])
    results = json.loads((out / "blimp_results.json").read_text())
    assert results["pairs"] == 10 and results["model"].startswith("hf-causal-")
    assert "over 10 pairs in 2 paradigms" in capsys.readouterr().out


def test_ce_by_piece_splits_the_sentence_score(setup, tmp_path, capsys):
    """With the shipped models: the three kinds of position add up to each model's summed scores; whole
    words raise the SLM's first-piece CE (it no longer sees the rest of the word) and leave the CLM's
    split as it is; the per-word CE divides by words + 1."""
    script = load_script("ce_by_piece")
    out = tmp_path / "ce.tsv"
    script.main(["--model", "SLM=slm-books", "--model", "SLM words=slm-books:whole-words", "--model", "CLM=clm-books",
                 "--model", "CLM words=clm-books:whole-words", "--text", str(setup["heldout"]), "--out", str(out)])
    rows = {}
    for line in out.read_text().splitlines()[1:]:
        label, kind, ce, n = line.split("\t")
        rows.setdefault(label, {})[kind] = (float(ce), int(n))
    sentences = setup["sentences"]
    words = sum(len(s.split()) + 1 for s in sentences)
    for label, spec, whole in (("SLM", "slm-books", False), ("SLM words", "slm-books", True), ("CLM", "clm-books", False)):
        scorer = Scorer.from_pretrained(spec, whole_words=whole)
        total = -sum(scorer.score(sentences))
        split = sum(ce * n for kind, (ce, n) in rows[label].items() if kind != "per word")
        assert split == pytest.approx(total, rel=1e-4), label
        assert rows[label]["per word"] == (pytest.approx(total / words, rel=1e-4), words)
        assert rows[label]["end of sentence"][1] == len(sentences)
        pieces = sum(len(scorer.tokenizer.encode(s)) for s in sentences)
        assert rows[label]["first piece"][1] + rows[label]["later piece"][1] == pieces
    assert rows["SLM words"]["first piece"][0] > rows["SLM"]["first piece"][0] + 0.5
    assert rows["CLM words"] == rows["CLM"]
    assert f"{len(sentences)} sentences" in capsys.readouterr().out
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(SystemExit, match="empty.txt: no sentences"):
        script.main(["--model", "SLM=slm-books", "--text", str(tmp_path / "empty.txt"), "--out", str(out)])


def test_score_shift_separates_the_change_per_error_from_the_change_per_word(setup, capsys):
    """Scores moved by a constant per list, -0.5 per word error and +0.25 per word give exactly those figures;
    padding and a list of one hypothesis are left out. On real lists, a model against itself changed nothing, and
    each tuned model is a row."""
    script = load_script("score_shift")
    rng = np.random.default_rng(0)
    base = rng.normal(-20.0, 5.0, (5, 4))
    errors, n_words = rng.integers(0, 4, (5, 4)), rng.integers(5, 12, (5, 4))
    real = np.ones((5, 4), dtype=bool)
    real[1, 3] = False
    real[4, 1:] = False
    tuned = base + rng.normal(0.0, 3.0, (5, 1)) - 0.5 * errors + 0.25 * n_words
    tuned[1, 3] = tuned[4, 0] = 1e6  # padding, and the one hypothesis of list 4
    found = script.shift(base, tuned, errors, n_words, real)
    assert found["lists"] == 4
    assert (found["per_error"], found["per_word"]) == (pytest.approx(-0.5), pytest.approx(0.25))
    clm, slm = str(setup["models"]["clm"]), str(setup["models"]["slm"])
    script.main(["--set", str(setup["dev"][0]), "--base", clm, "--tuned", clm, "--tuned", slm])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[1].strip() for r in rows] == [clm, slm]
    assert [float(x) for x in rows[0][2:7]] == [4, 0, 0, 0, 0]
    assert float(rows[1][4]) != 0
    with pytest.raises(SystemExit) as err:
        script.main(["--set", str(setup["root"] / "missing"), "--base", clm, "--tuned", slm])
    assert err.value.code == 2 and "missing: N-best input not found" in capsys.readouterr().err
