"""Re-plan after failures (`plan replan`, issue 40 item 5): a job runs a layout on N GPUs, K of them fail;
what is the best layout on the N - K left, what does the change cost, and is it better to shrink now or
to wait idle for spares?

Symbols [units]: N GPUs running, K lost, r the running layout's throughput and r' the new one's
[tokens/s], R the cluster's `reliability.restart_s` (relaunch, NCCL init, checkpoint load) [s],
E the time until spares arrive [s], H the horizon compared over [s].

Change cost (a restart into another layout). The checkpoint must be resharded: each GPU of the new
layout reads its share of the weights and optimizer states, `checkpoint_bytes_per_gpu` of the new
layout (the bounding pipeline rank; every unique byte once over its replicas), at the per-GPU storage
bandwidth b = min(S / G, network) with S the cluster's storage bandwidth (the spec states one,
`reliability.storage_write_gbps`; reads are taken at it) and G the new layout's GPUs
(planner/costs/reliability.py `checkpoint_write_s`):
    reshard_s = bytes_per_gpu / (b GB),    C = reshard_s + R.
The whole checkpoint holds P (2 + 12) bytes for BF16 training (P parameters; 16-bit weights, fp32
master weights and two moments): P x (weight_bytes + optimizer_state_bytes).

Shrink or wait, over the horizon H (remaining tokens / r, else 24 h), from the failure at t = 0,
with clip(t) = min(max(t, 0), H):
    (a) shrink: restart into the new layout (C1 = reshard to it + R), train at r' until the spares
        arrive (at max(E, C1)), restart back into the running layout (C2 = reshard back + R), then r:
        tokens_a = r' [clip(max(E, C1)) - clip(C1)] + r [H - clip(max(E, C1) + C2)]
    (b) wait: idle until the spares arrive, restart in the running layout (R; no resharding), then r:
        tokens_b = r [H - clip(E + R)]
The winner trains more tokens; its margin is |tokens_a - tokens_b| tokens, or that many divided by r
hours of the running job. Default E: 0 when the cluster has spare or unused nodes for the nodes lost
(as planner/costs/reliability.py counts spares), else `reliability.node_replace_s` (the wait for a
replacement node when no spare is free).

The new layout keeps the global batch B when a layout on N - K GPUs runs it. When none does, the
largest batch b <= B that some layout on N - K GPUs runs: dp divides b and N - K, so the batches tried
are floor(B / d) d for each divisor d of N - K, largest first. When no batch runs on N - K GPUs (a
prime factor no degree can take: 1,016 = 8 x 127 GPUs for a 96-layer, 96-head model), the largest
GPU count G < N - K (down to (N - K) / 2) that runs B.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.constraints import Limits
from planner.costs.context import job_context
from planner.costs.pipeline_ranks import split_ranks
from planner.costs.reliability import checkpoint_bytes_per_gpu, checkpoint_write_s
from planner.errors import InfeasibleError, SpecError
from planner.estimate import estimate_defaults, estimate_layout, layout_of
from planner.layout.axes import divisors
from planner.results import ScoredLayout
from planner.search import search, space_for, with_global_batch
from planner.specs import ClusterSpec, ModelSpec
from planner.units import GB, S_PER_H

DEFAULT_HORIZON_H = 24.0
FEWER_GPU_SEARCHES = 8  # GPU counts below N - K searched at most
# GPU counts below N - K looked at, with or without a valid layout: each is an enumeration of its layouts
# (1-9 ms), and N - K = 7,999,999 of an 8M-GPU cluster had 4 million counts down to half (hours; killed
# after 200 s). 1,024 keeps every count down to half of N - K for jobs up to 2,048 GPUs.
FEWER_GPU_COUNTS = 1024


@dataclass(frozen=True)
class ChangeCost:
    """What a restart into another layout costs (module docstring)."""

    checkpoint_bytes: float
    """the whole checkpoint: parameters x (weight + optimizer state bytes) [bytes]"""
    read_bytes_per_gpu: float
    """the share of the bounding GPU of the layout restarted into [bytes]"""
    read_gbps_per_gpu: float
    """min(storage bandwidth / its GPUs, network_gbps) [GB/s]"""
    reshard_s: float
    """read_bytes_per_gpu / read_gbps_per_gpu [s]"""
    restart_s: float
    """the cluster's reliability.restart_s [s]"""

    @property
    def total_s(self) -> float:
        return self.reshard_s + self.restart_s


