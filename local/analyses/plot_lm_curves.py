"""Validation loss per epoch of ESPnet LM experiments, from their train.log files: PNG + TSV.

Usage: python local/analyses/plot_lm_curves.py --exp LABEL=EXP_DIR [--exp ...] --out DIR
"""
import argparse
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from slm_lm.common.errors import InputError  # noqa: E402
from slm_lm.common.fileio import save_png, write_atomic  # noqa: E402

EPOCH = re.compile(r"(\d+)epoch results: .*\[valid\] loss=([0-9.]+)")


def valid_losses(exp_dir: Path) -> list:
    """[(epoch, valid loss), ...] read from EXP_DIR/train.log (the last run's lines win)."""
    log = exp_dir / "train.log"
    if not log.exists():
        raise InputError(f"{log}: not found (is {exp_dir} an ESPnet experiment directory?)")
    losses = {}
    for line in log.read_text(errors="replace").splitlines():
        match = EPOCH.search(line)
        if match:
            losses[int(match.group(1))] = float(match.group(2))
    if not losses:
        raise InputError(f"{log}: no '<N>epoch results ... [valid] loss=' lines")
    return sorted(losses.items())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp", action="append", required=True, help="LABEL=EXP_DIR (repeat)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    curves = {}
    for item in args.exp:
        label, _, path = item.partition("=")
        curves[label] = valid_losses(Path(path))
    rows = ["model\tepoch\tvalid_loss"] + [f"{m}\t{e}\t{v}" for m, c in curves.items() for e, v in c]
    write_atomic(args.out / "lm_valid_loss.tsv", "\n".join(rows) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, curve in curves.items():
        ax.plot([e for e, _ in curve], [v for _, v in curve], marker="o", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation loss (nats per predicted token)")
    ax.grid(alpha=0.3)
    ax.legend()
    save_png(fig, args.out / "lm_valid_loss.png")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
