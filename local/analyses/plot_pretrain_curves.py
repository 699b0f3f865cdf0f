"""Validation cross-entropy of slm-pretrain runs (their curve.tsv) against budget minutes and tokens seen: PNG.

Usage: python local/analyses/plot_pretrain_curves.py --run LABEL=RUN_DIR [--run ...] [--unigram CE] --out FILE.png
"""
import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from slm_lm.common.errors import InputError  # noqa: E402
from slm_lm.common.fileio import save_png  # noqa: E402


def read_curve(run_dir: Path) -> list:
    """Rows of RUN_DIR/curve.tsv as dicts of floats."""
    path = run_dir / "curve.tsv"
    if not path.exists():
        raise InputError(f"{path}: not found (is {run_dir} an slm-pretrain output directory?)")
    with open(path, encoding="utf-8") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle, delimiter="\t")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run", action="append", required=True, help="LABEL=RUN_DIR")
    p.add_argument("--unigram", type=float, help="unigram cross-entropy of the same text (a horizontal line)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for spec in args.run:
        label, _, run = spec.partition("=")
        rows = read_curve(Path(run))
        axes[0].plot([r["minutes"] for r in rows], [r["valid_ce"] for r in rows], marker="o", label=label)
        axes[1].plot([r["tokens"] / 1e6 for r in rows], [r["valid_ce"] for r in rows], marker="o", label=label)
    for ax, xlabel in zip(axes, ("budget minutes (slm-pretrain --clock)", "training tokens seen (millions)")):
        if args.unigram:
            ax.axhline(args.unigram, color="grey", linestyle="--", label="unigram")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out cross-entropy (nats/token)")
    axes[0].set_ylim(top=min(8.6, max(ax.get_ylim()[1] for ax in axes)))
    axes[1].legend()
    save_png(fig, args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
