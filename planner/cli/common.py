"""What the `plan` commands share: consoles, turning errors into exit codes, and CLI options
generated from the declarations (layout axes: planner/layout/axes.py; limits and settings:
planner/options.py), so that an axis or a limit is declared once and every command takes it."""
from __future__ import annotations

import functools
import inspect
import os
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from planner.cli import edge
from planner.errors import InfeasibleError, PlannerError, SpecError, SpecErrors, clip_file, printable


@functools.cache
def consoles() -> tuple[Any, Any]:
    """(out, err): the rich consoles of stdout and stderr, made on first use: `plan check --format
    json|github|junit` prints without importing rich (0.02 s of its start-up)."""
    from rich.console import Console

    class _Console(Console):
        """rich exits 1 when the reader of a pipe leaves (`plan search | head`); for us that is not an
        error: stop writing and exit 0, as `run` does for print()."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), (sys.stderr if self.stderr else sys.stdout).fileno())
            raise typer.Exit(0)

    # Piped output gets a fixed width that fits the tables instead of rich's 80-column default.
    # No emoji codes and no highlighting: a file named `:fire:.yaml` or a value `1e9` prints as written.
    out = _Console(width=None if Console().is_terminal else 150, emoji=False, highlight=False)
    # Messages are never wrapped: an error is one line, and a path in it stays whole for a script or a paste.
    err = _Console(stderr=True, width=None if Console(stderr=True).is_terminal else 150, emoji=False,
                   highlight=False, soft_wrap=True)
    return out, err


def __getattr__(name: str) -> Any:
    """`out` and `err` (`from planner.cli.common import out`): the consoles, made on first use."""
    if name in ("out", "err"):
        return consoles()[name == "err"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape(text: str) -> str:
    """rich's markup escaping (rich.markup.escape), imported when first needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


DEFAULT_MODEL = "gpt3-175b"
DEFAULT_CLUSTER = "dgx-a100-1024"


def warn_implausible(*specs: Any) -> None:
    """On stderr, the plausibility warnings `plan check` gives (a unit slip: 400 GB/s per NIC written for
    400 Gb/s) of the spec files among `specs` (a shipped name or a mapping is not checked: shipped specs
    pass `plan check`), so that a command that prices them says what `plan check` would."""
    from planner.check import check_paths

    def is_file(s: Any) -> bool:
        try:  # a name too long for the system is the loader's error to say, not this one's
            return isinstance(s, (str, os.PathLike)) and Path(s).suffix in (".yaml", ".yml") and Path(s).is_file()
        except (OSError, ValueError):
            return False

    files = [os.fspath(s) for s in specs if is_file(s)]
    if not files:
        return
    _, findings = check_paths(files)
    for f in findings:
        if f.severity == "warning":
            where = f"{clip_file(f.file)}:{f.line}" if f.line else clip_file(f.file)  # one line, ESC as \x1b
            consoles()[1].print(f"[yellow]warning:[/yellow] {escape(where)}: {escape(printable(f.path or ''))}: "
                                f"{escape(printable(f.message))}",
                                highlight=False, soft_wrap=True)


def run(fn: Callable[[], Any], json_out: bool = False) -> Any:
    """Turn planner errors, and failures of the environment (planner/cli/edge.py), into one red line
    on stderr and the documented exit status; with `json_out` (the command's --json) the error as JSON on
    stdout too."""
    try:
        return fn()
    except SpecErrors as exc:
        for e in exc.errors:
            consoles()[1].print(f"[red]error:[/red] {escape(str(e))}", markup=True, highlight=False, soft_wrap=True)
        if json_out:
            _json_error(exc.errors, 2, "error")
        raise typer.Exit(2)
    except PlannerError as exc:
        label = "infeasible" if isinstance(exc, InfeasibleError) else "error"
        consoles()[1].print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        if json_out:
            _json_error([exc], exc.exit_code, label)
        raise typer.Exit(exc.exit_code)
    except KeyboardInterrupt:
        consoles()[1].print("[red]interrupted[/red]")
        raise typer.Exit(130)
    except BrokenPipeError:  # `plan search --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0)
    except (typer.Exit, SystemExit):
        raise
    except Exception as exc:  # a bug: say so in one line unless debugging
        if _caused_by_interrupt(exc):  # Ctrl-C while a module was importing: "initialization failed"
            consoles()[1].print("[red]interrupted[/red]")
            raise typer.Exit(130)
        if os.environ.get("PLANNER_DEBUG"):
            raise
        if isinstance(exc, edge.ENVIRONMENT_ERRORS):  # the world failed (a full disk, no memory), not plan
            raise typer.Exit(edge.report(exc))
        consoles()[1].print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} (set PLANNER_DEBUG=1 for a traceback)",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(3)


