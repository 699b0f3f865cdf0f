"""CI smoke test of egs/librispeech_slm: every stage on the micro mini corpus, plus the recipe's
error paths (stage out of order, unknown option, missing corpus), the offline download stage on
a fake local mirror (checksums, resume, bad archive) and resumption of a killed decode."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "egs" / "librispeech_slm"
sys.path.insert(0, str(RECIPE / "local"))

import data_prep  # noqa: E402
import decode_nbest  # noqa: E402
import download_librispeech  # noqa: E402
import slurm_cluster  # noqa: E402
from fork_server import started  # noqa: E402

from slm_lm import pretrained  # noqa: E402
from slm_lm.data.librispeech import read_subset  # noqa: E402
from slm_lm.common.errors import InputError  # noqa: E402
from slm_lm.scoring.scorer import Scorer  # noqa: E402


def run_recipe(*args, check=True, timeout=900, env=None, python=None):
    """./run.sh ARGS from the recipe directory with this test's Python as the active python3 (or `--python
    PYTHON`); returns the CompletedProcess."""
    args = (*args, "--python", str(python)) if python else args
    env = dict(env or os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    proc = subprocess.run(["bash", "run.sh", *args], cwd=RECIPE, capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"run.sh {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


# ---------------------------------------------------------------------------------------------
# The whole recipe on micro data


# the third-party modules of the recipe's Python commands (slm_lm's commands import theirs when they run), imported
# once by the fork server
RECIPE_MODULES = ["torch", "numpy", "sentencepiece", "safetensors.torch", "jiwer", "soundfile", "yaml",
                  "espnet2.bin.asr_train", "espnet2.bin.asr_inference", "espnet2.bin.lm_train"]


@pytest.fixture(scope="module")
def recipe_python():
    """The `--python` of the micro run and of the tests that run its stages again: each command runs in a child
    of a fork server (tests/fork_server.py) that has imported the third-party modules of ESPnet's and slm_lm's
    commands; slm_lm and ESPnet are imported afresh by each command."""
    with started(sys.executable, RECIPE_MODULES, dict(os.environ)) as server:
        yield server.bin / "python"


@pytest.fixture(scope="module")
def micro(tmp_path_factory, recipe_python):
    """Run all stages 0-8 once with --micro true (a few minutes on 2 cores), with the MWER fine-tuning of
    --mwer_utts 6 (6 more utterances decoded, 2 updates). Its tests and the Slurm cluster's are one work unit of
    the test workers (tests/conftest.py, GROUPS)."""
    work = tmp_path_factory.mktemp("micro")
    # the timeout stops a hung run, not a slow one: 71 s alone on 2 quiet cores, 7 minutes in CI at load 5
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), *MWER, timeout=3600,
                      python=recipe_python)
    return work, proc


def decode_dir_of(work, tag="decode_asr_micro_asr_model_valid.acc.ave"):
    """ESPnet's decode dir: exp/asr_<asr config>_raw_en_bpe<N>/<inference tag>."""
    return work / "exp" / "asr_train_asr_mini_raw_en_bpe100" / tag


RESCORE_SLM = "decode_asr_micro_asr_model_valid.acc.ave_rescore_lm_train_lm_slm_mini_en_bpe100"
MWER = ("--mwer_utts", "6")


def test_micro_all_stages(micro):
    work, proc = micro
    for n in range(9):
        assert f"stage {n} done" in proc.stdout, f"stage {n} did not finish"
    for n in (0, 1, 2, 3, 8):
        assert list((work / "exp" / "logs").glob(f"stage{n}_*.log")), f"stage {n} wrote no log"
    # ESPnet-style experiment names (config tags) and training logs in them
    exp = work / "exp"
    assert "epoch results" in (exp / "asr_train_asr_mini_raw_en_bpe100" / "train.log").read_text()
    assert (exp / "lm_train_lm_slm_mini_en_bpe100" / "train.log").exists()
    # every finished piece of work says what made it
    for d in ("asr_train_asr_mini_raw_en_bpe100", "lm_train_lm_slm_mini_en_bpe100"):
        assert (exp / d / ".done").read_text().startswith("python\n-m\n")
    assert "conf/train_asr_mini.yaml md5=" in (exp / "asr_stats_raw_en_bpe100" / ".done").read_text()
    # collect-stats ran as nj=2 key-file shards, aggregated
    stats = exp / "asr_stats_raw_en_bpe100"
    assert sorted(p.name for p in (stats / "logdir").glob("stats.*.log")) == ["stats.1.log", "stats.2.log"]
    shapes = (stats / "train" / "speech_shape").read_text().splitlines()
    assert len(shapes) == len((work / "data" / "train" / "wav.scp").read_text().splitlines())
    # --ngpu N > 1 trains with DDP: both trainings get ESPnet's --multiprocessing_distributed true
    # (ESPnet turns it off by itself with 0 or 1 GPU); run_local.sh logs the command on the first line
    for d in ("asr_train_asr_mini_raw_en_bpe100", "lm_train_lm_slm_mini_en_bpe100"):
        log = exp / d / "train.log"
        assert "--multiprocessing_distributed true" in log.read_text().splitlines()[0], log
    # Kaldi-style data dirs, sorted and consistent
    for s in ("train", "dev", "dev_clean", "dev_other", "test_clean", "test_other"):
        d = work / "data" / s
        keys = [line.split()[0] for line in (d / "wav.scp").read_text().splitlines()]
        assert keys == sorted(keys) and keys
        assert keys == [line.split()[0] for line in (d / "text").read_text().splitlines()]
        assert keys == [line.split()[0] for line in (d / "utt2spk").read_text().splitlines()]
    # no sentence shared between train and dev/test, and the LM text has no dev/test sentence
    def texts(s):
        return {line.split(" ", 1)[1] for line in (work / "data" / s / "text").read_text().splitlines()}
    held_out = set().union(*(texts(s) for s in ("dev_clean", "dev_other", "test_clean", "test_other")))
    assert not texts("train") & held_out
    lm_text = set((work / "data" / "lm" / "train.txt").read_text().splitlines())
    assert len(lm_text) > 10000 and not lm_text & held_out
    # N-best layout with per-scorer scores, decoded in 2 shards; ESPnet's scoring files next to it
    decode = decode_dir_of(work)
    for s in ("dev_clean", "test_other"):
        text1 = (decode / s / "1best_recog" / "text").read_text().splitlines()
        ref = (work / "data" / s / "text").read_text().splitlines()
        assert len(text1) == len(ref)
        line = (decode / s / "1best_recog" / "scores").read_text().splitlines()[0]
        scores = json.loads(line.split(" ", 1)[1])
        assert {"decoder", "ctc", "length_bonus"} <= set(scores)
        assert (decode / s / "2best_recog" / "text").exists()
        assert sorted(p.name for p in (decode / s / "logdir").glob("keys.*")) == ["keys.1", "keys.2"]
        assert (decode / s / "text").read_text().splitlines() == text1
        hyp_trn = (decode / s / "score_wer" / "hyp.trn").read_text().splitlines()
        uttid, words = text1[0].split(" ", 1) if " " in text1[0] else (text1[0], "")
        assert hyp_trn[0] == f"{words}\t({uttid.split('-')[0]}-{uttid})"
        assert len((decode / s / "score_wer" / "ref.trn").read_text().splitlines()) == len(ref)
        assert "|Sum/Avg|" in (decode / s / "score_wer" / "result.txt").read_text()
        # CER beside WER, as asr.sh's score_cer: characters with <space>
        assert "### CER," in (decode / s / "score_cer" / "result.txt").read_text()
        assert (decode / s / "score_cer" / "hyp.trn").read_text().count("\t(") == len(ref)
    # rescoring, in a decode dir named with the ASR model and LM tags, and the results table
    rescored = decode.parent / RESCORE_SLM
    tuning = json.loads((rescored / "tuning.json").read_text())
    assert 0 <= tuning["best"]["lambdas"][0] <= 5
    for s in ("dev_clean", "test_other"):
        assert (rescored / s / "text").read_text() == (rescored / s / "1best_recog" / "text").read_text()
        assert "|Sum/Avg|" in (rescored / s / "score_wer" / "result.txt").read_text()
    assert len(list((rescored / "logdir").glob("cache.*"))) == 2  # LM scoring in 2 shards
    results = (work / "RESULTS.md").read_text()
    assert "|dataset|" in results and "baseline (AM only)" in results and "oracle (10-best)" in results
    assert "## Summary (WER %)" in results and "## Summary (CER %)" in results
    for s in ("dev_clean", "dev_other", "test_clean", "test_other"):
        assert f"|{s}|" in results
    # the SLM against the baseline, per set and over the test sets together (word-weighted)
    gains = {row.split("|")[1]: row.split("|") for row in results.splitlines() if "|slm|" in row}
    words = {s: sum(len(line.split()) - 1 for line in (work / "data" / s / "text").read_text().splitlines())
             for s in ("test_clean", "test_other")}
    pooled = sum(float(gains[s][3]) * n for s, n in words.items()) / sum(words.values())
    assert float(gains["test_clean + test_other"][3]) == pytest.approx(pooled, abs=0.006)
    assert all(0 <= float(row[7]) <= 1 for row in gains.values())  # P(rescored better)
    assert "RESULTS" in proc.stdout  # the table is printed at the end


def test_mwer_fine_tunes_the_slm_on_training_lists_and_is_reused(micro, recipe_python):
    """--mwer_utts 6: stage 6 decodes a draw of 6 training utterances, stage 7 fine-tunes stage 5's slm on their
    lists and rescores dev/test with it, stage 8 adds its row; a re-run reuses all of it."""
    work, _ = micro
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), "--stage", "6", "--stop_stage", "8",
                      *MWER, timeout=600, python=recipe_python)
    mwer = decode_dir_of(work).parent / (decode_dir_of(work).name + "_mwer6_lm_train_lm_slm_mini_en_bpe100")
    rescored = mwer.parent / mwer.name.replace("_mwer6_", "_rescore_mwer6_")
    for d in (decode_dir_of(work) / "train_sub6", mwer, rescored):
        assert f"{d}: reused" in proc.stdout
    train = (work / "data" / "train" / "text").read_text().splitlines()
    assert set((work / "data" / "train_sub6" / "text").read_text().splitlines()) <= set(train)
    card = json.loads((mwer / "model" / "training.json").read_text())
    assert card["training"].startswith("discriminative") and card["budget_updates"] == 2
    assert [line.split("\t")[0] for line in (mwer / "curve.tsv").read_text().splitlines()] == ["updates", "0", "1", "2"]
    assert Scorer.from_pretrained(mwer / "model").kind == "slm"  # the best of them: an ordinary model dir
    results = (work / "RESULTS.md").read_text()
    assert "|rescored, slm|rescored, slm-mwer|" in results and "|test_clean|slm-mwer|" in results


def test_killed_decode_resumes(micro, recipe_python):
    """A decode killed mid-way resumes from its partial results and redoes nothing finished."""
    work, _ = micro
    s = decode_dir_of(work) / "dev_clean"
    before = (s / "3best_recog" / "scores").read_text()
    # simulate a kill: final files gone, one job's last record torn, one record missing
    partials = sorted((s / "logdir").glob("output.*/partial.jsonl"))
    lines = partials[0].read_text().splitlines()
    partials[0].write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    for d in s.glob("*best_recog"):
        shutil.rmtree(d)
    (s / ".done").unlink()
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work),
                      "--stage", "6", "--stop_stage", "6", timeout=600, python=recipe_python)
    assert "stage 6 done" in proc.stdout
    assert (s / "3best_recog" / "scores").read_text() == before
    assert "incomplete record of an interrupted run" in (s / "logdir" / "decode.1.log").read_text()


def test_stages_rerun_and_reuse_by_what_they_make(micro, recipe_python):
    """ESPnet semantics: every selected stage runs; identical finished work is reused, a new LM kind
    is trained and rescored (the old recipe printed 'already done' and kept the old table)."""
    work, _ = micro
    asr_done = (work / "exp" / "asr_train_asr_mini_raw_en_bpe100" / ".done").stat().st_mtime_ns
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work),
                      "--stage", "5", "--stop_stage", "8", "--lm_kinds", "slm clm", timeout=900, python=recipe_python)
    for n in (5, 6, 7, 8):
        assert f"stage {n} done" in proc.stdout
    assert "already done" not in proc.stdout
    assert "lm_train_lm_slm_mini_en_bpe100: reused" in proc.stdout
    assert "lm_train_lm_clm_mini_en_bpe100: reused" not in proc.stdout
    assert (work / "exp" / "lm_train_lm_clm_mini_en_bpe100" / ".done").exists()
    assert (decode_dir_of(work).parent / RESCORE_SLM.replace("_slm_", "_clm_") / "tuning.json").exists()
    assert "rescored, clm" in (work / "RESULTS.md").read_text()
    # the whole default run again: everything reused, the ASR model untouched
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), timeout=600, python=recipe_python)
    assert proc.stdout.count(": reused") >= 4 + 1 + 4 + 1
    assert (work / "exp" / "asr_train_asr_mini_raw_en_bpe100" / ".done").stat().st_mtime_ns == asr_done


@pytest.mark.parametrize("options, tag", [
    (["--inference_asr_model", "valid.acc.best.pth"], "decode_asr_micro_asr_model_valid.acc.best"),
    (["--fusion_lm", "clm"],
     "decode_asr_micro_lm_lm_train_lm_clm_mini_en_bpe100_valid.loss.ave_asr_model_valid.acc.ave"),
])
def test_decoding_dirs_are_named_as_espnet_names_them(tmp_path, options, tag):
    """ESPnet's inference tag: --inference_asr_model's checkpoint, and the fusion LM's with its exp."""
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(tmp_path), "--stage", "7",
                      "--stop_stage", "7", *options, check=False)
    assert proc.returncode != 0
    assert f"asr_train_asr_mini_raw_en_bpe100/{tag}/dev_clean/.done is missing: run stage 6 first" in proc.stderr


def test_resources_never_redo_a_finished_training(micro, recipe_python):
    """Only --ngpu, --nj and the thread count differ: the stats and both trainings are reused, and nothing
    is renamed (the old recipe moved the finished experiments to .old.<time> and trained them again)."""
    work, _ = micro
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), "--stage", "4",
                      "--stop_stage", "5", "--ngpu", "1", "--nj", "1", "--train_threads", "1", timeout=600,
                      python=recipe_python)
    assert proc.stdout.count(": reused") == 3, proc.stdout
    assert not list(work.rglob("*.old.*"))


def test_training_options_name_the_experiment_and_a_finished_one_is_kept(micro, recipe_python):
    """--lm_train_args is part of the LM experiment's name (ESPnet's args tag), so a variant needs its own
    training; a finished training whose work changed (here its recorded command) stops the run, kept as
    it is: never renamed, deleted or retrained in place."""
    work, _ = micro
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), "--stage", "7",
                      "--stop_stage", "7", "--lm_train_args", "--seed 1", check=False, python=recipe_python)
    assert proc.returncode != 0
    assert "exp/lm_train_lm_slm_mini_en_bpe100_seed1/.done is missing: run stage 5 first" in proc.stderr
    lm = work / "exp" / "lm_train_lm_slm_mini_en_bpe100"
    done = (lm / ".done").read_text()
    before = sorted(p.name for p in lm.iterdir())
    (lm / ".done").write_text(done.replace("--resume\n", "--resume_other\n"))
    try:
        proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), "--stage", "5",
                          "--stop_stage", "5", check=False, python=recipe_python)
    finally:
        (lm / ".done").write_text(done)
    assert proc.returncode != 0 and f"{lm} holds a training finished by other work" in proc.stderr
    assert "--resume_other" in proc.stderr and "\n" not in proc.stderr.strip()
    assert sorted(p.name for p in lm.iterdir()) == before and not list(work.rglob("*.old.*"))


# ---------------------------------------------------------------------------------------------
# Cluster launchers: a fake `sbatch` on PATH records its arguments and runs the job script (each task
# of an array with its SLURM_ARRAY_TASK_ID, but task FAKE_SBATCH_SKIP: as one cancelled before it started,
# with exit status 0); it refuses GPU requests, as this machine has none.

FAKE_SBATCH = """#!/usr/bin/env bash
echo "$*" >> "${SBATCH_RECORD}"
array=1-1; gres=; script=
while [ $# -gt 0 ]; do
    case "$1" in
        --array) array=$2; shift 2 ;;
        --gres) gres=$2; shift 2 ;;
        --wait|--parsable|--*=*) shift ;;
        --*) shift 2 ;;
        *) script=$1; shift ;;
    esac
done
[ -z "${gres}" ] || { echo "fake sbatch: no GPUs in this test cluster" >&2; exit 1; }
array=${array%%%*}  # a throttle (1-N%M) runs the tasks in turn here anyway
rc=0
for ((i = ${array%-*}; i <= ${array#*-}; i++)); do
    [ "$i" != "${FAKE_SBATCH_SKIP:-}" ] || continue
    SLURM_ARRAY_TASK_ID=$i SLURM_JOB_ID=42 bash "${script}" || rc=1
done
exit ${rc}
"""


@pytest.fixture()
def fake_slurm(tmp_path):
    """Environment with the fake sbatch first on PATH; returns (env, record file)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(FAKE_SBATCH)
    (bindir / "sbatch").chmod(0o755)
    (bindir / "srun").write_text('#!/usr/bin/env bash\n[ "$1" = --export=ALL ] && shift\nexec "$@"\n')
    (bindir / "srun").chmod(0o755)
    record = tmp_path / "sbatch.args"
    env = dict(os.environ, PATH=f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SBATCH_RECORD=str(record),
               cmd_backend="slurm", slurm_partition="gpu")
    return env, record


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A real one-node Slurm cluster (tests/slurm_cluster.py: Debian's slurm-wlm and munge), started for this
    module's tests and stopped after them; returns the environment of run.sh with cmd_backend=slurm."""
    why = slurm_cluster.missing()
    if why:
        pytest.fail(why)
    with slurm_cluster.slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield dict(env, PATH=f"{Path(sys.executable).parent}:{env['PATH']}", cmd_backend="slurm")


def launch(cmd: str, args: str, env: dict) -> subprocess.CompletedProcess:
    """`${cmd} ARGS` of the recipe's cmd.sh, run from the recipe directory."""
    return subprocess.run(["bash", "-c", f". ./cmd.sh && ${{{cmd}}} {args}"], cwd=RECIPE, env=env,
                          capture_output=True, text=True, timeout=300)


# what a job sees (the launcher replaces the word JOB in the command: the partition's variable is named in
# lower case)
JOB_INFO = ("sh -c 'echo partition=$(printenv | grep -i ^slurm_job_partition= | cut -d= -f2) "
            "gpus=$CUDA_VISIBLE_DEVICES threads=$OMP_NUM_THREADS'")


def test_real_slurm_takes_the_options_the_launchers_pass(tmp_path, slurm):
    """Every option cmd.sh's launchers pass reaches a real sbatch (Slurm 22.05 here), which accepts it and runs
    the job: through conf/slurm.conf (CPU jobs in partition cpu, GPU jobs in partition gpu with --gres) and
    without it (the launcher's own options); a 2-node job is refused by this one-node cluster
    (EnforcePartLimits=ALL), by Slurm."""
    options = "--num_threads 3 --mem 1G --max_jobs_run 1 --name shards --time 1:00"
    proc = launch("train_cmd", f"{options} JOB=1:3 {tmp_path}/a/x.JOB.log {JOB_INFO}", slurm)
    assert proc.returncode == 0, proc.stderr
    for j in (1, 2, 3):
        assert "partition=cpu gpus= threads=3\n# ended (rc=0)" in (tmp_path / "a" / f"x.{j}.log").read_text()
    proc = launch("cuda_cmd", f"--gpu 2 JOB=1:2 {tmp_path}/g/x.JOB.log {JOB_INFO}", slurm)
    assert proc.returncode == 0, proc.stderr
    for j in (1, 2):  # two of the four fake GPUs each, 8 CPUs for 2 processes
        log = (tmp_path / "g" / f"x.{j}.log").read_text()
        [seen] = [line.split() for line in log.splitlines() if line.startswith("partition=")]
        assert seen[0] == "partition=gpu" and seen[2] == "threads=4" and "# ended (rc=0)" in log
        assert len(seen[1].removeprefix("gpus=").split(",")) == 2, log
    own = dict(slurm, slurm_partition="gpu")  # no --config: run_slurm.sh's own sbatch options
    proc = subprocess.run(["bash", "local/run_slurm.sh", "--cpus", "2", "--gpu", "1", "--mem", "500M", "--time",
                           "5", "--name", "own", f"{tmp_path}/o.log", "sh", "-c", "echo $SLURM_JOB_NAME"],
                          cwd=RECIPE, env=own, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "own\n# ended (rc=0)" in (tmp_path / "o.log").read_text(), proc.stderr
    proc = launch("cuda_cmd", f"--num_nodes 2 {tmp_path}/n.log true", slurm)
    assert proc.returncode != 0 and "Node count specification invalid" in proc.stderr


def test_real_slurm_failed_task_is_named_and_a_rerun_submits_only_the_missing_tasks(tmp_path, slurm):
    """A job array whose task 2 fails: the launcher fails naming task 2's log; run again (task 2 now
    succeeds), only task 2 is submitted, and a third run submits nothing. Changed input, and a partition sbatch
    refuses: each task named as not started (its log is the earlier run's), with sbatch's reason."""
    (tmp_path / "input").write_text("first")  # an input file of the tasks (sh's $0 here)
    job = (f'JOB=1:3 {tmp_path}/log/x.JOB.log '
           f'sh -c "echo JOB >> {tmp_path}/ran; [ JOB != 2 ] || [ -e {tmp_path}/fixed ]" {tmp_path}/input')
    proc = launch("decode_cmd", job, slurm)
    assert proc.returncode != 0
    assert f"task 2 of x failed (rc=1): see {tmp_path}/log/x.2.log" in proc.stderr, proc.stderr
    assert sorted((tmp_path / "ran").read_text().split()) == ["1", "2", "3"]
    (tmp_path / "fixed").touch()
    proc = launch("decode_cmd", job, slurm)
    assert proc.returncode == 0, proc.stderr
    assert "x: tasks 1,3 finished earlier with the same work: submitting 2" in proc.stdout
    assert sorted((tmp_path / "ran").read_text().split()) == ["1", "2", "2", "3"]
    assert (tmp_path / "log" / "x.2.1.log").exists() and not (tmp_path / "log" / "x.1.1.log").exists()
    proc = launch("decode_cmd", job, slurm)
    assert proc.returncode == 0 and "x: all 3 tasks finished earlier with the same work" in proc.stdout
    assert sorted((tmp_path / "ran").read_text().split()) == ["1", "2", "2", "3"]
    # sbatch refuses the job (no such partition): no task started, and Slurm's reason is shown
    (tmp_path / "input").write_text("changed")  # other work: every task is submitted again
    proc = launch("decode_cmd", job, dict(slurm, slurm_partition="nosuch"))
    assert proc.returncode != 0 and "invalid partition specified: nosuch" in proc.stderr.lower(), proc.stderr
    for j in (1, 2, 3):  # their logs are the earlier run's
        assert f"task {j} of x did not start: {tmp_path}/log/x.{j}.log was not written" in proc.stderr


def test_rescoring_am_score_defaults_to_the_decoding_weights(micro, tmp_path, recipe_python):
    """Without --am_weights, stage 7 weighs decoder and CTC scores as the decode config did (ctc_weight c:
    decoder=1-c,ctc=c); an explicit --am_weights wins."""
    work, _ = micro
    copy = tmp_path / "micro"
    shutil.copytree(work, copy, symlinks=True)
    conf = tmp_path / "decode_ctc04.yaml"
    conf.write_text((RECIPE / "conf" / "decode_asr_micro.yaml").read_text().replace(
        "ctc_weight: 0.3", "ctc_weight: 0.4"))
    same_lists = ("--inference_tag", "decode_asr_micro_asr_model_valid.acc.ave")  # stage 6's, reused
    done = copy / "exp" / "asr_train_asr_mini_raw_en_bpe100" / RESCORE_SLM / ".done"
    for extra, expected in (((), "decoder=0.6,ctc=0.4"), (("--am_weights", "decoder=1,ctc=0"), "decoder=1,ctc=0")):
        run_recipe("--mini", "true", "--micro", "true", "--workdir", str(copy), "--stage", "7", "--stop_stage", "7",
                   "--decode_config", str(conf), *same_lists, *extra, timeout=600, python=recipe_python)
        assert f"--am-weights\n{expected}\n" in done.read_text()


def test_stage5_fine_tunes_a_shipped_lm(micro, tmp_path, recipe_python):
    """--lm_init slm=slm-books (the mini default): stage 5 starts ESPnet's training from the shipped weights
    with their own tokenizer, and stage 7 rescores with the result; a malformed --lm_init is refused."""
    work, _ = micro
    copy = tmp_path / "micro"
    shutil.copytree(work, copy, symlinks=True)
    for stage in ("5", "7"):  # not stage 6: the copy's decoding is the original's (a re-run would redo it there)
        run_recipe("--mini", "true", "--micro", "true", "--workdir", str(copy), "--stage", stage, "--stop_stage", stage,
                   "--lm_init", "slm=slm-books", "--lm_train_args", "--max_epoch 1 --num_iters_per_epoch 3",
                   timeout=900, python=recipe_python)
    # --lm_train_args name the experiment as ESPnet's args tag does
    lm_dir = copy / "exp" / "lm_finetune_lm_slm_mini_en_slm-books_max_epoch1_num_iters_per_epoch3"
    assert (lm_dir / ".done").exists()
    shipped = pretrained.path("slm-books")
    tokens = (shipped / "tokens.txt").read_text().split()
    config = yaml.safe_load((lm_dir / "config.yaml").read_text())
    assert config["token_list"] == tokens
    assert config["init_param"] == [str(copy / "exp" / "lm_init_slm_slm-books" / "lm.pth")]
    start = Scorer.from_pretrained("slm-books").model.state_dict()["embed.tokens.weight"]
    tuned = Scorer.from_pretrained(lm_dir).model.state_dict()["embed.tokens.weight"]
    assert not torch.equal(start, tuned)  # trained, from the shipped weights: 3 updates move them a little
    assert torch.nn.functional.cosine_similarity(start.flatten(), tuned.flatten(), dim=0) > 0.99
    rescored = decode_dir_of(copy).parent / (decode_dir_of(copy).name + "_rescore_" + lm_dir.name)
    assert (rescored / "tuning.json").exists()
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(copy), "--stage", "5", "--stop_stage", "5",
                      "--lm_init", "slm", check=False, python=recipe_python)
    assert proc.returncode != 0 and "--lm_init: 'slm' is not KIND=MODEL" in proc.stderr
    proc = run_recipe("--mini", "true", "--workdir", str(copy), "--stage", "6", "--stop_stage", "6",
                      "--fusion_lm", "clm", check=False,
                      python=recipe_python)  # the mini default fine-tunes clm from clm-books
    assert proc.returncode != 0 and "shallow fusion needs the LM on the ASR's token list" in proc.stderr


def test_launchers_split_job_arrays(tmp_path, fake_slurm):
    """`${cmd} JOB=1:3 LOG cmd` runs 3 jobs with JOB replaced, on both backends; --gpu N reaches
    Slurm as --gres=gpu:N."""
    env, record = fake_slurm
    for backend in ("local", "slurm"):
        out = tmp_path / backend
        subprocess.run(["bash", "-c", f'. ./cmd.sh && ${{decode_cmd}} JOB=1:3 {out}/log/x.JOB.log '
                        f'sh -c "echo shard JOB > {out}/out.JOB"'], cwd=RECIPE,
                       env=dict(env, cmd_backend=backend), check=True)
        assert [(out / f"out.{j}").read_text() for j in (1, 2, 3)] == [f"shard {j}\n" for j in (1, 2, 3)]
        assert "# ended (rc=0)" in (out / "log" / "x.2.log").read_text()
    args = record.read_text().splitlines()
    assert len(args) == 1 and "--array 1-3" in args[0] and "--partition gpu" in args[0]
    assert "--cpus-per-task 2" in args[0] and "--gres" not in args[0]
    # a failing task fails the whole array, naming its log
    proc = subprocess.run(["bash", "-c", f'. ./cmd.sh && ${{cuda_cmd}} JOB=1:2 {tmp_path}/f/x.JOB.log '
                           f'sh -c "[ JOB = 1 ]"'], cwd=RECIPE, env=dict(env, cmd_backend="local"),
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "1 of 2 jobs failed" in proc.stderr
    proc = subprocess.run(["bash", "-c", f'. ./cmd.sh && ${{cuda_cmd}} --gpu 2 JOB=1:4 {tmp_path}/g/x.JOB.log true'],
                          cwd=RECIPE, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "failed" in proc.stderr
    last = record.read_text().splitlines()[-1]
    assert "--gres gpu:2" in last and "--array 1-4" in last and "--cpus-per-task 8" in last


def test_an_array_task_that_never_ran_fails_the_job_even_when_sbatch_says_0(tmp_path, fake_slurm):
    """`sbatch --wait` can end with 0 when scancel stopped array tasks that had not started; the stage then
    merged shards that were never written. Every task must have finished: the one that did not is named."""
    env, _ = fake_slurm
    proc = launch("decode_cmd", f'JOB=1:3 {tmp_path}/log/x.JOB.log sh -c "echo JOB >> {tmp_path}/ran"',
                  dict(env, FAKE_SBATCH_SKIP="2"))
    assert sorted((tmp_path / "ran").read_text().split()) == ["1", "3"]
    assert proc.returncode != 0 and "Slurm job x failed (sbatch rc=0)" in proc.stderr, proc.stderr
    assert f"task 2 of x did not start: {tmp_path}/log/x.2.log was not written" in proc.stderr
    assert "task 1 of x" not in proc.stderr and "task 3 of x" not in proc.stderr


def test_launchers_take_espnet_options_and_keep_old_logs(tmp_path, fake_slurm):
    """Both launchers take the options of ESPnet's run.pl/slurm.pl (--num_threads, --mem, --max_jobs_run,
    --name, --num_nodes): Slurm gets them as --cpus-per-task, --mem, --array 1-N%M, --job-name, --nodes;
    locally --max_jobs_run 1 runs the array one job at a time and --num_nodes 2 is refused. A log of an
    earlier run is kept as <log>.1.log (the second run's input file changed: on Slurm the same work again
    would not be resubmitted). ESPnet's launcher runs a 2-node job through local/slurm.pl."""
    env, record = fake_slurm
    options = "--num_threads 3 --mem 2G --max_jobs_run 1 --name shards --time 1:00"
    for backend in ("local", "slurm"):
        out = tmp_path / backend
        job = (f'. ./cmd.sh && ${{train_cmd}} {options} JOB=1:3 {out}/log/x.JOB.log '
               f'sh -c "echo start >> {out}/order; sleep 0.3; echo end JOB >> {out}/order" {tmp_path}/input')
        for run in range(2):
            (tmp_path / "input").write_text(f"run {run}")
            subprocess.run(["bash", "-c", job], cwd=RECIPE, env=dict(env, cmd_backend=backend), check=True)
        assert (out / "order").read_text().split("\n")[:6] == ["start", "end 1", "start", "end 2", "start", "end 3"]
        assert (out / "log" / "x.2.1.log").exists() and (out / "log" / "x.2.log").exists()
    args = record.read_text().splitlines()
    assert len(args) == 2
    for wanted in ("--cpus-per-task 3", "--mem-per-cpu 2G", "--array 1-3%1", "--job-name shards", "--time 1:00"):
        assert wanted in args[0], wanted
    proc = subprocess.run(["bash", "-c", f". ./cmd.sh && ${{train_cmd}} --num_nodes 2 {tmp_path}/n.log true"],
                          cwd=RECIPE, env=dict(env, cmd_backend="local"), capture_output=True, text=True)
    assert proc.returncode == 1 and "--num_nodes 2: this launcher runs on this machine only" in proc.stderr
    launch = ('. ./cmd.sh && python -m espnet2.bin.launch --cmd "${cuda_cmd} --name lm_x" '
              f'--log {tmp_path}/exp/train.log --ngpu 0 --num_nodes 2 --init_file_prefix {tmp_path}/exp/.dist_init_ '
              '--multiprocessing_distributed true -- python -c "import sys; print(*sys.argv[1:])" --resume true')
    subprocess.run(["bash", "-c", launch], cwd=RECIPE, env=env, check=True, capture_output=True)
    last = record.read_text().splitlines()[-1]
    assert "--nodes 2" in last and "--job-name lm_x" in last, last
    log = (tmp_path / "exp" / "train.log").read_text()
    assert "--resume true --ngpu 0 --multiprocessing_distributed true --dist_launcher slurm" in log, log


def test_slurm_conf_routes_jobs_and_threads_follow_cpus(tmp_path, fake_slurm):
    """With cmd_backend=slurm and no $slurm_partition, conf/slurm.conf (ESPnet's format) decides: a CPU
    job goes to the cpu partition without GPUs, a GPU job to the gpu partition with --gres; each job's
    OMP_NUM_THREADS is its CPUs per GPU process; an option the conf has no rule for is refused."""
    env, record = fake_slurm
    env = {k: v for k, v in env.items() if k != "slurm_partition"}
    for cmd, gpu, threads in (("decode_cmd", 0, 2), ("train_cmd", 0, 4), ("cuda_cmd", 2, 4)):
        subprocess.run(["bash", "-c", f'. ./cmd.sh && ${{{cmd}}} --gpu {gpu} {tmp_path}/{cmd}.log '
                        'sh -c "echo threads=\\$OMP_NUM_THREADS"'], cwd=RECIPE, env=env, capture_output=True)
        last = record.read_text().splitlines()[-1]
        assert ("--partition gpu" in last and f"--gres gpu:{gpu}" in last) if gpu else \
            ("--partition cpu" in last and "--gres" not in last), (cmd, last)
        cpus = {"decode_cmd": 2, "train_cmd": 4, "cuda_cmd": 8}[cmd]
        assert "--export=ALL" in last and f"--cpus-per-task {cpus}" in last
        script = Path(last.split()[-1]).read_text()
        assert f"export OMP_NUM_THREADS={threads}" in script, (cmd, script)
    assert "threads=2" in (tmp_path / "decode_cmd.log").read_text()
    proc = subprocess.run(["bash", "-c", f". ./cmd.sh && ${{train_cmd}} --colour blue {tmp_path}/x.log true"],
                          cwd=RECIPE, env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "--colour blue: no rule for it in conf/slurm.conf" in proc.stderr


def test_gpu_stages_request_gpus_through_the_launcher(micro, tmp_path, fake_slurm):
    """With --cmd_backend slurm --ngpu 2, ASR and LM training ask for 2 GPUs, decoding and LM scoring
    (--gpu_inference true) for 1 GPU per array task of nj shards (the fake cluster refuses GPUs: each run
    stops at that job).
    The trainings run because their .done is removed (an interrupted training resumes): --ngpu alone
    never redoes a finished one."""
    env, record = fake_slurm
    work = tmp_path / "work"
    shutil.copytree(micro[0], work, symlinks=True)
    for done in work.rglob(".done"):  # the copy's finished work, as if made there
        done.write_text(done.read_text().replace(str(micro[0]), str(work)))
    common = ["bash", "run.sh", "--mini", "true", "--micro", "true", "--workdir", str(work),
              "--cmd_backend", "slurm", "--ngpu", "2", "--nj", "2"]
    # from the last stage back, as a stopped training leaves no model for the stages after it
    for stage, extra, wanted in ((7, ["--lambda_range", "0:1:0.5", "--gpu_inference", "true"],
                                  ["--gres gpu:1", "--array 1-2", "score_nbest"]),
                                 (6, ["--inference_tag", "gpu", "--gpu_inference", "true"],
                                  ["--gres gpu:1", "--array 1-2", "decode_nbest"]),
                                 (5, [], ["--gres gpu:2", "lm_train"]), (4, [], ["--gres gpu:2", "asr_train"])):
        record.unlink(missing_ok=True)
        if stage in (4, 5):
            (work / "exp" / ("asr_train_asr_mini_raw_en_bpe100" if stage == 4 else "lm_train_lm_slm_mini_en_bpe100")
             / ".done").unlink()
        proc = subprocess.run([*common, "--stage", str(stage), "--stop_stage", str(stage), *extra], cwd=RECIPE,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode != 0, proc.stdout
        last = record.read_text().splitlines()[-1]
        script = last.split()[-1]
        for w in wanted[:-1]:
            assert w in last, (stage, last)
        assert wanted[-1] in Path(script).read_text()
    # --num_nodes 2: the LM training as one 2-node job whose srun starts the DDP processes (espnet2.bin.launch)
    proc = subprocess.run([*common, "--stage", "5", "--stop_stage", "5", "--num_nodes", "2"], cwd=RECIPE,
                          env=env, capture_output=True, text=True, timeout=600)
    last = record.read_text().splitlines()[-1]
    assert proc.returncode != 0 and "--nodes 2" in last and "--gres gpu:2" in last, last
    script = Path(last.split()[-1]).read_text()
    assert "srun" in script and "slm_lm.bin.lm_train" in script and "--dist_launcher slurm" in script
    proc = subprocess.run([*common[:-6], "--num_nodes", "2"], cwd=RECIPE, env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "--num_nodes 2 needs --cmd_backend slurm" in proc.stderr


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until path exists (or proc ended, or timeout seconds passed)."""
    t0 = time.monotonic()
    while not path.exists() and proc.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.2)


def test_sharded_equals_unsharded_through_a_real_slurm(micro, slurm, recipe_python):
    """The decoding and LM scoring stages through a real Slurm (job arrays of 3 shards, tests/slurm_cluster.py):
    a failed task fails the stage naming its log; scancel of a running stage stops it with nothing
    half-written; the re-run submits only the missing tasks, and the merged outputs are byte-identical to
    the micro run's (2 shards, local launcher). One test set (test_other) is enough for the test side."""
    work = micro[0]
    tag = "decode_slurm"
    common = ["bash", "run.sh", "--mini", "true", "--micro", "true", "--workdir", str(work), "--cmd_backend", "slurm",
              "--nj", "3", "--inference_tag", tag, "--test_parts", "test-other", "--python", str(recipe_python)]
    two, three = decode_dir_of(work), decode_dir_of(work, tag)
    # 1. task 2 of dev_clean's array fails (its 3rd utterance's audio is missing)
    audio = Path((work / "data" / "dev_clean" / "wav.scp").read_text().splitlines()[2].split()[1])
    audio.rename(audio.with_suffix(".away"))
    try:
        proc = subprocess.run([*common, "--stage", "6", "--stop_stage", "6"], cwd=RECIPE, env=slurm,
                              capture_output=True, text=True, timeout=900)
    finally:
        audio.with_suffix(".away").rename(audio)
    assert proc.returncode != 0
    assert f"task 2 of decode failed (rc=1): see {three}/dev_clean/logdir/decode.2.log" in proc.stderr, proc.stderr
    assert not (three / "dev_clean" / ".done").exists()
    # 2. scancel while dev_other's array runs: the stage stops, naming the stopped tasks' logs
    run = subprocess.Popen([*common, "--stage", "6", "--stop_stage", "6"], cwd=RECIPE, env=slurm,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(three / "dev_other" / "logdir" / "decode.1.log", run)
    subprocess.run(["scancel", "--user", "root"], env=slurm, check=True, timeout=60)
    out, err = run.communicate(timeout=600)
    assert run.returncode != 0 and "decode: tasks 1,3 finished earlier with the same work: submitting 2" in out
    assert "of decode was stopped before it ended (scancel, time limit or node failure): see " in err, err
    assert (three / "dev_clean" / ".done").exists() and not (three / "dev_other" / ".done").exists()
    assert not (three / "dev_other" / "1best_recog").exists()
    for shard in (three / "dev_other" / "logdir").glob("output.*"):  # a shard's files are all there, or none
        made = {p.name for p in shard.glob("*best_recog/*")}
        assert not made or len(made) == 5 and len(list(shard.glob("*best_recog/text"))) == 10, (shard, made)
    # 3. the re-run finishes (only the missing tasks submitted) and gives the 2-shard run's outputs
    proc = subprocess.run([*common, "--stage", "6", "--stop_stage", "7"], cwd=RECIPE, env=slurm,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dev_clean: reused" in proc.stdout
    for s in ("dev_clean", "dev_other", "test_other"):
        files = sorted(p.relative_to(two / s) for p in (two / s).rglob("*")
                       if p.is_file() and "logdir" not in p.parts and p.name != ".done")
        assert len(files) >= 10 * 5 + 4
        for f in files:
            assert (three / s / f).read_bytes() == (two / s / f).read_bytes(), f"{s}/{f}"
    assert sorted(p.name for p in (three / "test_other" / "logdir").glob("keys.*")) == ["keys.1", "keys.2", "keys.3"]
    r2, r1 = two.parent / RESCORE_SLM, three.parent / RESCORE_SLM.replace(two.name, tag)
    tuned, tuned_on_2 = (json.loads((r / "tuning.json").read_text()) for r in (r1, r2))
    tuned_on_2["sets"] = [s for s in tuned_on_2["sets"] if s["name"] != "test_clean"]  # the set not decoded here
    assert tuned == tuned_on_2
    for s in ("dev_clean", "test_other"):
        assert (r1 / s / "1best_recog" / "text").read_bytes() == (r2 / s / "1best_recog" / "text").read_bytes()
    def cache(d):  # the merged score cache (JSON lines: a header, then [text, score] rows), order aside
        (f,) = (d / "lm_cache").glob("*.jsonl")
        header, *rows = [json.loads(line) for line in f.read_text().splitlines()]
        return header, dict(rows)
    # the same hypotheses scored; the values agree to float noise only (another batch composition pads
    # differently: measured up to 1.4e-6 nats), too little to change any output compared above
    (h1, s1), (h2, s2) = cache(r1), cache(r2)
    assert h1 == h2 and set(s1) <= set(s2) and len(s1) > 0  # the micro run's also holds test_clean's
    assert max(abs(s1[t] - s2[t]) for t in s1) < 1e-4


# ---------------------------------------------------------------------------------------------
# Error paths of run.sh


def test_stage_out_of_order_names_the_missing_stage(tmp_path):
    proc = run_recipe("--workdir", str(tmp_path), "--stage", "4", "--stop_stage", "4", check=False)
    assert proc.returncode != 0
    assert "run stage 2 first" in proc.stderr or "run stage 1 first" in proc.stderr
    assert not list((tmp_path / "exp").glob("asr_*"))


def test_python_option_names_the_environment(tmp_path):
    """--python: the interpreter of every step (ESPnet's --python), checked first: one lacking what the
    recipe imports is refused in one line naming the missing packages; the default is the active python3
    when it has them (here this test's), so no .venv is made or needed."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = run_recipe("--python", str(bare / "bin" / "python"), "--workdir", str(tmp_path / "w"), check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"run.sh: --python {bare / 'bin' / 'python'}: ")
    assert "lacks espnet2 torch" in proc.stderr
    assert not (tmp_path / "w").exists()
    proc = run_recipe("--stage", "3", "--stop_stage", "3", "--workdir", str(tmp_path / "w"), check=False)
    assert "run stage 2 first" in proc.stderr and "setup_env" not in proc.stdout + proc.stderr
    chosen = subprocess.run(["bash", "-c", ". ./path.sh && command -v python"], cwd=RECIPE, capture_output=True,
                            text=True, env=dict(os.environ, python=sys.executable), check=True).stdout.strip()
    assert Path(chosen).samefile(sys.executable)


@pytest.mark.parametrize("args, message", [
    (["--stage", "x"], "run.sh: error: --stage 'x': not a stage number (0-9)"),
    (["--stop_stage", "8b"], "run.sh: error: --stop_stage '8b': not a stage number (0-9)"),
    (["--stage", ""], "run.sh: error: --stage '': not a stage number (0-9)"),
    (["--stage", "9"], "run.sh: error: --stage 9 --stop_stage 8: no stage to run (stage > stop_stage)"),
    (["--mwer_utts", "ten"], "run.sh: error: --mwer_utts 'ten': not a number of utterances"),
])
def test_stage_range_is_checked_before_any_work(tmp_path, args, message):
    """An unparseable --stage/--stop_stage, or an empty range, stops the run in one line with status 2 before
    anything is made (no environment, no work dir)."""
    proc = run_recipe("--workdir", str(tmp_path / "w"), *args, "--python", str(tmp_path / "no_python"), check=False)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, message + "\n", "")
    assert not (tmp_path / "w").exists()


def test_settings_files_and_the_command_line(tmp_path):
    """run.sh holds LibriSpeech-960's settings; --mini true reads conf/mini.sh over them, --micro true
    conf/micro.sh over both, and an option given on the command line wins over every setting."""
    import random
    rng = random.Random(0)
    words = ["".join(rng.choice("ABCDEFGHIJKLMNOPRSTUVWY") for _ in range(rng.randint(2, 7))) for _ in range(4000)]
    cases = ((["--mini", "true"], "data/token_list/bpe300"), (["--micro", "true"], "data/token_list/bpe100"),
             (["--micro", "true", "--bpe_size", "40", "--bpemode", "unigram"], "data/en_token_list/bpe_unigram40"))
    for n, (args, token_dir) in enumerate(cases):
        work = tmp_path / str(n)
        (work / "data" / "train").mkdir(parents=True)
        (work / "data" / "train" / "text").write_text("".join(f"u{i:04d} {' '.join(words[i:i + 8])}\n"
                                                              for i in range(0, len(words), 8)))
        run_recipe(*args, "--workdir", str(work), "--stage", "2", "--stop_stage", "2")
        assert (work / token_dir / "bpe.model").exists(), (args, list(work.rglob("bpe.model")))


def test_recipe_reads_no_path_beside_the_checkout():
    """Data comes through slm-data (get/path), never from a folder beside the checkout."""
    for f in [RECIPE / "run.sh", RECIPE / "path.sh", *(RECIPE / "local").glob("*.sh"), *(RECIPE / "conf").glob("*.sh")]:
        assert "../shared" not in f.read_text(), f


def test_unknown_option_is_refused(tmp_path):
    proc = run_recipe("--workdir", str(tmp_path), "--no_such_option", "1", check=False)
    assert proc.returncode != 0 and "unknown option --no_such_option" in proc.stderr


def test_missing_corpus_path(tmp_path):
    proc = run_recipe("--mini", "false", "--workdir", str(tmp_path), "--librispeech_dir",
                      str(tmp_path / "nowhere"), "--stage", "1", "--stop_stage", "1", check=False)
    assert proc.returncode != 0
    assert "nowhere/LibriSpeech is missing: run stage 0 first" in proc.stderr


# ---------------------------------------------------------------------------------------------
# Stage 0 (LibriSpeech download) against a fake local mirror


def _flac_bytes():
    import numpy as np
    import soundfile as sf
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(1600) / 5)).astype("float32"), 16000, format="FLAC")
    return buf.getvalue()


def _make_mirror(root, parts):
    """<root>/12/<part>.tar.gz in LibriSpeech's layout + md5sum.txt; <root>/11/ LM corpus."""
    (root / "12").mkdir(parents=True)
    (root / "11").mkdir()
    sums = []
    for part in parts:
        archive = root / "12" / f"{part}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            def add(name, data):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            add("LibriSpeech/README.TXT", b"fake\n")
            for spk, chapter in ((19, 198), (26, 495)):
                base = f"LibriSpeech/{part}/{spk}/{chapter}"
                trans = "".join(f"{spk}-{chapter}-{i:04d} HELLO WORLD {i}\n" for i in range(2))
                add(f"{base}/{spk}-{chapter}.trans.txt", trans.encode())
                for i in range(2):
                    add(f"{base}/{spk}-{chapter}-{i:04d}.flac", _flac_bytes())
        sums.append(f"{hashlib.md5(archive.read_bytes()).hexdigest()}  {part}.tar.gz")
    (root / "12" / "md5sum.txt").write_text("\n".join(sums) + "\n")
    with gzip.open(root / "11" / "librispeech-lm-norm.txt.gz", "wt") as f:
        f.write("A SENTENCE\nANOTHER ONE\n")


def test_download_from_local_mirror_with_resume(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean", "test-clean"])
    out = tmp_path / "downloads"
    # an interrupted earlier download left half of an archive behind
    (out / "archives").mkdir(parents=True)
    whole = (mirror / "12" / "dev-clean.tar.gz").read_bytes()
    (out / "archives" / "dev-clean.tar.gz.part").write_bytes(whole[: len(whole) // 2])
    download_librispeech.main(["--dir", str(out), "--mirror", str(mirror), "--parts", "dev-clean",
                               "test-clean", "--lm-corpus"])
    for part in ("dev-clean", "test-clean"):
        assert len(list((out / "LibriSpeech" / part).glob("*/*/*.flac"))) == 4
    assert (out / "LibriSpeech" / "README.TXT").exists()
    assert (out / "librispeech-lm-norm.txt.gz").exists()
    # data preparation reads what was unpacked
    data_prep.main(["--out", str(tmp_path / "data" / "dev_clean"), str(out / "LibriSpeech" / "dev-clean")])
    text = (tmp_path / "data" / "dev_clean" / "text").read_text().splitlines()
    assert text[0] == "19-198-0000 HELLO WORLD 0" and len(text) == 4
    spk2utt = (tmp_path / "data" / "dev_clean" / "spk2utt").read_text().splitlines()
    assert spk2utt[0] == "19 19-198-0000 19-198-0001"
    # the whole recipe stage 0 + 1 on the mirror (re-running stage 0 skips the unpacked parts)
    work = tmp_path / "work"
    run_recipe("--mini", "false", "--workdir", str(work), "--librispeech_dir", str(out), "--mirror",
               str(mirror), "--train_parts", "dev-clean", "--dev_parts", "dev-clean",
               "--test_parts", "test-clean", "--stage", "0", "--stop_stage", "1")
    assert (work / "data" / "test_clean" / "wav.scp").exists()


def test_download_keeps_an_archive_that_was_there(tmp_path):
    """An archive of the user's in archives/ (its MD5 the list's) is unpacked and kept: only an archive the
    stage downloaded is deleted after unpacking (the user's was deleted too)."""
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean", "test-clean"])
    out = tmp_path / "downloads"
    (out / "archives").mkdir(parents=True)
    mine = out / "archives" / "dev-clean.tar.gz"
    shutil.copy(mirror / "12" / "dev-clean.tar.gz", mine)
    download_librispeech.main(["--dir", str(out), "--mirror", str(mirror), "--parts", "dev-clean", "test-clean"])
    assert mine.read_bytes() == (mirror / "12" / "dev-clean.tar.gz").read_bytes()
    assert sorted(p.name for p in (out / "archives").iterdir()) == ["dev-clean.tar.gz"]  # test-clean's: ours, gone
    assert len(list((out / "LibriSpeech" / "dev-clean").glob("*/*/*.flac"))) == 4


def test_download_rejects_bad_checksum(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean"])
    (mirror / "12" / "md5sum.txt").write_text("0" * 32 + "  dev-clean.tar.gz\n")
    with pytest.raises(InputError, match="MD5 .* differs"):
        download_librispeech.main(["--dir", str(tmp_path / "d"), "--mirror", str(mirror),
                                   "--parts", "dev-clean"])
    assert not (tmp_path / "d" / "LibriSpeech" / "dev-clean").exists()


def test_download_missing_part_in_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean"])
    with pytest.raises(InputError, match="no checksum for test-other.tar.gz"):
        download_librispeech.main(["--dir", str(tmp_path / "d"), "--mirror", str(mirror),
                                   "--parts", "test-other"])


def _fake_copy(root, parts):
    """A user's own LibriSpeech copy: the layout, no marker files of ours."""
    for part in parts:
        chapter = root / "LibriSpeech" / part / "19" / "198"
        chapter.mkdir(parents=True)
        (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
        for i in range(2):
            (chapter / f"19-198-000{i}.flac").write_bytes(_flac_bytes())
    with gzip.open(root / "librispeech-lm-norm.txt.gz", "wt") as f:
        f.write("A SENTENCE\n")


def test_existing_copy_is_used_by_its_files_and_never_deleted(tmp_path):
    copy = tmp_path / "corpus"
    _fake_copy(copy, ["dev-clean", "test-clean"])
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in copy.rglob("*")}
    # a complete copy is used without any download: the mirror does not even exist
    download_librispeech.main(["--dir", str(copy), "--mirror", str(tmp_path / "no_mirror"),
                               "--parts", "dev-clean", "test-clean", "--lm-corpus"])
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in copy.rglob("*") if "archives" not in p.parts}
    assert after == before
    # an incomplete copy is an error naming the problem; nothing of it is deleted
    (copy / "LibriSpeech" / "test-clean" / "19" / "198" / "19-198-0001.flac").unlink()
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["test-clean"])
    with pytest.raises(InputError, match=r"test-clean is there but incomplete .*19-198-0001.flac is missing"):
        download_librispeech.main(["--dir", str(copy), "--mirror", str(mirror), "--parts", "test-clean"])
    assert (copy / "LibriSpeech" / "test-clean" / "19" / "198" / "19-198-0000.flac").exists()
    # a missing part next to the user's parts is downloaded; theirs stay as they are
    download_librispeech.main(["--dir", str(copy), "--mirror", str(mirror), "--parts", "dev-clean"])
    _make_mirror(tmp_path / "mirror2", ["dev-other"])
    download_librispeech.main(["--dir", str(copy), "--mirror", str(tmp_path / "mirror2"), "--parts", "dev-other"])
    assert len(list((copy / "LibriSpeech" / "dev-other").glob("*/*/*.flac"))) == 4
    assert (copy / "LibriSpeech" / "dev-clean" / "19" / "198" / "19-198.trans.txt").stat().st_ino == \
        before[copy / "LibriSpeech" / "dev-clean" / "19" / "198" / "19-198.trans.txt"][0]
    (copy / "librispeech-lm-norm.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a readable gzip"):
        download_librispeech.main(["--dir", str(copy), "--mirror", str(mirror), "--parts", "dev-clean",
                                   "--lm-corpus"])


def test_shared_copy_is_only_read_and_the_lm_corpus_goes_to_its_own_dir(tmp_path):
    """A complete shared copy without the LM corpus: nothing is written in it (no archives/), and the
    LM corpus is downloaded to --lm-dir; the recipe passes --lm_corpus_dir there and reads it in stage 3."""
    copy = tmp_path / "shared"
    _fake_copy(copy, ["dev-clean"])
    (copy / "librispeech-lm-norm.txt.gz").unlink()
    before = sorted(copy.rglob("*"))
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean"])
    download_librispeech.main(["--dir", str(copy), "--mirror", str(mirror), "--parts", "dev-clean", "--lm-corpus",
                               "--lm-dir", str(tmp_path / "lm")])
    assert sorted(copy.rglob("*")) == before
    assert (tmp_path / "lm" / "librispeech-lm-norm.txt.gz").read_bytes() == \
        (mirror / "11" / "librispeech-lm-norm.txt.gz").read_bytes()
    stages = (RECIPE / "local" / "stages.sh").read_text()
    assert '--lm-dir "${lm_corpus_dir}"' in stages and 'books=("${lm_corpus_dir}/librispeech-lm-norm.txt.gz")' in stages


# ---------------------------------------------------------------------------------------------
# The full-scale ASR config and ESPnet's speed perturbation

LIBRISPEECH_TRAIN_HOURS = 100.6 + 363.6 + 496.7  # train-clean-100, -360, -other-500 (OpenSLR 12)


LIBRISPEECH_TRAIN_WORDS = 9.4e6   # the train-960 transcripts
PIECES_PER_WORD = 1.27            # unigram 5000 (trained on Gutenberg books) on the dev_clean + dev_other references


def test_full_asr_config_updates():
    """conf/train_asr.yaml: the paper's shape, and ESPnet's LibriSpeech numbers give about 124k updates with
    the warm-up finished: batch_bins count each utterance's samples and its tokens x the vocabulary size (asr.sh's
    text_shape.bpe; the old comment said the text adds < 0.1 %), on speed-perturbed data of 3.02x the audio."""
    import re

    import yaml
    path = RECIPE / "conf" / "train_asr.yaml"
    conf = yaml.safe_load(path.read_text())
    enc, dec = conf["encoder_conf"], conf["decoder_conf"]
    assert (conf["encoder"], enc["num_blocks"], enc["output_size"], enc["attention_heads"]) == ("conformer", 12, 512, 8)
    assert (conf["decoder"], dec["num_blocks"]) == ("transformer", 6)
    assert conf["specaug"] == "specaug" and conf["model_conf"]["ctc_weight"] == 0.3
    settings, stages = (RECIPE / "run.sh").read_text(), (RECIPE / "local" / "stages.sh").read_text()
    assert 'speed_perturb_factors="0.9 1.0 1.1"' in settings
    assert conf["batch_type"] == "numel"
    copies = sum(1 / f for f in (0.9, 1.0, 1.1))  # a 0.9x copy is 1/0.9 as long
    audio_bins = LIBRISPEECH_TRAIN_HOURS * copies * 3600 * 16000
    text_bins = 3 * LIBRISPEECH_TRAIN_WORDS * PIECES_PER_WORD * 5000
    assert 0.4 < text_bins / (audio_bins + text_bins) < 0.6  # about half of each batch
    updates_per_epoch = round((audio_bins + text_bins) / (conf["batch_bins"] * conf["accum_grad"]))
    total = updates_per_epoch * conf["max_epoch"]
    assert 100_000 <= total < 150_000
    assert conf["scheduler_conf"]["warmup_steps"] < 0.4 * total
    assert '--train_shape_file "${shapes}/train/${asr_text_shape}"' in stages
    assert "asr_text_shape=text_shape.bpe" in stages
    comment = path.read_text()
    assert f"{updates_per_epoch:,} updates per epoch" in comment
    assert re.search(rf"= {total:,} updates", comment)


def test_speed_perturb_data_dir(tmp_path):
    import soundfile as sf

    import speed_perturb
    chapter = tmp_path / "c" / "19" / "198"
    chapter.mkdir(parents=True)
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
    for i in range(2):
        (chapter / f"19-198-000{i}.flac").write_bytes(_flac_bytes())
    data_prep.main(["--out", str(tmp_path / "train"), str(tmp_path / "c")])
    # as run.sh's stage 1: the resampling as array jobs (each its share of the 4 copies), then the directory
    for share in ("1/3", "2/3", "3/3"):
        speed_perturb.main(["--factors", "0.9 1.0 1.1", "--audio-dir", str(tmp_path / "sp"), "--shard", share,
                            str(tmp_path / "train"), str(tmp_path / "train_sp")])
        assert not (tmp_path / "train_sp").exists()
    written = {p: p.stat().st_mtime_ns for p in (tmp_path / "sp").rglob("*.flac")}
    assert len(written) == 4
    speed_perturb.main(["--factors", "0.9 1.0 1.1", "--audio-dir", str(tmp_path / "sp"),
                        str(tmp_path / "train"), str(tmp_path / "train_sp")])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "sp").rglob("*.flac")} == written
    wav = dict(line.split(" ", 1) for line in (tmp_path / "train_sp" / "wav.scp").read_text().splitlines())
    assert sorted(wav) == ["19-198-0000", "19-198-0001", "sp0.9-19-198-0000", "sp0.9-19-198-0001",
                           "sp1.1-19-198-0000", "sp1.1-19-198-0001"]
    assert "sp1.1-19-198-0001 sp1.1-19\n" in (tmp_path / "train_sp" / "utt2spk").read_text()
    assert (tmp_path / "train_sp" / "text").read_text().count("HELLO") == 3
    n = sf.info(wav["19-198-0000"]).frames
    assert abs(sf.info(wav["sp0.9-19-198-0000"]).frames - n / 0.9) <= 2
    assert abs(sf.info(wav["sp1.1-19-198-0000"]).frames - n / 1.1) <= 2
    with pytest.raises(InputError, match="--factors"):
        speed_perturb.main(["--factors", "fast", "--audio-dir", "x", str(tmp_path / "train"), str(tmp_path / "o")])
    with pytest.raises(InputError, match="--shard '3/2': J must be between 1 and N"):
        speed_perturb.main(["--factors", "1.1", "--audio-dir", "x", "--shard", "3/2", str(tmp_path / "train"),
                            str(tmp_path / "o")])


# ---------------------------------------------------------------------------------------------
# Bad input to the helper scripts


def test_data_prep_names_file_and_line(tmp_path):
    chapter = tmp_path / "dev-clean" / "19" / "198"
    chapter.mkdir(parents=True)
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
    (chapter / "19-198-0000.flac").write_bytes(_flac_bytes())
    with pytest.raises(InputError, match=r"19-198.trans.txt:2: audio .*19-198-0001.flac is missing"):
        read_subset(tmp_path / "dev-clean")
    (chapter / "19-198.trans.txt").write_text("19-198-0000\n")
    with pytest.raises(InputError, match="19-198.trans.txt:1: expected 'UTTID TEXT'"):
        read_subset(tmp_path / "dev-clean")


def test_read_partial_drops_only_a_torn_last_line(tmp_path, capsys):
    p = tmp_path / "partial.jsonl"
    p.write_text('{"uttid": "a", "hyps": []}\n{"uttid": "b", "hy')
    assert list(decode_nbest.read_partial(p)) == ["a"]
    assert "incomplete record" in capsys.readouterr().err
    p.write_text('{"uttid": "a", "hy\n{"uttid": "b", "hyps": []}\n')
    with pytest.raises(InputError, match="partial.jsonl:1: not a JSON record"):
        decode_nbest.read_partial(p)


def test_cmd_backends_are_valid_shell():
    for script in ("run.sh", "path.sh", "cmd.sh", "conf/mini.sh", "conf/micro.sh", "local/stages.sh",
                   "local/reuse.sh", "local/launch.sh", "local/parse_options.sh", "local/run_local.sh",
                   "local/run_slurm.sh", "local/setup_mini.sh"):
        subprocess.run(["bash", "-n", script], cwd=RECIPE, check=True)
    env = dict(os.environ, cmd_backend="slurm")
    out = subprocess.run(["bash", "-c", ". ./cmd.sh && echo $train_cmd"], cwd=RECIPE, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("local/run_slurm.sh")



def test_profile_asr_step_times_dtypes_and_names_operators(micro, tmp_path, recipe_python):
    """local/profile_asr_step.py on the micro experiment: a median per dtype against float32, then the
    profiler's operator table; a missing data dir is one error line, status 2."""
    work, _ = micro
    script = [str(recipe_python), "local/profile_asr_step.py", "--config",
              str(work / "exp" / "asr_train_asr_mini_raw_en_bpe100" / "config.yaml")]
    proc = subprocess.run([*script, "--data", str(work / "data" / "train"), "--batches", "2", "--batch-utts", "4",
                           "--reps", "1", "--threads", "1"], cwd=RECIPE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "float32: " in proc.stdout and "(1.00x float32)" in proc.stdout
    assert "bfloat16: " in proc.stdout and "aten::" in proc.stdout
    proc = subprocess.run([*script, "--data", str(tmp_path / "nodata")], cwd=RECIPE, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line == f"profile_asr_step.py: error: {tmp_path}/nodata/text: file not found", line
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "text").write_text("u1 HELLO\n")
    (bad / "wav.scp").write_text("u1 a.wav\nu2 b.wav\n")
    proc = subprocess.run([*script, "--data", str(bad)], cwd=RECIPE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"profile_asr_step.py: error: {bad}/text: no transcript for u2 (of wav.scp)"


@pytest.mark.parametrize("script,args", [("score_wer.py", ["DIR"]), ("decode_nbest.py", ["--out", "DIR"])])
def test_local_scripts_report_bad_input_in_one_line_with_status_2(script, args, tmp_path):
    """The recipe's local/ scripts exit 2 with one line naming the missing file, no traceback."""
    missing = tmp_path / "nodata"
    proc = subprocess.run([sys.executable, f"local/{script}", "--data", str(missing),
                           *[str(tmp_path) if a == "DIR" else a for a in args]],
                          cwd=RECIPE, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"{script}: error: {missing}/") and "not found" in line, line


# ---------------------------------------------------------------------------------------------
# issue 31, points 3, 9, 10, 11: ESPnet's shapes, tokenizer, names, duration filter, pack, CER, asr.sh N-best

def _sentences(n=300, seed=0):
    import random
    words = ("HELLO WORLD THE LORD SAID UNTO MOSES AND AARON SPEAK TO CHILDREN OF ISRAEL GO FORTH INTO LAND "
             "WHICH I GIVE THEM BEHOLD DAY COMETH NIGHT WATER BREAD HOUSE FATHER MOTHER").split()
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(n)]


def _data_dir(d, utts):
    """A Kaldi data dir: utts = [(uttid, seconds, text)], 16 kHz flac files beside it."""
    import numpy as np
    import soundfile as sf
    d.mkdir(parents=True)
    for u, sec, _ in utts:
        sf.write(d / f"{u}.flac", (0.1 * np.sin(np.arange(int(sec * 16000)) / 5)).astype("float32"), 16000)
    (d / "wav.scp").write_text("".join(f"{u} {d / u}.flac\n" for u, _, _ in utts))
    (d / "text").write_text("".join(f"{u} {t}\n" for u, _, t in utts))
    (d / "utt2spk").write_text("".join(f"{u} {u.split('-')[0]}\n" for u, _, _ in utts))


def _is_unigram(model):
    """A sentencepiece BPE model scores its pieces by merge rank (integers), a unigram one by log-probability."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(model))
    scores = [sp.get_score(i) for i in range(3, sp.get_piece_size())]
    return any(x != int(x) for x in scores)


def test_bpemode_unigram_for_librispeech_and_the_mini_keeps_its_bpe(tmp_path):
    """--bpemode (asr.sh's): unigram by default, in data/en_token_list/bpe_unigram<N>/; the mini keeps its BPE
    tokenizer in data/token_list/bpe<N>/ (its published figures; its finished stages name that directory)."""
    for mini, args, token_dir, unigram in (
            ("false", [], "data/en_token_list/bpe_unigram40", True),
            ("false", ["--bpemode", "bpe"], "data/en_token_list/bpe_bpe40", False),
            ("true", ["--micro", "true"], "data/token_list/bpe40", False)):
        work = tmp_path / f"{mini}{len(args)}"
        (work / "data" / "train").mkdir(parents=True)
        (work / "data" / "train" / "text").write_text("".join(f"u{i:04d} {t}\n" for i, t in enumerate(_sentences())))
        run_recipe("--mini", mini, *args, "--workdir", str(work), "--bpe_size", "40", "--stage", "2", "--stop_stage", "2")
        model = work / token_dir / "bpe.model"
        assert model.exists() and (work / token_dir / "tokens.txt").exists(), list(work.rglob("bpe.model"))
        assert _is_unigram(model) == unigram, token_dir
    proc = run_recipe("--workdir", str(tmp_path / "x"), "--bpemode", "word", "--stage", "9", "--stop_stage", "9",
                      check=False)
    assert proc.returncode != 0 and "--bpemode word: unigram or bpe" in proc.stderr
    mini = (RECIPE / "conf" / "mini.sh").read_text()
    for pinned in ("bpemode=bpe", "asr_text_shape=text_shape ", "max_wav_duration=none"):
        assert pinned in mini, pinned


# config names of ESPnet's egs2/librispeech/asr1/conf (202511): ours must not take them
ESPNET_LIBRISPEECH_CONFS = ("decode_asr.yaml", "train_asr_conformer.yaml", "train_asr_transformer.yaml", "train_lm.yaml",
                            "tuning/train_asr_conformer.yaml", "tuning/train_asr_conformer10_hop_length160.yaml",
                            "tuning/train_asr_transformer.yaml", "tuning/train_lm_adam.yaml")


def test_config_names_do_not_clash_with_espnets():
    ours = {str(p.relative_to(RECIPE / "conf")) for p in (RECIPE / "conf").rglob("*.yaml")}
    assert not ours & set(ESPNET_LIBRISPEECH_CONFS), ours & set(ESPNET_LIBRISPEECH_CONFS)
    assert os.readlink(RECIPE / "conf" / "train_asr.yaml") == "tuning/train_asr_slm_conformer.yaml"
    for f in ("run.sh", "README.md"):
        text = (RECIPE / f).read_text()
        assert "conf/decode_asr.yaml" not in text and "tuning/train_asr_conformer.yaml" not in text, f


def test_stage4_counts_text_in_batches_and_drops_long_utterances(tmp_path, fake_slurm):
    """LibriSpeech setting: stage 4 makes asr.sh's text_shape.bpe ("L,V") and trains on it, so batch_bins count
    the text; --max_wav_duration leaves longer utterances out of the train and valid shapes; without the
    tensorboard package the training says --use_tensorboard false (with it, true: ESPnet's default). The fake
    cluster refuses the training's GPU, so the run stops there with the command in its job script."""
    env, record = fake_slurm
    work = tmp_path / "w"
    lines = _sentences(60)
    _data_dir(work / "data" / "train", [(f"1-1-{i:04d}", 0.5 if i % 3 == 0 else 0.2, t) for i, t in enumerate(lines[:12])])
    _data_dir(work / "data" / "dev", [(f"2-1-{i:04d}", 0.5 if i == 0 else 0.2, t) for i, t in enumerate(lines[12:16])])
    (work / "data" / "train" / "lm.txt").write_text("\n".join(_sentences()) + "\n")
    common = ["--mini", "false", "--workdir", str(work), "--bpe_size", "40", "--speed_perturb_factors", "", "--nj", "1"]
    subprocess.run([sys.executable, "-m", "slm_lm.bin.train_bpe", "--text", str(work / "data" / "train" / "lm.txt"),
                    "--vocab-size", "40", "--model-type", "unigram", "--out", str(work / "data/en_token_list/bpe_unigram40")],
                   check=True, capture_output=True)
    proc = run_recipe(*common, "--stage", "4", "--stop_stage", "4", "--cmd_backend", "slurm", "--ngpu", "1",
                      "--max_wav_duration", "0.3", check=False, env=env, timeout=600)
    assert proc.returncode != 0, proc.stdout
    stats = work / "exp" / "asr_stats_raw_en_bpe40"
    vocab = len((work / "data/en_token_list/bpe_unigram40/tokens.txt").read_text().splitlines())
    full = dict(line.split() for line in (stats / "train" / "text_shape").read_text().splitlines())
    kept = stats / "max_wav_duration0.3"
    bpe = dict(line.split() for line in (kept / "train" / "text_shape.bpe").read_text().splitlines())
    assert len(full) == 12 and bpe == {u: f"{full[u]},{vocab}" for u in bpe}
    for x, n in (("train", 8), ("valid", 3)):
        speech = dict(line.split() for line in (kept / x / "speech_shape").read_text().splitlines())
        assert len(speech) == n and all(int(v) < 0.3 * 16000 for v in speech.values()), (x, speech)
        assert set(dict(line.split() for line in (kept / x / "text_shape.bpe").read_text().splitlines())) == set(speech)
    script = Path(record.read_text().splitlines()[-1].split()[-1]).read_text()
    assert "espnet2.bin.asr_train" in script and "--gres" in record.read_text().splitlines()[-1]
    assert f"--train_shape_file {kept}/train/text_shape.bpe" in script
    assert f"--valid_shape_file {kept}/valid/speech_shape" in script
    try:
        import tensorboard  # noqa: F401
        assert "--use_tensorboard true" in script
    except ImportError:
        assert "--use_tensorboard false" in script and "no tensorboard package" in proc.stdout


def test_pack_stage_zips_the_asr_model_and_the_lms(tmp_path):
    """Stage 9 (asked for, as asr.sh's packing): espnet2.bin.pack asr zips the ASR model, its config, stats and
    tokenizer, and each LM's config and checkpoint (the fusion LM as ESPnet's lm_train_config/lm_file)."""
    import zipfile

    import numpy as np
    work = tmp_path / "w"
    exp = work / "exp"
    asr = exp / "asr_train_asr_mini_raw_en_bpe100"
    for d, files in ((asr, ("config.yaml", "valid.acc.ave.pth")), (exp / "lm_train_lm_slm_mini_en_bpe100", ("config.yaml", "valid.loss.ave.pth")),
                     (exp / "lm_train_lm_clm_mini_en_bpe100", ("config.yaml", "valid.loss.ave.pth")),
                     (work / "data" / "token_list" / "bpe100", ("bpe.model", "tokens.txt"))):
        d.mkdir(parents=True)
        (d / ".done").write_text("work\n")
        for f in files:
            (d / f).write_text(f"name: {d.name}\n" if f.endswith(".yaml") else f"{d.name}/{f}\n")
    (exp / "asr_stats_raw_en_bpe100" / "train").mkdir(parents=True)
    np.savez(exp / "asr_stats_raw_en_bpe100" / "train" / "feats_stats.npz", count=np.array(1))
    (work / "RESULTS.md").write_text("# RESULTS\n")
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), "--stage", "9", "--stop_stage", "9",
                      "--lm_kinds", "slm clm", "--fusion_lm", "clm", timeout=300)
    packed = asr / "asr_train_asr_mini_raw_en_bpe100_valid.acc.ave.zip"
    assert f"packed: {packed}" in proc.stdout
    with zipfile.ZipFile(packed) as z:
        names = z.namelist()
        meta = yaml.safe_load(z.read("meta.yaml"))
    for f in ("asr_train_asr_mini_raw_en_bpe100/valid.acc.ave.pth", "lm_train_lm_slm_mini_en_bpe100/valid.loss.ave.pth",
              "lm_train_lm_slm_mini_en_bpe100/config.yaml", "token_list/bpe100/bpe.model", "feats_stats.npz",
              "decode_asr_micro.yaml", "RESULTS.md"):
        assert any(n.endswith(f) for n in names), (f, names)
    assert meta["files"]["lm_file"].endswith("lm_train_lm_clm_mini_en_bpe100/valid.loss.ave.pth")
    assert meta["yaml_files"]["asr_train_config"].endswith("asr_train_asr_mini_raw_en_bpe100/config.yaml")
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(tmp_path / "none"), "--stage", "9",
                      "--stop_stage", "9", check=False)
    assert proc.returncode != 0 and "run stage 4 first" in proc.stderr


def test_cer_beside_wer(tmp_path):
    """local/score_wer.py writes asr.sh's score_cer/ (characters, <space>) beside score_wer/."""
    data, dec = tmp_path / "data", tmp_path / "dec"
    data.mkdir()
    (dec / "1best_recog").mkdir(parents=True)
    (data / "text").write_text("a-1 HELLO WORLD\na-2 THE LORD\n")
    (dec / "1best_recog" / "text").write_text("a-1 HELLO WORD\na-2 THE LORD\n")
    subprocess.run([sys.executable, "local/score_wer.py", "--data", str(data), str(dec)], cwd=RECIPE, check=True,
                   capture_output=True)
    result = (dec / "score_cer" / "result.txt").read_text()
    # 19 characters (HELLO<space>WORLD: 11, THE<space>LORD: 8), one deletion (the L of WORLD)
    assert "|Sum/Avg|2|19|" in result and "|5.3|" in result, result
    assert (dec / "score_cer" / "ref.trn").read_text().startswith("H E L L O <space> W O R L D\t(a-a-1)")
    assert "|Sum/Avg|2|4|" in (dec / "score_wer" / "result.txt").read_text()


def _espnet_shard(d, utts):
    for rank in (1, 2):
        r = d / f"{rank}best_recog"
        r.mkdir(parents=True)
        (r / "text").write_text("".join(f"{u} WORD {rank}\n" for u in utts))
        (r / "score").write_text("".join(f"{u} tensor(-{rank}.5)\n" for u in utts))


def test_asr_sh_nbest_reads_only_the_last_runs_shards(tmp_path):
    """asr.sh leaves logdir/output.N and keys.N.scp of an earlier decoding with more jobs: the reader takes the
    jobs of the last run (its keys files are written together, the older ones before them); without keys
    files, a duplicate id names the files to remove."""
    from slm_lm.rescoring.nbest import read_espnet_nbest
    logdir = tmp_path / "test_other" / "logdir"
    # an earlier run with 3 jobs, then one with 2 jobs over the same utterances
    for n, utts in ((1, ["u1", "u2"]), (2, ["u3", "u4"]), (3, ["u3", "u4"])):
        _espnet_shard(logdir / f"output.{n}", utts)
        (logdir / f"keys.{n}.scp").write_text("".join(f"{u} x.flac\n" for u in utts))
    old = (logdir / "keys.1.scp").stat().st_mtime - 3600
    os.utime(logdir / "keys.3.scp", (old, old))
    nbest = read_espnet_nbest(tmp_path / "test_other", 2)
    assert sorted(nbest) == ["u1", "u2", "u3", "u4"] and all(len(h) == 2 for h in nbest.values())
    assert all("output.3" not in h[0].where for h in nbest.values())
    for n in (1, 2, 3):
        (logdir / f"keys.{n}.scp").unlink()
    with pytest.raises(InputError, match="duplicate id 'u3'.*remove the output.N dirs of the earlier run"):
        read_espnet_nbest(tmp_path / "test_other", 2)


def test_results_environment_block_as_espnets(tmp_path):
    """RESULTS.md's "## Environments" (stage 8): ESPnet's lines (date, python, espnet, pytorch, Git hash and
    commit date) plus the OS, slm_lm's version and the models and configs that made the tables."""
    import make_results
    import slm_lm
    config = tmp_path / "config.yaml"
    config.write_text("a: 1\n")
    lines = make_results.environment(make_results.labelled_paths("--files", [f"ASR config={config}"]))
    text = "\n".join(lines)
    assert lines[0] == "## Environments"
    for key in ("- date: `", "- os: `", "- python version: `", "- espnet version: `espnet ", "- pytorch version: `pytorch ",
                f"- slm_lm version: `slm_lm {slm_lm.__version__}`", "- Git hash: `", "  - Commit date: `",
                f"- ASR config: `{config}`"):
        assert key in text, key
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert f"- Git hash: `{head}`" in text
    with pytest.raises(InputError, match="no such file"):
        make_results.labelled_paths("--files", [f"ASR model={tmp_path / 'none.pth'}"])
    with pytest.raises(InputError, match="given twice"):
        make_results.labelled_paths("--files", [f"ASR config={config}", f"ASR config={config}"])


