"""Where a command may write, the same rules for every command: an output never is, lies inside or contains
an input (paths compared with links followed); an output file is not a directory nor under a file; an
output directory (or a link to one, written through) receives the command's entries, replacing only those
an earlier run of the same command wrote, all at once (`staged_outputs`): on any failure it is as it was,
and a run killed at any moment leaves the earlier run's outputs or its own once the next run has called
`finish_interrupted`.
"""
import fcntl
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.fileio import new_directory, write_atomic

_JOURNAL_SUFFIX = ".swap"  # `.<command>.XXXX.swap/`: a run's new entries, the old ones it replaces, its plan
_JOURNAL_LOCK = "lock"
_PLAN = "plan.json"


def check_no_overlap(option: str, out, inputs) -> None:
    """InputError unless the output `out` is outside every input path and contains none of them."""
    resolved = Path(out).resolve()
    for source in inputs:
        path = Path(source).resolve()
        if resolved == path or path in resolved.parents or resolved in path.parents:
            how = "is" if resolved == path else "is inside" if path in resolved.parents else "contains"
            raise InputError(f"{option} {out}: {how} the input {source}: outputs never replace, sit inside or "
                             "contain an input; choose another output")


def _existing_ancestor(option: str, path: Path) -> Path:
    """The nearest existing directory above `path`; InputError when that is a file."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {path}: cannot write: {parent} is a file, not a directory")
            return parent
    return Path("/")


def _check_writable(option: str, path, directory) -> None:
    """InputError unless entries can be made in `directory` (`path` being the output it holds or leads to)."""
    if not os.access(directory, os.W_OK | os.X_OK):
        reason = "a read-only file system" if os.statvfs(directory).f_flag & os.ST_RDONLY else "permission denied"
        raise InputError(f"{option} {path}: cannot write in {directory} ({reason})")


def check_output_file(option: str, path) -> Path:
    """The path to write an output file at (a link is written through: its target): InputError when `path`
    is a directory, a device, FIFO or socket, lies under a file, or its directory cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory, not a file")
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not target.is_file():
        raise InputError(f"{option} {path}: not a regular file (a device, FIFO or socket); outputs are written to "
                         "a temporary file renamed into place, which would replace it: name a file")
    parent = target.parent if target.parent.is_dir() else _existing_ancestor(option, target)
    _check_writable(option, path, parent)
    return target


