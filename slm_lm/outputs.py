"""Where a command may write, the same rules for every command: an output never is, lies inside or contains
an input (paths compared with links followed); an output file is not a directory nor under a file; an
output directory (or a link to one, written through) receives the command's entries, replacing only those
an earlier run of the same command wrote, all at once (`staged_outputs`): on any failure it is as it was.
"""
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from slm_lm.errors import InputError


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


def check_output_file(option: str, path) -> Path:
    """The path to write an output file at (a link is written through: its target): InputError when `path`
    is a directory, lies under a file, or its directory cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory, not a file")
    target = path.resolve() if path.is_symlink() else path
    parent = target.parent if target.parent.is_dir() else _existing_ancestor(option, target)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: cannot write in {parent} (permission denied)")
    return target


def check_output_dir(option: str, out, names, own, command: str) -> None:
    """InputError unless `out` can be (or become) a directory into which `command` writes the entries
    `names`: not a file nor under one, writable, and holding no entry of those names except `own` (those
    an earlier run of `command` wrote): no command replaces what it did not create."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{option} {out}: is a file, not a directory")
    existing = out if out.is_dir() else _existing_ancestor(option, out)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{option} {out}: cannot write in {existing} (permission denied)")
    if out.is_dir():
        for name in names:
            if name not in own and os.path.lexists(out / name):
                raise InputError(f"{out / name}: not written by {command} (no earlier run of it in {out}), and "
                                 f"this run would replace it; move it away or choose another {option}")


def _install(staging: Path, out: Path, own, command: str) -> None:
    """Move every entry of `staging` into `out`; the entries of an earlier run (`own`) are replaced, or
    removed when this run has none of that name. Nothing else in `out` is moved or deleted. On any failure
    every entry moved is moved back, so `out` is as it was."""
    old = Path(tempfile.mkdtemp(dir=out, prefix=f".{command}.", suffix=".old"))
    new_names = sorted(e.name for e in staging.iterdir())
    moved_old, moved_new = [], []
    try:
        for name in sorted(set(own) | set(new_names)):
            if name in own and os.path.lexists(out / name):
                os.rename(out / name, old / name)
                moved_old.append(name)
        for name in new_names:
            if os.path.lexists(out / name):  # appeared since the check: never replace it
                raise InputError(f"{out / name}: appeared while {command} was writing; not replaced")
            os.rename(staging / name, out / name)
            moved_new.append(name)
    except BaseException:
        for src, dst, names in ((out, staging, moved_new), (old, out, moved_old)):
            for name in reversed(names):
                try:
                    os.rename(src / name, dst / name)
                except OSError:
                    pass
        if any(old.iterdir()):
            raise InputError(f"{out}: replacing the earlier outputs failed and some could not be put back: "
                             f"they are in {old}") from None
        old.rmdir()
        raise
    shutil.rmtree(old)


@contextmanager
def staged_outputs(option: str, out, names, own, command: str):
    """Yield a temporary directory inside `out` to write the entries `names` into; when the block ends they
    replace those of an earlier run of `command` there (`own`), all at once. `out` is checked first
    (:func:`check_output_dir`); other entries of `out` are never moved or deleted; on any failure (an
    OSError becomes InputError) `out` is as it was and a directory it created is removed."""
    out = Path(out)
    check_output_dir(option, out, names, own, command)
    created = not out.exists()
    staging = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{command}.", suffix=".tmp"))
        yield staging
        _install(staging, out, own, command)
    except OSError as err:
        raise InputError(f"{option} {out}: cannot write the outputs ({err}); it is as it was") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
