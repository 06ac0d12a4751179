"""Outputs appear whole or not at all: write to a temporary file beside the target, then publish it.

`atomic_writer(path)` is the one way an output is written: a temporary file in the target's directory
(so the rename cannot cross a file system), flushed and fsynced, renamed over `path` when the block ends
normally, and removed when it ends by an exception or a KeyboardInterrupt. An unwritable directory or a
full disk is a `GraphsimError` (one line, exit 2) naming the path; the previous file, if any, is intact.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, overload

from graphsim.errors import GraphsimError, one_line

TMP_SUFFIX = ".tmp"  # every temporary output is `.<name>.<pid>.<random>.tmp` in the target's directory


class OutputError(GraphsimError):
    pass


def publish(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename the finished `tmp` over `path`, with the permissions a plain new file would get
    (mkstemp makes its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, Path(path))


def output_error(path: str | os.PathLike[str], e: OSError) -> OutputError:
    """The one-line error for an output that could not be written."""
    why = e.strerror or os.strerror(e.errno) if e.errno else str(e)  # "No space left on device", "Permission denied", …
    return OutputError(f"cannot write {os.fspath(path)}: {why}; choose a writable output path with free space "
                       "(nothing was written; a previous file there is unchanged)")


@overload
def atomic_writer(path: str | os.PathLike[str], mode: Literal["w"] = "w", *,
                  newline: str | None = None) -> contextlib.AbstractContextManager[IO[str]]: ...
@overload
def atomic_writer(path: str | os.PathLike[str], mode: Literal["wb"], *,
                  newline: str | None = None) -> contextlib.AbstractContextManager[IO[bytes]]: ...
def atomic_writer(path: str | os.PathLike[str], mode: str = "w", *,
                  newline: str | None = None) -> contextlib.AbstractContextManager[IO]:
    """`with atomic_writer(p) as f: f.write(...)`: `p` appears complete when the block ends, or not at all."""
    return _atomic_writer(Path(path), mode, newline)


@contextlib.contextmanager
def _atomic_writer(path: Path, mode: str, newline: str | None) -> Iterator[IO]:
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_writer mode {mode!r}: use 'w' or 'wb'")
    with atomic_path(path) as tmp:
        try:
            f = open(tmp, mode, encoding=None if "b" in mode else "utf-8",  # noqa: SIM115 (closed below)
                     newline=None if "b" in mode else newline)
        except OSError as e:
            raise output_error(path, e) from None
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            raise output_error(path, e) from None
        finally:
            with contextlib.suppress(OSError):  # a close after a failed write may fail again
                f.close()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path beside `path` for a writer that wants a file name (a plotting library, SQLite,
    pyarrow); published over `path` when the block ends normally, removed otherwise."""
    target = Path(path)
    parent = _parent(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=parent)
        os.close(fd)
    except OSError as e:
        raise output_error(target, e) from None
    try:
        yield tmp
        publish(tmp, target)
    except OSError as e:
        _remove(tmp)
        raise output_error(target, e) from None
    except BaseException:  # KeyboardInterrupt, SystemExit and errors of the writer: nothing partial stays
        _remove(tmp)
        raise


def _parent(target: Path) -> Path:
    """The target's directory, after the checks every output gets: not a directory itself, and the
    temporaries of a killed earlier writer of the same name removed (`remove_stale`)."""
    check_path_name(target)
    try:
        is_dir = target.is_dir()
    except OSError as e:  # a name the OS refuses to look up: too long, a loop of links
        raise output_error(target, e) from None
    if is_dir:
        raise output_error(target, IsADirectoryError(errno.EISDIR, "is a directory"))
    parent = target.parent if str(target.parent) else Path(".")
    remove_stale(parent, target.name)
    return parent


def check_path_name(target: Path) -> None:
    """OutputError for a path no file system takes (a NUL byte: Python raises ValueError for it, not OSError)."""
    if "\x00" in str(target):
        raise OutputError(f"cannot write {one_line(repr(str(target)))}: a path cannot hold a NUL byte; choose another "
                          "output path (nothing was written)")


def check_writable(path: str | os.PathLike[str], *, make_parents: bool = False) -> None:
    """Fail now, with the one-line error, if `path` could not be written later (a long run that would
    end unable to write its output). `make_parents`: create its missing directories first (for a writer
    that would)."""
    target = Path(path)
    check_path_name(target)
    if make_parents:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise output_error(target, e) from None
    parent = _parent(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise output_error(target, e) from None


@contextlib.contextmanager
def scratch_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside `path` (same naming, so a killed writer's is found and removed by the
    next one), removed when the block ends however it ends."""
    target = Path(path)
    parent = _parent(target)
    try:
        d = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=parent))
    except OSError as e:
        raise output_error(target, e) from None
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def remove_stale(directory: str | os.PathLike[str], name: str) -> list[Path]:
    """Remove the temporaries of `name` whose writing process is gone (a SIGKILL runs no cleanup); those
    of a live process, another writer still at work, stay (a SQLite temporary's -wal/-shm/-journal files go
    with it). Returns what was removed."""
    removed = []
    for p in Path(directory).glob(f".{glob_escape(name)}.*{TMP_SUFFIX}*"):
        pid = p.name[len(name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            _remove(str(p))
        removed.append(p)
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def leftover_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Temporary outputs a killed process left in `directory` (a SIGKILL runs no cleanup)."""
    return sorted(Path(directory).glob(f".*{TMP_SUFFIX}*"))
