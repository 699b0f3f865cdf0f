"""Errors raised for bad user input, and how the command-line tools report them."""
import os
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


def yaml_problem(err) -> str:
    """`FILE:LINE: problem` of a YAML parser's error (PyYAML's `MarkedYAMLError`), else its text."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    return f"{mark.name}:{mark.line + 1}: {problem}" if mark is not None else str(err)


def fail(prog: str, message) -> None:
    """Print ``prog: error: message`` on stderr (one line, no traceback) and exit with status 2; a message
    of several lines (e.g. a YAML parser's, with its pointer to the column) is joined into one; an OSError is
    ``FILE: reason``, without Python's ``[Errno N]``."""
    if isinstance(message, OSError):
        reason = os_problem(message, message.filename)
        message = f"{message.filename}: {reason}" if message.filename is not None else reason
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    line = f"{prog}: error: {text}"
    print(line, file=sys.stderr)
    raise CommandError(line)
