"""What the log parsers share: the warm-up rule, the step-time summary, number reading, errors.

A parser reads a log's lines once, keeps the timed steps it finds as `Step`s (line number, step
number, seconds) and the facts the log states, and hands them to `run()`, which applies the warm-up
rule and builds the run mapping of the `kind: runs` format.
"""
from __future__ import annotations

import ast
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from planner.errors import SpecError, clip

# Warm-up: the first WARMUP_MIN_LOGGED timed lines, or the first WARMUP_FRACTION of them when that
# is more, are left out. The first steps hold one-off costs the planner does not model: kernel
# compilation and autotuning (torch.compile, TE/cuDNN plans, CUDA graphs), NCCL communicator set-up,
# the caching allocator growing to its peak and the data loader's first prefetch. Megatron logs
# iteration 1 on a line of its own (`is_first_iteration`), and a timed interval that
# begins during warm-up carries some of it into the second line, hence two lines at least (the
# frameworks agree: DeepSpeed's ThroughputTimer starts its running average at step 2). On long
# logs 10 % also leaves out the slower settling of clocks, allocator and data pipeline.
WARMUP_MIN_LOGGED = 2
WARMUP_FRACTION = 0.10

MIB_PER_GIB = 1024.0
BYTES_PER_GB = 1.0e9
BYTES_PER_GIB = 2.0**30

# A number as the frameworks print it, also the non-finite ones Python's format gives (nan, inf).
NUMBER = r"[-+]?(?:nan|inf|(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
NUMBER_TEXT = re.compile(NUMBER)
# A count a log prints (steps, batch, GPUs, ranks): the frameworks keep them in int64 tensors or
# Python ints, and every real one is far below 10^18; more digits are not a count (and past 4,300
# Python's int() refuses the text, past 308 a float division by it overflows)
MAX_COUNT_DIGITS = 18
# A printed value read as a Python literal: the arguments a log prints are short (a path list at most);
# ast.literal_eval builds ~100 B of syntax tree a character (a 10 MB list argument took 4.9 GB)
MAX_LITERAL_CHARS = 65_536
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(line: str) -> str:
    """The line without ANSI colour escapes (torchtitan colours its metrics line)."""
    return ANSI_ESCAPE.sub("", line)


def number(text: str) -> float:
    """A printed number: thousands separators dropped (torchtitan prints tps as `6,789`)."""
    return float(text.replace(",", ""))


def literal(text: str) -> Any:
    """A value printed with repr() or str(): a Python literal when it is one, else the text (also when
    longer than MAX_LITERAL_CHARS: no value this planner reads is)."""
    text = text.strip()
    if len(text) > MAX_LITERAL_CHARS:
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def count(text: str, *, path: str, line: int | None, field: str) -> int:
    """The digits a pattern matched as an int; more than MAX_COUNT_DIGITS is a SpecError naming where."""
    if len(text) > MAX_COUNT_DIGITS:
        raise SpecError(f"a count of {len(text)} digits", file=path, line=line, path=field,
                        expected=f"a whole number of at most {MAX_COUNT_DIGITS} digits")
    return int(text)


def read_number(text: str, *, path: str, line: int | None, field: str) -> float:
    """A printed value that must be a number (a metric whose text no pattern checked), or a SpecError."""
    if not NUMBER_TEXT.fullmatch(text.strip()):
        raise SpecError(f"{clip(text.strip())!r} is not a number", file=path, line=line, path=field,
                        expected="a number as the framework prints it (1234.5, 1,234, 1.2e+03)")
    return number(text.strip())


class InOrder:
    """A `head`, then a `tail` later on the same line: what `head.*?tail` matches, in time linear in
    the line. re.search tries `.*?` again from every head, so a line of repeated heads was quadratic (a
    780 kB line of NeMo-like heads took 183 s; the 256 MiB a log may hold, days)."""

    def __init__(self, head: str, tail: str):
        self.head, self.tail = re.compile(head), re.compile(tail)

    def search(self, line: str) -> "Found | None":
        if not (head := self.head.search(line)) or not (tail := self.tail.search(line, head.end())):
            return None
        return Found(head.groups() + tail.groups())


@dataclass(frozen=True)
class Found:
    """The groups of an InOrder match, numbered from 1 across head and tail as in one pattern."""

    groups: tuple

    def group(self, index: int) -> Any:
        return self.groups[index - 1]


