#!/usr/bin/env python3
"""One GPU command: measure the GPU, train an SLM and a CLM of one shape for equal GPU time, and score the
dev N-best texts with the model of every validation along both runs.

`prepare` (on CPU, where the corpus is) builds the folder that travels to the GPU machine beside the
repository from an encoded corpus (`slm-pretrain encode`), sized so that both fit the limit (--travel-mib):
  train.ids.xz   the first sentences of the corpus that fit
  valid.ids.xz   its validation sentences; bpe.model, tokens.txt: the tokenizer
  nbest_texts.txt.xz  the unique hypothesis texts of a real 10-best set (scoring throughput)
  dev_texts.txt.xz    the unique hypothesis texts of the dev 10-best sets, as rescoring's LM sees them

`run` (on the GPU machine, or --dry-run on CPU) runs these stages within a wall-clock budget (--minutes),
each a subprocess with a time limit (one that fails or runs out of time is reported, and the next one runs):
  tests      pytest --device cuda -m device: the tests that take the `device` fixture (tests/conftest.py)
  parity     local/benchmarks/bf16_parity.py: |bf16 - fp32| sentence scores of every kind
  latency    local/benchmarks/bench_scoring.py in fp32 and bf16: the paper's Table 5 (small and base, n =
             10/100/500, every kind)
  rescoring  local/benchmarks/bench_rescore_speed.py: sentences/s of SLM, CLM and MLM over nbest_texts
  mfu        local/benchmarks/bench_train_speed.py: tokens/s and MFU of every kind at the trained shape
  attention  local/benchmarks/bench_attention.py: the SLM's SDPA against FlexAttention (scores, speed)
  step       local/benchmarks/bench_pretrain_step.py: slm-pretrain's packed (and compiled) step against the padded
             step before it, SLM and CLM, at the plan's widths and batch sizes, all within 90 s; then
             local/benchmarks/window_shape.py: the shape for --train-minutes
  train      slm-pretrain train: the SLM, then the CLM, each for the same minutes of training (what the
             measurements leave, at most --train-minutes), validated every --valid-every minutes; with
             the track stage, the model of every validation is kept (slm-pretrain --keep-models)
  track      every kept model scores dev_texts (`score-snapshots`): track_scores.tsv.xz, a column per model
--out gets at most 8 files, none over 16 MiB: summary.md, summary.json, session.log (every stage's output),
curves.tsv, and models.tar.00, ... (both fp16 model directories and track_scores.tsv.xz: `cat models.tar.* |
tar -x`; local/analyses/track_wer.py rescores the dev sets with every column on CPU).

  python local/gpu/gpu_session.py prepare --corpus exp/pretrain/books --data exp/gpu/data
  python local/gpu/gpu_session.py run --dry-run --data exp/gpu/data --out exp/gpu/dry   # rehearsal on CPU
  python3 local/gpu/gpu_session.py run --data exp/gpu/data --out "$OUT"                 # on the GPU
"""
import argparse
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import torch

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import why_not, write_atomic
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs
from slm_lm.data import datasets
from slm_lm.model.tokenizer import Tokenizer
from slm_lm.pretrain.corpus import load_corpus, read_ids, write_corpus
from slm_lm.rescoring.nbest import load_nbest
from slm_lm.scoring.scorer import Scorer

ROOT = Path(__file__).resolve().parents[2]
PROG = "gpu_session"
STAGES = ("tests", "parity", "latency", "rescoring", "mfu", "attention", "step", "train", "track")
DATA_FILES = ("train.ids.xz", "valid.ids.xz", "bpe.model", "tokens.txt", "nbest_texts.txt.xz", "dev_texts.txt.xz")
DEV_SETS = ("dev_clean", "dev_other")  # of slm-data's librispeech-nbest: the texts the track stage scores
TRACK_TABLE = "track_scores.tsv.xz"
KINDS = ("slm", "clm")  # trained one after the other, for the same minutes
SHAPE = dict(n_layers=6, d_model=384, n_heads=6, d_ff=1536, max_positions=256)
MIB = 2**20
MADE = "gpu_session.json"  # marks a folder gpu_session made (it may rewrite that one only)
RESULT_FILES = ("summary.md", "summary.json", "session.log", "curves.tsv")  # and models.tar.NN, in --out
LOG_HEADER = "gpu_session: session log\n"  # session.log's first line: --out holds an earlier run's results
BACK_FILES, BACK_FILE_MIB, BACK_MIB = 8, 16, 64  # what comes back from a GPU machine
MISSING_ON_THE_GPU = ("espnet", "espnet2", "jiwer", "kaldiio")  # not installed there: the dry run hides them

