"""Hardware family: memory per device, interconnect domain, GPU count."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from planner.layout.axes import axis
from planner.layout.space import RECOMPUTE_FULL
from planner.costs.offload import HOST_MEMORY_RESERVE
from planner.units import GIB
from planner.constraints.base import Constraint, Context, Mask, Option, relative_excess


TRY = ": try "  # what follows it in a memory violation's message: the tips, which a scored hint may replace
HINT_CHANGES = 3  # settings changed together at most in `plan estimate`'s memory hint


def _memory(scores, ctx: Context, c: Constraint) -> list[Mask]:
    model, headroom = ctx.model, ctx.limits.memory_headroom
    lay = scores.layouts
    mem = scores.memory_gib.total
    capacity = ctx.cluster.gpu.memory_gib
    usable = capacity * (1.0 - headroom)
    state_bytes = model.training.numerics.state_bytes

    def memory_msg(i: int) -> str:
        head = f" ({usable:.1f} GiB usable with {headroom:.0%} headroom)" if headroom else ""
        tips = _parallel_tips(scores, model, i)
        if lay.recompute[i] != RECOMPUTE_FULL:
            tips.append(axis("recompute").as_option("full"))
        if lay.dp[i] > 1 and lay.zero[i] < 3:
            tips.append(axis("zero").as_option(lay.zero[i] + 1))
        if lay.tp[i] > 1 and not lay.sequence_parallel[i]:
            tips.append(axis("sequence_parallel").as_option(True))
        if lay.micro_batch[i] > 1:
            tips.append(f"a smaller {axis('micro_batch').flag}")
        tips.append(f"more pipeline stages ({axis('pp').flag})")
        text = f"needs {mem[i]:.1f} GiB on {capacity:g} GiB{head}"
        # Weights, fp32 gradients and Adam states alone (18 B per parameter, Korthikanti et al. 2022)
        # set a floor on the GPU count that no layout gets under.
        floor = int(np.ceil(state_bytes * model.total_params() / (usable * GIB)))
        if lay.gpus[i] < floor:
            return (f"{text}: the weights, gradients and optimizer states alone ({state_bytes} B x "
                    f"{model.total_params() / 1e9:,.1f}B parameters) need at least {floor} GPUs, this run has {lay.gpus[i]}")
        return f"{text}{TRY}" + " or ".join(tips[:3])

    return [Mask(c.name, c.family, mem <= usable, memory_msg, relative_excess(mem, usable))]


def has_memory_tips(violations) -> bool:
    """Whether a memory violation among `violations` ends in tips (not when the layout fits, nor when
    the states alone need more GPUs than the run has)."""
    return any(v.constraint == "memory" and TRY in v.message for v in violations)


def with_memory_hint(violations: tuple, found, moe: bool, in_file: bool = False) -> tuple:
    """`violations` with the memory violation's tips replaced by what scoring found: `found` is
    (options, scored layout) of the fastest change of at most HINT_CHANGES settings that fits, or
    None when none does (`moe`: --ep was among the settings tried; `in_file`: named as a plan
    file's layout keys, not options)."""
    if found is None:
        names = ["cp", "pp", "tp", "recompute", "zero", "sequence_parallel", "micro_batch"] + (["ep"] if moe else [])
        what = (f"layout.{', layout.'.join(names)}" if in_file else ", ".join(axis(n).flag for n in names))
        tail = f"no change of up to {HINT_CHANGES} of {what} fits"
    else:
        options, fit = found
        tail = (f"fits with {(', ' if in_file else ' ').join(options)} ({fit.memory_gib.total:.1f} GiB, step "
                f"{fit.step_time_s:.3f} s, scored)")
    return tuple(replace(v, message=f"{v.message.split(TRY)[0]}: {tail}")
                 if v.constraint == "memory" and TRY in v.message else v for v in violations)


def _parallel_tips(scores, model, i: int) -> list[str]:
    """`--cp 2x` when activations are most of the memory and the sequence splits further; `--ep 2x`
    when the routed experts' states are and the experts split further."""
    lay, mem = scores.layouts, scores.memory_gib
    tips = []
    cp, ep = int(lay.cp[i]), int(lay.ep[i])
    if mem.activations[i] > 0.5 * mem.total[i] and model.seq_len % (4 * cp) == 0:
        tips.append(axis("cp").as_option(2 * cp))
    states = mem.weights[i] + mem.gradients[i] + mem.optimizer[i]
    if model.moe is not None and states > 0.5 * mem.total[i] and model.moe.experts % (2 * ep) == 0:
        tips.append(axis("ep").as_option(2 * ep))
    return tips


def _host_memory(scores, ctx: Context, c: Constraint) -> list[Mask]:
    """Offloading layouts: a node's GPUs' offloaded bytes fit its host memory less a reserve
    (planner/costs/offload.py HOST_MEMORY_RESERVE), on a node that states its host memory and link."""
    lay = scores.layouts
    offloads = lay.offload > 0
    if not offloads.any():
        return []
    node, name = ctx.cluster.node, ctx.cluster.name
    if not node.offload_ready:
        return [Mask(c.name, c.family, ~offloads,
                     lambda i: f"offload={axis('offload').to_json(lay.offload[i])} needs the node's host memory, host link "
                     f"and host memory bandwidth, which cluster {name} does not state (node.host_memory_gib, "
                     "node.host_link_gbps, node.host_memory_gbps)", np.where(offloads, 1.0, 0.0))]
    per_node = np.minimum(node.gpus, lay.gpus)
    need = scores.memory_gib.host * per_node
    usable = node.host_memory_gib * (1.0 - HOST_MEMORY_RESERVE)
    return [Mask(c.name, c.family, need <= usable,
                 lambda i: f"offloads {need[i]:,.0f} GiB to the host memory of a node of {per_node[i]} GPUs, which has "
                 f"{node.host_memory_gib:g} GiB ({usable:,.0f} usable, {HOST_MEMORY_RESERVE:.0%} kept for the system)",
                 relative_excess(need, usable))]


def _nvlink_domain(scores, ctx: Context, c: Constraint) -> list[Mask]:
    # A tp the user fixed is their choice, priced over the network where it leaves the domain (vTrain
    # measured tp 16 across two 8-GPU nodes): the rule steers the search, it does not refuse what trains.
    if ctx.limits.allow_cross_node_tp or "tp" in ctx.limits.fixed:
        return []
    tp = scores.layouts.tp
    domain = ctx.cluster.node.nvlink_domain
    return [Mask(c.name, c.family, (tp <= domain) & (domain % tp == 0),
                 lambda i: f"tp={tp[i]} does not fit the {domain} GPUs of one NVLink domain "
                 f"(tp groups must tile it; allow with {c.option.flag})",
                 _tiling_excess(tp, domain))]


def _tiling_excess(tp: np.ndarray, domain: int) -> np.ndarray:
    """How far tp is from a size that tiles the domain: tp / d - 1, d the largest divisor of the
    domain <= tp. 0 exactly when tp divides the domain; (tp - domain) / domain above it (d = domain);
    tp 3 on 8 GPUs: d = 2, 0.5."""
    small = [d for d in range(1, math.isqrt(domain) + 1) if domain % d == 0]  # domains go up to 1e6 GPUs
    divisors = np.array(sorted(set(small + [domain // d for d in small])))
    tp = np.asarray(tp)
    fits = divisors[np.searchsorted(divisors, tp, side="right") - 1]  # tp >= 1, and 1 divides every domain
    return tp / fits - 1.0


def _gpu_count(scores, ctx: Context, c: Constraint) -> list[Mask]:
    gpus = scores.layouts.gpus
    total = ctx.cluster.total_gpus
    return [Mask(c.name, c.family, gpus <= total, lambda i: f"uses {gpus[i]} GPUs but the cluster has {total}",
                 relative_excess(gpus.astype(float), float(total)))]


CONSTRAINTS = (
    Constraint("memory", "hardware", Option(
        "memory_headroom", "--memory-headroom", float, "fraction of GPU memory kept free", default=0.05, off=0.0,
        bounds=dict(ge=0, lt=1)), unit="GiB", masks=_memory),
    Constraint("host_memory", "hardware", unit="GiB", masks=_host_memory),
    Constraint("tp_in_nvlink_domain", "hardware", Option(
        "allow_cross_node_tp", "--allow-cross-node-tp", bool, "let tp groups leave the NVLink domain",
        default=False, off=False), masks=_nvlink_domain),
    Constraint("gpu_count", "hardware", unit="GPUs", masks=_gpu_count),
)
