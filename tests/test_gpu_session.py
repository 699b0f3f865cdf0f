"""local/gpu/gpu_session.py: `prepare` builds a data folder that fits the travel limit; the CPU dry run of
`run` goes through every stage, trains both models and leaves files that would all come back."""
import importlib.util
import io
import json
import lzma
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import MIRROR
from slm_lm.bin import pretrain as pretrain_cli
from slm_lm.bin import subset_nbest
from slm_lm.model.bpe import train_bpe
from slm_lm.model.config import KINDS
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.pretrain import load_corpus
from slm_lm.rescoring.inputs import normalized_sets
from slm_lm.scoring.scorer import Scorer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "local" / "gpu" / "gpu_session.py"
TRACK_WER = ROOT / "local" / "analyses" / "track_wer.py"
NBEST = MIRROR / "librispeech_nbest" / "dev_other"
TEXT = """IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH
AND THE EARTH WAS WITHOUT FORM AND VOID AND DARKNESS WAS UPON THE FACE OF THE DEEP
AND THE SPIRIT OF GOD MOVED UPON THE FACE OF THE WATERS
AND GOD SAID LET THERE BE LIGHT AND THERE WAS LIGHT
IT'S A QUICK BROWN FOX JUMPING OVER THE LAZY DOG
"""


@pytest.fixture(scope="module")
def gpu_session():
    spec = importlib.util.spec_from_file_location("gpu_session", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """An encoded corpus as `slm-pretrain encode` makes it: 2,000 varied sentences (they compress like text)."""
    d = tmp_path_factory.mktemp("gpu_corpus")
    words = TEXT.split()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, size=rng.integers(4, 20))) for _ in range(2000)]
    (d / "train.txt").write_text(TEXT * 20 + "\n".join(lines) + "\n")
    (d / "valid.txt").write_text(TEXT)
    train_bpe(d / "train.txt", d / "corpus", vocab_size=60)
    for name in ("train", "valid"):
        pretrain_cli.main(["encode", "--bpe-dir", str(d / "corpus"), "--text", str(d / f"{name}.txt"),
                           "--out", str(d / "corpus" / f"{name}.ids.xz")])
    return d / "corpus"


@pytest.fixture(scope="module")
def dev_sets(tmp_path_factory):
    """Every 400th utterance of both dev sets: a folder with dev_clean/ and dev_other/, and the --dev-sets value."""
    d = tmp_path_factory.mktemp("gpu_dev_sets")
    for name in ("dev_clean", "dev_other"):
        subset_nbest.main([str(MIRROR / "librispeech_nbest" / name), str(d / name), "--every", "400"])
    return d, f"{d / 'dev_clean'},{d / 'dev_other'}"


