#!/usr/bin/env python3
"""Held-out cross-entropy split by the kind of position: a word's first piece, the later pieces of a word,
and the end of sentence; plus nats per word (a sentence's summed score over its words + 1).

  python local/analyses/ce_by_piece.py --model SLM=slm-books --model "SLM, whole words=slm-books:whole-words" \
      --model CLM=clm-books --text exp/pretrain/text/valid.txt --max-sentences 1000 --out exp/ce_by_piece.tsv

A SPEC ending in `:whole-words` is scored with whole words (`Scorer(whole_words=True)`). The split shows
where a bidirectional LM's lower CE comes from: a piece-level PLL predicts each piece of a word from
the word's other pieces too, which makes words of many pieces cheap; a left-to-right LM cannot.
"""
import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.evaluation.analysis_inputs import parse_models, read_sentences

KINDS = ("first piece", "later piece", "end of sentence")
WHOLE_WORDS = ":whole-words"


def ce_by_piece(scorer, sentences: list) -> dict:
    """{kind of position: (mean CE in nats, count)} and ("per word", ...) over `sentences`."""
    starts = scorer.tokenizer.word_start_ids()
    totals = {kind: [0.0, 0] for kind in KINDS}
    words = 0
    for ids, row in zip(scorer.encode(sentences), scorer.logprobs(sentences, progress=True)):
        for token, logprob in zip(ids[1:-1], row[:-1].tolist()):
            totals[KINDS[0] if starts[token] else KINDS[1]][0] -= logprob
            totals[KINDS[0] if starts[token] else KINDS[1]][1] += 1
        totals[KINDS[2]][0] -= float(row[-1])
        totals[KINDS[2]][1] += 1
        words += sum(starts[token] for token in ids[1:-1]) + 1
    out = {kind: (total / max(1, n), n) for kind, (total, n) in totals.items()}
    out["per word"] = (sum(total for total, _ in totals.values()) / max(1, words), words)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True,
                   help="LABEL=SPEC (repeat); SPEC as for slm-rescore, optionally ending in :whole-words")
    p.add_argument("--text", required=True, help="held-out sentences: text file or .trn")
    p.add_argument("--max-sentences", type=int, default=None, help="the first N sentences only")
    p.add_argument("--out", required=True, help="TSV: model, kind of position, mean CE, count")
    args = p.parse_args(argv)
    from slm_lm.scoring.scorer import load_scorer

    try:
        sentences = [s for s in read_sentences(args.text) if s.strip()][: args.max_sentences]
        if not sentences:
            raise InputError(f"{args.text}: no sentences")
        rows = {}
        for label, spec in parse_models(args.model):
            whole = spec.endswith(WHOLE_WORDS)
            scorer = load_scorer(spec.removesuffix(WHOLE_WORDS), whole_words=True) if whole else load_scorer(spec)
            rows[label] = ce_by_piece(scorer, sentences)
    except InputError as e:
        fail("ce_by_piece", e)
    lines = ["model\tposition\tmean_ce\tcount"]
    lines += [f"{label}\t{kind}\t{ce:.4f}\t{n}" for label, row in rows.items() for kind, (ce, n) in row.items()]
    write_atomic(Path(args.out), "\n".join(lines) + "\n")
    print(f"{len(sentences)} sentences; mean CE (nats): " + "; ".join(
        f"{label}: " + ", ".join(f"{kind} {ce:.3f}" for kind, (ce, _) in row.items()) for label, row in rows.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
