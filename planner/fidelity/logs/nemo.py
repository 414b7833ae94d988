"""NeMo 2 (Lightning) logs (NVIDIA/NeMo 8cfedd72; the prints: tests/data/logs/nemo-prints.txt).

NeMo 2's `ProgressPrinter` (nemo/lightning/pytorch/callbacks/progress_printer.py) prints, every
`log_interval` steps, `Training epoch E, iteration n/N | name: value | ...` with the metrics
Lightning's progress bar holds averaged over the interval; `TimingCallback` (nemo/utils/
exp_manager.py) puts `train_step_timing in s` among them. The layout comes from the process groups
`megatron_init.initialize_model_parallel_for_nemo` logs (`All tensor model parallel group ranks:
[[0, 1, ...], ...]`): the size of a group is the degree, and the groups together hold every rank.
"""
from __future__ import annotations

import re
from typing import Any

from planner.errors import SpecError
from planner.fidelity.logs.common import Step, checked_seconds, literal, number, positive_int, run

STEP_LINE = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)((?: \| [^|:]+: [^|]+)+)$")
STEP_TIME = "train_step_timing in s"
GROUPS = re.compile(r"All (tensor model|pipeline model|context|expert model|expert tensor) "
                    r"parallel group ranks: (\[.*\])\s*$")
LAYOUT_KEYS = {"tensor model": "tp", "pipeline model": "pp", "context": "cp",
               "expert model": "ep", "expert tensor": "etp"}


def _metrics(tail: str) -> dict[str, str]:
    pairs = (part.rsplit(": ", 1) for part in tail.split(" | ")[1:])
    return {key.strip(): value.strip() for key, value in pairs}


def parse_nemo(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A NeMo 2 log: the ProgressPrinter lines and the parallel groups megatron_init logs."""
    steps: list[Step] = []
    batch = None
    for line_no, line in enumerate(lines, 1):
        match = STEP_LINE.search(line.rstrip())
        if not match:
            continue
        metrics = _metrics(match.group(4))
        if STEP_TIME in metrics:
            seconds = checked_seconds(number(metrics[STEP_TIME]), path=path, line=line_no,
                                      field=STEP_TIME)
            steps.append(Step(line_no, int(match.group(2)), seconds))
        if "global_batch_size" in metrics:
            batch = positive_int(number(metrics["global_batch_size"]), path=path, line=line_no,
                                 field="global_batch_size")
    layout: dict[str, Any] = {}
    gpus = None
    for line_no, line in enumerate(lines, 1):
        match = GROUPS.search(line)
        if not match:
            continue
        groups = literal(match.group(2))
        if not (isinstance(groups, list) and groups and all(isinstance(g, list) and g
                                                            for g in groups)):
            raise SpecError("a parallel group list that is not a list of rank lists", file=path,
                            line=line_no, expected="[[0, 1, ...], ...]")
        layout[LAYOUT_KEYS[match.group(1)]] = len(groups[0])
        if match.group(1) == "tensor model":
            gpus = sum(len(g) for g in groups)
    return run(name=name, path=path, framework="nemo", steps=steps, gpus=gpus,
               global_batch=batch, seq_len=None, precision=None, layout=layout, model=None,
               peak_memory_gib=None)