def run(*args, script=SCRIPT):
    """The script's run (a timeout of an hour stops a hung run: the dry run takes 4 minutes on 2 quiet cores)."""
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True, timeout=3600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_prepare_cuts_the_corpus_to_what_fits_beside_the_repository(gpu_session, corpus, dev_sets, tmp_path):
    roomy = run("prepare", "--corpus", corpus, "--data", tmp_path / "all", "--nbest", NBEST, "--dev-sets", dev_sets[1])
    assert roomy.returncode == 0, roomy.stdout + roomy.stderr
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted(
        ["bpe.model", "tokens.txt", "train.ids.xz", "train.ids.json", "valid.ids.xz", "valid.ids.json",
         "nbest_texts.txt.xz", "dev_texts.txt.xz", "gpu_session.json"])
    assert (tmp_path / "all" / "train.ids.xz").read_bytes() == (corpus / "train.ids.xz").read_bytes()
    with lzma.open(tmp_path / "all" / "nbest_texts.txt.xz", "rt") as handle:
        texts = handle.read().splitlines()
    assert texts == load_nbest(NBEST, nbest=10).unique_texts() and len(texts) > 10_000
    with lzma.open(tmp_path / "all" / "dev_texts.txt.xz", "rt") as handle:
        dev_texts = handle.read().splitlines()
    sets = normalized_sets([load_nbest(dev_sets[0] / name, nbest=10) for name in ("dev_clean", "dev_other")])
    assert dev_texts == sorted(set(sets[0].unique_texts()) | set(sets[1].unique_texts())) and len(dev_texts) > 100

    repo, carried = gpu_session.travel_bytes(ROOT, [tmp_path / "all"])
    whole = (corpus / "train.ids.xz").stat().st_size
    limit = (repo + carried - whole + whole / 2) / 2**20  # room for about half of the corpus
    data = tmp_path / "data"
    proc = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1],
               "--travel-mib", limit, "--spare-mib", 0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    repo, carried = gpu_session.travel_bytes(ROOT, [data])
    assert repo + carried <= limit * 2**20
    kept, every = load_corpus(data / "train.ids.xz"), load_corpus(corpus / "train.ids.xz")
    assert len(every) / 4 < len(kept) < len(every) and all(np.array_equal(a, b) for a, b in zip(kept, every))
    assert f"{len(kept)} of {len(every)} training sentences" in proc.stdout

    again = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1],
                "--travel-mib", limit, "--spare-mib", 0)  # a folder it made: made again
    assert again.returncode == 0 and len(load_corpus(data / "train.ids.xz")) == len(kept)
    full = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1],
               "--travel-mib", repo / 2**20)
    assert full.returncode == 2 and "no room for training sentences" in full.stderr
    for other in (corpus, tmp_path / "user"):  # a folder it did not make is left alone
        (tmp_path / "user").mkdir(exist_ok=True)
        (tmp_path / "user" / "notes.txt").write_text("mine")
        before = sorted(p.name for p in other.iterdir())
        refused = run("prepare", "--corpus", corpus, "--data", other, "--nbest", NBEST, "--dev-sets", dev_sets[1])
        assert refused.returncode == 2 and refused.stderr.startswith("gpu_session: error: --data")
        assert len(refused.stderr.strip().splitlines()) == 1 and sorted(p.name for p in other.iterdir()) == before


def test_a_failed_prepare_leaves_no_half_made_data_folder(corpus, dev_sets, tmp_path):
    """`prepare` stopped by the travel limit left --data with the tokenizer, the validation corpus and the
    N-best texts in it; its files are now made in a folder inside --data and moved into it together, so a
    failure leaves --data as it was: absent, or an earlier `prepare`'s, byte for byte."""
    data = tmp_path / "data"
    tiny = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1],
               "--travel-mib", 1)
    assert tiny.returncode == 2 and "no room for training sentences" in tiny.stderr, tiny.stderr
    assert len(tiny.stderr.strip().splitlines()) == 1 and not data.exists()
    made = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1])
    assert made.returncode == 0, made.stderr
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    again = run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets", dev_sets[1],
                "--travel-mib", 1)
    assert again.returncode == 2 and {p.name: p.read_bytes() for p in data.iterdir()} == before