# Per mode: the stages' options and time limits (s); the command's minutes; the training's most and least
# minutes per model, validation interval (minutes), and seconds per run beside its training (start,
# validations, export); the seconds kept for the track stage; the seconds kept free at the end. The
# measurements are cut short to leave both models their least training. The dry run keeps the trained shape
# (the exported models have their real size) and shrinks everything else.
PLANS = {
    "gpu": dict(
        limits=dict(tests=60, parity=30, latency=45, rescoring=60, mfu=30, attention=90, step=90),
        tests=["-k", "not flex"], parity=["--size", "small", "--sentences", "200"],
        latency=["--sizes", "small,base", "--lengths", "10,100,500", "--repeats", "7", "--modes", "latency",
                 "--mlm-max-tokens", "65536"],
        rescoring=["--random-init", "slm:small", "--random-init", "clm:small", "--random-init", "mlm:small",
                   "--max-tokens", "65536"],
        mfu=["--tokens", "32768", "--length", "64", "--steps", "10", "--warmup", "3", "--matmul-size", "8192"],
        attention=["--rows", "100", "--length", "64", "--tokens", "32768", "--repeats", "7"],
        step=[["--widths", "384,512", "--tokens", "8192", "--compile"], ["--widths", "384,512", "--tokens", "32768"]],
        step_options=["--sentences", "200000", "--rounds", "7", "--group", "5", "--matmul-size", "8192"],
        train=["--valid-sentences", "0"], batch_tokens=32768,
        track=["--max-tokens", "65536", "--dtype", "bfloat16"],
        minutes=9.0, train_minutes=3.0, train_least=2.0, valid_every=0.5, train_start=75, track_seconds=120,
        end_margin=15),
    "dry": dict(
        limits=dict(tests=300, parity=120, latency=180, rescoring=180, mfu=300, attention=120, step=300),
        tests=["-k", "test_clm_ignores_the_future or test_alone_equals_inside_padded_batch"],
        parity=["--size", "tiny", "--sentences", "5"],
        latency=["--sizes", "tiny", "--lengths", "4,8", "--repeats", "1", "--modes", "latency", "--vocab", "50",
                 "--threads", "1"],
        rescoring=["--random-init", "slm:tiny", "--random-init", "clm:tiny", "--random-init", "mlm:tiny",
                   "--sample", "5", "--threads", "1"],
        mfu=["--tokens", "16", "--length", "8", "--steps", "1", "--warmup", "0", "--matmul-size", "256",
             "--threads", "1"],
        attention=["--rows", "6", "--length", "12", "--repeats", "1", "--threads", "1"],
        step=[["--widths", "64", "--tokens", "512"]],
        step_options=["--sentences", "500", "--rounds", "1", "--group", "1", "--matmul-size", "256", "--threads", "1"],
        train=["--valid-sentences", "10", "--threads", "1"], batch_tokens=1024,
        track=["--threads", "1", "--dtype", "float32"],
        minutes=60.0, train_minutes=0.1, train_least=0.05, valid_every=0.05, train_start=120, track_seconds=600,
        end_margin=20),
}


def parse_args(argv=None):
    p = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="build the data folder that travels (on CPU)")
    prep.add_argument("--corpus", required=True,
                      help="train.ids.xz, valid.ids.xz, bpe.model, tokens.txt (slm-pretrain encode)")
    prep.add_argument("--data", required=True, help="the folder to build (git-ignored; copied to the GPU machine with the repository)")
    prep.add_argument("--nbest", help="the N-best set whose unique 10-best texts time the scoring "
                      "(default: dev_other of slm-data get librispeech-nbest)")
    prep.add_argument("--dev-sets", help="comma-separated N-best sets whose unique 10-best texts the track stage "
                      f"scores (default: {' and '.join(DEV_SETS)} of slm-data get librispeech-nbest)")
    prep.add_argument("--travel-mib", type=number(float, above=0), default=64.0,
                      help="what may travel: repository + --data")
    prep.add_argument("--spare-mib", type=number(float, 0), default=1.0, help="kept free under --travel-mib")
    run = sub.add_parser("run", help="the GPU command (or its CPU rehearsal with --dry-run)")
    run.add_argument("--data", required=True, help="the folder `prepare` built")
    run.add_argument("--out", required=True, help="results folder: summaries, session log, curves, models in parts")
    run.add_argument("--run-dir", default=str(ROOT / "exp/gpu/run"), help="benchmark JSONs and the training runs")
    run.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, from {','.join(STAGES)}")
    run.add_argument("--dry-run", action="store_true", help="on CPU, small benchmarks and budgets: rehearse it")
    run.add_argument("--minutes", type=number(float, above=0),
                     help="the command's wall-clock budget (default 9; dry 60)")
    run.add_argument("--train-minutes", type=number(float, above=0),
                     help="most training minutes per model (default 3; dry 0.1)")
    run.add_argument("--lr", type=number(float, above=0), default=3e-4, help="peak learning rate of both models")
    run.add_argument("--batch-tokens", type=number(int, 1),
                     help="tokens per update of both models, padding included (default 32768; dry 1024)")
    run.add_argument("--warmup", type=number(float, 0, 1), default=0.05, help="warm-up share of the training budget")
    run.add_argument("--part-mib", type=number(float, above=0, high=BACK_FILE_MIB), default=15.5,
                     help="size of the models.tar.NN parts")
    score = sub.add_parser("score-snapshots",
                           help="the track stage's subprocess: score dev_texts with every kept model")
    score.add_argument("--data", required=True, help="the folder `prepare` built")
    score.add_argument("--run-dir", required=True, help="holds KIND/snapshots/UPDATES/; gets track/KIND-UPDATES.txt")
    score.add_argument("--device", default="cuda")
    score.add_argument("--dtype", default="bfloat16")
    score.add_argument("--max-tokens", type=number(int, 1), default=8192, help="padded tokens per scoring batch")
    score.add_argument("--threads", type=number(int, 1), help="CPU threads (default: torch's)")
    args = p.parse_args(argv)
    if args.command == "run":
        args.stages = args.stages.split(",")
        unknown = sorted(set(args.stages) - set(STAGES))
        if unknown:
            p.error(f"unknown stages {unknown}; choose from {','.join(STAGES)}")
        args.plan = PLANS["dry" if args.dry_run else "gpu"]
        args.device = "cpu" if args.dry_run else "cuda"
        args.minutes = args.minutes or args.plan["minutes"]
        args.train_minutes = args.train_minutes or args.plan["train_minutes"]
        args.batch_tokens = args.batch_tokens or args.plan["batch_tokens"]
    for name in ("data", "out", "run_dir", "corpus"):
        if getattr(args, name, None):
            setattr(args, name, str(Path(getattr(args, name)).resolve()))
    return args


