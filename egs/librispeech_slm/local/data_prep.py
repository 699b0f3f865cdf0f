#!/usr/bin/env python3
"""Make Kaldi-style data directories from LibriSpeech subsets.

    data_prep.py --out data/train <LibriSpeech>/train-clean-100 <LibriSpeech>/train-clean-360 ...

writes `wav.scp` (uttid path.flac, read by ESPnet with soundfile), `text`, `utt2spk`,
`spk2utt` (all sorted by uttid, as Kaldi's validate_data_dir.sh demands). Every
`<spk>/<chapter>/<spk>-<chapter>.trans.txt` line must have its audio file, and every audio
file its transcript; otherwise an InputError names the file and line.
"""
import argparse
from collections import defaultdict
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.data.librispeech import read_subset
from slm_lm.rescoring.transcripts import write_table


def main(argv=None):
    """Command line: build one data directory from one or more subsets."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="data directory to write")
    p.add_argument("subsets", nargs="+", help="LibriSpeech subset directories")
    args = p.parse_args(argv)
    utts = {}
    for subset in args.subsets:
        for uttid, value in read_subset(subset).items():
            if uttid in utts:
                raise InputError(f"{subset}: utterance {uttid} also occurs in an earlier subset")
            utts[uttid] = value
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted(utts)
    spk2utt = defaultdict(list)
    for k in keys:
        spk2utt[utts[k][1]].append(k)
    write_table(out / "wav.scp", ((k, utts[k][0]) for k in keys))
    write_table(out / "text", ((k, utts[k][2]) for k in keys))
    write_table(out / "utt2spk", ((k, utts[k][1]) for k in keys))
    write_table(out / "spk2utt", ((s, " ".join(u)) for s, u in sorted(spk2utt.items())))
    print(f"{out}: {len(keys)} utterances, {len(spk2utt)} speakers")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("data_prep.py", e)
