"""Keep every k-th utterance (in sorted id order) of an ESPnet N-best set, for quick comparisons.

Usage: python local/subset_nbest.py SRC_DIR DST_DIR --every K
SRC_DIR is laid out like ../shared/data/librispeech_nbest/<set> (raw_hypotheses/<k>best_recog/* and
references/ref_wer.trn); DST_DIR gets the same layout with only the kept utterances.
"""
import argparse
import re
from pathlib import Path

from slm_lm.fileio import write_atomic


def _trn_uttid(line: str):
    """The utterance id of an sclite line `WORDS (<spk>-<uttid>)`: the dash-suffix that is an utterance id."""
    match = re.search(r"\(([^)]*)\)\s*$", line)
    spk_utt = match.group(1) if match else ""
    fields = spk_utt.split("-")
    # LibriSpeech: <spk> = SPEAKER-CHAPTER and <uttid> = SPEAKER-CHAPTER-NNNN, so the id is the last 3 of 5
    return "-".join(fields[len(fields) // 2:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--every", type=int, required=True)
    args = p.parse_args(argv)
    first = args.src / "raw_hypotheses" / "1best_recog" / "text"
    ids = sorted(line.split(maxsplit=1)[0] for line in first.read_text().splitlines() if line.strip())
    keep = set(ids[:: args.every])
    for path in sorted((args.src / "raw_hypotheses").glob("*best_recog/*")):
        lines = [line for line in path.read_text().splitlines() if line.split(maxsplit=1)[0] in keep]
        write_atomic(args.dst / path.relative_to(args.src), "\n".join(lines) + "\n")
    trn = args.src / "references" / "ref_wer.trn"
    kept_refs = [line for line in trn.read_text().splitlines() if _trn_uttid(line) in keep]
    write_atomic(args.dst / "references" / "ref_wer.trn", "\n".join(kept_refs) + "\n")
    print(f"{args.dst}: {len(keep)} of {len(ids)} utterances, {len(kept_refs)} references")


if __name__ == "__main__":
    main()