# ---------------------------------------------------------------- what travels and what comes back

def travel_bytes(root: Path, carry: list) -> tuple[int, int]:
    """(bytes of the repository's files that travel: tracked and untracked but not ignored, bytes under the
    `carry` paths)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    files = {root / name.decode() for name in listed if name}
    carried = {f for c in carry for f in ([Path(c)] if Path(c).is_file() else Path(c).rglob("*")) if f.is_file()}
    repo = sum(f.stat().st_size for f in files - carried if f.is_file())
    return repo, sum(f.stat().st_size for f in carried)


def check_back(out: Path) -> list:
    """(name, bytes) of the files in `out`; ValueError if they would not all come back."""
    files = sorted((f.name, f.stat().st_size if f.is_file() else -1) for f in out.iterdir())
    problems = [f"{name} is a folder" for name, size in files if size < 0]
    problems += [f"{name} is over {BACK_FILE_MIB} MiB" for name, size in files if size > BACK_FILE_MIB * MIB]
    if len(files) > BACK_FILES:
        problems.append(f"{len(files)} files, over {BACK_FILES}")
    if sum(s for _, s in files) > BACK_MIB * MIB:
        problems.append(f"{sum(s for _, s in files) / MIB:.1f} MiB in all, over {BACK_MIB}")
    if problems:
        raise ValueError(f"{out}: would not all come back: {'; '.join(problems)}")
    return files


# ---------------------------------------------------------------- prepare (CPU)

def prepare(args) -> None:
    """Build --data from --corpus: the tokenizer, valid.ids.xz, nbest_texts.txt.xz, and the first sentences
    of train.ids.xz that fit the travel limit beside the repository. The files are made in a folder inside
    --data and moved into it together at the end: a failed `prepare` leaves --data as it was."""
    corpus, data = Path(args.corpus), Path(args.data)
    check_no_overlap("--data", data, [corpus])
    finish_interrupted(data, PROG)
    if data.is_dir() and any(data.iterdir()) and not (data / MADE).exists():
        raise InputError(f"--data {data}: a folder that `prepare` did not make; give a new folder")
    nbest = args.nbest or datasets.require("librispeech-nbest") / "dev_other"
    dev_sets = (args.dev_sets.split(",") if args.dev_sets
                else [datasets.require("librispeech-nbest") / d for d in DEV_SETS])
    tokenizer = Tokenizer.from_dir(corpus)
    ids = read_ids(corpus / "train.ids.xz", tokenizer)
    load_corpus(corpus / "valid.ids.xz", tokenizer)
    names = (*DATA_FILES, "valid.ids.json", "train.ids.json", MADE)
    with staged_outputs("--data", data, names, names if (data / MADE).exists() else (), PROG) as staging:
        write_atomic(staging / MADE, json.dumps({"corpus": str(corpus), "nbest": str(nbest),
                                                 "dev_sets": [str(d) for d in dev_sets]}) + "\n")
        for name in ("bpe.model", "tokens.txt", "valid.ids.xz", "valid.ids.json"):
            write_atomic(staging / name, (corpus / name).read_bytes())
        write_atomic(staging / "nbest_texts.txt.xz",
                     lzma.compress(("\n".join(load_nbest(nbest, nbest=10).unique_texts()) + "\n").encode()))
        write_atomic(staging / "dev_texts.txt.xz", lzma.compress(("\n".join(dev_texts(dev_sets)) + "\n").encode()))
        ends = np.flatnonzero(ids == 0)
        kept, size = len(ends), (corpus / "train.ids.xz").stat().st_size
        repo, carried = travel_bytes(ROOT, [staging])
        room = (args.travel_mib - args.spare_mib) * MIB - repo - carried - 1024  # 1024: train.ids.json
        if room < size / len(ends):
            raise InputError(f"--travel-mib {args.travel_mib}: no room for training sentences beside the repository "
                             f"({repo / MIB:.2f} MiB) and the other data ({carried / MIB:.2f} MiB)")
        while size > room:  # the compressed size is close to proportional to the sentences kept
            kept = int(kept * room / size * 0.995)
            size = write_corpus(ids[: ends[kept - 1] + 1], tokenizer, staging / "train.ids.xz")["bytes"]
            print(f"gpu_session: the first {kept} sentences: {size / MIB:.2f} MiB", flush=True)
        if kept == len(ends):
            for name in ("train.ids.json", "train.ids.xz"):
                write_atomic(staging / name, (corpus / name).read_bytes())
    repo, carried = travel_bytes(ROOT, [data])
    print(f"gpu_session: {data}: {kept} of {len(ends)} training sentences ({ends[kept - 1] + 1 - kept} pieces); "
          f"travels {(repo + carried) / MIB:.2f} MiB: repository {repo / MIB:.2f} MiB + data {carried / MIB:.2f} MiB "
          f"(limit {args.travel_mib} MiB)")


def dev_texts(dev_sets: list) -> list:
    """The unique texts of the sets' 10-best lists, normalised as slm-rescore's LM sees them, sorted."""
    from slm_lm.rescoring.inputs import normalized_sets  # needs jiwer: on CPU (prepare) only, not on the GPU machine

    sets = normalized_sets([load_nbest(d, nbest=10) for d in dev_sets])
    return sorted({text for s in sets for text in s.unique_texts()})


# ---------------------------------------------------------------- run (GPU, or CPU with --dry-run)

def check_inputs(args) -> str:
    """The device's name; one-line errors for a missing data file, --out on an input, an --out or --run-dir that
    cannot be a folder, or no GPU (unless --dry-run)."""
    if not Path(args.data).is_dir():
        fail(PROG, f"--data {args.data}: {why_not(args.data, 'folder')} (make it with `gpu_session.py prepare`)")
    for name in DATA_FILES:
        if not (Path(args.data) / name).is_file():
            fail("gpu_session", f"{Path(args.data) / name}: missing (make it with `gpu_session.py prepare`)")
    if args.out == args.data:
        fail("gpu_session", f"--out {args.out} is the data directory; give another folder")
    if Path(args.out) in Path(args.run_dir).parents or args.out == args.run_dir:
        fail("gpu_session", f"--run-dir {args.run_dir} is inside --out {args.out}: only the results may be there")
    out = Path(args.out)
    names = [*RESULT_FILES, *(sorted(p.name for p in out.glob("models.tar.*")) if out.is_dir() else ())]
    check_output_dir("--out", out, names, names if written_by_a_session(out) else (), PROG)
    check_output_dir("--run-dir", args.run_dir, (), (), PROG)
    if args.dry_run:
        return "cpu (dry run)"
    if not torch.cuda.is_available():
        fail("gpu_session", f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none; "
             "--dry-run rehearses the session on CPU")
    return torch.cuda.get_device_name(0)


def written_by_a_session(out: Path) -> bool:
    """True when `out` holds the session log an earlier run began (it may then rewrite the results there)."""
    log = out / "session.log"
    if not log.is_file():
        return False
    with open(log, "rb") as handle:
        return handle.read(len(LOG_HEADER)) == LOG_HEADER.encode()


def training_minutes(seconds_left: float, cap: float, start: float, least: float) -> float:
    """Minutes of training each of the len(KINDS) models gets: an equal share of what is left after each
    run's `start` seconds (loading, validation, export), at most `cap` minutes; 0 when under `least` minutes."""
    each = (seconds_left / len(KINDS) - start) / 60
    return min(cap, each) if each >= least else 0.0