@dataclass(frozen=True)
class SparesDecision:
    """Shrink now or wait idle for spares, tokens trained over the horizon (module docstring)."""

    spares_in_h: float
    spares_source: str
    """where E came from: the caller, the cluster's spare/unused nodes, or reliability.node_replace_s"""
    horizon_h: float
    horizon_source: str
    back: ChangeCost
    """the second restart of (a): from the new layout back into the running one"""
    shrink_tokens: float
    wait_tokens: float

    @property
    def winner(self) -> str:
        """'shrink' or 'wait' (a tie waits: no change of layout for nothing)."""
        return "shrink" if self.shrink_tokens > self.wait_tokens else "wait"

    @property
    def margin_tokens(self) -> float:
        return abs(self.shrink_tokens - self.wait_tokens)


@dataclass(frozen=True)
class Replan:
    """The running layout, the best one on the GPUs left, and what the change costs."""

    gpus: int
    lost_gpus: int
    running: ScoredLayout
    new: ScoredLayout
    new_gpus: int
    """GPUs the new layout uses: N - K, or fewer when no layout of N - K GPUs runs"""
    global_batch: int
    new_global_batch: int
    change_note: str | None
    """why the new layout differs from the running job in batch or GPU count (None: N - K GPUs, batch kept)"""
    change: ChangeCost
    decision: SparesDecision

    @property
    def gpus_left(self) -> int:
        return self.gpus - self.lost_gpus

    @property
    def tokens_per_s_lost(self) -> float:
        return self.running.tokens_per_s - self.new.tokens_per_s

    @property
    def margin_h(self) -> float:
        """The winner's margin in hours of the running job [h]."""
        return self.decision.margin_tokens / self.running.tokens_per_s / S_PER_H


def tokens_over_horizon(*, running_tps: float, new_tps: float, spares_s: float, horizon_s: float,
                        shrink_cost_s: float, back_cost_s: float, resume_s: float) -> tuple[float, float]:
    """(tokens_a, tokens_b): shrink now vs wait for spares (module docstring) [tokens]."""
    def clip(t: float) -> float:
        return min(max(t, 0.0), horizon_s)

    back_at = max(spares_s, shrink_cost_s)
    shrink = new_tps * (clip(back_at) - clip(shrink_cost_s)) + running_tps * (horizon_s - clip(back_at + back_cost_s))
    wait = running_tps * (horizon_s - clip(spares_s + resume_s))
    return shrink, wait


def change_cost(model: ModelSpec, cluster: ClusterSpec, layout: dict[str, Any]) -> ChangeCost:
    """The cost of restarting into `layout` (a ScoredLayout's `layout`; module docstring)."""
    lay = layout_of(model, int(layout["dp"] * layout["tp"] * layout["pp"] * layout["cp"]),
                    {k: v for k, v in layout.items() if k not in ("stage_layers", "offload_layers")}, gpus_said="the layout")
    ranks = split_ranks(model, lay, layout["stage_layers"]) if "stage_layers" in layout else None
    job = job_context(model, cluster, lay, ranks)
    gpus = int(lay.gpus[0])
    per_gpu = float(checkpoint_bytes_per_gpu(job)[0])
    reshard = float(checkpoint_write_s(cluster, per_gpu, gpus))
    prec = model.training.numerics
    return ChangeCost(checkpoint_bytes=float(model.total_params() * (prec.weight_bytes + prec.optimizer_state_bytes)),
                      read_bytes_per_gpu=per_gpu, read_gbps_per_gpu=per_gpu / reshard / GB if reshard else math.inf,
                      reshard_s=reshard, restart_s=float(cluster.reliability.restart_s))


