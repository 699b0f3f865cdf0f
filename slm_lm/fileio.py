"""Atomic file output: write a temporary file beside the target, then rename it into place, so that a
crash never leaves a half-written file."""
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_open(path, mode: str = "w"):
    """Open a temporary file for writing (text mode is UTF-8); on success it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_atomic(path, data) -> None:
    """Write `data` (str as UTF-8, or bytes) to `path` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
