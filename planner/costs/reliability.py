"""Failure-aware goodput and time/energy to train.

Failures (exponential, independent per GPU): the job's mean time to interruption is
M = MTBF_gpu / gpus. Default MTBF_gpu = 50,700 h from Dubey et al. 2024 (Llama 3, Sec. 3.3.4:
419 unexpected interruptions in 54 days on 16,384 H100s -> M = 3.09 h).

Checkpoints: delta = checkpoint bytes per GPU / write bandwidth per GPU. Each GPU writes its share
of the weights and optimizer states (memory model), the replicas of a data-parallel group
splitting the copy they hold (Megatron's fully parallel distributed checkpoint); the bandwidth is
the storage's aggregate write bandwidth shared by the job's GPUs, at most a GPU's network link.

Interval (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3), Eq. 37): tau = sqrt(2 delta M) [1 + sqrt(delta/(2M))/3 + delta/(18 M)] - delta
for delta < 2M, else tau = M. Young (1974): tau = sqrt(2 delta M). First order (Daly):
tau = sqrt(2 delta M) - delta.

Effective training time ratio: Daly's expected wall clock for a solve time T_s is
T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau, so ETTR = T_s / T_w
= tau / (M e^(R/M) (e^((tau + delta)/M) - 1)), which to first order is
1 - delta/tau - (tau/2 + R)/M (checkpoint cost, lost work, restart).

Restart R = restart_s + P(no spare free) x node_replace_s. Nodes under repair when a failure hits
are Poisson with mean lambda = gpus / MTBF_gpu x repair time; a spare is free unless at least
`spares` nodes are already in repair: P = P(Poisson(lambda) >= spares). Spares are the spec's
`spare_nodes` plus the cluster nodes the job does not use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.layout.arrays import unique_rows
from planner.specs import ClusterSpec
from planner.units import GB, J_PER_KWH, KWH_PER_MWH, S_PER_DAY, S_PER_H, W_PER_KW
from planner.costs.energy import carbon_t
from planner.costs.memory import expert_data_parallel


@dataclass(frozen=True)
class Reliability:
    """Failure figures per layout (arrays)."""

    mtti_h: np.ndarray
    checkpoint_write_s: np.ndarray
    checkpoint_interval_s: np.ndarray
    restart_s: np.ndarray
    ettr: np.ndarray
    goodput_tokens_per_s: np.ndarray


@dataclass(frozen=True)
class TrainingTotals:
    """What training on the token budget takes per layout (arrays)."""

    train_days: np.ndarray
    train_gpu_hours: np.ndarray
    train_mwh: np.ndarray
    train_cost_usd: np.ndarray
    train_tco2e: np.ndarray


def job_mtti_s(gpu_mtbf_h, gpus):
    """Mean time to interruption of a job on `gpus` GPUs [s]."""
    return np.asarray(gpu_mtbf_h, dtype=float) * S_PER_H / np.asarray(gpus, dtype=float)


def young_interval_s(delta_s, mtti_s):
    """Young 1974: tau = sqrt(2 delta M) [s]."""
    return np.sqrt(2.0 * np.asarray(delta_s) * mtti_s)


def daly_first_order_interval_s(delta_s, mtti_s):
    """Daly 2006 first order: tau = sqrt(2 delta M) - delta [s]."""
    return np.sqrt(2.0 * np.asarray(delta_s) * mtti_s) - delta_s


def daly_interval_s(delta_s, mtti_s):
    """Daly 2006 higher order (Eq. 37): sqrt(2dM)(1 + sqrt(d/2M)/3 + d/(18M)) - d, or M if d >= 2M [s]."""
    d, m = np.broadcast_arrays(np.asarray(delta_s, dtype=float), np.asarray(mtti_s, dtype=float))
    x = d / (2.0 * m)
    tau = np.sqrt(2.0 * d * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - d
    return np.where(d < 2.0 * m, tau, m)


def ettr(tau_s, delta_s, mtti_s, restart_s):
    """Effective training time ratio from Daly's expected wall clock (module docstring), in [0, 1]."""
    tau, d, m, r = (np.asarray(a, dtype=float) for a in (tau_s, delta_s, mtti_s, restart_s))
    with np.errstate(over="ignore"):  # hopeless cases overflow to an infinite wall clock: ETTR 0
        wall_per_solve = m * np.exp(r / m) * np.expm1((tau + d) / m) / tau
    return np.clip(1.0 / wall_per_solve, 0.0, 1.0)


def ettr_first_order(tau_s, delta_s, mtti_s, restart_s):
    """1 - (delta/tau + (tau/2 + R)/M), bounded to [0, 1]."""
    return np.clip(1.0 - (np.asarray(delta_s) / tau_s + (np.asarray(tau_s) / 2.0 + restart_s) / mtti_s), 0.0, 1.0)