class Session:
    """Runs stages as time-limited subprocesses, logs their output, and collects their results."""

    def __init__(self, args):
        self.args, self.plan, self.start = args, args.plan, time.monotonic()
        self.out, self.run_dir = Path(args.out), Path(args.run_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out / "session.log", "a", encoding="utf-8")
        if self.log.tell() == 0:
            self.log.write(LOG_HEADER)
        self.stages = {}
        path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        if args.dry_run:  # the GPU machine has no ESPnet, jiwer or kaldiio: none of the stages may need them
            bare = self.run_dir / "bare"
            bare.mkdir(exist_ok=True)
            (bare / "sitecustomize.py").write_text(
                f"import sys\nsys.modules.update(dict.fromkeys({MISSING_ON_THE_GPU!r}))\n")
            path.insert(0, str(bare))
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1")

    def seconds_left(self) -> float:
        return 60 * self.args.minutes - (time.monotonic() - self.start)

    def call(self, name: str, command: list, limit: float) -> dict:
        """Run `command` for at most `limit` seconds; returns status, seconds, return code and stdout."""
        print(f"gpu_session: {name}: {' '.join(map(str, command))} (limit {limit:.0f} s)", flush=True)
        self.log.write(f"\n===== {name}: {' '.join(map(str, command))}\n")
        self.log.flush()
        began = time.monotonic()
        try:
            proc = subprocess.run([str(c) for c in command], cwd=ROOT, env=self.env, timeout=limit,
                                  stdout=subprocess.PIPE, stderr=self.log, text=True)
            status, code, stdout = ("ok" if proc.returncode == 0 else "failed"), proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            status, code = "timed out", None
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        self.log.write(stdout)
        self.log.flush()
        seconds = time.monotonic() - began
        print(f"gpu_session: {name}: {status} in {seconds:.0f} s", flush=True)
        return {"status": status, "seconds": round(seconds, 1), "returncode": code, "stdout": stdout}

    def track_reserve(self) -> float:
        """The seconds kept for a later track stage."""
        return self.plan["track_seconds"] if "track" in self.args.stages else 0

    def limit(self, name: str) -> float:
        """The stage's own limit, cut so that a later train stage keeps both models' least training and a
        later track stage its seconds."""
        reserve = self.track_reserve()
        if "train" in self.args.stages:
            least = min(self.plan["train_least"], self.args.train_minutes)
            reserve += len(KINDS) * (self.plan["train_start"] + 60 * least) + self.plan["end_margin"]
        return min(self.plan["limits"][name], self.seconds_left() - reserve)

    def measure(self, name: str, commands: dict, read):
        """Run the stage's commands (label -> (command, JSON it writes)); `read` turns that JSON into results."""
        for label, (command, json_path) in commands.items():
            limit = self.limit(name)
            if limit < 10:
                self.stages[label] = {"status": "skipped: no time left in this command"}
                continue
            json_path.unlink(missing_ok=True)
            result = self.call(label, command, limit)
            if json_path.exists():
                try:
                    result["results"] = read(json.loads(json_path.read_text()))
                except (ValueError, KeyError) as e:
                    result["status"] = f"failed: {json_path}: unreadable results: {e}"
            self.stages[label] = result

    def tests(self):
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", self.args.device,
                   "-m", "device", "tests/test_models.py", "tests/test_scorer.py", "tests/test_pretrain.py",
                   *self.plan["tests"]]
        limit = self.limit("tests")
        if limit < 10:
            self.stages["tests"] = {"status": "skipped: no time left in this command"}
            return
        result = self.call("tests", command, limit)
        lines = result["stdout"].strip().splitlines()
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped|deselected)",
                                                    lines[-1] if lines else "")}
        result["results"] = {"line": lines[-1] if lines else "", **counts}
        self.stages["tests"] = result

    def parity(self):
        path = self.run_dir / "parity.json"
        command = [sys.executable, ROOT / "local/benchmarks/bf16_parity.py", "--data", self.args.data, "--device",
                   self.args.device, "--json", path, *self.plan["parity"]]
        self.measure("parity", {"parity": (command, path)}, lambda saved: saved["results"])

    def latency(self):
        commands = {}
        for dtype in ("float32", "bfloat16"):
            path = self.run_dir / f"latency_{dtype}.json"
            commands[f"latency_{dtype}"] = ([sys.executable, ROOT / "local/benchmarks/bench_scoring.py", "--device",
                                             self.args.device, "--dtype", dtype, "--json", path,
                                             *self.plan["latency"]], path)
        self.measure("latency", commands, lambda saved: saved["results"])

    def rescoring(self):
        table = self.run_dir / "rescoring.md"
        command = [sys.executable, ROOT / "local/benchmarks/bench_rescore_speed.py", "--texts",
                   Path(self.args.data) / "nbest_texts.txt.xz", "--tokenizer", self.args.data, "--device",
                   self.args.device, "--dtype", "bfloat16", "--out", table, *self.plan["rescoring"]]
        self.measure("rescoring", {"rescoring": (command, table.with_suffix(".json"))}, lambda rows: rows)

    def mfu(self):
        path = self.run_dir / "mfu.json"
        command = [sys.executable, ROOT / "local/benchmarks/bench_train_speed.py", "--device", self.args.device,
                   "--dtype", "bfloat16", "--json", path, *shape_options(drop=("max_positions",)),
                   *self.plan["mfu"]]
        self.measure("mfu", {"mfu": (command, path)},
                     lambda saved: {"matmul_peak_tflops": saved["matmul_peak_tflops"], "kinds": saved["results"]})

    def attention(self):
        path = self.run_dir / "attention.json"
        command = [sys.executable, ROOT / "local/benchmarks/bench_attention.py", "--device", self.args.device,
                   "--dtype", "bfloat16", "--json", path, *shape_options(drop=("max_positions",)),
                   *self.plan["attention"]]
        self.measure("attention", {"attention": (command, path)}, lambda saved: {k: saved[k] for k in ("scoring", "training")})

    def step(self):
        """slm-pretrain's packed step (compiled where the plan says) against the padded step before it, for the SLM
        and the CLM at the plan's widths and batch sizes (`bench_pretrain_step.py`, one command per batch size, all
        within the stage's limit), then the shape that a window of --train-minutes should train (`window_shape.py`)."""
        end = time.monotonic() + self.plan["limits"]["step"]
        paths = []
        for options in self.plan["step"]:
            name = "step_" + options[options.index("--tokens") + 1].replace(",", "-")
            path = self.run_dir / f"{name}.json"
            path.unlink(missing_ok=True)
            limit = min(self.limit("step"), end - time.monotonic())
            if limit < 10:
                self.stages[name] = {"status": "skipped: no time left in this command"}
                continue
            command = [sys.executable, ROOT / "local/benchmarks/bench_pretrain_step.py", "--data", self.args.data,
                       "--device", self.args.device, "--dtype", "bfloat16", "--kinds", ",".join(KINDS),
                       "--n-layers", SHAPE["n_layers"], "--max-positions", SHAPE["max_positions"], "--json", path,
                       *options, *self.plan["step_options"]]
            result = self.call(name, command, limit)
            if path.exists():  # written after every configuration: a command stopped by its limit keeps those
                result["results"] = json.loads(path.read_text())["results"]
                paths.append(path)
            self.stages[name] = result
        if paths:
            command = [sys.executable, ROOT / "local/benchmarks/window_shape.py", "--speed", *paths, "--minutes",
                       self.args.train_minutes]
            self.stages["window"] = self.call("window", command, 30)

    def train(self):
        """Train the SLM, then the CLM, for the same minutes each (keeping the model of every validation for
        a later track stage); write both curves."""
        minutes = training_minutes(self.seconds_left() - self.plan["end_margin"] - self.track_reserve(),
                                   self.args.train_minutes, self.plan["train_start"],
                                   min(self.plan["train_least"], self.args.train_minutes))
        if not minutes:
            self.stages["train"] = {"status": "skipped: no time left in this command"}
            return
        print(f"gpu_session: train: {minutes:.2f} minutes each for {', '.join(KINDS)}", flush=True)
        for i, kind in enumerate(KINDS):
            run = self.run_dir / kind
            if run.exists():  # every command trains from scratch: an earlier command's run goes, no other folder
                if not (run / MADE).exists():
                    raise InputError(f"{run}: a folder that gpu_session did not make; give another --run-dir")
                shutil.rmtree(run)
            run.mkdir(parents=True)
            write_atomic(run / MADE, json.dumps({"kind": kind, "minutes": minutes}) + "\n")
            deadline = (self.seconds_left() - self.plan["end_margin"] - self.track_reserve()) / (len(KINDS) - i)
            command = [sys.executable, "-m", "slm_lm.bin.pretrain", "train", "--kind", kind, "--data",
                       self.args.data, "--out", run, "--minutes", f"{minutes:.3f}", "--clock", "wall",
                       "--deadline", f"{deadline / 60:.3f}", "--device", self.args.device, "--dtype", "bfloat16",
                       "--lr", self.args.lr, "--warmup", self.args.warmup, "--dropout", "0",
                       "--batch-tokens", self.args.batch_tokens,
                       "--valid-every", self.plan["valid_every"], *shape_options(), *self.plan["train"],
                       *(["--keep-models"] if "track" in self.args.stages else [])]
            result = self.call(f"train_{kind}", command, deadline + 30)
            card_path = run / "model" / "training.json"
            if card_path.exists():
                card = json.loads(card_path.read_text())
                card["finished"] = card["spent_minutes"] >= 0.999 * card["budget_minutes"]
                card["tokens_per_s"] = card["tokens_seen"] / max(1e-9, 60 * card["spent_minutes"])
                result["results"] = card
            self.stages[f"train_{kind}"] = result
        runs = self.trained()
        if runs:
            write_atomic(self.out / "curves.tsv", curves(self.run_dir, runs))

    def trained(self) -> list:
        """The kinds whose run in --run-dir has exported a model."""
        return [kind for kind in KINDS if (self.run_dir / kind / "model" / "training.json").exists()]

    def track(self):
        """Score dev_texts with every kept model, in a subprocess (`score-snapshots`) given what is left."""
        limit = self.seconds_left() - self.plan["end_margin"]
        if limit < 10:
            self.stages["track"] = {"status": "skipped: no time left in this command"}
            return
        command = [sys.executable, Path(__file__).resolve(), "score-snapshots", "--data", self.args.data,
                   "--run-dir", self.run_dir, "--device", self.args.device, *self.plan["track"]]
        result = self.call("track", command, limit)
        result["results"] = [json.loads(line) for line in result["stdout"].splitlines() if line.startswith("{")]
        self.stages["track"] = result

    def pack(self):
        """KIND/model/ and KIND/curve.tsv of every run, and the track stage's table, as one tar written to --out
        in parts of --part-mib."""
        runs, table = self.trained(), track_table(self.args.data, self.run_dir)
        if not runs and table is None:
            return
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for kind in runs:
                tar.add(self.run_dir / kind / "model", arcname=f"{kind}/model")
                tar.add(self.run_dir / kind / "curve.tsv", arcname=f"{kind}/curve.tsv")
            if table is not None:
                member = tarfile.TarInfo(TRACK_TABLE)
                member.size, member.mtime = len(table), int(time.time())
                tar.addfile(member, io.BytesIO(table))
        data, size = buffer.getvalue(), int(self.args.part_mib * MIB)
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        room = BACK_FILES - len(RESULT_FILES)
        if len(parts) > room:
            raise ValueError(f"the models' tar ({len(data) / MIB:.1f} MiB) needs {len(parts)} parts of "
                             f"{self.args.part_mib} MiB; at most {room} come back")
        for old in self.out.glob("models.tar.*"):
            old.unlink()
        names = [f"models.tar.{i:02d}" for i in range(len(parts))]
        for name, part in zip(names, parts):
            write_atomic(self.out / name, part)
        self.stages["pack"] = {"status": "ok", "parts": names, "mib": round(len(data) / MIB, 2)}


