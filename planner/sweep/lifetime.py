"""How a sweep stops: Ctrl-C (SIGINT) and SIGTERM in the parent become one exception, raised once,
and pool workers never outlive the parent (README.md, "What the tool promises")."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WATCHDOG_S = 0.2  # how often a worker checks that its parent is alive [s]
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the sweep; `signum` says which (the exit status is 128 + signum)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """The sweep's own SIGINT and SIGTERM handlers. The first signal raises `Stopped` where the
    main thread is; later ones are only recorded, so the finished rows are written in peace."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.active = threading.current_thread() is threading.main_thread()
        self.previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if self.active else {}

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            raise Stopped(signum)

    def arm(self) -> None:
        """(Re)install the handlers: a library may have replaced the C-level handler since (CP-SAT
        leaves SIGINT at SIG_DFL after a solve unless told not to catch it)."""
        for s in STOP_SIGNALS if self.active else ():
            signal.signal(s, self._handle)

    def check(self) -> None:
        """Raise `Stopped` when a signal came but its exception was swallowed on the way (then the
        row of the point that was running is not trusted)."""
        if self.signum is not None:
            raise Stopped(self.signum)

    def restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """SIGINT and SIGTERM raise `Stopped` inside the block (in the main thread; elsewhere the
    handlers cannot be set and the block runs unguarded); the previous handlers come back after."""
    guard = StopSignals()
    guard.arm()
    try:
        yield guard
    finally:
        guard.restore()


@contextmanager
def signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered when the block ends), for starting a pool: a handler
    run mid-fork would raise in an at-fork hook, which swallows it, or leave a started worker
    unrecorded, so that nobody ends it. Workers inherit the mask; `worker_init` lifts it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# --- pool workers ------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this process when its parent dies (even by SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watchdog below still ends the worker


def _watchdog(parent: int) -> None:
    """Exit when the parent is gone: it was replaced by init or a subreaper (portable fallback)."""
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(WATCHDOG_S)


def worker_init() -> None:
    """Initializer of a pool worker. Stopping is the parent's job: the worker leaves the terminal's
    process group (a terminal's Ctrl-C reaches the parent only) and ignores SIGINT; SIGTERM keeps
    its default, so the parent can end it. It dies with its parent: PR_SET_PDEATHSIG on Linux, and
    a watchdog thread everywhere (else a killed sweep leaves workers holding the caller's pipes)."""
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the parent's handler
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked while the parent started the pool
    _die_with_parent()
    parent = os.getppid()
    if parent == 1:  # the parent died before the line above
        os._exit(1)
    threading.Thread(target=_watchdog, args=(parent,), name="parent-watchdog", daemon=True).start()
