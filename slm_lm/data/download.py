"""Downloading with checksums: a file from a URL base or a local mirror directory (`<mirror>/<resource>/<name>`),
resumed from a partial `.part` file, and checked against an MD5 list in the mirror's `md5sum.txt`."""
import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.progress import progress_bar


def is_url(mirror):
    """True for http(s)/ftp mirrors, false for a local directory (or file:// URL)."""
    return mirror.split("://")[0] in ("http", "https", "ftp")


def local_path(mirror, resource, name):
    """Path of a file in a local mirror."""
    root = mirror[len("file://"):] if mirror.startswith("file://") else mirror
    return Path(root) / resource / name


def read_md5sums(mirror, resource, required):
    """{file name: md5} from the mirror's md5sum.txt; {} when absent and not required."""
    where = f"{mirror}/{resource}/md5sum.txt"
    try:
        if is_url(mirror):
            with urllib.request.urlopen(where, timeout=60) as r:
                text = r.read().decode("utf-8")
        else:
            text = local_path(mirror, resource, "md5sum.txt").read_text(encoding="utf-8")
    except (OSError, urllib.error.URLError) as e:
        if required:
            raise InputError(f"{where}: cannot read the checksum list ({e})") from None
        return {}
    sums = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 32:
            raise InputError(f"{where}, line {lineno}: expected 'MD5 FILE', got {line!r}")
        sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def md5_of(path):
    """MD5 hex digest of a file, with a progress bar."""
    h = hashlib.md5()
    with open(path, "rb") as f, progress_bar(total=path.stat().st_size, unit="B", unit_scale=True,
                                             desc=f"md5 {path.name}", file=sys.stderr) as bar:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()


def fetch(mirror, resource, name, dest, progress=True):
    """Download (or copy) a file to dest, resuming a partial `dest.part`; returns the announced size."""
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if is_url(mirror):
        req = urllib.request.Request(f"{mirror}/{resource}/{name}",
                                     headers={"Range": f"bytes={have}-"} if have else {})
        try:
            src = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            if e.code == 416:  # already complete
                os.replace(part, dest)
                return have
            raise InputError(f"{mirror}/{resource}/{name}: HTTP {e.code}") from None
        except urllib.error.URLError as e:
            raise InputError(f"{mirror}/{resource}/{name}: cannot download ({e.reason})") from None
        if have and src.status != 206:  # server ignored the range: start again
            have = 0
        total = have + int(src.headers.get("Content-Length", 0))
    else:
        path = local_path(mirror, resource, name)
        if not path.is_file():
            raise InputError(f"{path}: not in the mirror")
        src = open(path, "rb")
        src.seek(have)
        total = path.stat().st_size
    with src, open(part, "ab" if have else "wb") as out, \
            progress_bar(total=total, initial=have, unit="B", unit_scale=True, desc=name, file=sys.stderr,
                         disable=not progress) as bar:
        for block in iter(lambda: src.read(1 << 20), b""):
            out.write(block)
            bar.update(len(block))
    os.replace(part, dest)
    return total


def get_verified(mirror, resource, name, dest, md5sums, required):
    """Fetch unless present, then check the MD5 (or the size when no MD5 is known)."""
    expected = md5sums.get(name)
    if expected is None and required:
        raise InputError(f"{mirror}/{resource}/md5sum.txt: no checksum for {name}")
    total = dest.stat().st_size if dest.exists() else fetch(mirror, resource, name, dest)
    if expected is not None:
        got = md5_of(dest)
        if got != expected:
            bad = dest.with_name(dest.name + ".bad")
            os.replace(dest, bad)
            raise InputError(f"{dest}: MD5 {got} differs from {expected} in {mirror}/{resource}/md5sum.txt "
                             f"(moved to {bad}; run the stage again to download it anew)")
    elif total and dest.stat().st_size != total:
        raise InputError(f"{dest}: {dest.stat().st_size} bytes, the server announced {total}")