def read_texts(path: Path) -> list:
    """The lines of an lzma-compressed text file that `prepare` wrote."""
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def snapshots(run_dir: Path) -> list:
    """(kind, updates, directory) of every model a run kept after its first update, by kind, then by updates."""
    found = []
    for kind in KINDS:
        folder = run_dir / kind / "snapshots"
        if folder.is_dir():
            found += sorted((kind, int(d.name), d) for d in folder.iterdir() if d.name.isdigit() and int(d.name) > 0)
    return found


def score_snapshots(args) -> None:
    """Score dev_texts with every kept model: its scores go to track/KIND-UPDATES.txt (one a line, in
    dev_texts' order) as soon as they are done, with a JSON line on stdout, so a stage stopped by its time
    limit keeps the models it finished."""
    if args.threads:
        torch.set_num_threads(args.threads)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise InputError(f"--run-dir {run_dir}: {why_not(run_dir, 'folder')}")
    texts, folder = read_texts(Path(args.data) / "dev_texts.txt.xz"), run_dir / "track"
    if folder.exists():  # an earlier command's scores go, no other folder
        if not (folder / MADE).exists():
            raise InputError(f"{folder}: a folder that gpu_session did not make; give another --run-dir")
        shutil.rmtree(folder)
    folder.mkdir()
    write_atomic(folder / MADE, json.dumps({"texts": len(texts)}) + "\n")
    for kind, updates, directory in snapshots(run_dir):
        began = time.monotonic()
        scorer = Scorer.from_pretrained(directory, device=args.device, dtype=args.dtype, max_tokens=args.max_tokens)
        scores = scorer.score(texts)
        write_atomic(folder / f"{kind}-{updates}.txt", "".join(f"{x:.4f}\n" for x in scores))
        print(json.dumps({"model": f"{kind}-{updates}", "texts": len(texts),
                          "seconds": round(time.monotonic() - began, 1)}), flush=True)