def default_spares(cluster: ClusterSpec, gpus: int, lost_gpus: int) -> tuple[float, str]:
    """(E [h], where it came from): 0 when spare plus unused nodes cover the nodes lost, else the
    cluster's wait for a replacement node."""
    rel, per_node = cluster.reliability, cluster.node.gpus
    lost_nodes = -(-lost_gpus // per_node)
    spares = rel.spare_nodes + max(cluster.nodes - -(-gpus // per_node), 0)
    if spares >= lost_nodes:
        return 0.0, f"{cluster.name} has {spares:,} spare or unused nodes for the {lost_nodes:,} lost"
    return rel.node_replace_s / S_PER_H, "the cluster's reliability.node_replace_s: no spare node free"


def replan(model: ModelSpec, cluster: ClusterSpec, *, gpus: int, lost_gpus: int, running: dict[str, Any],
           spares_eta_h: float | None = None, remaining_tokens: float | None = None,
           limits: Limits = Limits()) -> Replan:
    """Score `running` (axis values by name, as `plan estimate` takes them) on `gpus`, find the best
    layout on gpus - lost_gpus, and decide between shrinking and waiting (module docstring).
    Bad input is a SpecError naming the flag; no layout on the GPUs left an InfeasibleError."""
    _check_input(cluster, gpus, lost_gpus, spares_eta_h, remaining_tokens)
    now = estimate_layout(model, cluster, gpus=gpus, limits=limits, gpus_said=f"--gpus is {gpus}",
                          **estimate_defaults(dict(running), gpus, cluster))
    _check_rules(now)
    left = gpus - lost_gpus
    new_model, new_gpus, note, best = _best_on(model, cluster, left, limits)
    change = change_cost(new_model, cluster, best.layout)
    back = change_cost(model, cluster, now.layout)
    if spares_eta_h is None:
        spares_eta_h, source = default_spares(cluster, gpus, lost_gpus)
    else:
        source = "--spares-in-h"
    if remaining_tokens is None:
        horizon_h, horizon_source = DEFAULT_HORIZON_H, "the default: no tokens left given"
    else:
        horizon_h = remaining_tokens / now.tokens_per_s / S_PER_H
        horizon_source = f"{remaining_tokens:.4g} tokens left at the running throughput"
    shrink, wait = tokens_over_horizon(running_tps=now.tokens_per_s, new_tps=best.tokens_per_s,
                                       spares_s=spares_eta_h * S_PER_H, horizon_s=horizon_h * S_PER_H,
                                       shrink_cost_s=change.total_s, back_cost_s=back.total_s,
                                       resume_s=cluster.reliability.restart_s)
    decision = SparesDecision(spares_eta_h, source, horizon_h, horizon_source, back, shrink, wait)
    return Replan(gpus, lost_gpus, now, best, new_gpus, model.training.global_batch,
                  new_model.training.global_batch, note, change, decision)


def _check_input(cluster: ClusterSpec, gpus: int, lost_gpus: int, spares_eta_h, remaining_tokens) -> None:
    """Bounds compared before any float conversion: an int too large for a float (10**400 tokens) is out
    of range, not an OverflowError in math.isfinite; NaN fails every comparison."""
    from planner.options import shown_number

    def said(value) -> str:  # as given (-1.0, nan), an int in a few digits (1.358e+331)
        return shown_number(value) if isinstance(value, int) else str(value)

    if not 2 <= gpus <= cluster.total_gpus:
        raise SpecError(f"got {shown_number(gpus)}, and {cluster.name} has {cluster.total_gpus:,} GPUs", path="--gpus",
                        expected=f"GPUs from 2 to {cluster.total_gpus:,}")
    if not 1 <= lost_gpus < gpus:
        raise SpecError(f"got {shown_number(lost_gpus)} of the {gpus} GPUs running", path="--lost-gpus",
                        expected=f"from 1 to {gpus - 1} (some GPUs must be left)")
    if spares_eta_h is not None and not 0 <= spares_eta_h <= 1e6:
        raise SpecError(f"got {said(spares_eta_h)}", path="--spares-in-h", expected="hours from 0 to 1,000,000")
    if remaining_tokens is not None and not 0 < remaining_tokens <= 1e18:
        raise SpecError(f"got {said(remaining_tokens)}", path="--tokens", expected="tokens > 0 and at most 1e18")


def _check_rules(running: ScoredLayout) -> None:
    """A running layout breaks no rule of the space (tp divides the heads, ...): one that does cannot be
    running, so it is bad input naming the flags of the rule's axes."""
    from planner.layout.axes import AXES, RULES

    flags = {a.name: a.flag for a in AXES}
    for v in running.violations:
        rule = next((r for r in RULES if r.name == v.constraint), None)
        if rule is not None:
            raise SpecError(v.message, path="/".join(flags[a] for a in rule.axes if flags.get(a)),
                            expected="a running layout that obeys the rule")


def _best_on(model: ModelSpec, cluster: ClusterSpec, left: int, limits: Limits):
    """(the model as the new layout trains it, its GPUs, why it differs, the layout): the global batch on
    the GPUs left, else the largest batch that runs on them, else the most GPUs below that run the batch."""
    batch = model.training.global_batch
    tried: list[str] = []
    found = _search(model, cluster, left, limits, tried)
    if found is not None:
        return model, left, None, found
    for b in sorted({batch // d * d for d in divisors(left) if d <= batch} - {batch}, reverse=True):
        smaller = with_global_batch(model, b)
        found = _search(smaller, cluster, left, limits, tried)
        if found is not None:
            return smaller, left, (f"global batch {b} (not {batch}): the largest batch <= {batch} that a layout on "
                                   f"the {left:,} GPUs left runs; {tried[0]}"), found
    searched = 0
    lowest = max(left // 2, left - FEWER_GPU_COUNTS, 1)
    for g in range(left - 1, lowest - 1, -1):
        if searched == FEWER_GPU_SEARCHES:
            break
        if len(space_for(model, g)):
            searched += 1
            found = _search(model, cluster, g, limits, [])
            if found is not None:
                return model, g, (f"{g:,} of the {left:,} GPUs left, global batch {batch} kept: no batch <= {batch} "
                                  f"runs on {left:,} GPUs; {tried[0]}"), found
    fewer = (f"none of the {searched} GPU counts with a valid layout from {left - 1:,} down to {lowest:,} "
             f"runs batch {batch}") if left > 1 else "no fewer GPUs are left to try"  # 1 left: nothing below it
    raise InfeasibleError(f"no layout runs on the {left:,} GPUs left: {tried[0]}; no smaller batch runs on them, and {fewer}")


def _search(model: ModelSpec, cluster: ClusterSpec, gpus: int, limits: Limits, tried: list[str]) -> ScoredLayout | None:
    """The best layout of `gpus` GPUs, or None, with why appended to `tried`."""
    batch = model.training.global_batch
    if not len(space_for(model, gpus)):
        tried.append(f"no layout of {gpus:,} GPUs has dp dividing batch {batch} with tp, pp and cp the model allows")
        return None
    result = search(model, cluster, gpus=gpus, top_k=1, limits=limits)
    if result.best is None:
        removed = ", ".join(f"{k} removed {v:,}" for k, v in result.rejected.items() if v)
        tried.append(f"batch {batch} on {gpus:,} GPUs: no feasible layout ({removed})")
    return result.best