def test_dry_run_trains_both_models_and_everything_would_come_back(gpu_session, corpus, dev_sets, tmp_path):
    few = tmp_path / "few_dev_sets"  # 2 utterances of each set: the track stage and this test score fewer texts
    for name in ("dev_clean", "dev_other"):
        subset_nbest.main([str(dev_sets[0] / name), str(few / name), "--every", "4"])
    data = tmp_path / "data"
    assert run("prepare", "--corpus", corpus, "--data", data, "--nbest", NBEST, "--dev-sets",
               f"{few / 'dev_clean'},{few / 'dev_other'}").returncode == 0
    proc = run("run", "--dry-run", "--data", data, "--out", tmp_path / "out", "--run-dir", tmp_path / "run",
               "--batch-tokens", 256, "--train-minutes", 0.05)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpu_session: would travel" in proc.stdout and "gpu_session: comes back: " in proc.stdout
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    parts = [f for f in files if f.startswith("models.tar.")]
    assert files == sorted(["curves.tsv", "session.log", "summary.json", "summary.md", *parts]) and len(parts) >= 2
    assert all((tmp_path / "out" / f).stat().st_size <= 16 * 2**20 for f in files)
    info = json.loads((tmp_path / "out" / "summary.json").read_text())
    stages = info["stages"]
    assert info["dry_run"] and list(stages) == ["tests", "parity", "latency_float32", "latency_bfloat16", "rescoring",
                                                "mfu", "attention", "step_512", "window", "train_slm",
                                                "train_clm", "track", "pack"]
    assert all(s["status"] == "ok" for s in stages.values()), stages
    assert stages["tests"]["results"]["passed"] >= 6 and "failed" not in stages["tests"]["results"]
    parity = stages["parity"]["results"]
    assert sorted(parity) == sorted(KINDS)
    assert all(0 < r["max_abs_diff"] < 0.5 and r["sentences"] == 5 for r in parity.values())  # bf16 really ran
    for dtype in ("float32", "bfloat16"):
        rows = stages[f"latency_{dtype}"]["results"]
        assert {(r["kind"], r["n"]) for r in rows} == {(k, n) for k in KINDS for n in (4, 8)}
    rescoring = stages["rescoring"]["results"]
    assert sorted(r["kind"] for r in rescoring) == ["clm", "mlm", "slm"] and all(r["sent_per_s"] > 0 for r in rescoring)
    mfu = stages["mfu"]["results"]
    assert mfu["matmul_peak_tflops"] > 0 and sorted(r["kind"] for r in mfu["kinds"]) == sorted(KINDS)
    attention = stages["attention"]["results"]
    assert attention["scoring"]["max_abs_diff_nats"] < 0.5 and attention["scoring"]["flex"]["median_s"] > 0
    rows = stages["step_512"]["results"]  # the padded step before against slm-pretrain's packed step
    assert {(r["kind"], r["path"], r["batch_tokens"], r["d_model"]) for r in rows} == {
        (k, p, 512, 64) for k in ("slm", "clm") for p in ("padded", "packed")}
    assert all(r["tokens_per_s"] > 0 and r["counted_flops_per_token"] > 0 for r in rows)
    cards = {kind: stages[f"train_{kind}"]["results"] for kind in ("slm", "clm")}
    assert cards["slm"]["budget_minutes"] == cards["clm"]["budget_minutes"]  # the same training time
    for kind, card in cards.items():
        assert card["kind"] == kind and card["updates"] > 0 and math.isfinite(card["valid_ce"]) and card["finished"]
        assert card["batch_tokens"] == 256  # --batch-tokens reaches both runs (one row: the cheapest step)
        assert card["parameters"] == cards["slm"]["parameters"] > 10_000_000  # the shape the GPU trains
    curves = (tmp_path / "out" / "curves.tsv").read_text().splitlines()
    assert curves[0].startswith("kind\tminutes\tupdates") and {c.split("\t")[0] for c in curves[1:]} == {"slm", "clm"}
    with tarfile.open(fileobj=io.BytesIO(b"".join((tmp_path / "out" / p).read_bytes() for p in parts))) as tar:
        tar.extractall(tmp_path / "back")
    with lzma.open(data / "dev_texts.txt.xz", "rt") as handle:
        texts = handle.read().splitlines()
    with lzma.open(tmp_path / "back" / "track_scores.tsv.xz", "rt") as handle:
        header, *rows = handle.read().splitlines()
    names = header.split("\t")[1:]
    assert [r.split("\t")[0] for r in rows] == texts
    assert [r["model"] for r in stages["track"]["results"]] == names
    for kind in ("slm", "clm"):
        scorer = Scorer.from_pretrained(tmp_path / "back" / kind / "model")
        assert scorer.model.config.kind == kind and all(math.isfinite(x) for x in scorer.score(["AND GOD SAID"]))
        kept = [n for n in names if n.startswith(f"{kind}-")]  # the model of every validation after update 0
        validated = [int(r.split("\t")[1]) for r in (tmp_path / "back" / kind / "curve.tsv").read_text().splitlines()[1:]]
        assert [int(n.split("-")[1]) for n in kept] == [u for u in validated if u > 0] and kept
        last = [float(r.split("\t")[1 + names.index(kept[-1])]) for r in rows]  # the exported model's scores
        assert last == pytest.approx(scorer.score(texts), abs=1e-3)
    assert stages["pack"]["parts"] == parts

    evaluated = run("--returned", tmp_path / "back", "--nbest", few, "--out", tmp_path / "track",
                    script=TRACK_WER)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    table = (tmp_path / "track" / "track.md").read_text().splitlines()
    assert [line.split(" | ")[0].strip("| ") for line in table[2:]] == ["AM only", "score:lm (first pass)",
                                                                         *(n.split("-")[0] for n in names)]
    assert all(float(cell.split()[0]) >= 0 for line in table[2:] for cell in line.strip("|").split(" | ")[4:6])
    missing = run("--returned", tmp_path / "back", "--nbest", dev_sets[0], "--out",
                  tmp_path / "track_full", script=TRACK_WER)  # texts the track stage did not score
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "track_scores.tsv.xz has no score of" in missing.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("# GPU session (DRY RUN on CPU)") and "| slm |" in summary and "MFU" in summary
    assert "## trained models" in summary and summary.count(" | True |") == 2
    window = summary.split("## window: ok")[1].split("##")[0].strip().splitlines()[2:]  # the shape for 0.05 minutes
    assert window[0].startswith("0.05 training minutes") and [line.split(" | ")[0] for line in window[3:]] == ["| slm",
                                                                                                          "| clm"]


