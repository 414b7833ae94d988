"""Where `plan` meets a failing world: stdout and stderr that are closed, full or not UTF-8, and the
exceptions the environment raises (a full disk, no memory, a dead worker process, an unreadable folder).

Every such failure becomes one line on stderr and exit status ENVIRONMENT_EXIT (2, as an output file
that cannot be written), never a traceback:
- stdout is the result: a write that fails (a full disk, `>/dev/full`, stdout closed with `>&-`)
  ends the command with exit 2, so that the output is never gone with exit 0;
- stderr only carries diagnostics: a write to it that fails is dropped and the exit status stands
  (`plan search missing.yaml 2>/dev/full` still exits 2);
- a terminal that cannot encode a character (`PYTHONIOENCODING=ascii`, `LC_ALL=C`) gets an ASCII
  spelling (`±` as `+/-`) or an escape (`\\u2028`), never a crash.
"""
from __future__ import annotations

import codecs
import errno
import os
import sys
from concurrent.futures import BrokenExecutor

import typer

ENVIRONMENT_EXIT = 2
# What the world raises, not the input or the planner: OSError (full disk, closed stdout, permissions),
# UnicodeError (undecodable names, unencodable text), MemoryError, a process pool whose worker died,
# ImportError (a library that cannot load, e.g. under `ulimit -v`).
ENVIRONMENT_ERRORS = (OSError, UnicodeError, MemoryError, BrokenExecutor, ImportError)


class OutputLost(OSError):
    """stdout did not take the command's output: the result is gone, so the command fails."""


def _to_devnull(fd: int) -> None:
    """Point `fd` at /dev/null: later writes (Python's flush at exit, worker processes) then succeed
    quietly, and no file opened later can take the number of a closed stdout or stderr."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


class _Stream:
    """sys.stdout or sys.stderr behind a guard. stdout (`strict`): the first failed write raises
    OutputLost and later ones go nowhere; stderr: failed writes are dropped."""

    def __init__(self, stream, fd: int | None, strict: bool, closed: bool = False) -> None:
        self._stream, self._fd, self._strict = stream, fd, strict
        self._closed, self._failed = closed, False
        self.written = 0  # characters asked to be written: 0 when a command printed nothing

    def __getattr__(self, name):  # encoding, buffer, fileno... of the real stream
        return getattr(self._stream, name)

    def isatty(self) -> bool:
        return not self._failed and self._stream.isatty()

    def write(self, text) -> int:
        self.written += len(text)
        if not self._failed:
            try:
                if self._closed and text:
                    raise OSError(errno.EBADF, "it is closed")
                return self._stream.write(text)
            except BrokenPipeError:  # the reader left (`| head`): common.run exits 0 for that
                raise
            except OSError as exc:
                self._fail(exc)
        return len(text)

    def flush(self) -> None:
        if not self._failed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self._failed = True
        try:
            if self._fd is not None:
                _to_devnull(self._fd)
        except OSError:
            pass
        if self._strict:
            raise OutputLost(exc.errno, f"cannot write the output to stdout: {exc.strerror or exc}") from None


# What a terminal that cannot encode the planner's few non-ASCII characters shows instead.
_FALLBACKS = {"±": "+/-", "×": "x", "…": "...", "—": "-", "–": "-", "→": "->", "≤": "<=", "≥": ">=", "·": "*",
              "µ": "u", "²": "^2", "³": "^3"}


def _fallback(exc: UnicodeEncodeError) -> tuple[str, int]:
    """codecs error handler: ASCII spellings of known characters, escapes (`\\u2028`) for the rest."""
    bad = exc.object[exc.start:exc.end]
    return "".join(_FALLBACKS.get(c) or c.encode("ascii", "backslashreplace").decode() for c in bad), exc.end


codecs.register_error("planner.fallback", _fallback)


def _guard(name: str, fd: int | None, strict: bool) -> None:
    stream = getattr(sys, name)
    if isinstance(stream, _Stream):
        return
    closed = stream is None  # Python found the descriptor closed at start (`>&-`)
    if closed:
        try:
            os.fstat(fd)  # taken since by a file of ours: leave it be
            stream, fd = open(os.devnull, "w", encoding="utf-8"), None
        except OSError:
            _to_devnull(fd)
            stream = open(fd, "w", closefd=False, encoding="utf-8")
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="planner.fallback")  # `±` on an ASCII terminal: `+/-`, not a crash
    setattr(sys, name, _Stream(stream, fd, strict, closed=closed and strict))


def guard_streams() -> None:
    """Guard stdout and stderr (see the module's docstring); idempotent."""
    _guard("stderr", 2, strict=False)
    _guard("stdout", 1, strict=True)


def describe(exc: BaseException) -> str:
    """One line for an environment failure."""
    if isinstance(exc, OutputLost):
        return exc.strerror
    if isinstance(exc, MemoryError):
        return "out of memory" + (f" ({exc})" if str(exc) else "") + ": give the command more memory or less work"
    if isinstance(exc, BrokenExecutor):
        return f"a worker process died (out of memory or killed): {exc}"
    if isinstance(exc, ImportError):
        return f"cannot load a library: {exc}"
    if isinstance(exc, UnicodeError):
        return f"cannot convert text: {exc}"
    where = f"{os.fsdecode(exc.filename)}: " if getattr(exc, "filename", None) else ""
    return f"{where}{exc.strerror or exc}"


def report(exc: BaseException) -> int:
    """Print `exc` as one line on stderr (dropped when stderr fails) and return the exit status. Plain
    text, not rich: it must work with no memory left and whatever state the consoles are in."""
    from planner.errors import clip, printable

    try:
        sys.stderr.write(f"error: {printable(clip(describe(exc), 1000))}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - nothing more can be said; the status says it
        pass
    return ENVIRONMENT_EXIT


def json_error(exit_code: int, kind: str, errors: list[dict]) -> None:
    """The JSON of a failed command on stdout: what `--json` promises a script whatever the outcome."""
    import json

    sys.stdout.write(json.dumps({"error": {"kind": kind, "exit_code": exit_code, "errors": errors}}, indent=2) + "\n")


def _wants_json(argv: list[str]) -> bool:
    """`--json` among the options (before a `--` that ends them)."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


class PlanApp(typer.Typer):
    """The `plan` app: its commands run with guarded streams, and stdout is flushed before the exit
    status is final, so `plan --help >/dev/full` is one line and exit 2, not a traceback."""

    def __call__(self, *args, **kwargs):
        if kwargs.get("standalone_mode", True) is False:
            return super().__call__(*args, **kwargs)
        guard_streams()
        try:
            try:
                code = super().__call__(*args, **kwargs)
            except SystemExit as exc:
                code = exc.code
            if code == 2 and getattr(sys.stdout, "written", 1) == 0 and _wants_json(list(kwargs.get("args") or sys.argv[1:])):
                # refused by the option parser (an unknown option, a value of the wrong type), before any command ran
                json_error(2, "usage", [{"message": "the command line was refused (an unknown option or a value of "
                                                    "the wrong type): the message is on stderr"}])
            sys.stdout.flush()
        except ENVIRONMENT_ERRORS as exc:
            code = report(exc)
        sys.exit(code)
