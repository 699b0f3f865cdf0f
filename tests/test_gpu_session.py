"""local/gpu/gpu_session.py: the CPU dry run of a GPU session goes through every stage and leaves sane outputs."""
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from slm_lm.bin import pretrain as pretrain_cli
from slm_lm.bpe import train_bpe
from slm_lm.config import KINDS
from slm_lm.scorer import Scorer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "local" / "gpu" / "gpu_session.py"
TEXT = """IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH
AND THE EARTH WAS WITHOUT FORM AND VOID AND DARKNESS WAS UPON THE FACE OF THE DEEP
AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS
AND GOD SAID LET THERE BE LIGHT AND THERE WAS LIGHT
IT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_session")
    (d / "train.txt").write_text(TEXT * 40)
    (d / "valid.txt").write_text(TEXT)
    train_bpe(d / "train.txt", d / "data", vocab_size=60)
    for name in ("train", "valid"):
        pretrain_cli.main(["encode", "--bpe-dir", str(d / "data"), "--text", str(d / f"{name}.txt"),
                           "--out", str(d / "data" / f"{name}.ids.xz")])
    return d / "data"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_dry_run_goes_through_every_stage_and_brings_back_a_scoring_ready_model(data, tmp_path):
    proc = run("--dry-run", "--data", data, "--out", tmp_path / "out", "--run-dir", tmp_path / "run", "--part-mib", "0.2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    parts = [f for f in files if f.startswith("model.tar.")]
    assert files == sorted(["curve.tsv", "session.log", "summary.json", "summary.md", *parts]) and len(parts) >= 2
    assert len(files) <= 8 and all((tmp_path / "out" / f).stat().st_size <= 16 * 2**20 for f in files)
    info = json.loads((tmp_path / "out" / "summary.json").read_text())
    stages = info["stages"]
    assert info["dry_run"] and list(stages) == ["tests", "parity", "latency_float32", "latency_bfloat16", "mfu", "train"]
    assert all(s["status"] == "ok" for s in stages.values()), stages
    assert stages["tests"]["results"]["passed"] >= 6 and "failed" not in stages["tests"]["results"]
    parity = stages["parity"]["results"]
    assert sorted(parity) == sorted(KINDS)
    assert all(0 < r["max_abs_diff"] < 0.5 and r["sentences"] == 5 for r in parity.values())  # bf16 really ran
    for dtype in ("float32", "bfloat16"):
        rows = stages[f"latency_{dtype}"]["results"]
        assert {(r["kind"], r["n"]) for r in rows} == {(k, n) for k in KINDS for n in (4, 8)}
        assert all(r["seconds"] > 0 for r in rows)
    mfu = stages["mfu"]["results"]
    assert mfu["matmul_peak_tflops"] > 0 and sorted(r["kind"] for r in mfu["kinds"]) == sorted(KINDS)
    for r in mfu["kinds"]:
        assert r["model_tflops"] == pytest.approx(6 * r["params_m"] * 1e6 * r["tokens_per_s"] / 1e12)
    card = stages["train"]["results"]
    assert card["kind"] == "slm" and card["updates"] > 0 and math.isfinite(card["valid_ce"]) and card["finished"]
    assert stages["train"]["parts"] == parts
    curve = (tmp_path / "out" / "curve.tsv").read_text().splitlines()
    assert curve[0].startswith("minutes\tupdates") and len(curve) >= 3
    with tarfile.open(fileobj=io.BytesIO(b"".join((tmp_path / "out" / p).read_bytes() for p in parts))) as tar:
        tar.extractall(tmp_path / "back")
    scorer = Scorer.from_pretrained(tmp_path / "back" / "model")
    assert scorer.model.config.kind == "slm" and all(math.isfinite(x) for x in scorer.score(["AND GOD SAID"]))
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("# GPU session (DRY RUN on CPU)") and "| slm |" in summary and "MFU" in summary

    # The second command resumes the run while its checkpoint is there.
    again = run("--dry-run", "--data", data, "--out", tmp_path / "out2", "--run-dir", tmp_path / "run",
                "--stages", "train", "--resume", "--train-minutes", "0.1")
    assert again.returncode == 0, again.stdout + again.stderr
    train = json.loads((tmp_path / "out2" / "summary.json").read_text())["stages"]["train"]
    assert train["note"] == "resumed" and train["results"]["updates"] > card["updates"]


def test_without_a_gpu_or_its_data_it_stops_with_one_line(data, tmp_path):
    missing = run("--data", tmp_path, "--out", tmp_path / "out")
    assert missing.returncode == 2 and missing.stderr.strip().endswith("train.ids.xz: missing (make it with "
                                                                       "slm-pretrain encode; see README.md)")
    if not torch.cuda.is_available():
        nogpu = run("--data", data, "--out", tmp_path / "out")
        assert nogpu.returncode == 2 and len(nogpu.stderr.strip().splitlines()) == 1
        assert "gpu_session: error: no CUDA device" in nogpu.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def gpu_session():
    spec = importlib.util.spec_from_file_location("gpu_session", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_stage_past_its_limit_is_stopped_and_reported(gpu_session, tmp_path):
    args = gpu_session.parse_args(["--dry-run", "--data", str(tmp_path), "--out", str(tmp_path / "out"),
                                   "--run-dir", str(tmp_path / "run")])
    result = gpu_session.Session(args).call("sleep", [sys.executable, "-c", "import time; time.sleep(30)"], 1)
    assert result["status"] == "timed out" and result["seconds"] < 20


def test_a_second_command_without_the_checkpoint_trains_a_run_that_fits_it(gpu_session):
    assert gpu_session.train_budget(True, True, 12, 300) == (12, "resumed")
    assert gpu_session.train_budget(False, False, 12, 300) == (12, "new run")  # command 1: a second one follows
    minutes, note = gpu_session.train_budget(False, True, 12, 300)
    assert minutes == 5 and note.startswith("no checkpoint")
    assert gpu_session.train_budget(False, True, 3, 300)[0] == 3
