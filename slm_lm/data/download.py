"""Downloading with checksums: a file from a URL base or a local mirror directory (`<mirror>/<resource>/<name>`),
resumed from a partial `.part` file, and checked against an MD5 list in the mirror's `md5sum.txt`."""
import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import MAX_SMALL_FILE, decode_utf8, read_small_file
from slm_lm.common.progress import progress_bar


def is_url(mirror):
    """True for http(s)/ftp mirrors, false for a local directory (or file:// URL)."""
    return mirror.split("://")[0] in ("http", "https", "ftp")


def local_path(mirror, resource, name):
    """Path of a file in a local mirror."""
    root = mirror[len("file://"):] if mirror.startswith("file://") else mirror
    return Path(root) / resource / name


def read_md5sums(mirror, resource, required):
    """{file name: md5} from the mirror's md5sum.txt (a regular file, or a URL, of a bounded size); {} when
    absent and not required."""
    where = f"{mirror}/{resource}/md5sum.txt"
    if is_url(mirror):
        try:
            with urllib.request.urlopen(where, timeout=60) as r:
                data = r.read(MAX_SMALL_FILE + 1)
        except (OSError, urllib.error.URLError) as e:
            if required:
                raise InputError(f"{where}: cannot read the checksum list ({e})") from None
            return {}
        if len(data) > MAX_SMALL_FILE:
            raise InputError(f"{where}: over {MAX_SMALL_FILE:,} bytes, the ceiling for a checksum list")
    else:
        path = local_path(mirror, resource, "md5sum.txt")
        if not required and not os.path.lexists(path):
            return {}
        where = str(path)
        data = read_small_file(path, "checksum list")
    sums = {}
    for lineno, line in enumerate(decode_utf8(where, data).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 32:
            raise InputError(f"{where}:{lineno}: expected 'MD5 FILE', got {line!r}")
        sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def md5_of(path, progress=True):
    """MD5 hex digest of a file, with a progress bar."""
    h = hashlib.md5()
    with open(path, "rb") as f, progress_bar(total=path.stat().st_size, unit="B", unit_scale=True,
                                             desc=f"md5 {path.name}", file=sys.stderr, disable=not progress) as bar:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()


def fetch(mirror, resource, name, part, progress=True, resume=True):
    """Download (or copy) a file into `part`, continuing what `part` holds when `resume`; returns the size
    announced (the whole file's)."""
    have = part.stat().st_size if resume and part.exists() else 0
    if is_url(mirror):
        req = urllib.request.Request(f"{mirror}/{resource}/{name}",
                                     headers={"Range": f"bytes={have}-"} if have else {})
        try:
            src = urllib.request.urlopen(req, timeout=60)
        except urllib.error.HTTPError as e:
            if e.code == 416:  # already complete
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
    return total


def get_verified(mirror, resource, name, dest, md5sums, required, progress=True) -> bool:
    """`dest`, checked: a file already there against its MD5 (a copy that differs is refused, never moved nor
    replaced); else fetched into `dest.part` and renamed to `dest` once its MD5 (or, when no MD5 is known, the
    size announced) is right. A `.part` is resumed only when an MD5 can check the result; a resumed one that
    is wrong is fetched again from the start. True when this call made `dest` (it was not there)."""
    expected = md5sums.get(name)
    listed = f"{mirror}/{resource}/md5sum.txt"
    if expected is None and required:
        raise InputError(f"{listed}: no checksum for {name}")
    if dest.exists():
        if expected is not None and (got := md5_of(dest, progress)) != expected:
            raise InputError(f"{dest}: is there and its MD5 {got} differs from {expected} in {listed}; it is "
                             "not replaced: move it away to download it anew")
        return False
    part = dest.with_name(dest.name + ".part")
    for resume in ([True, False] if expected is not None and part.exists() else [False]):
        total = fetch(mirror, resource, name, part, progress, resume)
        if expected is not None:
            got = md5_of(part, progress)
            problem = None if got == expected else f"MD5 {got} differs from {expected} in {listed}"
        else:
            size = part.stat().st_size
            problem = None if not total or size == total else f"{size} bytes, the source announced {total}"
        if problem is None:
            os.replace(part, dest)
            return True
    part.unlink()
    raise InputError(f"{mirror}/{resource}/{name}: downloaded, {problem}; the download was deleted")
