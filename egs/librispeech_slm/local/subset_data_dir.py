#!/usr/bin/env python3
"""A seeded random subset of a Kaldi-style data directory (ESPnet's utils/subset_data_dir.sh N, drawn at random).

    subset_data_dir.py --utts 500 --seed 0 data/train data/train_sub500

writes `wav.scp`, `text`, `utt2spk` and `spk2utt` of N utterances drawn from SRC's wav.scp with the seed, sorted
by uttid; the same SRC, N and seed give the same subset.
"""
import argparse
import random
from collections import defaultdict
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.transcripts import read_table, write_table


def main(argv=None):
    """Command line: write the subset."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--utts", type=int, required=True, help="utterances to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    p.add_argument("src", help="data directory to draw from")
    p.add_argument("dst", help="data directory to write")
    args = p.parse_args(argv)
    src, dst = Path(args.src), Path(args.dst)
    tables = {name: read_table(src / name) for name in ("wav.scp", "text", "utt2spk")}
    keys = sorted(tables["wav.scp"])
    if not 0 < args.utts <= len(keys):
        raise InputError(f"{src}/wav.scp: --utts {args.utts}: want 1 to {len(keys)} (its utterances)")
    chosen = sorted(random.Random(args.seed).sample(keys, args.utts))
    for name in ("text", "utt2spk"):
        missing = [k for k in chosen if k not in tables[name]]
        if missing:
            raise InputError(f"{src}/{name}: no line for {missing[0]} (of wav.scp)")
    dst.mkdir(parents=True, exist_ok=True)
    spk2utt = defaultdict(list)
    for k in chosen:
        spk2utt[tables["utt2spk"][k]].append(k)
    for name, table in tables.items():
        write_table(dst / name, ((k, table[k]) for k in chosen))
    write_table(dst / "spk2utt", ((s, " ".join(u)) for s, u in sorted(spk2utt.items())))
    print(f"{dst}: {len(chosen)} of the {len(keys)} utterances of {src}, {len(spk2utt)} speakers (seed {args.seed})")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("subset_data_dir.py", e)