def track_table(data: str, run_dir: Path) -> bytes | None:
    """TRACK_TABLE's bytes: a `text` column (dev_texts), then a column KIND-UPDATES of each scored model; None
    when no model was scored."""
    folder = run_dir / "track"
    names = [f"{kind}-{updates}" for kind, updates, _ in snapshots(run_dir)
             if (folder / f"{kind}-{updates}.txt").is_file()]
    if not names:
        return None
    texts = read_texts(Path(data) / "dev_texts.txt.xz")
    columns = [(folder / f"{name}.txt").read_text().splitlines() for name in names]
    for name, column in zip(names, columns):
        if len(column) != len(texts):
            raise ValueError(f"{folder / name}.txt: {len(column)} scores for {len(texts)} texts")
    rows = ["\t".join(["text", *names]), *("\t".join(row) for row in zip(texts, *columns))]
    return lzma.compress(("\n".join(rows) + "\n").encode())


def shape_options(drop=()) -> list:
    return [x for k, v in SHAPE.items() if k not in drop for x in ("--" + k.replace("_", "-"), str(v))]


def curves(run_dir: Path, runs: list) -> str:
    """The runs' curve.tsv side by side: a `kind` column first."""
    lines = []
    for kind in runs:
        header, *rows = (run_dir / kind / "curve.tsv").read_text().splitlines()
        lines = lines or [f"kind\t{header}"]
        lines += [f"{kind}\t{row}" for row in rows]
    return "\n".join(lines) + "\n"


