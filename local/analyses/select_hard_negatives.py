#!/usr/bin/env python3
"""Hard negatives for simulated lists: keep each list's reference and the `--keep` variants an LM scores highest.

Random simulated errors are mostly easy to tell from the sentence; the hard ones are those the LM itself would
choose. Make more variants than wanted, score every hypothesis with `slm-score`, then keep the hardest:

  slm-simulate-nbest --confusions $N/dev_clean --nbest 10 --text exp/sim/text/train.txt --lists 8000 \
      --variants 20 --seed 1 --out exp/sim/cand_clean
  cut -f4 exp/sim/cand_clean/nbest.tsv > exp/sim/cand_clean.txt
  slm-score --model slm-books --input exp/sim/cand_clean.txt --output exp/sim/cand_clean.scores
  python local/analyses/select_hard_negatives.py --lists exp/sim/cand_clean --scores exp/sim/cand_clean.scores \
      --keep 7 --out exp/sim/hard_clean

OUT/nbest.tsv and OUT/ref.txt are read by slm-mwer-train as slm-simulate-nbest's are: each list is its reference
and the `--keep` variants of highest score, shuffled (seed 0), every score 0. The line printed says how often the
LM preferred a variant to the reference.
"""
import argparse
import random
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import read_text_lines, write_atomic
from slm_lm.common.options import number

PROG = "select_hard_negatives"
OUTPUTS = ("nbest.tsv", "ref.txt")


def read_lists(lists_dir: Path, scores_path: Path) -> dict:
    """{uttid: (reference, [(score, text) of its hypotheses])}, the scores read in the lists' order."""
    refs = {}
    for n, line in read_text_lines(lists_dir / "ref.txt"):
        uttid, _, text = line.partition(" ")
        if not text:
            raise InputError(f"{lists_dir / 'ref.txt'}:{n}: not `uttid text`")
        refs[uttid] = text
    lists = {}
    scores = read_text_lines(scores_path)
    nbest = lists_dir / "nbest.tsv"
    for n, line in read_text_lines(nbest):
        fields = line.split("\t")
        if len(fields) != 4 or fields[0] not in refs:
            raise InputError(f"{nbest}:{n}: not `uttid<TAB>rank<TAB>score<TAB>text` of an utterance of ref.txt")
        scored = next(scores, None)
        if scored is None:
            raise InputError(f"{scores_path}: {n - 1} lines, fewer than {nbest}'s")
        columns = scored[1].split("\t")
        try:
            score = float(columns[1])
        except (IndexError, ValueError):
            raise InputError(f"{scores_path}:{scored[0]}: not slm-score's `line<TAB>score<TAB>n_tokens`") from None
        if columns[0] != str(n):
            raise InputError(f"{scores_path}:{scored[0]}: scores line {columns[0]}, not line {n} of {nbest}")
        lists.setdefault(fields[0], (refs[fields[0]], []))[1].append((score, fields[3]))
    if next(scores, None) is not None:
        raise InputError(f"{scores_path}: more lines than {nbest}")
    if not lists:
        raise InputError(f"{nbest}: no hypothesis")
    return lists


def hardest(lists: dict, keep: int, where: Path) -> tuple[list, int]:
    """[(uttid, reference, shuffled hypotheses)] with the `keep` best-scored variants, and the number of lists
    where the LM scored a variant above the reference."""
    rng, out, beaten = random.Random(0), [], 0
    for uttid, (ref, hyps) in lists.items():
        variants = sorted((h for h in hyps if h[1] != ref), reverse=True)
        if len(variants) == len(hyps):
            raise InputError(f"{where}: list {uttid} does not hold its reference")
        if len(variants) < keep:
            raise InputError(f"{where}: list {uttid} has {len(variants)} variants, fewer than --keep {keep}")
        ref_score = next(score for score, text in hyps if text == ref)
        beaten += variants[0][0] > ref_score
        texts = [ref] + [text for _, text in variants[:keep]]
        rng.shuffle(texts)
        out.append((uttid, ref, texts))
    return out, beaten


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lists", required=True, help="slm-simulate-nbest's output dir (nbest.tsv, ref.txt)")
    p.add_argument("--scores", required=True, help="slm-score's output for the texts of LISTS/nbest.tsv, in order")
    p.add_argument("--keep", type=number(int, 1), default=7, help="variants kept per list (default 7)")
    p.add_argument("--out", required=True, help="new output dir: nbest.tsv, ref.txt")
    args = p.parse_args(argv)
    lists_dir, out = Path(args.lists), Path(args.out)
    try:
        if out.resolve() == lists_dir.resolve():
            raise InputError(f"--out {out}: the --lists dir itself")
        for name in OUTPUTS:
            if (out / name).exists() or (out / name).is_symlink():
                raise InputError(f"{out / name}: exists; give a new --out")
        lists = read_lists(lists_dir, Path(args.scores))
        chosen, beaten = hardest(lists, args.keep, lists_dir / "nbest.tsv")
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "nbest.tsv", "".join(f"{uttid}\t{rank}\t0\t{text}\n" for uttid, _, texts in chosen
                                                for rank, text in enumerate(texts, 1)))
        write_atomic(out / "ref.txt", "".join(f"{uttid} {ref}\n" for uttid, ref, _ in chosen))
    except (InputError, OSError) as err:
        fail(PROG, err)
    print(f"{out}: {len(chosen)} lists of {args.keep + 1} hypotheses; the LM scored a variant above the reference "
          f"in {beaten} ({beaten / len(chosen):.1%})")


if __name__ == "__main__":
    main()
