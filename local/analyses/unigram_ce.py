#!/usr/bin/env python3
"""Cross-entropy of a unigram model (token counts of a training text) on a validation text, in nats per
scored token (every piece plus </s>, as slm_lm's LMs score). A floor to read LM validation losses against.

Usage: python local/analyses/unigram_ce.py --bpemodel BPE.model --train TRAIN.txt --valid VALID.txt
"""
import argparse
import collections
import math

import sentencepiece as spm


def unigram_ce(bpemodel: str, train: str, valid: str) -> float:
    """Nats per token of add-0.5-smoothed training unigram frequencies on the validation sentences."""
    sp = spm.SentencePieceProcessor(model_file=bpemodel)
    counts = collections.Counter()
    with open(train, encoding="utf-8") as f:
        for line in f:
            counts.update(sp.encode(line.strip()) + ["</s>"])
    total = sum(counts.values()) + 0.5 * (sp.get_piece_size() + 1)
    nll = n = 0
    with open(valid, encoding="utf-8") as f:
        for line in f:
            for token in sp.encode(line.strip()) + ["</s>"]:
                nll -= math.log((counts[token] + 0.5) / total)
                n += 1
    return nll / n


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bpemodel", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--valid", required=True)
    a = p.parse_args()
    print(f"unigram cross-entropy: {unigram_ce(a.bpemodel, a.train, a.valid):.3f} nats/token")