@dataclass(frozen=True)
class Step:
    """One timed line of a log: its line number (1-based), step number and seconds per step."""

    line: int
    step: int
    seconds: float


def warmup_count(n_logged: int) -> int:
    """How many of `n_logged` timed lines the warm-up rule leaves out."""
    return max(WARMUP_MIN_LOGGED, math.ceil(WARMUP_FRACTION * n_logged))


def checked_seconds(value: float, *, path: str, line: int, field: str) -> float:
    """`value` when it is a finite time > 0; else a SpecError naming the file, line and field."""
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"step time {value!r} s is not a positive finite number", file=path,
                        line=line, path=field, expected="a finite time > 0")
    return value


def keep(store: dict[str, tuple[Any, int]], key: str, value: Any, line: int, *, path: str,
         read: set[str] | frozenset[str]) -> None:
    """store[key] = (value, line). A setting this parser reads, printed again with another value, is a
    SpecError: two runs in one log (a job restarted with other settings), whose steps would be mixed."""
    if key in read and key in store and store[key][0] != value:
        raise SpecError(f"{key} is {clip(repr(store[key][0]))} at line {store[key][1]} and {clip(repr(value))} here: "
                        "two runs of different settings in one log", file=path, line=line, path=key,
                        expected="the log of one run (split a restarted job's log where its settings changed)")
    store[key] = (value, line)


def checked_rate(value: float, *, path: str, line: int, field: str) -> float:
    """`value` when it is a finite rate > 0 (tokens or samples a second); else a SpecError saying the rate
    as printed (a step time derived from a tps of nan read "step time -1.0 s")."""
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{field} {value!r} is not a positive finite number", file=path, line=line, path=field,
                        expected="a finite rate > 0")
    return value


def step_time(steps: list[Step], *, path: str, framework: str) -> tuple[float, int, int]:
    """(median seconds per step after warm-up, steps used, steps left out as warm-up).

    The median, not the mean: a logged interval that holds a checkpoint save, an evaluation pass,
    a garbage-collection pause or a straggling node is one slow line among many, a one-off cost the
    planner does not predict; the median ignores it where the mean would move with it."""
    if not steps:
        raise SpecError(f"no timed training step in this {framework} log", file=path,
                        expected=f"the per-step lines {framework} prints")
    skipped = warmup_count(len(steps))
    kept = steps[skipped:]
    if not kept:
        raise SpecError(
            f"only {len(steps)} timed steps, all of them warm-up (the first {skipped} logged are "
            "left out: they include compilation and allocation)",
            file=path, line=steps[-1].line,
            expected=f"more than {skipped} logged training steps")
    return statistics.median(s.seconds for s in kept), len(kept), skipped


def positive_int(value: Any, *, path: str, line: int | None, field: str) -> int:
    """`value` as an int >= 1, or a SpecError naming where it was read."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 \
            or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise SpecError(f"{value!r} is not a positive whole number", file=path, line=line,
                        path=field, expected="an integer >= 1")
    return int(value)


def run(*, name: str, path: str, framework: str, steps: list[Step], gpus: int | None,
        global_batch: int | None, seq_len: int | None, precision: str | None,
        layout: dict[str, Any], model: dict[str, int] | None,
        peak_memory_gib: float | None, torch_compile: bool | None = None) -> dict[str, Any]:
    """The run mapping of the `kind: runs` format; keys the log does not state are left out."""
    seconds, used, skipped = step_time(steps, path=path, framework=framework)
    if gpus is None:
        raise SpecError(f"this {framework} log does not state the number of GPUs", file=path,
                        expected="the lines that give the world size (see planner.fidelity.logs)")
    out: dict[str, Any] = {"name": name, "model": model or None, "gpus": gpus}
    if global_batch is not None:
        out["global_batch"] = global_batch
    if seq_len is not None:
        out["seq_len"] = seq_len
    if precision is not None:
        out["precision"] = precision
    if torch_compile is not None:
        out["torch_compile"] = torch_compile
    out["layout"] = layout
    measured: dict[str, float] = {"step_time_s": seconds}
    if peak_memory_gib is not None and math.isfinite(peak_memory_gib) and peak_memory_gib > 0:
        measured["peak_memory_gib"] = peak_memory_gib
    out["measured"] = measured
    out["source"] = {"framework": framework, "path": path, "steps_used": used,
                     "steps_skipped_warmup": skipped}
    return out
