"""Start-up cost of the ESPnet registration hook (`slm_lm_espnet_hook.pth`) in every Python of an environment.

Installs a checkout (default: this one) as a user would (`pip install --no-deps --prefix`) into a fresh
virtual environment without other packages, then starts `python -X importtime -c pass` there `--runs`
times and reports the median of the hook module's cumulative import time (what `site` spends importing it,
everything it imports included), and the median wall time of `python -c pass` with and without the hook's
.pth (the starts interleaved). Example (BENCHMARKS.md)::

    python local/benchmarks/bench_hook_startup.py --runs 20
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = "slm_lm_espnet_hook"
REPO = Path(__file__).resolve().parents[2]


def install(repo: Path, venv: Path) -> tuple[Path, Path]:
    """A fresh venv with `repo` pip-installed into it: (its python, the hook's .pth)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--ignore-installed", "--prefix", str(venv), str(repo)], check=True)
    python = venv / "bin" / "python"
    pths = list(venv.glob(f"lib/python*/site-packages/{HOOK}.pth"))
    if len(pths) != 1:
        sys.exit(f"bench_hook_startup: error: {repo}: the install has no {HOOK}.pth")
    return python, pths[0]


def hook_import_us(python: Path) -> int:
    """The hook module's cumulative import time in one start (microseconds, `-X importtime`)."""
    stderr = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                            check=True).stderr
    for line in stderr.splitlines():
        fields = line.split("|")
        if len(fields) == 3 and fields[2].strip() == HOOK:
            return int(fields[1])
    raise SystemExit(f"bench_hook_startup: error: {python}: no import of {HOOK} at start-up")


def wall_ms(python: Path) -> float:
    """Wall time of one `python -c pass` (ms)."""
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], check=True)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to install (default: this one)")
    parser.add_argument("--runs", type=int, default=20, help="starts per measurement (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        python, pth = install(args.repo.resolve(), Path(tmp) / "venv")
        hook_us = [hook_import_us(python) for _ in range(args.runs)]
        with_hook, without_hook = [], []
        disabled = pth.with_name(pth.name + ".off")
        for _ in range(args.runs):
            with_hook.append(wall_ms(python))
            pth.rename(disabled)
            without_hook.append(wall_ms(python))
            disabled.rename(pth)
    print(f"{args.repo.resolve()}: {args.runs} starts of `python -c pass` ({sys.version.split()[0]})")
    print(f"hook import (-X importtime, cumulative): median {statistics.median(hook_us) / 1000:.2f} ms "
          f"(min {min(hook_us) / 1000:.2f}, max {max(hook_us) / 1000:.2f})")
    print(f"wall time: median {statistics.median(with_hook):.1f} ms with the hook, "
          f"{statistics.median(without_hook):.1f} ms without")


if __name__ == "__main__":
    main()
