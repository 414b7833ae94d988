"""DeepSpeed logs (deepspeedai/DeepSpeed edaa7221, v0.19.5+; the prints are in
tests/data/logs/deepspeed-prints.txt).

Rank 0 prints its config at start (runtime/config.py `DeepSpeedConfig.print`): `DeepSpeedEngine
configuration:`, then `  name ..... value` per attribute, then `  json = {...}` (the user's
ds_config, indented JSON). Every `steps_per_print` optimizer steps `ThroughputTimer.stop`
(utils/timer.py) prints `epoch=E/micro_step=M/global_step=G, RunningAvgSamplesPerSec=..,
CurrSamplesPerSec=C, MemAllocated=..GB, MaxMemAllocated=P GB`, where C = train_batch_size / the
seconds of that one global step, so
    step time [s] = train_batch_size / CurrSamplesPerSec,
and P is `max_memory_allocated() / 1024**3`: GiB, though printed as GB.
`world_size` in the config is DeepSpeed's data-parallel size: the GPUs when no model-parallel unit
is attached (a Megatron-DeepSpeed log also prints Megatron's arguments block and is read as one).
"""
from __future__ import annotations

import json
import re
from typing import Any

from planner.errors import SpecError
from planner.fidelity.logs.common import (NUMBER, Step, checked_rate, checked_seconds, count, keep, literal, number,
                                          positive_int, run)

CONFIG_START = "DeepSpeedEngine configuration:"
CONFIG_LINE = re.compile(r"  ([A-Za-z_]\w*) (\.*) ?(.*)$")
JSON_START = re.compile(r"  json = (\{.*)$")
THROUGHPUT = re.compile(rf"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec="
                        rf"({NUMBER}), CurrSamplesPerSec=({NUMBER}), MemAllocated=({NUMBER})GB, "
                        rf"MaxMemAllocated=({NUMBER})GB")


READ = frozenset({"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization_stage", "world_size",
                  "bfloat16_enabled", "fp16_enabled"})  # the attributes read (a restart's second block must agree)


def ds_config(lines: list[str], path: str = "<log>") -> tuple[dict[str, tuple[Any, int]], dict[str, Any]]:
    """The printed attributes (name -> (value, line)) and the user's ds_config JSON."""
    attributes: dict[str, tuple[Any, int]] = {}
    user: dict[str, Any] = {}
    inside = False
    for index, line in enumerate(lines):
        if CONFIG_START in line:
            inside = True
        elif inside and (match := JSON_START.search(line)):
            text, depth = "", 0
            for part in [match.group(1)] + lines[index + 1:]:
                text += part + "\n"
                depth += part.count("{") - part.count("}")
                if depth <= 0:
                    break
            try:
                user = json.loads(text)
            except json.JSONDecodeError:
                user = {}
            inside = False
        elif inside and (match := CONFIG_LINE.search(line)):
            keep(attributes, match.group(1), literal(match.group(3)), index + 1, path=path, read=READ)
    return attributes, user


def _precision(values: dict[str, Any], user: dict[str, Any]) -> str | None:
    for key, name in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        if isinstance(user.get(key), dict) and user[key].get("enabled"):
            return name
    if values.get("bfloat16_enabled") is True:
        return "bf16"
    if values.get("fp16_enabled") is True:
        return "fp16"
    return "fp32" if user or "fp16_enabled" in values else None


def parse_deepspeed(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A DeepSpeed log: the engine configuration block and the ThroughputTimer lines."""
    attributes, user = ds_config(lines, path)
    values = {k: v for k, (v, _) in attributes.items()}
    where = {k: n for k, (_, n) in attributes.items()}
    batch = values.get("train_batch_size", user.get("train_batch_size"))
    batch = None if batch is None else positive_int(batch, path=path, line=where.get(
        "train_batch_size"), field="train_batch_size")
    steps: list[Step] = []
    peaks = []
    for line_no, line in enumerate(lines, 1):
        if not (match := THROUGHPUT.search(line)):
            continue
        if batch is None:
            raise SpecError("a throughput line before the configuration that gives its batch",
                            file=path, line=line_no, expected="'DeepSpeedEngine configuration:' "
                            "with train_batch_size first")
        samples_per_s = checked_rate(number(match.group(5)), path=path, line=line_no, field="CurrSamplesPerSec")
        seconds = checked_seconds(batch / samples_per_s, path=path, line=line_no, field="CurrSamplesPerSec")
        steps.append(Step(line_no, count(match.group(3), path=path, line=line_no, field="global_step"),
                          seconds))
        peaks.append(number(match.group(7)))
    layout: dict[str, Any] = {}
    micro = values.get("train_micro_batch_size_per_gpu", user.get("train_micro_batch_size_per_gpu"))
    if micro is not None:
        layout["micro_batch"] = positive_int(
            micro, path=path, field="train_micro_batch_size_per_gpu",
            line=where.get("train_micro_batch_size_per_gpu"))
    zero = user.get("zero_optimization")
    stage = values.get("zero_optimization_stage", zero.get("stage") if isinstance(zero, dict) else None)
    if isinstance(stage, int) and not isinstance(stage, bool):
        layout["zero"] = stage
    world = values.get("world_size")
    gpus = None if world is None else positive_int(world, path=path, line=where.get("world_size"),
                                                   field="world_size")
    return run(name=name, path=path, framework="deepspeed", steps=steps, gpus=gpus,
               global_batch=batch, seq_len=None, precision=_precision(values, user),
               layout=layout, model=None, peak_memory_gib=max(peaks, default=None))
