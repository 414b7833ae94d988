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
from planner.fidelity.logs.common import Step, checked_seconds, count, positive_int, read_number, run

# The head, then the metrics checked apart: `((?: \| [^|:]+: [^|]+)+)$` in one search was quadratic in a
# line of repeated heads (780 kB, 183 s). ProgressPrinter prints a dozen metrics, under 1 kB; the check's
# memory grows with a line's metrics (~180 B each), so a longer line is refused before it
STEP_LINE = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)( \| .*)$")
METRICS = re.compile(r"(?: \| [^|:]+: [^|]+)+")
MAX_PROGRESS_CHARS = 65_536
STEP_TIME = "train_step_timing in s"
GROUPS = re.compile(r"All (tensor model|pipeline model|context|expert model|expert tensor) "
                    r"parallel group ranks: (\[.*)$")
# The rank lists are read without building them, and without a pattern repeated once a group (its
# backtracking stack grows ~500 B a group): a 10 MB list as Python objects took 2.2 GB
LIST_CHARS = re.compile(r"\[[\d,\s\[\]]*\]")
RANK_GROUP = re.compile(r"\[([^\[\]]*)\]")
NOT_A_LIST = re.compile(r"^\s*,|,\s*,|,\s*$|^\s*$|[^\s,]\s+[^\s,]")  # items separated by single commas
LAYOUT_KEYS = {"tensor model": "tp", "pipeline model": "pp", "context": "cp",
               "expert model": "ep", "expert tensor": "etp"}


def _metrics(tail: str) -> dict[str, str]:
    pairs = (part.rsplit(": ", 1) for part in tail.split(" | ")[1:])
    return {key.strip(): value.strip() for key, value in pairs}


def _group_sizes(text: str) -> tuple[int, int] | None:
    """(ranks in the first group, ranks in all) of `[[0, 1], [2, 3]]`, or None when it is not a list of
    rank lists; linear time, memory for the counts only."""
    if not LIST_CHARS.fullmatch(text):
        return None
    inner, first, total = text[1:-1], None, 0
    for group in RANK_GROUP.finditer(inner):
        if NOT_A_LIST.search(group.group(1)):
            return None
        size = group.group(1).count(",") + 1
        first, total = first or size, total + size
    outside = RANK_GROUP.sub("x", inner)  # what is left between the groups: x, x, x
    if first is None or "[" in outside or "]" in outside or re.search(r"\d|xx", outside) or NOT_A_LIST.search(outside):
        return None
    return first, total


def parse_nemo(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A NeMo 2 log: the ProgressPrinter lines and the parallel groups megatron_init logs."""
    steps: list[Step] = []
    batch = None
    for line_no, line in enumerate(lines, 1):
        match = STEP_LINE.search(line.rstrip())
        if match and len(line) > MAX_PROGRESS_CHARS:
            raise SpecError(f"a progress line of {len(line):,} characters", file=path, line=line_no,
                            expected=f"NeMo's progress line (a dozen metrics; at most {MAX_PROGRESS_CHARS:,} "
                                     "characters)")
        if not match or not METRICS.fullmatch(match.group(4)):
            continue
        metrics = _metrics(match.group(4))
        if STEP_TIME in metrics:
            seconds = checked_seconds(read_number(metrics[STEP_TIME], path=path, line=line_no, field=STEP_TIME),
                                      path=path, line=line_no, field=STEP_TIME)
            steps.append(Step(line_no, count(match.group(2), path=path, line=line_no, field="iteration"),
                              seconds))
        if "global_batch_size" in metrics:
            batch = positive_int(read_number(metrics["global_batch_size"], path=path, line=line_no,
                                             field="global_batch_size"),
                                 path=path, line=line_no, field="global_batch_size")
    layout: dict[str, Any] = {}
    gpus = None
    for line_no, line in enumerate(lines, 1):
        match = GROUPS.search(line)
        if not match:
            continue
        sizes = _group_sizes(match.group(2).rstrip())
        if sizes is None:
            raise SpecError("a parallel group list that is not a list of rank lists", file=path,
                            line=line_no, expected="[[0, 1, ...], ...]")
        layout[LAYOUT_KEYS[match.group(1)]] = sizes[0]
        if match.group(1) == "tensor model":
            gpus = sizes[1]
    return run(name=name, path=path, framework="nemo", steps=steps, gpus=gpus,
               global_batch=batch, seq_len=None, precision=None, layout=layout, model=None,
               peak_memory_gib=None)
