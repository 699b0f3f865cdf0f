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

from slm_lm.errors import InputError, fail
from slm_lm.fileio import atomic_open


def read_subset(subset_dir):
    """Return {uttid: (flac_path, speaker, text)} for one LibriSpeech subset directory."""
    subset_dir = Path(subset_dir)
    if not subset_dir.is_dir():
        raise InputError(f"{subset_dir}: LibriSpeech subset directory not found "
                         "(run stage 0, or check --librispeech_dir)")
    utts = {}
    trans_files = sorted(subset_dir.glob("*/*/*.trans.txt"))
    if not trans_files:
        raise InputError(f"{subset_dir}: no <spk>/<chapter>/*.trans.txt files")
    for trans in trans_files:
        with open(trans, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.rstrip("\n").split(" ", 1)
                if len(parts) != 2 or not parts[1].strip():
                    raise InputError(f"{trans}, line {lineno}: expected 'UTTID TEXT', got {line!r}")
                uttid, text = parts
                audio = trans.parent / f"{uttid}.flac"
                if not audio.is_file():
                    raise InputError(f"{trans}, line {lineno}: audio {audio} is missing")
                if uttid in utts:
                    raise InputError(f"{trans}, line {lineno}: duplicate utterance id {uttid}")
                utts[uttid] = (str(audio.resolve()), uttid.split("-")[0], " ".join(text.split()))
    for audio in subset_dir.glob("*/*/*.flac"):
        if audio.stem not in utts:
            raise InputError(f"{audio}: no transcript line in {audio.parent}/*.trans.txt")
    return utts


def write_table(path, rows):
    """Write `key value` lines atomically (temp file + rename)."""
    with atomic_open(path) as f:
        for key, value in rows:
            f.write(f"{key} {value}\n")


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
