"""The equal-budget comparison's helpers on tiny inputs: N-best subsets, loss curves, the table."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import MIRROR
from fork_server import started
from slm_lm import build_lm
from slm_lm.bin import subset_nbest
from slm_lm.model.bpe import train_bpe
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.scoring.scorer import Scorer

ROOT = Path(__file__).resolve().parents[1]
ANALYSES = ROOT / "local" / "analyses"
SHARED = MIRROR / "librispeech_nbest"


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare_table = load_script(ANALYSES / "compare_table.py")
plot_lm_curves = load_script(ANALYSES / "plot_lm_curves.py")


def test_subset_keeps_every_kth_utterance_with_its_references(tmp_path):
    subset_nbest.main([str(SHARED / "dev_clean"), str(tmp_path / "sub"), "--every", "500"])
    full = load_nbest(SHARED / "dev_clean", nbest=10)
    sub = load_nbest(tmp_path / "sub", nbest=10)
    expected = sorted(full.hyps)[::500]
    assert sorted(sub.hyps) == expected and sorted(sub.refs) == expected
    for utt in expected:
        assert sub.refs[utt] == full.refs[utt]
        assert [h.text for h in sub.hyps[utt]] == [h.text for h in full.hyps[utt]]


def test_curves_read_the_last_run_of_each_epoch(tmp_path):
    exp = tmp_path / "slm"
    exp.mkdir()
    (exp / "train.log").write_text(
        "x (trainer:394) INFO: 1epoch results: [train] loss=7.0, [valid] loss=6.5, time=1\n"
        "x (trainer:394) INFO: 2epoch results: [train] loss=6.0, [valid] loss=9.9, time=1\n"
        "resumed\nx (trainer:394) INFO: 2epoch results: [train] loss=6.0, [valid] loss=5.5, time=1\n"
    )
    plot_lm_curves.main(["--exp", f"SLM={exp}", "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "lm_valid_loss.tsv").read_text().splitlines()[1:] == ["SLM\t1\t6.5", "SLM\t2\t5.5"]
    assert (tmp_path / "out" / "lm_valid_loss.png").stat().st_size > 1000
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="train.log: not found"):
        plot_lm_curves.main(["--exp", f"X={tmp_path / 'empty'}", "--out", str(tmp_path / "out")])


def test_comparison_table_reads_every_evaluation(tmp_path, capsys):
    (tmp_path / "text.txt").write_text("THE EARTH WAS WITHOUT FORM AND VOID\nAND GOD SAW THE LIGHT\n" * 50)
    tokenizer = train_bpe(tmp_path / "text.txt", tmp_path / "bpe", vocab_size=40)
    for i, kind in enumerate(compare_table.KINDS):
        Scorer(build_lm(kind, tokenizer.vocab_size, "tiny"), tokenizer).save_pretrained(tmp_path / "models" / kind)
        ev = tmp_path / "eval" / kind
        (ev / "blimp").mkdir(parents=True)
        (ev / "heldout.tsv").write_text(f"1\t-{10 + i}\t5\n2\t-{10 + i}\t5\n")  # CE = (10 + i) / 5
        (ev / "blimp" / "blimp_results.json").write_text(json.dumps({"overall": 50.0 + i}))
        for dev, test in (("dev_clean", "dev_other"), ("dev_other", "dev_clean")):
            report = dict(name=test, wer_am=4.0, wer_file=3.0, wer_rescored=3.5 - i / 10, wer_oracle=1.0)
            (ev / f"tune_{dev}").mkdir()
            (ev / f"tune_{dev}" / "tuning.json").write_text(json.dumps({"best": {"lambdas": [0.1 * i]}, "sets": [report]}))
    table = compare_table.comparison_table(tmp_path)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()[2:]}
    assert rows["clm"][1:4] == ["2.200", f"{torch.tensor(2.2).exp():.1f}", "51.0"]
    assert rows["mlm"][2].endswith("(pseudo)")
    assert rows["bilm"][4] == "3.20 (λ=0.3)"
    assert float(rows["bilm"][0]) > float(rows["slm"][0])  # two towers
    assert rows["AM only (no LM)"][-2:] == ["4.00", "4.00"]
    # an unfinished evaluation is reported as such, not dropped
    (tmp_path / "eval" / "mlm" / "tune_dev_other" / "tuning.json").unlink()
    table = compare_table.comparison_table(tmp_path)
    assert "| mlm | not evaluated yet: eval/mlm/tune_dev_other/tuning.json missing |" in table
    assert "| clm | " in table and "| AM only (no LM) |" in table
    compare_table.main([str(tmp_path)])
    assert capsys.readouterr().out == table + "\n"
    with pytest.raises(SystemExit, match=r"^compare_table: error: .*models: no finished evaluation under eval/$"):
        compare_table.main([str(tmp_path / "models")])


def test_compare_scripts_are_valid_shell():
    for script in ("compare_lms.sh", "eval_lm.sh", "train_compare_cpu.sh", "pretrain_equal.sh"):
        subprocess.run(["bash", "-n", str(ANALYSES / script)], check=True)


# the third-party modules of the comparison's steps (slm_lm's commands import them when they run), imported once
# by a fork server
STEPS = ["torch", "numpy", "sentencepiece", "safetensors.torch", "jiwer", "yaml", "espnet2.bin.lm_train"]


@pytest.fixture()
def served_python():
    """A `python` that runs each step in a child of a fork server (tests/fork_server.py), importing slm_lm and
    ESPnet afresh."""
    with started(sys.executable, STEPS, dict(os.environ)) as server:
        yield server.bin / "python"


def test_compare_lms_runs_end_to_end_on_tiny_inputs(tmp_path, served_python):
    """The one-command comparison, scaled down: 2 books, a few updates, 10 dev utterances, 2 BLiMP pairs (its
    steps run by the `PYTHON` it is given)."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("pg2150.txt.gz", "pg2147.txt.gz"):
        (books / name).symlink_to(MIRROR / "text" / "gutenberg" / name)
    env = dict(os.environ, SLM_LM_DATA=str(MIRROR), BOOKS=str(books), BPE_SIZE="1000", VALID_EVERY="50",
               TRAIN_EVERY="1", VALID_LINES="5", NBEST_EVERY="300", BLIMP_LIMIT="2",
               LM_TRAIN_ARGS="--max_epoch 1 --num_iters_per_epoch 3 --num_att_plot 0", PYTHON=str(served_python))
    out = tmp_path / "compare"
    run = subprocess.run(["bash", str(ANALYSES / "compare_lms.sh"), str(out)], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    table = (out / "comparison.md").read_text()
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:2 + len(compare_table.KINDS)]] == \
        list(compare_table.KINDS)
    assert "not evaluated" not in table
    assert len(load_nbest(out / "nbest_every300" / "dev_clean", nbest=10).hyps) == 10
    for kind in compare_table.KINDS:
        log = (out / "models" / kind / "train.log").read_text()
        assert "1epoch results" in log and "2epoch" not in log  # LM_TRAIN_ARGS (1 epoch) reached every kind
        blimp = json.loads((out / "eval" / kind / "blimp" / "blimp_results.json").read_text())
        assert blimp["pairs"] == 2 * 67
    # finished steps are skipped: a second run retrains nothing and gives the same table
    logs = {kind: (out / "models" / kind / "train.log").stat().st_size for kind in compare_table.KINDS}
    subprocess.run(["bash", str(ANALYSES / "compare_lms.sh"), str(out)], env=env, capture_output=True, check=True)
    assert (out / "comparison.md").read_text() == table
    assert logs == {kind: (out / "models" / kind / "train.log").stat().st_size for kind in compare_table.KINDS}


def test_unigram_floor_prefers_frequent_tokens(tmp_path):
    unigram_ce = load_script(ANALYSES / "unigram_ce.py")
    (tmp_path / "train.txt").write_text("THE THE THE THE THE THE LORD\n" * 200 + "ZEBRA\n")
    tokenizer_dir = tmp_path / "bpe"
    train_bpe(tmp_path / "train.txt", tokenizer_dir, vocab_size=30)
    (tmp_path / "common.txt").write_text("THE THE THE\n")
    (tmp_path / "rare.txt").write_text("ZEBRA ZEBRA ZEBRA\n")
    model = str(tokenizer_dir / "bpe.model")
    common = unigram_ce.unigram_ce(model, str(tmp_path / "train.txt"), str(tmp_path / "common.txt"))
    rare = unigram_ce.unigram_ce(model, str(tmp_path / "train.txt"), str(tmp_path / "rare.txt"))
    assert 0 < common < 2 < rare