def check_output_dir(option: str, out, names, own, command: str) -> None:
    """InputError unless `out` can be (or become) a directory into which `command` writes the entries
    `names`: not a file nor under one, writable, and holding no entry of those names except `own` (those
    an earlier run of `command` wrote): no command replaces what it did not create."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{option} {out}: is a file, not a directory")
    existing = out if out.is_dir() else _existing_ancestor(option, out)
    _check_writable(option, out, existing)
    if out.is_dir():
        for name in names:
            if name not in own and os.path.lexists(out / name):
                raise InputError(f"{out / name}: not written by {command} (no earlier run of it in {out}), and "
                                 f"this run would replace it; move it away or choose another {option}")


def _lock_journal(journal: Path):
    """An open descriptor holding `journal`/lock (flock): a live run holds its journal until it is done."""
    fd = os.open(journal / _JOURNAL_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _roll_forward(journal: Path, out: Path, command: str) -> None:
    """Finish the install that `journal`/plan.json records; each step can be repeated, so a run killed here
    is finished by the next. The old entries go to `journal`/old, the new ones from `journal`/new into `out`."""
    plan = json.loads((journal / _PLAN).read_text(encoding="utf-8"))
    new, old = journal / "new", journal / "old"
    for name in plan["old"]:  # not yet moved away, and not already replaced by the new entry
        if (not os.path.lexists(old / name) and os.path.lexists(out / name)
                and (name not in plan["new"] or os.path.lexists(new / name))):
            os.rename(out / name, old / name)
    for name in plan["new"]:
        if os.path.lexists(new / name):
            if os.path.lexists(out / name):  # appeared since the check: never replace it
                raise InputError(f"{out / name}: appeared while {command} was writing; not replaced")
            os.rename(new / name, out / name)
    os.unlink(journal / _PLAN)  # done: what is left in the journal is the old run's, to delete


def _roll_back(journal: Path, out: Path, plan: dict) -> None:
    """Undo a failed install: the new entries back into `journal`/new, the old ones back into `out`."""
    new, old = journal / "new", journal / "old"
    for name in plan["new"]:
        if not os.path.lexists(new / name) and os.path.lexists(out / name):
            os.rename(out / name, new / name)
    for name in plan["old"]:
        if os.path.lexists(old / name):
            os.rename(old / name, out / name)
    os.unlink(journal / _PLAN)


def finish_interrupted(out, command: str) -> None:
    """Complete or undo what a run of `command` killed while writing into `out` left there, so that `out`
    holds that run's outputs (its plan was written: every new entry was ready) or the earlier run's (it was
    not), and no leftover. Journals a live run holds are left alone."""
    out = Path(out)
    if not out.is_dir():
        return
    for journal in sorted(out.glob(f".{command}.*{_JOURNAL_SUFFIX}")):
        fd = _lock_journal(journal)
        if fd is None:
            continue
        try:
            if (journal / _PLAN).exists():
                _roll_forward(journal, out, command)
            shutil.rmtree(journal)
        except OSError as err:
            raise InputError(f"{journal}: cannot finish an interrupted run of {command} ({os_problem(err)}); its "
                             f"outputs and the earlier run's are in {journal}") from None
        finally:
            os.close(fd)


def _install(journal: Path, out: Path, own, command: str) -> None:
    """Move the entries of `journal`/new into `out`, replacing those of an earlier run (`own`), or removing
    them when this run has none of that name. Nothing else in `out` is moved or deleted. Once the plan is
    written, a kill leaves what `finish_interrupted` completes; before, what it deletes. On any error every
    entry moved is moved back, so `out` is as it was."""
    plan = {"new": sorted(e.name for e in (journal / "new").iterdir()),
            "old": sorted(name for name in own if os.path.lexists(out / name))}
    (journal / "old").mkdir()
    write_atomic(journal / _PLAN, json.dumps(plan))
    try:
        _roll_forward(journal, out, command)
    except BaseException:
        try:
            _roll_back(journal, out, plan)
        except OSError:
            raise InputError(f"{out}: replacing the earlier outputs failed and some could not be put back: "
                             f"they are in {journal}") from None
        raise


@contextmanager
def staged_outputs(option: str, out, names, own, command: str):
    """Yield a temporary directory inside `out` to write the entries `names` into; when the block ends they
    replace those of an earlier run of `command` there (`own`), all at once. `out` is checked first
    (:func:`check_output_dir`); other entries of `out` are never moved or deleted; on any failure (an
    OSError becomes InputError) `out` is as it was and a directory it created is removed; a kill leaves
    either run's outputs once the next run of `command` calls :func:`finish_interrupted`."""
    out = Path(out)
    check_output_dir(option, out, names, own, command)
    journal = fd = None
    try:
        with new_directory(out):
            try:
                journal = Path(tempfile.mkdtemp(dir=out, prefix=f".{command}.", suffix=_JOURNAL_SUFFIX))
                fd = _lock_journal(journal)
                (journal / "new").mkdir()
                yield journal / "new"
                _install(journal, out, own, command)
            finally:
                if journal is not None and not (journal / _PLAN).exists():  # else a failed roll-back: kept, named
                    _remove_journal(journal, command)
                if fd is not None:
                    os.close(fd)
    except OSError as err:
        raise InputError(f"{option} {out}: cannot write the outputs ({os_problem(err)}); it is as it was") from None


def _remove_journal(journal: Path, command: str) -> None:
    """Delete a finished or failed run's journal; what cannot be deleted (an immutable file among the earlier
    outputs) is left with a warning naming it."""
    try:
        shutil.rmtree(journal)
    except OSError as err:
        print(f"{command}: warning: {journal}: cannot delete what it holds ({os_problem(err)}); delete it yourself",
              file=sys.stderr)
