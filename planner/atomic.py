"""Output files written whole or not at all: a temporary file in the same folder, renamed over the output.

A full disk, a file-size limit, a kill or a concurrent writer leaves either the old file or a complete
new one, never a part or an empty file. A symbolic link at the output path is refused (nothing is
written through it, nor is it replaced), and so is an output that is one of the command's inputs.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from planner.errors import SpecError

_WRITABLE = "a writable file in an existing folder"


def _refuse(path: Path, message: str, flag: str, expected: str) -> SpecError:
    return SpecError(message, file=os.fsdecode(path), path=flag, expected=expected)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_output(path: Path, flag: str, inputs: Iterable[Path | None] = ()) -> os.stat_result | None:
    """The output's current state (None: absent), after refusing a symlink, a non-regular file or an input."""
    try:
        old = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a name too long, a folder that is a file
        raise _refuse(path, f"cannot write: {exc.strerror or exc}", flag, _WRITABLE) from None
    except ValueError:  # a NUL byte in the name
        raise _refuse(path, "cannot write: the name holds a NUL character", flag, _WRITABLE) from None
    if stat.S_ISLNK(old.st_mode):
        raise _refuse(path, "is a symbolic link: not written through nor replaced", flag,
                      "a path that is not a symbolic link (write to its target by name)")
    if not stat.S_ISREG(old.st_mode):
        what = "a directory" if stat.S_ISDIR(old.st_mode) else "a FIFO" if stat.S_ISFIFO(old.st_mode) else "a device or socket"
        raise _refuse(path, f"not a regular file ({what})", flag, "a path to a file to write")
    for given in inputs:
        try:
            same = given is not None and _same_file(old, os.stat(given))
        except (OSError, ValueError):
            same = False
        if same:
            raise _refuse(path, f"is the input {os.fsdecode(given)}: refusing to overwrite it", flag,
                          "an output path other than the inputs")
    return old


def _temporary(path: Path) -> tuple[int, Path]:
    """A new file next to `path` (same file system, so the rename is atomic), mode 0666 less the umask."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name[:40]}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name")


def write_atomic(path: Path, data: str | bytes, flag: str, inputs: Iterable[Path | None] = ()) -> None:
    """Replace `path` with `data` (text as UTF-8) atomically; any failure is a one-line SpecError (exit 2)
    and leaves the old file as it was."""
    path = Path(path)
    old = check_output(path, flag, inputs)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = _temporary(path)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))  # keep the replaced file's permissions
        os.replace(tmp, path)  # replaces a symlink made meanwhile, never writes through it
        tmp = None
    except OSError as exc:
        raise _refuse(path, f"cannot write: {exc.strerror or exc}", flag, _WRITABLE) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
