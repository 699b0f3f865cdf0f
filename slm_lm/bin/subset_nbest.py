"""slm-subset-nbest: keep every k-th utterance (in sorted id order) of an ESPnet N-best set, for quick
comparisons.

Usage: slm-subset-nbest SRC_DIR DST_DIR --every K
SRC_DIR is laid out like the `slm-data get librispeech-nbest` lists' <set>/ (raw_hypotheses/<k>best_recog/* and
references/ref_wer.trn); DST_DIR gets the same layout with only the kept utterances, and subset.json
(the source and K). DST_DIR is new or an earlier subset; SRC_DIR is never written.
"""
import argparse
import json
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import read_text_lines, write_atomic
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs
from slm_lm.rescoring.transcripts import parse_trn_line, trn_uttid

COMMAND = "slm-subset-nbest"
RECORD = "subset.json"
OUTPUTS = ("raw_hypotheses", "references", RECORD)


def _earlier_subset(dst: Path) -> set:
    """OUTPUTS when DST_DIR holds an earlier subset (its subset.json), else none."""
    try:
        record = json.loads((dst / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return set(OUTPUTS) if isinstance(record, dict) and "subset_of" in record else set()


def _lines(path: Path) -> list[str]:
    return [line for _, line in read_text_lines(path)]


def main(argv=None):
    """Entry point of ``slm-subset-nbest``."""
    p = Parser(prog=COMMAND, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--every", type=number(int, 1), required=True)
    args = p.parse_args(argv)
    first = args.src / "raw_hypotheses" / "1best_recog" / "text"
    trn = args.src / "references" / "ref_wer.trn"
    try:
        for path in (first, trn):
            if not path.is_file():
                fail(COMMAND, f"{path}: not found (want SRC_DIR/raw_hypotheses/<k>best_recog/ and "
                              "SRC_DIR/references/ref_wer.trn)")
        check_no_overlap("DST_DIR", args.dst, [args.src])
        finish_interrupted(args.dst, COMMAND)
        own = _earlier_subset(args.dst)
        check_output_dir("DST_DIR", args.dst, OUTPUTS, own, COMMAND)
        ids = sorted(line.split(maxsplit=1)[0] for line in _lines(first) if line.strip())
        keep = set(ids[:: args.every])
        known = set(ids)

        def kept(line: str) -> bool:
            parsed = parse_trn_line(line)
            return parsed is not None and trn_uttid(parsed[1], known) in keep

        with staged_outputs("DST_DIR", args.dst, OUTPUTS, own, COMMAND) as staging:
            for path in sorted((args.src / "raw_hypotheses").glob("*best_recog/*")):
                lines = [line for line in _lines(path) if line.strip() and line.split(maxsplit=1)[0] in keep]
                write_atomic(staging / path.relative_to(args.src), "\n".join(lines) + "\n")
            kept_refs = [line for line in _lines(trn) if kept(line)]
            write_atomic(staging / "references" / "ref_wer.trn", "\n".join(kept_refs) + "\n")
            write_atomic(staging / RECORD, json.dumps({"subset_of": str(args.src), "every": args.every,
                                                       "utterances": len(keep)}, indent=1) + "\n")
    except (InputError, OSError) as err:
        fail(COMMAND, err)
    print(f"{args.dst}: {len(keep)} of {len(ids)} utterances, {len(kept_refs)} references")


if __name__ == "__main__":
    main()
