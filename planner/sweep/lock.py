"""One writer per output: a sweep holds an exclusive lock on `.NAME.lock` beside its `--out` while
it runs, with its PID inside, so a second sweep on the same file is refused, naming the first."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from planner.errors import SpecError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks here; the output is not guarded
    fcntl = None


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


def _holder(fd: int) -> str:
    """The PID the holder writes into the lock file just after locking it ('unknown' if it never does)."""
    for _ in range(20):
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.01)
    return "unknown"


def _acquire(path: Path, out: Path) -> int:
    """An open descriptor of `path` holding its lock. A lock file removed by a writer that just
    finished (we may have opened it before the removal) is not the live one: open it again."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only folder, /proc, a name too long once ".lock" is added
            raise SpecError(f"cannot write the lock file {path.name[:80]} beside the output: {exc.strerror or exc}",
                            file=str(out), path="--out", expected="a writable folder and a file name of at most "
                            "245 characters") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: another process holds it
            other = _holder(fd)
            os.close(fd)
            raise SpecError(f"another plan sweep (pid {other}) is writing this file", file=str(out), path="--out",
                            expected=f"one sweep per output: wait for pid {other} to finish, or another --out") from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold the lock of `out` for the block (non-blocking: a held lock is a `SpecError`, exit 2).
    The lock file is removed afterwards; a killed sweep's stale file holds no lock (the kernel drops
    it with the process), so it never blocks a rerun."""
    if fcntl is None:
        yield
        return
    path = lock_path(out)
    fd = _acquire(path, out)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)  # while still locked, so nobody takes a file about to vanish
        except FileNotFoundError:
            pass
        os.close(fd)
