"""What the `plan` commands share: consoles, turning errors into exit codes, and CLI options
generated from the declarations (layout axes: planner/layout/axes.py; limits and settings:
planner/options.py), so that an axis or a limit is declared once and every command takes it."""
from __future__ import annotations

import functools
import inspect
import os
import sys
import typing
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from planner.cli import edge
from planner.layout.axes import AXES, Axis, fixable
from planner.constraints.base import Option
from planner.errors import InfeasibleError, PlannerError, SpecError, SpecErrors
from planner.options import check_axis, check_option, limits_from, options_for


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
err = _Console(stderr=True, width=None if Console(stderr=True).is_terminal else 150, emoji=False, highlight=False,
               soft_wrap=True)

DEFAULT_MODEL = "gpt3-175b"
DEFAULT_CLUSTER = "dgx-a100-1024"


def run(fn: Callable[[], Any]) -> Any:
    """Turn planner errors, and failures of the environment (planner/cli/edge.py), into one red line
    on stderr and the documented exit status."""
    try:
        return fn()
    except SpecErrors as exc:
        for e in exc.errors:
            err.print(f"[red]error:[/red] {escape(str(e))}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    except PlannerError as exc:
        label = "infeasible" if isinstance(exc, InfeasibleError) else "error"
        err.print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]")
        raise typer.Exit(130)
    except BrokenPipeError:  # `plan search --json | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0)
    except (typer.Exit, SystemExit):
        raise
    except Exception as exc:  # a bug: say so in one line unless debugging
        if _caused_by_interrupt(exc):  # Ctrl-C while a module was importing: "initialization failed"
            err.print("[red]interrupted[/red]")
            raise typer.Exit(130)
        if os.environ.get("PLANNER_DEBUG"):
            raise
        if isinstance(exc, edge.ENVIRONMENT_ERRORS):  # the world failed (a full disk, no memory), not plan
            raise typer.Exit(edge.report(exc))
        err.print(f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} (set PLANNER_DEBUG=1 for a traceback)",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(3)


def numbers_checked(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` without numpy's RuntimeWarnings on stderr (a division by zero on the way to an infinity),
    for commands whose outputs refuse a non-finite figure by name (planner/results.py, non_finite_error):
    that one line says it. Sweep workers are forked inside, so they inherit the filter."""
    def quiet() -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"planner(\.|$)")
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


def axis_params(mode: str, axes: tuple[Axis, ...] = AXES) -> list[inspect.Parameter]:
    """`mode` "fix": every fixable axis as an optional option (`plan search --tp 8`); "give": the
    axes `plan estimate` takes, required ones without a default."""
    params = []
    for a in fixable(axes):
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


def _checked(values: dict, declared, key: Callable, check: Callable) -> dict:
    """The values given for the declared options or axes (None: not given), each checked."""
    given = {}
    for d in declared:
        v = values.get(key(d))
        if v is not None:
            check(d, v)
            given[key(d)] = v
    return given


def read_options(values: dict, where: str) -> dict:
    """The option values given, checked against their bounds."""
    return _checked(values, options_for(where), lambda o: o.key, check_option)


def read_axes(values: dict, axes: tuple[Axis, ...] = AXES) -> dict:
    """Axis values given on the command line (the others left free), checked against their domains."""
    return _checked(values, fixable(axes), lambda a: a.name, check_axis)


def read_limits(values: dict, where: str, *, fix: bool = True):
    """`Limits` from a command's option values; with `fix`, the axes given are fixed dimensions."""
    return limits_from(read_options(values, where), read_axes(values) if fix else None)


def setting(values: dict, option: Option) -> Any:
    """A search setting's value (its default when not given), checked."""
    v = values.get(option.key)
    if v is None:
        return option.default
    check_option(option, v)
    return v


# --- the run stated on the command line: spec fields overridden as if the spec said so ----------

RUN_FLAGS = {"seq_len": "--seq-len", "training.precision": "--precision"}  # spec path -> flag


def with_run(model, *, seq_len: int | None = None, precision: str | None = None):
    """`model` as if its spec said `seq_len` and `training.precision` (planner/search.py with_run), a
    problem said naming the flag (exit 2)."""
    from planner.search import with_run as run_as

    return run_as(model, seq_len=seq_len, precision=precision, flags=RUN_FLAGS)


def check_nvlink_segment(cluster, gpus: int | None, flag: str = "--nvlink-domain-gpus"):
    """The cluster with node.nvlink_segment_gpus = `gpus` (GPUs of an NVLink domain the job's
    consecutive ranks fill), within the cluster's NVLink domain."""
    if gpus is None:
        return cluster
    if cluster.pools:
        raise SpecError(f"{cluster.name} has {len(cluster.pool_names)} pools", path=flag,
                        expected="a cluster of one pool (each pool states its own NVLink domain)")
    domain = cluster.node.nvlink_domain
    if not 1 <= gpus <= domain:
        raise SpecError(f"got {gpus}, and an NVLink domain of {cluster.name} has {domain} GPUs", path=flag,
                        expected=f"GPUs from 1 to {domain}")
    return cluster.model_copy(update={"node": cluster.node.model_copy(update={"nvlink_segment_gpus": gpus})})


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
