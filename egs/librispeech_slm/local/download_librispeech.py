#!/usr/bin/env python3
"""Download and unpack LibriSpeech (OpenSLR 12) and its LM corpus (OpenSLR 11), resumably.

    download_librispeech.py --dir downloads --parts dev-clean test-clean ... [--lm-corpus]
        [--mirror https://www.openslr.org/resources | /local/mirror]

For each part, `<mirror>/12/<part>.tar.gz` is fetched into `<dir>/archives/` (an interrupted
download continues with an HTTP Range request, or a local copy continues where it stopped),
checked against the MD5 listed in `<mirror>/12/md5sum.txt`, and unpacked into
`<dir>/LibriSpeech/<part>/`. A part already there (unpacked by an earlier run or an existing copy of
the user's) is checked by its files -- every transcript line has its non-empty audio file, every audio
file its transcript line -- and used as it is; an incomplete one is an error naming the problem.
Nothing that is there is deleted or replaced, and a complete copy is only read (`archives/` is made
only for a download), so a read-only shared copy works.
With --lm-corpus, `<mirror>/11/librispeech-lm-norm.txt.gz` goes to `--lm-dir` (default `<dir>`; MD5 from
`<mirror>/11/md5sum.txt` when the mirror has one, else the announced size is checked).
A local mirror (a directory with `12/` and `11/`) makes the stage testable offline.
"""
import argparse
import gzip
import os
import shutil
import sys
import tarfile
from pathlib import Path


from slm_lm.data.librispeech import read_subset
from slm_lm.data.download import get_verified, read_md5sums
from slm_lm.common.errors import InputError, fail
from slm_lm.common.progress import progress_bar

PARTS = ["train-clean-100", "train-clean-360", "train-other-500", "dev-clean", "dev-other",
         "test-clean", "test-other"]
LM_CORPUS = "librispeech-lm-norm.txt.gz"


def check_part(target):
    """A LibriSpeech part on disk, checked by its files (data_prep's rules plus non-empty audio);
    returns the number of utterances, or raises InputError naming the problem."""
    utts = read_subset(target)
    empty = [audio for audio, _, _ in utts.values() if os.path.getsize(audio) == 0]
    if empty:
        raise InputError(f"{empty[0]}: empty audio file ({len(empty)} in {target})")
    return len(utts)


def existing_part(target):
    """True when root/LibriSpeech/<part> is there and complete; an incomplete copy is an error
    (never deleted: it may be the user's)."""
    if not target.exists():
        return False
    try:
        check_part(target)
    except InputError as e:
        raise InputError(f"{target} is there but incomplete ({e}); complete or move it, "
                         "then run again (nothing was deleted)") from None
    return True


def unpack(archive, part, root):
    """Extract one LibriSpeech archive into root/LibriSpeech/<part> (absent before)."""
    target = root / "LibriSpeech" / part
    tmp = root / f".unpack-{part}"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        bad = [m.name for m in members if ".." in Path(m.name).parts
               or not (m.name == "LibriSpeech" or m.name.startswith("LibriSpeech/"))]
        if bad:
            raise InputError(f"{archive}: unexpected member {bad[0]} (not a LibriSpeech archive?)")
        if not any(m.name.startswith(f"LibriSpeech/{part}/") for m in members):
            raise InputError(f"{archive}: no LibriSpeech/{part}/ inside")
        with progress_bar(members, desc=f"unpack {part}", file=sys.stderr) as bar:
            tar.extractall(tmp, members=bar, filter="data")
    target.parent.mkdir(parents=True, exist_ok=True)
    for extra in (tmp / "LibriSpeech").iterdir():  # README, CHAPTERS.TXT, SPEAKERS.TXT ...
        if extra.name != part and not (target.parent / extra.name).exists():
            os.replace(extra, target.parent / extra.name)
    os.replace(tmp / "LibriSpeech" / part, target)
    shutil.rmtree(tmp)
    check_part(target)


def check_gzip(path):
    """An existing LM corpus must at least be a gzip file with content (it is used as it is)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            if not f.readline().strip():
                raise InputError(f"{path}: empty first line (not the LibriSpeech LM corpus?)")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a readable gzip text file ({e}); move it away to download it") from None


def main(argv=None):
    """Command line: download the chosen parts (and the LM corpus)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="download directory (gets archives/ and LibriSpeech/)")
    p.add_argument("--mirror", default="https://www.openslr.org/resources")
    p.add_argument("--parts", nargs="+", default=PARTS, choices=PARTS)
    p.add_argument("--lm-corpus", action="store_true", help=f"also get {LM_CORPUS} (OpenSLR 11)")
    p.add_argument("--lm-dir", help="where the LM corpus is or goes (default: --dir)")
    p.add_argument("--keep-archives", action="store_true")
    args = p.parse_args(argv)
    root = Path(args.dir)
    lm_corpus = Path(args.lm_dir or args.dir) / LM_CORPUS
    mirror = args.mirror.rstrip("/")
    todo = [x for x in args.parts if not existing_part(root / "LibriSpeech" / x)]
    if todo:
        (root / "archives").mkdir(parents=True, exist_ok=True)
        sums = read_md5sums(mirror, "12", required=True)
        for part in todo:
            archive = root / "archives" / f"{part}.tar.gz"
            get_verified(mirror, "12", f"{part}.tar.gz", archive, sums, required=True)
            unpack(archive, part, root)
            if not args.keep_archives:
                archive.unlink()
    for part in args.parts:
        print(f"{root / 'LibriSpeech' / part}: ready")
    if args.lm_corpus and lm_corpus.exists():
        check_gzip(lm_corpus)
    elif args.lm_corpus:
        lm_corpus.parent.mkdir(parents=True, exist_ok=True)
        get_verified(mirror, "11", LM_CORPUS, lm_corpus, read_md5sums(mirror, "11", False), False)
    if args.lm_corpus:
        print(f"{lm_corpus}: ready")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("download_librispeech.py", e)
