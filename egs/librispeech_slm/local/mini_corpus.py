#!/usr/bin/env python3
"""Build the offline mini corpus: King James Bible text, spoken by espeak-ng.

The output mimics LibriSpeech's on-disk layout so that stages 1-8 of the recipe run
unchanged on it::

    <out>/LibriSpeech/<subset>/<spk>/<chapter>/<spk>-<chapter>-<NNNN>.flac
    <out>/LibriSpeech/<subset>/<spk>/<chapter>/<spk>-<chapter>.trans.txt
    <out>/books/<NN>_<Book>.txt        one verse per line: the LM material (train books only)
    <out>/books_heldout/<NN>_<Book>.txt   the dev/test books (not for LM training)
    <out>/split.json                   which books went to train / dev / test

Train, dev and test sentences come from disjoint books, and train sentences whose text
also occurs in dev/test are dropped. The "clean" dev/test sets get mild noise, the
"other" sets faster speech and louder noise (as LibriSpeech's harder half).
Re-running skips every utterance whose audio already exists (resume after a kill).
"""
import argparse
import io
import json
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.common.progress import progress_bar
from slm_lm.data.bible import DEV_BOOKS, TEST_BOOKS, read_bible
from slm_lm.data.text_norm import normalize_librispeech

SAMPLE_RATE = 16000
VOICES = ["en-us", "en-gb", "en-us+f3", "en-gb-scotland", "en-029+f2", "en-us-nyc",
          "en-gb-x-rp+f4", "en-gb-x-gbclan+m3"]
# subset -> (source split, rate range (words/min), SNR range (dB))
# (train-mini last: the utterance ids number all subsets in this order, so --train N leaves dev/test ids as they are)
SUBSETS = {
    "dev-clean": ("dev", (170, 200), (25.0, 40.0)),
    "dev-other": ("dev", (210, 240), (8.0, 15.0)),
    "test-clean": ("test", (170, 200), (25.0, 40.0)),
    "test-other": ("test", (210, 240), (8.0, 15.0)),
    "train-mini": ("train", (170, 240), (12.0, 40.0)),
}

def sentences_of(verse, min_words, max_words):
    """Split a verse at sentence / clause punctuation; keep normalised pieces in range."""
    out = []
    for piece in re.split(r"(?<=[.;:?!])\s+", verse):
        text = normalize_librispeech(piece)
        if min_words <= len(text.split()) <= max_words:
            out.append(text)
    return out


def plan(verses, counts, seed, min_words, max_words):
    """Choose the sentences of every subset; returns {subset: [(book, chapter, text)]}."""
    pools = {"train": [], "dev": [], "test": []}
    for book, chapter, verse in verses:
        split = "dev" if book in DEV_BOOKS else "test" if book in TEST_BOOKS else "train"
        pools[split].extend((book, chapter, s) for s in sentences_of(verse, min_words, max_words))
    held_out = {t for split in ("dev", "test") for _, _, t in pools[split]}
    pools["train"] = [x for x in pools["train"] if x[2] not in held_out]
    dev_set = {t for _, _, t in pools["dev"]}
    pools["test"] = [x for x in pools["test"] if x[2] not in dev_set]
    chosen, used = {}, defaultdict(set)
    for subset, (split, _, _) in SUBSETS.items():
        rng = random.Random(f"{seed}:{subset}")  # one stream per subset: --train N leaves dev/test as they are
        pool = [x for x in pools[split] if x[2] not in used[split]]
        # distinct texts inside a split (dev-clean and dev-other never share a sentence)
        uniq = list({x[2]: x for x in pool}.values())
        if len(uniq) < counts[subset]:
            raise InputError(f"mini corpus: {subset} needs {counts[subset]} sentences, "
                             f"the {split} books give only {len(uniq)}")
        pick = rng.sample(uniq, counts[subset])
        used[split].update(x[2] for x in pick)
        chosen[subset] = pick
    return chosen