def p_no_spare(spares, mean_in_repair):
    """P(Poisson(mean_in_repair) >= spares): the chance a failure finds no free spare node."""
    spares = np.asarray(spares, dtype=np.int64)
    lam = np.broadcast_to(np.asarray(mean_in_repair, dtype=float), spares.shape)
    out = np.empty(spares.shape)
    for idx in np.ndindex(spares.shape):  # a handful of distinct values; cdf summed term by term
        k, mu = int(spares[idx]), float(lam[idx])
        term, cdf = math.exp(-mu), 0.0
        for j in range(min(k, 10_000)):
            cdf += term
            term *= mu / (j + 1)
        out[idx] = max(0.0, 1.0 - cdf)
    return out


def restart_time_s(cluster: ClusterSpec, gpus) -> np.ndarray:
    rel = cluster.reliability
    gpus = np.asarray(gpus, dtype=np.int64)
    used_nodes = -(-gpus // cluster.node.gpus)
    spares = rel.spare_nodes + np.maximum(cluster.nodes - used_nodes, 0)
    # The Poisson tail is a short loop per distinct (spares, gpus) pair (a search has one).
    first, inv = unique_rows([spares.ravel(), gpus.ravel()])
    p = p_no_spare(spares.ravel()[first], gpus.ravel()[first] / rel.gpu_mtbf_h * rel.node_repair_h)[inv]
    return rel.restart_s + p.reshape(gpus.shape) * rel.node_replace_s


def checkpoint_bytes_per_gpu(job) -> np.ndarray:
    """Weights and optimizer states each GPU writes [bytes]: every unique byte once over the ranks
    that hold a copy, whatever the ZeRO stage: dense parameters over dp x cp (context-parallel ranks
    hold the same weights: Megatron-Core's data-parallel group with cp), routed experts over their
    edp replicas (tp*cp*dp / (ep*etp)). 16-bit weights and the fp32 master weights and moments
    (Rajbhandari et al. 2020 Sec. 3.1); not gradients, not FP8 weight caches or weights ZeRO-3
    gathers for compute. The pipeline rank with the most parameters bounds the write."""
    layouts, prec = job.layouts, job.numerics
    dense, experts = job.params_most
    shard = dense / (layouts.dp * layouts.cp) + experts / expert_data_parallel(layouts)
    return shard * (prec.weight_bytes + prec.optimizer_state_bytes)


def checkpoint_write_s(cluster: ClusterSpec, nbytes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    per_gpu_gbps = np.minimum(cluster.reliability.storage_write_gbps / gpus, cluster.node.network_gbps)
    return nbytes / (per_gpu_gbps * GB)


def reliability(cluster: ClusterSpec, layouts, checkpoint_bytes: np.ndarray, tokens_per_s: np.ndarray) -> Reliability:
    """Per-layout failure figures (module docstring); `checkpoint_bytes`: checkpoint_bytes_per_gpu(job)."""
    gpus = layouts.gpus
    m = job_mtti_s(cluster.reliability.gpu_mtbf_h, gpus)
    delta = checkpoint_write_s(cluster, checkpoint_bytes, gpus)
    tau = daly_interval_s(delta, m)
    r = restart_time_s(cluster, gpus)
    ratio = ettr(tau, delta, m, r)
    return Reliability(mtti_h=m / S_PER_H, checkpoint_write_s=delta, checkpoint_interval_s=tau, restart_s=r,
                       ettr=ratio, goodput_tokens_per_s=tokens_per_s * ratio)


def batch_token_factor(batch_tokens, critical_batch_tokens):
    """McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", Eq. 2.11):
    E = E_min (1 + B / B_noise): tokens needed grow by 1 + B/B_crit with the batch."""
    if critical_batch_tokens is None:
        return 1.0
    return 1.0 + np.asarray(batch_tokens, dtype=float) / critical_batch_tokens


def time_to_train_s(tokens: float, tokens_per_s, token_factor=1.0) -> np.ndarray:
    """Wall time to train on `tokens` (x the statistical-efficiency factor) at a rate [s]; infinite at
    goodput 0 (ranked last; the outputs refuse it, naming the reliability fields: planner/results.py)."""
    with np.errstate(divide="ignore"):
        return tokens * np.asarray(token_factor) / np.asarray(tokens_per_s, dtype=float)


def training_totals(cluster: ClusterSpec, tokens: float, goodput_tokens_per_s, gpus, avg_power_kw,
                    token_factor=1.0) -> TrainingTotals:
    """Time and energy to train on `tokens` (x the statistical-efficiency factor) at the goodput.
    Energy is the step's average power over the whole wall clock (restarts counted at that power)."""
    wall_s = time_to_train_s(tokens, goodput_tokens_per_s, token_factor)
    gpu_hours = np.asarray(gpus) * wall_s / S_PER_H
    mwh = np.asarray(avg_power_kw) * W_PER_KW * wall_s / J_PER_KWH / KWH_PER_MWH
    price = cluster.pricing
    return TrainingTotals(
        train_days=wall_s / S_PER_DAY,
        train_gpu_hours=gpu_hours,
        train_mwh=mwh,
        train_cost_usd=gpu_hours * price.gpu_hour_usd + mwh * KWH_PER_MWH * price.electricity_usd_per_kwh,
        train_tco2e=carbon_t(mwh, cluster.power.grid_gco2_per_kwh),
    )