def training_table(stages: dict, peak_tflops) -> list:
    """Markdown rows of the trained models: budget, updates, tokens, tokens/s, MFU, epochs, valid CE, and the seconds
    of compiling the step and of validating (checkpoints and exports included)."""
    lines = ["| kind | parameters | minutes | updates | tokens | tokens/s | MFU | epochs | valid CE | finished "
             "| compile (s) | validating (s) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        card = stages.get(f"train_{kind}", {}).get("results")
        if not card:
            continue
        mfu = 6 * card["parameters"] * card["tokens_per_s"] / 1e12 / peak_tflops if peak_tflops else None
        card["mfu"] = mfu
        lines.append(f"| {kind} | {card['parameters'] / 1e6:.1f}M | {card['spent_minutes']:.2f} | {card['updates']} | "
                     f"{card['tokens_seen']} | {card['tokens_per_s']:.0f} | "
                     f"{'-' if mfu is None else f'{100 * mfu:.1f} %'} | {card['epochs']:.2f} | "
                     f"{card['valid_ce']:.4f} | {card['finished']} | {card.get('compile_seconds', '-')} | "
                     f"{card.get('validation_seconds', '-')} |")
    return lines


def summary_markdown(info: dict) -> str:
    """summary.md: the device, then every stage's status, time and the tables it printed."""
    stages = info["stages"]
    lines = [f"# GPU session{' (DRY RUN on CPU)' if info['dry_run'] else ''}", "",
             f"device: {info['device']}; torch {info['torch']} (CUDA {info['cuda']}); {info['seconds']:.0f} s in all",
             ""]
    for name, stage in stages.items():
        lines += [f"## {name}: {stage['status']}" + (f" in {stage['seconds']:.0f} s" if "seconds" in stage else ""), ""]
        if name == "tests":
            lines += [stage.get("results", {}).get("line", ""), ""]
        elif not name.startswith("train_") and stage.get("stdout"):
            lines += [stage["stdout"].strip(), ""]
    peak = stages.get("mfu", {}).get("results", {}).get("matmul_peak_tflops")
    peak_text = "not measured" if peak is None else f"{peak:.3g} TFLOP/s"
    lines += ["## trained models", "", f"MFU against the bf16 matmul peak of the mfu stage ({peak_text})", "",
              *training_table(stages, peak), ""]
    return "\n".join(lines)


def run(args) -> None:
    device = check_inputs(args)
    if args.dry_run:
        repo, carried = travel_bytes(ROOT, [args.data])
        print(f"gpu_session: would travel {(repo + carried) / MIB:.2f} MiB: repository {repo / MIB:.2f} MiB + "
              f"{args.data} {carried / MIB:.2f} MiB", flush=True)
    session = Session(args)
    for name in args.stages:
        try:
            getattr(session, name)()
        except Exception as e:  # report it and go on: the other stages' results still come back
            session.stages[name] = {"status": f"error: {type(e).__name__}: {e}"}
            print(f"gpu_session: {name}: error: {e}", flush=True)
    try:
        session.pack()
    except (OSError, ValueError) as e:
        session.stages["pack"] = {"status": f"failed: {e}"}
    info = {"dry_run": args.dry_run, "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
            "stages": session.stages, "seconds": time.monotonic() - session.start, "shape": SHAPE,
            "args": {k: v for k, v in vars(args).items() if k != "plan"}}
    text = summary_markdown(info)
    write_atomic(session.out / "summary.md", text + "\n")
    for stage in info["stages"].values():
        stage.pop("stdout", None)  # in session.log and summary.md
    write_atomic(session.out / "summary.json", json.dumps(info, indent=2))
    session.log.close()
    print(text)
    try:
        back = check_back(session.out)
        print("gpu_session: comes back: " + ", ".join(f"{name} {size / MIB:.2f} MiB" for name, size in back) +
              f"; {sum(s for _, s in back) / MIB:.2f} MiB in all", flush=True)
    except ValueError as e:
        session.stages["back"] = {"status": f"failed: {e}"}
        print(f"gpu_session: {e}", flush=True)
    failed = [n for n, s in session.stages.items() if s["status"] != "ok"]
    if failed:
        print(f"gpu_session: not ok: {', '.join(failed)} (see session.log)", flush=True)
        sys.exit(1)


def main(argv=None):
    args = parse_args(argv)
    try:
        {"prepare": prepare, "run": run, "score-snapshots": score_snapshots}[args.command](args)
    except (InputError, OSError) as e:
        fail(PROG, e)


if __name__ == "__main__":
    main()
