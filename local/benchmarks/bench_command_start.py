"""Start-up of the package's commands: the wall time of `--help` and of an N-best set that does not exist.

Runs each call as `python -m MODULE ARGS` with this Python, with a checkout's package first on PYTHONPATH
(this one, and with `--repo` another, the calls interleaved), and prints the median of `--runs` calls and
whether the call imported torch. Example (BENCHMARKS.md)::

    python local/benchmarks/bench_command_start.py --repo <checkout before the change> --runs 7
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# runs the module as `python -m` would, then says whether torch was imported
WRAPPER = ("import runpy, sys\nsys.argv = sys.argv[1:]\n"
           "try:\n    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
           "finally:\n    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")


def calls(tmp: Path) -> dict:
    """Name -> (module, arguments): `--help` of the most used commands, and slm-rescore given an N-best set
    that does not exist."""
    missing = str(tmp / "missing")
    return {
        "slm-rescore --help": ["slm_lm.bin.rescore", "--help"],
        "slm-score --help": ["slm_lm.bin.score", "--help"],
        "slm-rescore-mt --help": ["slm_lm.bin.rescore_mt", "--help"],
        "slm-pretrain --help": ["slm_lm.bin.pretrain", "--help"],
        "slm-rescore, missing N-best set": ["slm_lm.bin.rescore", "--dev", missing, "--lm", "slm-books", "--out",
                                            str(tmp / "out")],
    }


def timed(repo: Path, call: list, cwd: Path) -> tuple:
    """(seconds, whether torch was imported, exit status) of one call with `repo` first on PYTHONPATH, run in `cwd`
    (not in a checkout, whose package would come first)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *call], capture_output=True, text=True, env=env,
                          cwd=cwd)
    seconds = time.perf_counter() - start
    return seconds, "torch imported: True" in proc.stderr, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="another checkout to compare with (its calls interleaved)")
    parser.add_argument("--runs", type=int, default=7, help="calls of each (default 7)")
    args = parser.parse_args()
    repos = [REPO, *([args.repo.resolve()] if args.repo else [])]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; Python "
          f"{sys.version.split()[0]}; median of {args.runs} interleaved calls")
    with tempfile.TemporaryDirectory() as tmp:
        table = calls(Path(tmp))
        results = {(name, repo): [] for name in table for repo in repos}
        for _ in range(args.runs):
            for name, call in table.items():
                for repo in repos:
                    results[name, repo].append(timed(repo, call, Path(tmp)))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| call | " + " | ".join(f"{repo} (s) | exit | torch" for repo in repos) + " |")
    print("|---|" + "---:|---:|---|" * len(repos))
    for name in table:
        cells = []
        for repo in repos:
            runs = results[name, repo]
            cells += [f"{statistics.median(s for s, _, _ in runs):.2f}", str(runs[0][2]),
                      "yes" if any(t for _, t, _ in runs) else "no"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
