#!/usr/bin/env python3
"""A time-boxed GPU benchmark-and-train run: the CUDA tests, bf16-vs-fp32 parity, the scoring latency table,
training throughput (MFU), then a `small` SLM pre-trained on an encoded corpus (--data); results under --out.

A command has a wall-clock budget (--command-minutes). Its stages run in this order, each a subprocess with
a time limit (one that fails or runs out of time is reported, and the next one runs):
  tests    pytest --device cuda -m device: the tests that take the `device` fixture (tests/conftest.py)
  parity   local/benchmarks/bf16_parity.py: |bf16 - fp32| sentence scores of every kind (small, random weights)
  latency  local/benchmarks/bench_scoring.py in fp32 and bf16: paper Table 5's lengths 10/100/500, small and base
  mfu      local/benchmarks/bench_train_speed.py: tokens/s, model FLOP/s = 6 x params x tokens/s, MFU (small, bf16)
  train    slm-pretrain train: a `small` SLM in bf16 for --train-minutes in all, ending by this command's
           deadline; a later command with --resume continues it from RUN_DIR/slm/checkpoint.pt (--run-dir),
           or, where that checkpoint is missing, trains a new run that fits the time it has

--out gets at most 8 flat files: summary.md, summary.json, session.log (every stage's output), curve.tsv,
model.tar.00, model.tar.01, ... (the exported fp16 model directory and its curve, in at most 4 parts of
--part-mib: `cat model.tar.* | tar -x`).

  python local/gpu/gpu_session.py --data exp/gpu/data --out exp/gpu/out1                            # all stages
  python local/gpu/gpu_session.py --data exp/gpu/data --out exp/gpu/out2 --stages train --resume   # train on
  python local/gpu/gpu_session.py --dry-run --data DIR --out DIR    # the same path on CPU, tiny (~1 min of CPU)
"""
import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
from slm_lm.errors import fail
from slm_lm.fileio import write_atomic

STAGES = ("tests", "parity", "latency", "mfu", "train")
DATA_FILES = ("train.ids.xz", "valid.ids.xz", "bpe.model", "tokens.txt")
MAX_PARTS = 4  # with summary.md, summary.json, session.log and curve.tsv: at most 8 files in --out
# Per mode: the stages' time limits (s), the seconds kept for training and for its start and export, and
# the sizes. The dry run's limits are loose: a loaded CPU must not time it out.
PLANS = {
    "gpu": dict(
        limits=dict(tests=150, parity=60, latency=150, mfu=120), train_reserve=180, train_margin=60,
        tests=[], parity=["--size", "small", "--sentences", "200"],
        latency=["--sizes", "small,base", "--lengths", "10,100,500", "--repeats", "5", "--mlm-max-tokens", "65536",
                 "--mlm-sample-chunks", "4"],
        mfu=["--size", "small", "--tokens", "16384", "--length", "128", "--steps", "10", "--warmup", "2",
             "--matmul-size", "8192"],
        train=["--size", "small", "--batch-tokens", "16384", "--valid-every", "1"],
        train_minutes=10.0, command_minutes=9.25),
    "dry": dict(
        limits=dict(tests=300, parity=180, latency=180, mfu=180), train_reserve=60, train_margin=30,
        tests=["-k", "test_clm_ignores_the_future or test_alone_equals_inside_padded_batch"],
        parity=["--size", "tiny", "--sentences", "5"],
        latency=["--sizes", "tiny", "--lengths", "4,8", "--repeats", "1", "--modes", "latency", "--vocab", "50",
                 "--mlm-sample-chunks", "1", "--threads", "1"],
        mfu=["--size", "tiny", "--tokens", "256", "--steps", "1", "--matmul-size", "256", "--threads", "1"],
        train=["--size", "tiny", "--batch-tokens", "256", "--valid-every", "0.02", "--valid-sentences", "20",
               "--threads", "1"],
        train_minutes=0.05, command_minutes=30.0),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="train.ids.xz, valid.ids.xz, bpe.model, tokens.txt (slm-pretrain encode)")
    p.add_argument("--out", required=True, help="results folder: summary, session log, curve and the model in parts")
    p.add_argument("--run-dir", default=str(ROOT / "exp/gpu/run"),
                   help="benchmark JSONs and the training run (whose checkpoint --resume continues)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, from {','.join(STAGES)}")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny models and budgets: rehearse every stage")
    p.add_argument("--command-minutes", type=float, help="this command's wall-clock budget (default 9.25; dry 30)")
    p.add_argument("--train-minutes", type=float, help="the SLM's training budget over all commands (default 10; dry 0.05)")
    p.add_argument("--resume", action="store_true",
                   help="this command continues the run in --run-dir; without its checkpoint, train a new run "
                        "that fits this command instead")
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (untuned for this budget)")
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up share of the training budget")
    p.add_argument("--part-mib", type=float, default=15.0, help="size of the model.tar.NN parts")
    args = p.parse_args(argv)
    args.stages = args.stages.split(",")
    unknown = sorted(set(args.stages) - set(STAGES))
    if unknown:
        p.error(f"unknown stages {unknown}; choose from {','.join(STAGES)}")
    args.data, args.out, args.run_dir = (str(Path(d).resolve()) for d in (args.data, args.out, args.run_dir))
    args.plan = PLANS["dry" if args.dry_run else "gpu"]
    args.device = "cpu" if args.dry_run else "cuda"
    args.command_minutes = args.command_minutes or args.plan["command_minutes"]
    args.train_minutes = args.train_minutes or args.plan["train_minutes"]
    return args


