"""Training logs in, measured runs out: the parsers behind `plan calibrate LOG` and
`plan runs import`.

`parse_log(text, path)` reads one log a framework printed (Megatron-LM / Megatron-Core,
Megatron-Bridge, NeMo 2, torchtitan, DeepSpeed) and returns one run in the `kind: runs` shape:
name, model (the dims the log states, or None), gpus, global_batch, seq_len, precision, layout
(only the keys the log states), measured step time (the median after warm-up, see
`common.WARMUP_MIN_LOGGED`) and peak memory, and where it came from. Pure functions: the caller
reads the file. A log of no known framework, or with no timed step after warm-up, is a SpecError
naming the file and line.
"""
from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Callable

from planner.errors import SpecError, clip, printable
from planner.fidelity.logs import deepspeed, megatron, nemo, torchtitan
from planner.fidelity.logs.common import WARMUP_FRACTION, WARMUP_MIN_LOGGED, InOrder, strip_ansi

__all__ = ["parse_log", "detect_framework", "FRAMEWORKS", "WARMUP_MIN_LOGGED", "WARMUP_FRACTION"]

Parser = Callable[[list[str], str, str], dict[str, Any]]

# What marks each framework's log, strongest first: a Megatron-DeepSpeed log prints Megatron's
# arguments block and DeepSpeed's config, and is read as Megatron (whose lines give the layout);
# Bridge prints Megatron's iteration line but its own config summary and GB memory report.
MARKERS: list[tuple[str, re.Pattern[str] | InOrder]] = [
    ("megatron-bridge", re.compile(re.escape(megatron.BRIDGE_START))),
    ("megatron", megatron.ARGS_START),
    ("megatron-bridge", megatron.MEMORY_GB),
    ("megatron", megatron.MEMORY_MB),
    ("nemo", InOrder(r"Training epoch \d+, iteration \d+/\d+ \|", r"\| train_step_timing in s: ")),
    ("torchtitan", torchtitan.MESH),
    ("torchtitan", torchtitan.STEP_LINE),
    ("deepspeed", re.compile(re.escape(deepspeed.CONFIG_START))),
    ("deepspeed", deepspeed.THROUGHPUT),
    ("megatron", megatron.ITERATION),
]

FRAMEWORKS: dict[str, Parser] = {
    "megatron": megatron.parse_megatron,
    "megatron-bridge": megatron.parse_bridge,
    "nemo": nemo.parse_nemo,
    "torchtitan": torchtitan.parse_torchtitan,
    "deepspeed": deepspeed.parse_deepspeed,
}


# A line per logged step: a million steps each logged with three more lines of other output. More is
# not one run's log (every rank's output interleaved: rank 0's is the one to read); each line costs
# ~60 B beside its text, so 64 MiB of 3-character lines took 3.5 GB before this bound
MAX_LOG_LINES = 4_000_000
MAX_NAME_CHARS = 128  # a run's name in a runs file (planner/fidelity/runs.py RunEntry.name); a file's stem may be 255
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines breaks


def detect_framework(text: str) -> str | None:
    """The framework whose lines the log holds ('megatron', 'megatron-bridge', 'nemo',
    'torchtitan', 'deepspeed'), or None when it holds none of them."""
    return _framework(text.splitlines())


def _framework(lines: list[str]) -> str | None:
    lines = [strip_ansi(line) for line in lines]  # the same strings where no colour was printed
    for framework, marker in MARKERS:
        if any(marker.search(line) for line in lines):
            return framework
    return None


def parse_log(text: str, path: str = "<log>") -> dict[str, Any]:
    """One measured run from the text of one training log; `path` names it in the run and in
    errors (its stem is the run's name)."""
    breaks = sum(text.count(mark) for mark in LINE_BREAKS) - text.count("\r\n")
    if breaks >= MAX_LOG_LINES:
        raise SpecError(f"{breaks + 1:,} lines", file=path, expected=(
            f"a training log of at most {MAX_LOG_LINES:,} lines (rank 0's output of one run)"))
    lines = text.splitlines()
    framework = _framework(lines)
    if framework is None:
        first = next((line for line in lines if line.strip()), "")
        raise SpecError(
            f"not a training log this planner reads: no line of {len(lines)} is one that "
            f"Megatron-LM, Megatron-Bridge, NeMo 2, torchtitan or DeepSpeed prints (first line: "
            f"{printable(clip(first.strip()))!r})",
            file=path, line=max(len(lines), 1),
            expected="a log with the per-step lines of one of: " + ", ".join(FRAMEWORKS))
    return FRAMEWORKS[framework](lines, path, (PurePath(path).stem or path)[:MAX_NAME_CHARS])
