"""A layout that does not fit in memory: the change of settings that makes it fit, found by scoring
each (planner/cli/main.py `_with_memory_hint`, which `plan estimate` prints)."""
from __future__ import annotations

from dataclasses import replace

from planner.errors import SpecError


def with_memory_hint(result, model, cluster, *, gpus, limits, given):
    """The memory violation's tips replaced by a change of settings that fits (one setting changed,
    then two, then three; the fastest that fits), or said to be none."""
    from planner.constraints.hardware import has_memory_tips, with_memory_hint as hinted

    if not has_memory_tips(result.violations):  # fits, or below the floor of the states alone
        return result
    found = memory_fix(result, model, cluster, gpus=gpus, limits=limits, given=given)
    return replace(result, violations=hinted(result.violations, found, moe=model.moe is not None))


def _choices(lay: dict, moe: bool) -> dict:
    """Axis -> values to try, from the layout scored (the degrees keep the GPU count)."""
    choices = {
        "cp": [lay["cp"] * 2, lay["cp"] * 4],
        "pp": [lay["pp"] * 2],
        "tp": [lay["tp"] * 2],
        "recompute": {"none": ["selective", "full"], "selective": ["full"], "full": []}[lay["recompute"]],
        "zero": list(range(lay["zero"] + 1, 4)),
        "sequence_parallel": [True] if not lay["sequence_parallel"] else [],
        "micro_batch": sorted({1, lay["micro_batch"] // 2} - {0}) if lay["micro_batch"] > 1 else [],
        "ep": [lay["ep"] * 2] if moe else [],
    }
    return {k: v for k, v in choices.items() if v}


def memory_fix(result, model, cluster, *, gpus, limits, given):
    """([options], its scored layout) of the fastest change of at most HINT_CHANGES settings that makes
    the layout fit in memory without breaking anything else; None when none does."""
    from itertools import combinations, product

    from planner.constraints.hardware import HINT_CHANGES
    from planner.estimate import estimate_layout
    from planner.layout.axes import axis

    lay = result.layout
    total = int(lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"])
    others = {v.constraint for v in result.violations} - {"memory"}
    choices = _choices(lay, bool(model.moe))
    base = {k: lay[k] for k in given if k in lay}
    for n in range(1, HINT_CHANGES + 1):
        fits = []
        for names in combinations(choices, n):
            for values in product(*(choices[k] for k in names)):
                change = dict(zip(names, values))
                trial = {**base, **change}
                if {"cp", "pp", "tp"} & set(change):
                    trial["dp"] = None  # the other degrees keep the GPU count
                try:
                    scored = estimate_layout(model, cluster, gpus=gpus or total, limits=limits, **trial)
                except SpecError:  # a degree that does not divide the GPUs, an expert group too large
                    continue
                if {v.constraint for v in scored.violations} <= others:
                    fits.append((scored.step_time_s, [axis(k).as_option(v) for k, v in change.items()], scored))
        if fits:
            _, options, scored = min(fits, key=lambda f: f[0])
            return options, scored
    return None
