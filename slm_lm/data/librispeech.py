"""LibriSpeech as distributed: a subset directory of <speaker>/<chapter>/ with .flac audio and .trans.txt transcripts."""
from pathlib import Path

from slm_lm.common.errors import InputError


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
