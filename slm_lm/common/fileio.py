"""File input and output: UTF-8 text in (`read_text_lines`, gzip or not, or `decode_utf8`; errors name the
line), and
atomic output: write a temporary file (or directory) beside the target, then rename it into place, so that a
crash never leaves a half-written file; and one writer per output directory (`exclusive_dir_lock`)."""
import codecs
import errno
import fcntl
import json
import glob
import gzip
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from slm_lm.common.errors import InputError, os_problem

_UMASK = os.umask(0)
os.umask(_UMASK)


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a write refused for room: the file written is to blame


@contextmanager
def new_directory(path):
    """Create the directory `path` (and its missing parents) for the block; if the block fails, remove those
    it created that are still empty, so that a failed command leaves no empty directory behind."""
    path = Path(path)
    created, missing = [], path
    while not missing.exists():  # the deepest first, up to the first that exists
        created.append(missing)
        missing = missing.parent
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for directory in created:
            try:
                directory.rmdir()
            except OSError:  # not empty (resumable state, another writer's files) or gone
                break
        raise


def _remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary files of `path` (`.NAME.XXXXXXXX.tmp`) that a killed writer left: a live writer
    holds a lock on its own (`atomic_open`), which ends with its process."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if not _TEMPORARY.fullmatch(stale.name[len(path.name) + 1:]):
            continue
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # else its writer is alive: OSError, left alone
                os.unlink(stale)
        except OSError:
            pass
        finally:
            os.close(fd)


_TEMPORARY = re.compile(r"\.[a-z0-9_]{8}\.tmp")  # what tempfile.mkstemp adds to the prefix `.NAME`


@contextmanager
def atomic_open(path, mode: str = "w"):
    """Open a temporary file for writing (text mode is UTF-8); on success it replaces `path`. A write refused
    for room (a full disk, a quota, a size limit) raises an OSError naming `path`. The temporary file is
    locked while it is written, so that a later writer of `path` deletes those of killed runs."""
    path = Path(path)
    with new_directory(path.parent):
        _remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        held = os.dup(fd)  # holds the lock until the file is in place
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
                yield handle
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the usual permissions
            os.replace(tmp, path)
        except BaseException as err:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(err, OSError) and err.filename is None and err.errno in _NO_ROOM:
                raise OSError(err.errno, err.strerror, str(path)) from None
            raise
        finally:
            os.close(held)


@contextmanager
def scratch_directory(parent, prefix: str):
    """A temporary directory `parent`/`prefix`XXXXXXXX for the block, deleted after it. It is locked while in
    use, so that a later call deletes those that killed runs left (a live run's lock ends with its process)."""
    parent = Path(parent)
    for stale in parent.glob(f"{glob.escape(prefix)}*"):
        if not (_SCRATCH.fullmatch(stale.name[len(prefix):]) and stale.is_dir() and not stale.is_symlink()):
            continue
        fd = os.open(stale, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(stale)
        except OSError:  # its run is alive, or it went away
            pass
        finally:
            os.close(fd)
    scratch = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.close(fd)


_SCRATCH = re.compile(r"[a-z0-9_]{8}")  # what tempfile.mkdtemp adds to the prefix


def write_atomic(path, data) -> None:
    """Write `data` (str as UTF-8, or bytes) to `path` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def save_png(fig, path, dpi: int = 120) -> None:
    """Lay out a matplotlib figure, write it to `path` as PNG atomically, and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=dpi)
    plt.close(fig)


LOCK_FILE = ".slm_lm.lock"