def synth_one(job):
    """Synthesise one utterance to FLAC (16 kHz, noise added); skip if it exists."""
    path, text, voice, rate, pitch, snr, seed = job
    if os.path.exists(path):
        return path
    torch.set_num_threads(1)
    proc = subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-p", str(pitch),
                           "--stdout", text.lower()], check=True, capture_output=True)
    wav, sr = sf.read(io.BytesIO(proc.stdout), dtype="float32")
    wav = AF.resample(torch.from_numpy(wav), sr, SAMPLE_RATE).numpy()
    rng = np.random.default_rng(seed)
    power = float(np.mean(wav ** 2)) + 1e-10
    noise = rng.standard_normal(len(wav)).astype("float32")
    noise = np.convolve(noise, np.ones(4, dtype="float32") / 4, mode="same")  # coloured
    noise *= np.sqrt(power / (np.mean(noise ** 2) * 10 ** (snr / 10)))
    wav = wav + noise
    wav *= 0.9 / max(1e-6, float(np.abs(wav).max()))
    tmp = path + ".tmp.flac"
    sf.write(tmp, wav, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
    os.replace(tmp, path)
    return path


def write_lines(path, lines):
    """Write one line per item, atomically."""
    write_atomic(path, "".join(line + "\n" for line in lines))


def main(argv=None):
    """Command line: build the mini corpus under --out."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="corpus root (gets LibriSpeech/ and books/)")
    p.add_argument("--train", type=int, default=6000, help="train utterances")
    p.add_argument("--dev", type=int, default=100, help="utterances per dev set (clean, other)")
    p.add_argument("--test", type=int, default=100, help="utterances per test set")
    p.add_argument("--min-words", type=int, default=3)
    p.add_argument("--max-words", type=int, default=14)
    p.add_argument("--nj", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bible-cmd", default="bible")
    args = p.parse_args(argv)

    out = Path(args.out)
    verses = read_bible(args.bible_cmd)
    books = defaultdict(list)
    for book, _, verse in verses:
        books[book].append(verse)
    for i, (book, lines) in enumerate(books.items()):
        folder = "books_heldout" if book in DEV_BOOKS + TEST_BOOKS else "books"
        write_lines(out / folder / f"{i:02d}_{book}.txt", lines)

    counts = {"train-mini": args.train, "dev-clean": args.dev, "dev-other": args.dev,
              "test-clean": args.test, "test-other": args.test}
    chosen = plan(verses, counts, args.seed, args.min_words, args.max_words)
    book_index = {b: i for i, b in enumerate(books)}
    jobs, trans = [], defaultdict(list)
    for subset, items in chosen.items():
        rng = random.Random(f"{args.seed + 1}:{subset}")
        _, (r_lo, r_hi), (s_lo, s_hi) = SUBSETS[subset]
        for book, chapter, text in items:
            v = rng.randrange(len(VOICES))
            spk, chap = 100 + v, book_index[book] * 1000 + chapter
            uttid = f"{spk}-{chap}-{len(jobs):04d}"  # unique across subsets
            d = out / "LibriSpeech" / subset / str(spk) / str(chap)
            d.mkdir(parents=True, exist_ok=True)
            jobs.append((str(d / f"{uttid}.flac"), text, VOICES[v], rng.randint(r_lo, r_hi),
                         rng.randint(25, 75), rng.uniform(s_lo, s_hi), rng.randrange(2**31)))
            trans[d / f"{spk}-{chap}.trans.txt"].append(f"{uttid} {text}")
    # audio already on disk is reused only when it was planned with the same settings
    plan_file = out / "plan.json"
    planned = json.dumps([job[:6] for job in jobs])
    if plan_file.exists() and plan_file.read_text(encoding="utf-8") != planned + "\n":
        raise InputError(f"{plan_file}: the corpus under {out} was built with other settings "
                         "(sizes, seed); delete that directory or choose another --out")
    write_lines(plan_file, [planned])
    with ProcessPoolExecutor(args.nj) as ex, progress_bar(ex.map(synth_one, jobs, chunksize=16), total=len(jobs),
                                                          desc="espeak-ng", file=sys.stderr) as bar:
        for _ in bar:
            pass
    for path, lines in trans.items():
        write_lines(path, sorted(lines))
    split = {"dev_books": DEV_BOOKS, "test_books": TEST_BOOKS,
             "counts": {s: len(v) for s, v in chosen.items()}, "voices": VOICES}
    write_lines(out / "split.json", [json.dumps(split, indent=1)])
    print(f"mini corpus: {len(jobs)} utterances under {out / 'LibriSpeech'}")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("mini_corpus.py", e)