def check_inputs(args) -> str:
    """The device's name; one-line errors for a missing data file, --out on an input, or no GPU (unless --dry-run)."""
    for name in DATA_FILES:
        if not (Path(args.data) / name).is_file():
            fail("gpu_session", f"{Path(args.data) / name}: missing (make it with slm-pretrain encode; see README.md)")
    if args.out == args.data:
        fail("gpu_session", f"--out {args.out} is the data directory; give another folder")
    if args.dry_run:
        return "cpu (dry run)"
    if not torch.cuda.is_available():
        fail("gpu_session", f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none; "
             "--dry-run rehearses the session on CPU")
    return torch.cuda.get_device_name(0)


def train_budget(checkpoint: bool, resume: bool, train_minutes: float, seconds_left: float) -> tuple:
    """(budget minutes, note) of the train stage. A run continues with its whole budget; a command meant to
    continue one (`resume`) that finds no checkpoint trains a run that fits what it has left."""
    if checkpoint:
        return train_minutes, "resumed"
    if resume:
        minutes = min(train_minutes, seconds_left / 60)
        return minutes, f"no checkpoint in the run directory: a new run of {minutes:.2f} minutes, fitting this command"
    return train_minutes, "new run"


class Session:
    """Runs stages as time-limited subprocesses, logs their output, and collects their results."""

    def __init__(self, args):
        self.args, self.start = args, time.monotonic()
        self.out, self.run_dir = Path(args.out), Path(args.run_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out / "session.log", "a", encoding="utf-8")
        self.stages = {}
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                        PYTHONUNBUFFERED="1")

    def seconds_left(self) -> float:
        return 60 * self.args.command_minutes - (time.monotonic() - self.start)

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

    def limit(self, name: str) -> float:
        """The stage's own limit, cut so that a later train stage keeps its reserve of this command."""
        reserve = self.args.plan["train_reserve"] if "train" in self.args.stages else 0
        return min(self.args.plan["limits"][name], self.seconds_left() - reserve)

    def measure(self, name: str, commands: dict, read):
        """Run the stage's commands (label -> command); `read` turns the JSON it wrote into results."""
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
                   *self.args.plan["tests"]]
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
                   self.args.device, "--json", path, *self.args.plan["parity"]]
        self.measure("parity", {"parity": (command, path)}, lambda saved: saved["results"])

    def latency(self):
        commands = {}
        for dtype in ("float32", "bfloat16"):
            path = self.run_dir / f"latency_{dtype}.json"
            commands[f"latency_{dtype}"] = ([sys.executable, ROOT / "local/benchmarks/bench_scoring.py", "--device",
                                             self.args.device, "--dtype", dtype, "--json", path,
                                             *self.args.plan["latency"]], path)
        self.measure("latency", commands, lambda saved: saved["results"])

    def mfu(self):
        path = self.run_dir / "mfu.json"
        command = [sys.executable, ROOT / "local/benchmarks/bench_train_speed.py", "--device", self.args.device,
                   "--dtype", "bfloat16", "--json", path, *self.args.plan["mfu"]]
        self.measure("mfu", {"mfu": (command, path)},
                     lambda saved: {"matmul_peak_tflops": saved["matmul_peak_tflops"], "kinds": saved["results"]})

    def train(self):
        """Train (or resume) the SLM until its budget is spent or this command's deadline, then pack it."""
        run, plan = self.run_dir / "slm", self.args.plan
        seconds = self.seconds_left() - plan["train_margin"]
        if seconds < 10:
            self.stages["train"] = {"status": "skipped: no time left in this command"}
            return
        minutes, note = train_budget((run / "checkpoint.pt").exists(), self.args.resume, self.args.train_minutes,
                                     seconds)
        print(f"gpu_session: train: {note}", flush=True)
        command = [sys.executable, "-m", "slm_lm.bin.pretrain", "train", "--kind", "slm", "--data", self.args.data,
                   "--out", run, "--minutes", f"{minutes:.3f}", "--deadline", f"{seconds / 60:.3f}", "--clock", "wall",
                   "--device", self.args.device, "--dtype", "bfloat16", "--lr", self.args.lr,
                   "--warmup", self.args.warmup, *plan["train"]]
        result = self.call("train", command, seconds + plan["train_margin"] - 5)
        result["note"] = note
        card_path = run / "model" / "training.json"
        if card_path.exists():
            card = json.loads(card_path.read_text())
            card["finished"] = card["spent_minutes"] >= card["budget_minutes"]
            result["results"] = card
            write_atomic(self.out / "curve.tsv", (run / "curve.tsv").read_text())
            try:
                result["parts"] = self.pack(run)
            except ValueError as e:
                result["status"] = f"failed: {e}"
        self.stages["train"] = result

    def pack(self, run: Path) -> list:
        """model/ and curve.tsv as one tar, written to --out in parts of --part-mib (at most MAX_PARTS)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(run / "model", arcname="model")
            tar.add(run / "curve.tsv", arcname="curve.tsv")
        data, size = buffer.getvalue(), int(self.args.part_mib * 2**20)
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        if len(parts) > MAX_PARTS:
            raise ValueError(f"the model's tar ({len(data) / 2**20:.1f} MiB) needs {len(parts)} parts of "
                             f"{self.args.part_mib} MiB; at most {MAX_PARTS} come back")
        for old in self.out.glob("model.tar.*"):
            old.unlink()
        names = [f"model.tar.{i:02d}" for i in range(len(parts))]
        for name, part in zip(names, parts):
            write_atomic(self.out / name, part)
        return names


def summary_markdown(info: dict) -> str:
    """summary.md: the device, then every stage's status, time and the tables it printed."""
    lines = [f"# GPU session{' (DRY RUN on CPU)' if info['dry_run'] else ''}", "",
             f"device: {info['device']}; torch {info['torch']} (CUDA {info['cuda']}); stages: {', '.join(info['stages'])}; "
             f"{info['seconds']:.0f} s in all", ""]
    for name, stage in info["stages"].items():
        lines += [f"## {name}: {stage['status']}" + (f" in {stage['seconds']:.0f} s" if "seconds" in stage else ""), ""]
        if name == "tests":
            lines += [stage.get("results", {}).get("line", ""), ""]
        elif name == "train" and "results" in stage:
            card = stage["results"]
            lines += [f"{stage['note']}; {card['parameters'] / 1e6:.1f}M parameters, {card['updates']} updates, "
                      f"{card['tokens_seen']} tokens in {card['spent_minutes']:.2f} of {card['budget_minutes']:.2f} "
                      f"budget minutes ({card['tokens_seen'] / max(1e-9, 60 * card['spent_minutes']):.0f} tokens/s), "
                      f"{card['epochs']:.2f} epochs, valid CE {card['valid_ce']:.4f}, lr now {card['lr']:.2e}, "
                      f"finished: {card['finished']}; returned as {', '.join(stage.get('parts', []))}", ""]
        elif stage.get("stdout"):
            lines += [stage["stdout"].strip(), ""]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    device = check_inputs(args)
    session = Session(args)
    for name in args.stages:
        try:
            getattr(session, name)()
        except Exception as e:  # report it and go on: the other stages' results still come back
            session.stages[name] = {"status": f"error: {type(e).__name__}: {e}"}
            print(f"gpu_session: {name}: error: {e}", flush=True)
    info = {"dry_run": args.dry_run, "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
            "stages": session.stages, "seconds": time.monotonic() - session.start,
            "args": {k: v for k, v in vars(args).items() if k != "plan"}}
    text = summary_markdown(info)
    write_atomic(session.out / "summary.md", text + "\n")
    for stage in info["stages"].values():
        stage.pop("stdout", None)  # in session.log and summary.md
    write_atomic(session.out / "summary.json", json.dumps(info, indent=2))
    print(text)
    failed = [n for n, s in session.stages.items() if s["status"] != "ok"]
    if failed:
        print(f"gpu_session: not ok: {', '.join(failed)} (see session.log)", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