@contextmanager
def exclusive_dir_lock(directory, command: str):
    """Hold `directory` (created if missing) for the block, as its one writer: `fcntl.flock` on
    `directory`/.slm_lm.lock, which names the holder (command, pid, host) while it is held and is removed
    when the block ends. A second holder, in this process or another, is refused at once: InputError naming
    the directory and the holder. The lock is advisory: it keeps out the commands that take it.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory}: is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{directory}: cannot create the directory: {e.strerror or e}") from None
    lock = directory / LOCK_FILE
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise InputError(f"{directory}: cannot write its lock file {LOCK_FILE}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(f"{directory}: in use by {holder} (lock {lock}); one writer per output "
                                 f"directory: wait for it to end, or give {command} another one") from None
            raise InputError(f"{directory}: cannot lock {lock}: {e.strerror or e}") from None
        try:  # the file locked is still the one at `lock` (not one a finishing holder just removed)?
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{command} (pid {os.getpid()} on {socket.gethostname()})\n".encode())
        except OSError as e:  # a full disk
            raise InputError(f"{lock}: cannot write the lock file: {os_problem(e, lock)}") from None
        yield lock
    finally:
        try:
            os.unlink(lock)  # while still held: a later writer creates and locks a new file
        except OSError:
            pass
        os.close(fd)


MAX_SMALL_FILE = 64 * 2**20  # bytes: a config, token list or tokenizer model is far smaller
MAX_TEXT_FILE = 2**30  # bytes: a Kaldi table, N-best or transcript file read whole


def read_small_file(path, what: str, ceiling: int = MAX_SMALL_FILE) -> bytes:
    """The bytes of `path` (a `what`: "model config", "token list", ...), which must be a regular file of at
    most `ceiling` bytes: a FIFO or a device (which would block or never end) or a larger file -> InputError.
    The file is opened without blocking and checked before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # checked before os.fdopen, which refuses a directory naming only the descriptor
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a directory, not a file; the {what} must be a file")
        raise InputError(f"{path}: not a regular file (a FIFO, device or socket); the {what} must be a file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(ceiling + 1)
    if len(data) > ceiling:
        raise InputError(f"{path}: over {ceiling:,} bytes, the ceiling for a {what}; not a {what}?")
    return data


def decode_utf8(path, data: bytes) -> str:
    """`data`, the bytes of the file `path`, as text (a byte-order mark dropped); InputError naming the line
    of the first bytes that are not UTF-8."""
    body = data[len(codecs.BOM_UTF8):] if data.startswith(codecs.BOM_UTF8) else data
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = body.count(b"\n", 0, e.start) + 1, e.start - body.rfind(b"\n", 0, e.start)
        raise InputError(f"{path}:{line}: not UTF-8 text ({e.reason} at byte {column} of the line)") from None


MAX_LINE = 16 * 2**20  # bytes: a line of text (a sentence, an N-best line, a book's paragraph) is far shorter


def _open_regular(path):
    """A binary handle on `path`, which must be a regular file: a FIFO is opened without blocking and a
    device, FIFO or socket refused (they would block or never end) -> InputError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise InputError(f"{path}: cannot open: {os_problem(e, path)}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path}: is a directory, not a file" if stat.S_ISDIR(mode) else
                         f"{path}: not a regular file (a FIFO, device or socket, which may block or never end); "
                         "give a file")
    return os.fdopen(fd, "rb")


def read_text_lines(path) -> Iterator[tuple[int, str]]:
    """(line number, line without newline) of a UTF-8 text file (a regular file, gzip if named *.gz; `-`:
    standard input); errors -> InputError naming the line, a line over MAX_LINE bytes among them."""
    path = Path(path) if path != "-" else path
    raw_handle = sys.stdin.buffer if path == "-" else _open_regular(path)
    handle = gzip.GzipFile(fileobj=raw_handle, mode="rb") if path != "-" and path.suffix == ".gz" else raw_handle
    number = 0
    try:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE + 1), b""), 1):
            if len(raw) > MAX_LINE:
                raise InputError(f"{path}:{number}: a line of over {MAX_LINE:,} bytes; not a text file?")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte {e.start + 1} of the line)"
                                 ) from None
            yield number, line.rstrip("\r\n")
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError(f"{path}:{number + 1}: cannot read: "
                         f"{os_problem(e, path) if isinstance(e, OSError) else e}") from None
    finally:
        if raw_handle is not sys.stdin.buffer:
            handle.close()
            raw_handle.close()


def why_not(path, what: str) -> str:
    """Why `path`, which a command wants as a `what` ("reference file", "model directory"), is not one, in
    plain words: a directory or a file where the other is wanted, a FIFO or device, a link to nothing, or
    nothing at all."""
    path = Path(path)
    if path.is_dir():
        return "is a directory, not a file"
    if path.is_file():
        return "is a file, not a directory"
    if path.exists():
        return "not a regular file nor a directory (a FIFO, device or socket)"
    if path.is_symlink():
        return f"{what} not found (a link to {os.readlink(path)}, which does not exist)"
    return f"{what} not found"


def check_readable(path) -> None:
    """InputError unless `path` is a readable, non-empty regular file (a FIFO or device would block or never
    end)."""
    try:
        info = os.stat(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file (a FIFO, device or socket); the weights must be a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: cannot read: permission denied")
    if info.st_size == 0:
        raise InputError(f"{path}: empty file")


def read_json(path) -> dict:
    """A JSON object from a UTF-8 file (a byte-order mark is accepted; a regular file of a bounded size)."""
    data = read_small_file(path, "JSON file")
    if not data:
        raise InputError(f"{path}: empty file")
    text = decode_utf8(path, data)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON ({e.msg}; truncated?)") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value