def _json_error(errors: list, exit_code: int, kind: str) -> None:
    """The error as JSON on stdout (a script's `json.load` gets an object, not an empty stream):
    {"error": {"kind", "exit_code", "errors": [{"message", "file", "line", "path", "expected"}]}}."""
    from planner.errors import MAX_MESSAGE_CHARS, SHOWN_CHARS, clip, clip_file

    def bounded(text, limit=MAX_MESSAGE_CHARS):  # as the stderr line bounds them (planner/errors.py)
        return None if text is None else clip(text, limit)

    edge.json_error(exit_code, kind, [
        {"message": bounded(e.message), "file": None if e.file is None else clip_file(e.file), "line": e.line,
         "path": bounded(e.path, 2 * SHOWN_CHARS), "expected": bounded(e.expected)} if isinstance(e, SpecError)
        else {"message": bounded(str(e))} for e in errors])


def numbers_checked(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` without numpy's RuntimeWarnings on stderr (a division by zero on the way to an infinity),
    for commands whose outputs refuse a non-finite figure by name (planner/results.py, non_finite_error):
    that one line says it. Sweep workers are forked inside, so they inherit the filter."""
    def quiet() -> Any:
        from planner.api.arguments import numbers_checked as checked

        with checked():
            return fn()

    return quiet


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


# --- generated options -------------------------------------------------------------------------

def _param(name: str, kind: Any, default: Any, *decls: str, help: str) -> inspect.Parameter:
    info = typer.Option(*decls, help=escape(help))  # units in brackets ("[s]") are not rich markup
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info])


def option_params(where: str, *, file_defaults: bool = False) -> list[inspect.Parameter]:
    """The limits and settings a command takes. `file_defaults`: every default None (a file's value
    or the option's default applies later), as `plan sweep` and `plan check` need."""
    from planner.options import options_for

    params = []
    for o in options_for(where):
        if o.kind is bool:
            params.append(_param(o.key, bool, False, o.flag, help=o.help))  # a switch: off unless given
            continue
        default = None if file_defaults else o.default
        kind = Optional[o.kind] if default is None else o.kind
        shown = f"{o.help} (default {o.default:g})" if file_defaults and o.default is not None else o.help
        params.append(_param(o.key, kind, default, o.flag, help=shown))
    return params


def axis_params(mode: str, axes: tuple | None = None) -> list[inspect.Parameter]:
    """`mode` "fix": every fixable axis as an optional option (`plan search --tp 8`); "give": the
    axes `plan estimate` takes, required ones without a default. `axes`: planner/layout/axes.py's AXES."""
    from planner.layout.axes import AXES, fixable

    params = []
    for a in fixable(AXES if axes is None else axes):
        if mode == "fix":
            kind, default, help_ = Optional[a.kind], None, a.help
        elif a.given is None:
            continue
        elif a.estimate_default is not None:  # None: not given, its default follows the degrees
            kind, default, help_ = Optional[a.kind], None, a.give_help
        else:
            kind = a.kind if a.given != "optional" else Optional[a.kind]
            default = inspect.Parameter.empty if a.given == "required" else a.default
            help_ = a.give_help
        decl = f"{a.flag}/--no-{a.flag.removeprefix('--')}" if a.kind is bool else a.flag
        params.append(_param(a.name, kind, default, decl, help=help_))
    return params


def with_params(*groups: list[inspect.Parameter]) -> Callable:
    """Give a command the generated options on top of its own: it receives them in **kwargs."""
    def decorate(fn: Callable) -> Callable:
        hints = typing.get_type_hints(fn, include_extras=True)  # annotations are strings under PEP 563
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(fn).parameters.values()
               if p.kind != inspect.Parameter.VAR_KEYWORD]

        @functools.wraps(fn)
        def command(**kwargs):
            return fn(**kwargs)

        command.__signature__ = inspect.Signature(own + [p for g in groups for p in g])
        return command

    return decorate


def write_output(path: Path, text: str, flag: str) -> None:
    """Write a command's output file; a directory, a FIFO or a device in its place, a missing folder
    or a name the system refuses is bad input (exit 2), never a hang or a traceback."""
    try:
        if path.exists() and not path.is_file():
            raise SpecError("not a regular file", file=str(path), path=flag, expected="a path to a file to write")
        path.write_text(text)
    except OSError as exc:
        raise SpecError(f"cannot write: {exc.strerror or exc}", file=str(path), path=flag,
                        expected="a writable file in an existing folder") from None