def test_the_dry_run_hides_what_the_gpu_machine_lacks(gpu_session, tmp_path):
    args = gpu_session.parse_args(["run", "--dry-run", "--data", str(tmp_path), "--out", str(tmp_path / "out"),
                                   "--run-dir", str(tmp_path / "run")])
    session = gpu_session.Session(args)
    for module in gpu_session.MISSING_ON_THE_GPU:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], env=session.env, capture_output=True)
        assert proc.returncode == 1 and b"ModuleNotFoundError" in proc.stderr
    assert subprocess.run([sys.executable, "-c", "import slm_lm.scoring.scorer"], env=session.env).returncode == 0


def test_without_a_gpu_or_its_data_it_stops_with_one_line(corpus, tmp_path):
    missing = run("run", "--data", tmp_path, "--out", tmp_path / "out")
    assert missing.returncode == 2 and missing.stderr.strip().endswith(
        "train.ids.xz: missing (make it with `gpu_session.py prepare`)")
    if not torch.cuda.is_available():
        for name in ("bpe.model", "tokens.txt", "train.ids.xz", "valid.ids.xz"):
            (tmp_path / name).write_bytes((corpus / name).read_bytes())
        for name in ("nbest_texts.txt.xz", "dev_texts.txt.xz"):
            (tmp_path / name).write_bytes(b"")
        nogpu = run("run", "--data", tmp_path, "--out", tmp_path / "out")
        assert nogpu.returncode == 2 and len(nogpu.stderr.strip().splitlines()) == 1
        assert "gpu_session: error: no CUDA device" in nogpu.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("theirs", ["summary.md", "models.tar.00", "session.log"])
def test_results_replace_only_an_earlier_sessions(gpu_session, corpus, tmp_path, theirs):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    for name in gpu_session.DATA_FILES:
        (data / name).write_bytes((corpus / name).read_bytes() if (corpus / name).is_file() else b"")
    out.mkdir()
    (out / theirs).write_text("a user's own file\n")
    refused = run("run", "--dry-run", "--data", data, "--out", out, "--run-dir", tmp_path / "run")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(f"gpu_session: error: {out / theirs}: not written by gpu_session")
    assert (out / theirs).read_text() == "a user's own file\n" and sorted(os.listdir(out)) == [theirs]
    (out / "session.log").write_text(gpu_session.LOG_HEADER + "an earlier run's output\n")
    args = gpu_session.parse_args(["run", "--dry-run", "--data", str(data), "--out", str(out),
                                   "--run-dir", str(tmp_path / "run")])
    assert gpu_session.check_inputs(args) == "cpu (dry run)"


def test_a_stage_past_its_limit_is_stopped_and_reported(gpu_session, tmp_path):
    args = gpu_session.parse_args(["run", "--dry-run", "--data", str(tmp_path), "--out", str(tmp_path / "out"),
                                   "--run-dir", str(tmp_path / "run")])
    result = gpu_session.Session(args).call("sleep", [sys.executable, "-c", "import time; time.sleep(30)"], 1)
    assert result["status"] == "timed out" and result["seconds"] < 20


def test_both_models_get_the_same_share_of_what_is_left(gpu_session):
    assert gpu_session.training_minutes(400, 3.0, 40, 2.0) == pytest.approx(160 / 60)  # (400 / 2 - 40) s each
    assert gpu_session.training_minutes(1000, 3.0, 40, 2.0) == 3.0  # at most the cap
    assert gpu_session.training_minutes(300, 3.0, 40, 2.0) == 0.0  # under the least: not worth starting
