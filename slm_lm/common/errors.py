"""Errors raised for bad user input, and how the command-line tools report them; a closed standard output
(`slm-score ... | head -1`) ends a command quietly, as it ends `cat`."""
import atexit
import os
import select
import sys


class InputError(ValueError):
    """Bad user input; the message names the file, line or index and the problem.

    `index` is the 0-based position of the offending item in the caller's input, when there is one.
    """

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class CommandError(SystemExit):
    """Exit status 2 (like argparse's usage errors); ``str()`` is the one-line message."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def os_problem(err: OSError, path=None) -> str:
    """An OSError in plain words, without Python's `[Errno N]` prefix: its reason ("No such file or
    directory"), then the file(s) it names other than `path` (which the message names already)."""
    named = [str(f) for f in (err.filename, err.filename2) if f is not None]
    if path is not None:
        named = [f for f in named if os.path.abspath(f) != os.path.abspath(path)]
    reason = err.strerror or str(err)
    return f"{reason}: {', '.join(named)}" if named else reason


def yaml_problem(err, path=None) -> str:
    """`FILE:LINE: problem` of a YAML parser's error (PyYAML's `MarkedYAMLError`; FILE: `path`, else the name the
    parser knows), else its text (after `path: `)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    if mark is None:
        return f"{path}: {err}" if path is not None else str(err)
    return f"{path if path is not None else mark.name}:{mark.line + 1}: {problem}"


CLOSED_STDOUT_STATUS = 141  # 128 + SIGPIPE: what a shell reports for `cat` whose reader has gone


def stdout_closed() -> bool:
    """True when standard output is a pipe whose reader has gone (`... | head -1` after head ended)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR is reported whatever the events asked for
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no real file behind sys.stdout
        return False


def _end_quietly() -> None:
    """Leave at once with status 141 and nothing more on stderr; standard output, closed by its reader, goes to
    /dev/null so that no later flush finds the broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.stderr.flush()
    os._exit(CLOSED_STDOUT_STATUS)


def _closed_stdout_ends_quietly(kind, value, traceback) -> None:
    if issubclass(kind, BrokenPipeError) and stdout_closed():
        _end_quietly()
    _excepthook(kind, value, traceback)


def _flush_stdout_at_exit() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _end_quietly()
    except (AttributeError, OSError, ValueError):
        pass


def end_quietly_on_closed_stdout() -> None:
    """From now on, a closed standard output ends this process quietly: a BrokenPipeError that no one catches
    (or that `fail` is given), or one at the last flush of standard output (each command's parser calls this)."""
    global _excepthook
    if sys.excepthook is not _closed_stdout_ends_quietly:
        _excepthook, sys.excepthook = sys.excepthook, _closed_stdout_ends_quietly
        atexit.register(_flush_stdout_at_exit)


_excepthook = sys.excepthook


def fail(prog: str, message) -> None:
    """Print ``prog: error: message`` on stderr (one line, no traceback) and exit with status 2; a message
    of several lines (e.g. a YAML parser's, with its pointer to the column) is joined into one; an OSError is
    ``FILE: reason``, without Python's ``[Errno N]``. A broken pipe on a closed standard output is no error:
    the command ends quietly (status 141, as `cat`)."""
    if isinstance(message, BrokenPipeError) and stdout_closed():
        _end_quietly()
    if isinstance(message, OSError):
        reason = os_problem(message, message.filename)
        message = f"{message.filename}: {reason}" if message.filename is not None else reason
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    line = f"{prog}: error: {text}"
    print(line, file=sys.stderr)
    raise CommandError(line)