def test_lm_configs_name_a_size_or_spell_the_shape():
    """Every LM config of the recipe either names a size (slm_lm.model.config.SIZES) or spells the whole shape, never a
    size and then another shape; the micro setting adds no size on top of its config's spelled shape."""
    from slm_lm.model.config import SIZES
    shape = {"n_layers", "d_model", "n_heads", "d_ff"}
    for path in (RECIPE / "conf").rglob("*.yaml"):
        lm_conf = (yaml.safe_load(path.read_text()) or {}).get("lm_conf")
        if lm_conf is None:
            continue
        if "size" in lm_conf:
            assert lm_conf["size"] in SIZES and not shape & set(lm_conf), path
        else:
            assert shape <= set(lm_conf), path
    assert "--lm_conf size=" not in (RECIPE / "conf" / "micro.sh").read_text()


def test_conf_comments_point_to_what_exists():
    """A config's comment that names a config file or a section of a results page names one that exists."""
    import re
    pages = {p: (REPO / p).read_text() for p in ("RESULTS.md", "docs/experiments.md")}
    for path in (RECIPE / "conf").rglob("*.yaml"):
        text = path.read_text()
        for m in re.finditer(r"(\S*?)((?:tuning/)?(?:train|decode|finetune)_\w+\.yaml)", text):
            if "egs2/" not in m.group(1):  # ESPnet's own files are named by their egs2/ path
                assert (RECIPE / "conf" / m.group(2)).exists(), f"{path}: {m.group(2)}"
        for page, section in re.findall(r"(RESULTS\.md|docs/experiments\.md),\s*#?\s*\"([^\"]+)\"", text):
            assert re.search(rf"^#+ {re.escape(section)}", pages[page], re.MULTILINE), f"{path}: {page}, {section}"


