"""slm-subset-nbest: keep every k-th utterance (in sorted id order) of an ESPnet N-best set, for quick
comparisons.

Usage: slm-subset-nbest SRC_DIR DST_DIR --every K
SRC_DIR is laid out like the `slm-data get librispeech-nbest` lists' <set>/ (raw_hypotheses/<k>best_recog/* and
references/ref_wer.trn); DST_DIR gets the same layout with only the kept utterances.
"""
import argparse
from pathlib import Path

from slm_lm.errors import fail
from slm_lm.fileio import write_atomic
from slm_lm.transcripts import parse_trn_line, trn_uttid


def main(argv=None):
    """Entry point of ``slm-subset-nbest``."""
    p = argparse.ArgumentParser(prog="slm-subset-nbest", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--every", type=int, required=True)
    args = p.parse_args(argv)
    first = args.src / "raw_hypotheses" / "1best_recog" / "text"
    trn = args.src / "references" / "ref_wer.trn"
    for path in (first, trn):
        if not path.is_file():
            fail("slm-subset-nbest", f"{path}: not found (want SRC_DIR/raw_hypotheses/<k>best_recog/ and "
                                     "SRC_DIR/references/ref_wer.trn)")
    if args.every < 1:
        fail("slm-subset-nbest", f"--every {args.every}: want at least 1")
    ids = sorted(line.split(maxsplit=1)[0] for line in first.read_text().splitlines() if line.strip())
    keep = set(ids[:: args.every])
    for path in sorted((args.src / "raw_hypotheses").glob("*best_recog/*")):
        lines = [line for line in path.read_text().splitlines() if line.split(maxsplit=1)[0] in keep]
        write_atomic(args.dst / path.relative_to(args.src), "\n".join(lines) + "\n")
    known = set(ids)

    def kept(line: str) -> bool:
        parsed = parse_trn_line(line)
        return parsed is not None and trn_uttid(parsed[1], known) in keep

    kept_refs = [line for line in trn.read_text().splitlines() if kept(line)]
    write_atomic(args.dst / "references" / "ref_wer.trn", "\n".join(kept_refs) + "\n")
    print(f"{args.dst}: {len(keep)} of {len(ids)} utterances, {len(kept_refs)} references")


if __name__ == "__main__":
    main()
