"""slm-simulate-nbest: N-best lists simulated on text with the word confusions of an ASR's real lists, to train
an LM discriminatively (slm-mwer-train) on far more text than the ASR has decoded.

Example (the confusions of dev_clean's 10-best lists, 12,000 lists of book sentences)::

    N=$(slm-data path librispeech-nbest)
    slm-simulate-nbest --confusions $N/dev_clean --nbest 10 --text exp/text/train.txt --lists 12000 \\
        --out exp/sim_clean
    slm-mwer-train --model slm-books --train exp/sim_clean/nbest.tsv --train-ref exp/sim_clean/ref.txt \\
        --lambda 0.3 --out exp/mwer/slm_sim_clean

OUT/nbest.tsv holds the lists (uttid, rank, score 0, text; each sentence is one of its list's hypotheses, the
others have one to three word errors drawn from the confusions), OUT/ref.txt their references (Kaldi text),
OUT/confusions.tsv the mined confusions with their counts, OUT/simulate.json what was done. The lists'
utterance ids are `sim<group>-<number>`, a hundred lists to a group: slm-mwer-train holds out whole groups.
"""
import argparse
import json
import random
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import read_json, read_text_lines, write_atomic
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.rescoring.confusions import Simulator, mine_confusions
from slm_lm.rescoring.inputs import comma_list, load_nbest_sets, normalized_sets

COMMAND = "slm-simulate-nbest"
RECORD = "simulate.json"
OUTPUTS = ("nbest.tsv", "ref.txt", "confusions.tsv", RECORD)
LISTS_PER_GROUP = 100


def build_parser() -> Parser:
    """Command-line options."""
    p = Parser(prog=COMMAND, description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--confusions", required=True, help="real N-best input(s) whose word errors are mined, "
                   "comma-separated: ESPnet dir, .json or .tsv (never a set the LM will be tested on)")
    p.add_argument("--confusions-ref", default="", help="reference file(s) for --confusions, comma-separated ('-': "
                   "found with the data)")
    p.add_argument("--nbest", type=number(int, 1), default=None, help="mine ranks 1..N (default: all)")
    p.add_argument("--text", required=True, help="text file(s), one sentence a line (e.g. slm-prepare-lm-text's "
                   "output), comma-separated")
    p.add_argument("--lists", type=number(int, 1), default=None,
                   help="lists to make (default: one per sentence that gives one)")
    p.add_argument("--variants", type=number(int, 1), default=7,
                   help="hypotheses with errors per list, besides the sentence (default 7)")
    p.add_argument("--seed", type=number(int, 0), default=0, help="seed of the sentences' order and the edits")
    p.add_argument("--no-normalize", action="store_true", help="texts as they are (default: LibriSpeech-normalised)")
    p.add_argument("--out", required=True, help="output dir: nbest.tsv, ref.txt, confusions.tsv, simulate.json")
    return p


def read_sentences(paths: list[str], normalize: bool) -> list[str]:
    """The non-empty lines of `paths` (normalised), each once, in order of first appearance."""
    seen = {}
    for path in paths:
        for _, line in read_text_lines(path):
            text = normalize_librispeech(line) if normalize else " ".join(line.split())
            if text:
                seen.setdefault(text, None)
    return list(seen)


def _earlier_run(out: Path) -> set:
    """OUTPUTS when `out` holds an earlier run's record, else none."""
    try:
        record = read_json(out / RECORD)
    except InputError:
        return set()
    return set(OUTPUTS) if isinstance(record, dict) and record.get("command") == COMMAND else set()


def main(argv=None) -> None:
    """Entry point of ``slm-simulate-nbest``."""
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    texts = comma_list(args.text)
    try:
        real = load_nbest_sets(comma_list(args.confusions), comma_list(args.confusions_ref), "--confusions",
                               args.nbest)
        if not args.no_normalize:
            real = normalized_sets(real)
        refs = [r for r in comma_list(args.confusions_ref) if r != "-"]
        check_no_overlap("--out", out, [s.source for s in real] + refs + texts)
        sentences = read_sentences(texts, not args.no_normalize)
        if not sentences:
            raise InputError(f"{', '.join(texts)}: no sentence")
        counts = mine_confusions(real)
        if not any(edit[0] != "I" for edit in counts):
            raise InputError(f"{', '.join(s.source for s in real)}: no hypothesis differs from its reference by a "
                             "substituted or deleted word: no confusion to simulate with")
        finish_interrupted(out, COMMAND)
        own = _earlier_run(out)
        check_output_dir("--out", out, OUTPUTS, own, COMMAND)
        random.Random(args.seed).shuffle(sentences)
        simulator = Simulator(counts, args.seed)
        lists, skipped = [], 0
        for sentence in sentences:
            if args.lists is not None and len(lists) == args.lists:
                break
            hyps = simulator.nbest(sentence, args.variants)
            if hyps is None:
                skipped += 1
            else:
                lists.append((sentence, hyps))
        if args.lists is not None and len(lists) < args.lists:
            raise InputError(f"--lists {args.lists}: the text gives only {len(lists)} lists ({skipped} of "
                             f"{len(sentences)} sentences have too few confusions for {args.variants} variants)")
        ids = [f"sim{k // LISTS_PER_GROUP:05d}-{k:07d}" for k in range(len(lists))]
        nbest = "".join(f"{uttid}\t{rank}\t0\t{hyp}\n" for uttid, (_, hyps) in zip(ids, lists)
                        for rank, hyp in enumerate(hyps, 1))
        record = {"command": COMMAND, "confusions": [s.source for s in real], "nbest": args.nbest, "text": texts,
                  "normalized": not args.no_normalize, "seed": args.seed, "variants": args.variants,
                  "lists": len(lists), "sentences_read": len(sentences), "sentences_without_list": skipped,
                  "confusions_mined": len(counts), "hypotheses_mined": sum(s.n_hyps for s in real)}
        with staged_outputs("--out", out, OUTPUTS, own, COMMAND) as staging:
            write_atomic(staging / "nbest.tsv", nbest)
            write_atomic(staging / "ref.txt", "".join(f"{u} {s}\n" for u, (s, _) in zip(ids, lists)))
            write_atomic(staging / "confusions.tsv", "op\tref\thyp\tcount\n" + "".join(
                f"{op}\t{ref}\t{hyp}\t{n}\n" for (op, ref, hyp), n in counts.most_common()))
            write_atomic(staging / RECORD, json.dumps(record, indent=1) + "\n")
    except (InputError, OSError) as err:
        fail(COMMAND, err)
    print(f"{out}: {len(lists)} lists of {args.variants + 1} hypotheses ({skipped} of {len(sentences)} sentences "
          f"with too few confusions); {len(counts)} confusions mined from {record['hypotheses_mined']} hypotheses")


if __name__ == "__main__":
    main()
