"""Hardware family: memory per device, interconnect domain, GPU count."""
from __future__ import annotations

import numpy as np

from ..costs.memory import GIB, GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES
from ..score import Scores
from ..specs import ClusterSpec, ModelSpec
from .base import Limits, Mask, relative_excess


STATE_BYTES_PER_PARAM = WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES


def masks(model: ModelSpec, cluster: ClusterSpec, scores: Scores, limits: Limits) -> list[Mask]:
    lay = scores.layouts
    mem = scores.memory_gib.total
    capacity = cluster.gpu.memory_gib
    usable = capacity * (1.0 - limits.memory_headroom)

    def memory_msg(i: int) -> str:
        head = f" ({usable:.1f} GiB usable with {limits.memory_headroom:.0%} headroom)" if limits.memory_headroom else ""
        tips = []
        if lay.recompute[i] != 2:
            tips.append("--recompute full")
        if lay.dp[i] > 1 and lay.zero[i] < 3:
            tips.append(f"--zero {lay.zero[i] + 1}")
        if lay.tp[i] > 1 and not lay.sequence_parallel[i]:
            tips.append("--sequence-parallel")
        if lay.micro_batch[i] > 1:
            tips.append("a smaller --micro-batch")
        tips.append("more pipeline stages (--pp)")
        text = f"needs {mem[i]:.1f} GiB on {capacity:g} GiB{head}"
        # Weights, fp32 gradients and Adam states alone (18 B per parameter, Korthikanti et al. 2022)
        # set a floor on the GPU count that no layout gets under.
        floor = int(np.ceil(STATE_BYTES_PER_PARAM * model.total_params() / (usable * GIB)))
        if lay.gpus[i] < floor:
            return (f"{text}: the weights, gradients and optimizer states alone ({STATE_BYTES_PER_PARAM} B x "
                    f"{model.total_params() / 1e9:,.1f}B parameters) need at least {floor} GPUs, this run has {lay.gpus[i]}")
        return f"{text}: try " + " or ".join(tips[:3])

    out = [Mask("memory", "hardware", mem <= usable, memory_msg, relative_excess(mem, usable))]

    domain = cluster.node.nvlink_domain
    if not limits.allow_cross_node_tp:
        out.append(
            Mask(
                "tp_in_nvlink_domain",
                "hardware",
                (lay.tp <= domain) & (domain % lay.tp == 0),
                lambda i: f"tp={lay.tp[i]} does not fit the {domain} GPUs of one NVLink domain "
                "(tp groups must tile it; allow with --allow-cross-node-tp)",
                relative_excess(lay.tp.astype(float), float(domain)),
            )
        )
    total = cluster.total_gpus
    out.append(
        Mask(
            "gpu_count",
            "hardware",
            lay.gpus <= total,
            lambda i: f"uses {lay.gpus[i]} GPUs but the cluster has {total}",
            relative_excess(lay.gpus.astype(float), float(total)),
        )
    )
    return out
