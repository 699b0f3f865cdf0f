#!/usr/bin/env python3
"""Cross-entropy by position (the Transcormer paper's figure): CLM, MLM-PLL, Bi-LM and SLM compared on
held-out sentences of exactly N pieces (default 20).

  python local/analyses/plot_position_ce.py --model CLM=exp/clm --model MLM=exp/mlm --model Bi-LM=exp/bilm \
      --model SLM=exp/slm --text heldout.txt --out exp/position_ce

--text is one sentence per line, or a sclite .trn file (e.g. the dev references). A sentence is used
when every model's tokenizer gives it exactly --length pieces (so all models see the same sentences).
Position i is the i-th piece; position N+1 is the end of sentence (models that score it). Writes
OUT/position_ce.tsv (mean cross-entropy in nats per position and model) and OUT/position_ce.png.
"""
import argparse
from pathlib import Path

import torch

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import save_png, write_atomic
from slm_lm.evaluation.analysis_inputs import exact_length, parse_models, read_sentences


def position_ce(scorer, sentences: list, length: int) -> list:
    """Mean cross-entropy (nats) at positions 1..length(+1 for the end of sentence if scored)."""
    rows = torch.stack([row.double() for row in scorer.logprobs(sentences, progress=True)])
    if rows.shape[1] not in (length, length + 1):
        raise RuntimeError(f"expected {length} or {length + 1} scores per sentence, got {rows.shape[1]}")
    return (-rows.mean(dim=0)).tolist()


def plot(path: Path, curves: dict, length: int, n_sentences: int) -> None:
    """Line plot of the curves (label -> per-position CE), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in curves.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=label)
    ticks = list(range(1, length + 1, 2))
    ax.set_xticks(ticks + [length + 1])
    ax.set_xticklabels([str(i) for i in ticks] + ["</s>"])
    ax.set_xlabel("position (piece index; last: end of sentence)")
    ax.set_ylabel("mean cross-entropy (nats)")
    ax.set_title(f"Cross-entropy by position ({n_sentences} sentences of {length} pieces)")
    ax.grid(alpha=0.3)
    ax.legend()
    save_png(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, help="LABEL=SPEC (repeat); SPEC as for slm-rescore")
    p.add_argument("--text", required=True, help="held-out sentences: text file or .trn")
    p.add_argument("--length", type=int, default=20, help="pieces per sentence (default 20)")
    p.add_argument("--max-sentences", type=int, default=None, help="use at most this many sentences")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from slm_lm.scoring.scorer import load_scorer

    try:
        models = parse_models(args.model)
        scorers = [(label, load_scorer(spec, device=args.device, truncate=True)) for label, spec in models]
        try:
            sentences = exact_length([s for _, s in scorers], read_sentences(args.text), args.length, args.max_sentences)
        except InputError as e:
            raise InputError(f"{args.text}: {e}") from None
        if not sentences:
            raise InputError(f"{args.text}: no sentence has exactly {args.length} pieces under every model")
        curves = {label: position_ce(scorer, sentences, args.length) for label, scorer in scorers}
    except InputError as e:
        fail("plot_position_ce", e)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["position\t" + "\t".join(curves)]
    for i in range(args.length + 1):
        cells = [f"{v[i]:.4f}" if i < len(v) else "" for v in curves.values()]
        lines.append(("</s>" if i == args.length else str(i + 1)) + "\t" + "\t".join(cells))
    write_atomic(out / "position_ce.tsv", "\n".join(lines) + "\n")
    plot(out / "position_ce.png", curves, args.length, len(sentences))
    print(f"{len(sentences)} sentences of {args.length} pieces; mean CE per model: "
          + ", ".join(f"{k} {sum(v) / len(v):.3f}" for k, v in curves.items()))
    print(f"wrote {out}/position_ce.tsv and {out}/position_ce.png")


if __name__ == "__main__":
    main()