def test_gutenberg_lm_text_comes_through_slm_data(tmp_path):
    """--lm_corpus gutenberg: stage 3 reads the books where `slm-data path books` says they are (here
    $SLM_LM_DATA), not a folder beside the checkout."""
    work, data_dir = tmp_path / "w", tmp_path / "slm_data"
    books = data_dir / "text" / "gutenberg"
    books.mkdir(parents=True)
    sentences = _sentences(2000, seed=1)
    with gzip.open(books / "pg1.txt.gz", "wt") as f:
        f.write("".join(s.capitalize() + ".\n" for s in sentences))
    for s in ("train", "dev_clean", "dev_other", "test_clean", "test_other"):
        (work / "data" / s).mkdir(parents=True)
        (work / "data" / s / "text").write_text("".join(f"{s}-{i:04d} {t}\n" for i, t in enumerate(_sentences(20, seed=2))))
    (work / "data" / "train" / "text").write_text("".join(f"u{i:04d} {t}\n" for i, t in enumerate(_sentences())))
    run_recipe("--micro", "true", "--lm_corpus", "gutenberg", "--bpe_size", "40", "--workdir", str(work),
               "--stage", "2", "--stop_stage", "3", env=dict(os.environ, SLM_LM_DATA=str(data_dir)))
    assert str(books) in (work / "data" / "lm" / ".done").read_text()
    assert (work / "data" / "lm" / "train" / "text").stat().st_size > 0
