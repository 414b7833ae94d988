"""Typed, frozen specs of the hardware and the training job.

Every field carries its unit in its name (`memory_gib`, `nvlink_gbps`, `tdp_w`). Specs are validated
once, at load time (`planner.loading`); cost code trusts them. Bandwidths are GB/s (1e9 bytes/s)
per GPU per direction; memory sizes are GiB (2**30 bytes); compute is dense TFLOP/s (1e12).
"""
from __future__ import annotations

import re
from typing import Annotated, Literal

import numpy as np

from pydantic import BaseModel, Strict, ValidationError, ConfigDict, Field, field_validator, model_validator

from .layers import LayerKind, attention_matrices, layer_kinds, layer_norm_params, mlp_matrices
from .precision import PRECISIONS, Precision, precision
from .errors import SpecError, shown
from .shipped import DEFAULT_STACK, stack_file, stack_loaded, unknown_stack_message
from .units import GB, TERA, US

# Upper bounds reject absurd values (a typo of a few orders of magnitude), not future hardware.
# Lower bounds reject values no real hardware has, which would make search rank layouts of 1e300 s:
# rates >= MIN_TFLOPS TFLOP/s and MIN_GBPS GB/s, memory >= MIN_GIB GiB, efficiencies and
# power-cap fractions >= MIN_FRACTION, powers >= MIN_W W, a GPU's MTBF >= 1 h.
MIN_TFLOPS = 0.01  # 10 GFLOP/s: below any GPU's tensor or vector peak
MIN_GBPS = 0.01  # 10 MB/s (80 Mb/s): below any NIC, link or memory
MIN_GIB = 0.1
MIN_FRACTION = 0.01
MIN_W = 1.0
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class _Spec(BaseModel):
    model_config = _STRICT


class PeakTflops(_Spec):
    """Peak dense tensor-core throughput per precision [TFLOP/s]."""

    bf16: float = Field(ge=MIN_TFLOPS, le=1e5)
    fp16: float = Field(ge=MIN_TFLOPS, le=1e5)
    fp8: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5, description="FP8 with per-tensor scaling (Hopper, Blackwell)")
    mxfp8: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5, description="MXFP8: FP8 with a scale per 32 values (Blackwell, MI355X)")
    tf32: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5)


class Efficiency(_Spec):
    """What the hardware reaches, fitted once per GPU type over every stack's measurements
    (benchmarks/calibrate.py). What the software does (overheads, overlap, kernel fusion) is in
    the stack profile (`StackSpec`, configs/stacks/).

    They are data, not code: each is the fraction of a datasheet peak that real kernels reach,
    or a fixed latency.
    """

    gemm: float = Field(ge=MIN_FRACTION, le=1, description="fraction of peak TFLOP/s that large, wave-aligned GEMMs reach")
    gemm_fp8: float | None = Field(default=None, ge=MIN_FRACTION, le=1, description=(
        "fraction of the FP8 (and MXFP8) peak that large GEMMs reach (None: `gemm`)"))
    gemm_half_gflop: float = Field(default=0.0, ge=0, le=1e6, description=(
        "GEMM work at which a GEMM reaches half of `gemm` [GFLOP] (saturating curve; 0: off)"))
    hbm: float = Field(ge=MIN_FRACTION, le=1, description="fraction of HBM bandwidth memory-bound kernels reach")
    flash_attention: float = Field(ge=MIN_FRACTION, le=1, description="fraction of peak the fused attention kernel reaches (forward, head dim 128)")
    flash_half_seq: float = Field(default=0.0, ge=0, le=1e7, description=(
        "sequence length at which fused attention reaches half its long-sequence rate (0: no dependence)"))
    flash_half_head_dim: float = Field(default=0.0, ge=0, le=1e4, description=(
        "head dim at which fused attention reaches half its large-head-dim rate (0: no dependence)"))
    nvlink: float = Field(ge=MIN_FRACTION, le=1, description="NCCL bus bandwidth / link bandwidth inside a node")
    network: float = Field(ge=MIN_FRACTION, le=1, description="NCCL bus bandwidth / link bandwidth between nodes")
    latency_us: float = Field(ge=0, le=1e4, description="per-step latency of a collective or a p2p send inside a node [us]")
    network_latency_us: float | None = Field(default=None, ge=0, le=1e4, description=(
        "per-step latency of a collective step between nodes [us] (default: latency_us)"))
    message_half_mb: float = Field(default=0.0, ge=0, le=1e4, description="message size at which NCCL reaches half its bus bandwidth [MB]")

    @property
    def latency_s(self) -> float:
        return self.latency_us * US

    @property
    def network_latency_s(self) -> float:
        return (self.latency_us if self.network_latency_us is None else self.network_latency_us) * US


class GpuPower(_Spec):
    """Power drawn by one GPU in each state [W]; defaults are fractions of TDP unless given."""

    busy_w: float | None = Field(default=None, ge=MIN_W, le=1e5)
    comm_w: float | None = Field(default=None, ge=MIN_W, le=1e5)
    full_power_compute_fraction: float | None = Field(
        default=None, gt=0, le=1,
        description="achieved fraction of peak FLOP/s at which a computing GPU draws busy_w; below it busy "
        "power falls linearly toward comm_w (None: busy_w at any rate, the default)")


class PowerCap(_Spec):
    """One power-cap level of a GPU: the cap, the tensor-core speed and the busy power it leaves."""

    cap_w: float = Field(ge=MIN_W, le=1e5, description="power limit set with nvidia-smi -pl [W]")
    speed: float = Field(ge=MIN_FRACTION, le=1, description="tensor-core (SM clock) throughput relative to the uncapped GPU")
    power: float = Field(ge=MIN_FRACTION, le=1, description="busy power relative to the uncapped busy power")


class GpuSpec(_Spec):
    name: str = Field(min_length=1, max_length=128)
    memory_gib: float = Field(ge=MIN_GIB, le=4096)
    peak_tflops: PeakTflops
    hbm_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="HBM bandwidth [GB/s]")
    tdp_w: float = Field(ge=MIN_W, le=1e5)
    idle_w: float = Field(ge=MIN_W, le=1e5)
    memory_reserve_gib: float = Field(default=2.0, ge=0, le=4096, description="CUDA context, NCCL buffers, allocator fragmentation")
    sms: int | None = Field(default=None, gt=0, le=100_000, description=(
        "streaming multiprocessors: GEMM tiles run in waves of this many (None: no wave quantisation)"))
    gemm_tiles: tuple[Annotated[tuple[Annotated[int, Field(gt=0, le=4096)], Annotated[int, Field(gt=0, le=4096)]],
                                Strict(False)], ...] = Field(
        default=((128, 256), (256, 128), (128, 128), (64, 128)), strict=False, min_length=1, max_length=16,
        description="output tiles (rows, columns) the GEMM library chooses among; the one wasting least is used")
    efficiency: Efficiency
    power: GpuPower = GpuPower()
    power_caps: tuple[PowerCap, ...] = Field(
        default=(), strict=False, max_length=32,
        description="power-cap levels the search may choose (planner/costs/power_caps.py); levels at or above "
        "tdp_w are the uncapped GPU; empty: uncapped only")

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> "GpuSpec":
        if self.idle_w >= self.tdp_w:
            raise ValueError(f"idle_w ({self.idle_w:g}) must be below tdp_w ({self.tdp_w:g})")
        if self.memory_reserve_gib >= self.memory_gib:
            raise ValueError("memory_reserve_gib must be below memory_gib")
        caps = sorted(self.power_caps, key=lambda c: c.cap_w)
        for lo, hi in zip(caps, caps[1:]):
            if lo.cap_w == hi.cap_w or lo.speed > hi.speed or lo.power > hi.power:
                raise ValueError("power_caps: a lower cap_w must have a distinct cap, no higher speed and no higher power")
        return self

    @property
    def busy_w(self) -> float:
        return self.power.busy_w or self.tdp_w

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * GB

    def peak_flops(self, peak: str) -> float:
        """Dense FLOP/s of the `peak_tflops` field `peak` (bf16, fp16, fp8, tf32)."""
        return getattr(self.peak_tflops, peak) * TERA

    @property
    def comm_w(self) -> float:
        # Communicating GPUs draw well under TDP: tensor cores idle, HBM and NVLink busy.
        return self.power.comm_w or self.idle_w + 0.4 * (self.tdp_w - self.idle_w)


class NodeSpec(_Spec):
    gpus: int = Field(gt=0, le=1024)
    nvlink_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="GB/s per GPU per direction inside the node")
    network_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="GB/s per GPU per direction between nodes")
    nvlink_domain_gpus: int | None = Field(default=None, gt=0, le=1_000_000, description="GPUs reachable over NVLink (default: the node)")

    @property
    def nvlink_domain(self) -> int:
        return self.nvlink_domain_gpus or self.gpus


class NetworkSpec(_Spec):
    """The scale-out fabric between NVLink domains (planner/costs/comm.py). Defaults: a non-blocking,
    rail-optimised fat tree of 64-port switches (NVIDIA DGX SuperPOD reference architecture)."""

    oversubscription: float = Field(default=1.0, ge=1, le=64, description=(
        "downlink/uplink ratio above the leaf switches: traffic that leaves a leaf gets 1/x of the bandwidth"))
    switch_radix: int = Field(default=64, ge=4, le=4096, description="ports per switch (Quantum-2 NDR: 64)")
    switch_latency_us: float = Field(default=0.13, ge=0, le=1000, description="latency of one switch hop [us]")
    rail_optimized: bool = Field(default=True, description=(
        "GPU i of every node on the same leaf (rail): a leaf reaches radix/2 nodes, not radix/2 / gpus-per-node"))


class PowerSpec(_Spec):
    pue: float = Field(default=1.1, gt=0, le=10, description="power usage effectiveness of the data centre")
    node_overhead_w: float = Field(default=3300.0, ge=0, le=1e6, description="non-GPU power per node [W]")
    grid_gco2_per_kwh: float = Field(
        default=429.0, ge=0, le=5000,
        description="grid carbon intensity [gCO2e/kWh] (default: the US average Patterson et al. 2021 used for GPT-3)")


class ReliabilitySpec(_Spec):
    """Failures, restarts and checkpoints (planner/costs/reliability.py).

    Default MTBF from Dubey et al. 2024 (Llama 3), Sec. 3.3.4: 419 unexpected interruptions in 54 days
    on 16,384 H100s, i.e. a job MTTI of 54 x 24 / 419 = 3.09 h and a per-GPU MTBF of
    3.09 h x 16,384 = 50,700 h (all causes, counted per GPU). Restart and replacement times are
    illustrative; replace them with the cluster's own figures.
    """

    gpu_mtbf_h: float = Field(default=50_700.0, ge=1, le=1e9, description="mean time between failures of one GPU (all causes) [h]")
    restart_s: float = Field(default=600.0, ge=0, le=1e6, description="relaunch, NCCL init and checkpoint load after a failure [s]")
    node_replace_s: float = Field(default=1800.0, ge=0, le=1e7, description="extra wait for a replacement node when no spare is free [s]")
    node_repair_h: float = Field(default=24.0, gt=0, le=1e5, description="time a failed node is out of service [h]")
    spare_nodes: int = Field(default=0, ge=0, le=1_000_000, description="hot spare nodes beyond the cluster's `nodes`")
    storage_write_gbps: float = Field(default=1000.0, ge=MIN_GBPS, le=1e9, description="aggregate checkpoint write bandwidth of the storage [GB/s]")


class PricingSpec(_Spec):
    """Prices for `--objective cost` (defaults: typical cloud on-demand A100/H100 rates, 2024)."""

    gpu_hour_usd: float = Field(default=2.0, ge=0, le=1e4)
    electricity_usd_per_kwh: float = Field(default=0.10, ge=0, le=100)


class PoolSpec(_Spec):
    """One pool of identical nodes in a mixed cluster (planner/pools.py places pipeline stages on pools)."""

    name: str = Field(min_length=1, max_length=128, description="unique among the cluster's pools")
    gpu: GpuSpec = Field(description="a shipped GPU preset name (resolved by the loader), or a mapping with the preset's fields")
    nodes: int = Field(gt=0, le=1_000_000)
    node: NodeSpec


    @property
    def total_gpus(self) -> int:
        return self.nodes * self.node.gpus


_POOL_DERIVED = ("gpu", "nodes", "node")


class ClusterSpec(_Spec):
    name: str = Field(min_length=1, max_length=128)
    gpu: GpuSpec = Field(description="with `pools:`: the first pool's (omit it, or give the same)")
    nodes: int = Field(gt=0, le=1_000_000, description="with `pools:`: the first pool's (omit it, or give the same)")
    node: NodeSpec = Field(description="with `pools:`: the first pool's (omit it, or give the same)")
    pools: tuple[PoolSpec, ...] | None = Field(default=None, strict=False, min_length=1, max_length=64, description=(
        "mixed GPU pools (planner/pools.py): a job runs in one pool or places its pipeline stages on "
        "several. `gpu`, `nodes` and `node` then describe the first pool, which every single-pool "
        "command (search, estimate) plans for"))
    inter_pool_gbps: float | None = Field(default=None, ge=MIN_GBPS, le=1e5, description=(
        "GB/s per GPU per direction between two pools (default: the slowest pool's network_gbps: a "
        "send between pools leaves through one NIC and enters through another, and the slower bounds it)"))
    network: NetworkSpec = NetworkSpec()
    power: PowerSpec = PowerSpec()
    pricing: PricingSpec = PricingSpec()
    reliability: ReliabilitySpec = ReliabilitySpec()

    @model_validator(mode="before")
    @classmethod
    def _first_pool_fills_in(cls, data):
        """With `pools:`, an omitted `gpu`, `nodes` or `node` is the first pool's."""
        if not isinstance(data, dict) or not isinstance(data.get("pools"), (list, tuple)) or not data["pools"]:
            return data
        first = data["pools"][0]
        data = dict(data)
        for key in _POOL_DERIVED:
            if key in data:
                continue
            if isinstance(first, PoolSpec):
                data[key] = getattr(first, key)
            elif isinstance(first, dict) and key in first:
                data[key] = first[key]
        return data

    @model_validator(mode="after")
    def _pools_consistent(self) -> "ClusterSpec":
        if self.pools is None:
            if self.inter_pool_gbps is not None:
                raise ValueError("inter_pool_gbps needs pools: (a cluster of one pool has no link between pools)")
            return self
        names = [p.name for p in self.pools]
        seen = sorted({n for n in names if names.count(n) > 1})
        if seen:
            raise ValueError(f"pools has the name {seen[0]!r} more than once (each pool needs its own name)")
        first = self.pools[0]
        for key in _POOL_DERIVED:
            if getattr(self, key) != getattr(first, key):
                raise ValueError(f"{key} differs from the first pool's ({first.name!r}): with pools:, omit "
                                 f"{key} or give the first pool's")
        return self

    @property
    def total_gpus(self) -> int:
        """GPUs of the first pool (of the cluster when it has one pool): what single-pool commands use."""
        return self.nodes * self.node.gpus

    @property
    def pool_names(self) -> tuple[str, ...]:
        """The pools' names; a cluster without `pools:` is one pool named after the cluster."""
        return tuple(p.name for p in self.pools) if self.pools else (self.name,)

    @property
    def inter_pool_bandwidth_gbps(self) -> float:
        """GB/s per GPU per direction between pools (`inter_pool_gbps`, or its default)."""
        if self.inter_pool_gbps is not None:
            return self.inter_pool_gbps
        return min(p.node.network_gbps for p in self.pools) if self.pools else self.node.network_gbps

    def pool_cluster(self, name: str) -> "ClusterSpec":
        """A single-pool view: this cluster's network, power, pricing and reliability with pool `name`'s
        GPU, nodes and node."""
        if not self.pools:
            if name != self.name:
                raise ValueError(f"unknown pool {name!r}: the cluster has one pool, {self.name!r}")
            return self
        pool = next((p for p in self.pools if p.name == name), None)
        if pool is None:
            raise ValueError(f"unknown pool {name!r}; the pools are: {', '.join(self.pool_names)}")
        return self.model_copy(update=dict(name=f"{self.name}/{pool.name}", gpu=pool.gpu, nodes=pool.nodes,
                                           node=pool.node, pools=None, inter_pool_gbps=None))


class StackConstants(_Spec):
    """What a software stack does, as constants (planner/costs): per-GPU fitted values override
    the profile's own (`StackSpec.gpus`)."""

    layer_overhead_us: float = Field(ge=0, le=1e5, description="fixed time per transformer layer forward (launches, small ops) [us]")
    layer_launch_us: float = Field(default=0.0, ge=0, le=1e5, description=(
        "host time to launch one layer's forward kernels [us]: a layer's compute never takes less "
        "(small layers are launch-bound; backward launches twice as many)"))
    microbatch_overhead_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "fixed time per micro-batch per model chunk on a pipeline rank (schedule, p2p setup, hooks) [us]"))
    step_overhead_s: float = Field(ge=0, le=100, description="fixed time per optimizer step (data loading, grad norm, logging) [s]")
    elementwise_backward_factor: float = Field(default=1.0, gt=0, le=10, description="backward/forward ratio of memory-bound traffic (kernel fusion)")
    loss_fp32_passes: float = Field(default=3.0, gt=0, le=100, description=(
        "passes over the fp32 logits in the loss forward (read or write, each s x b x vocab / tp); the backward as many again"))
    tp_overlap_exposed: float = Field(default=1.0, ge=0, le=1, description="fraction of TP communication left exposed when tp_comm_overlap is on")
    dp_overlap_exposed: float = Field(default=0.1, ge=0, le=1, description="fraction of overlappable DP communication that stays exposed")
    optimizer_step_factor: float = Field(default=1.0, gt=0, le=100, description=(
        "optimizer-step HBM traffic relative to one fused Adam pass (unfused multi-tensor kernels: >1)"))
    zero3_unit_overhead_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "fixed time per ZeRO-3 gathering unit per pass (hooks, allocation, stream sync) [us]"))
    moe_sync_us: float = Field(default=0.0, ge=0, le=1e6, description=(
        "GPU idle per forward of a dropless MoE layer [us]: the dispatcher reads the tokens per expert "
        "on the host (a blocking sync) before it can size and launch the rest of the layer"))

    @property
    def layer_overhead_s(self) -> float:
        return self.layer_overhead_us * US

    @property
    def microbatch_overhead_s(self) -> float:
        return self.microbatch_overhead_us * US


class StackGpuConstants(_Spec):
    """Constants of one stack fitted on one GPU type, and the sources they were fitted on."""

    fitted_on: tuple[str, ...] = Field(default=(), strict=False, max_length=64)
    error_cases: tuple[Annotated[tuple[Annotated[float, Field(ge=1)], Annotated[float, Field(gt=0)],
                                      Annotated[float, Field(ge=0, le=1000)]], Strict(False)], ...] = Field(default=(), strict=False, max_length=100_000, description=(
        "calibration runs measured on this GPU: (GPUs, parameters [billions], leave-one-source-out "
        "|error| [%]), for the error bands (planner/error_bands.py)"))
    layer_overhead_us: float | None = Field(default=None, ge=0, le=1e5)
    layer_launch_us: float | None = Field(default=None, ge=0, le=1e5)
    microbatch_overhead_us: float | None = Field(default=None, ge=0, le=1e6)
    step_overhead_s: float | None = Field(default=None, ge=0, le=100)
    elementwise_backward_factor: float | None = Field(default=None, gt=0, le=10)
    loss_fp32_passes: float | None = Field(default=None, gt=0, le=100)
    tp_overlap_exposed: float | None = Field(default=None, ge=0, le=1)
    dp_overlap_exposed: float | None = Field(default=None, ge=0, le=1)
    optimizer_step_factor: float | None = Field(default=None, gt=0, le=100)
    zero3_unit_overhead_us: float | None = Field(default=None, ge=0, le=1e6)
    moe_sync_us: float | None = Field(default=None, ge=0, le=1e6)


class StackSpec(StackConstants):
    """A software-stack profile (configs/stacks/*.yaml): the kernels it runs, what it overlaps and how
    well, its fixed overheads and how ZeRO-3/FSDP gathers parameters. The GPU preset keeps what the
    hardware does."""

    name: str = Field(min_length=1, max_length=128)
    description: str = Field(default="", max_length=2000)
    attention: Literal["flash", "standard"] = "flash"
    tp_comm_overlap: bool = False
    dp_comm_overlap: bool = True
    cp_comm: Literal["p2p", "all_gather"] = Field(default="p2p", description=(
        "context-parallel K/V exchange (Megatron --cp-comm-type): a ring overlapped with attention, or an all-gather"))
    zero3_gather: Literal["layer", "module"] = Field(default="layer", description=(
        "ZeRO-3 gathering unit: a whole transformer layer (FSDP wrapping per block) or one weight "
        "matrix at a time (DeepSpeed stage-3 hooks per submodule)"))
    zero3_units_in_flight: int = Field(default=2, ge=1, le=64, description=(
        "gathered units held at once (the one at work and the prefetched ones)"))
    zero3_prefetch_params: float = Field(default=0.0, ge=0, le=1e12, description=(
        "parameters prefetched beyond the units in flight (DeepSpeed stage3_prefetch_bucket_size)"))
    zero3_reduce_bucket_params: float = Field(default=0.0, ge=0, le=1e12, description=(
        "gradient elements bucketed before a reduce-scatter (DeepSpeed reduce_bucket_size; 0: one unit)"))
    carried_over_error_pct: float = Field(default=25.0, ge=0, le=1000, description=(
        "expected |error| where this stack was never calibrated on any GPU [%] (benchmarks/calibrate.py "
        "measures it: sources predicted with constants carried over from other stacks)"))
    gpus: dict[str, StackGpuConstants] = Field(default_factory=dict, description=(
        "constants fitted on a GPU type (benchmarks/calibrate.py); other GPUs carry the profile's over"))

    def for_gpu(self, gpu_name: str) -> StackConstants:
        """The constants on `gpu_name`: the fitted ones where this GPU was calibrated."""
        fitted = self.gpus.get(gpu_name)
        base = {k: getattr(self, k) for k in StackConstants.model_fields}
        if fitted is not None:
            base.update({k: v for k, v in fitted.model_dump().items() if k in base and v is not None})
        return StackConstants(**base)


# A shipped name (GPU preset, stack profile): a file name in configs/<kind>/ without `.yaml`, never
# a path, so that `gpu: ../models/x` or `stack: /etc/x` cannot read another file as a preset.
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def is_plain_name(name: object) -> bool:
    return isinstance(name, str) and PLAIN_NAME.fullmatch(name) is not None and ".." not in name


def _stack_profile(value):
    """A stack named by a shipped profile becomes that profile; a mapping is an inline profile.
    A broken shipped profile is reported against its own file (a SpecError passes through
    pydantic unchanged)."""
    if not isinstance(value, str):
        return value
    if not is_plain_name(value):
        raise ValueError(f"software stack {shown(value)} is not a shipped profile name (a plain name of at most "
                         "128 characters, not a path); give your own profile as a mapping")
    if stack_file(value) is None:
        raise ValueError(unknown_stack_message(value))
    data, loaded = stack_loaded(value)
    try:
        return StackSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        raise SpecError(f"stack profile '{value}': {err['msg']}", file=loaded.file, line=loaded.line_of(loc),
                        path=".".join(map(str, loc)) or None) from None


class TrainingSpec(_Spec):
    global_batch: int = Field(gt=0, le=100_000_000, description="sequences per optimizer step")
    precision: Literal[tuple(PRECISIONS)] = "bf16"  # type: ignore[valid-type]  # planner/precision.py
    stack: StackSpec = Field(default=DEFAULT_STACK, validate_default=True, description=(
        "software stack: a shipped profile (configs/stacks/) by name, or a profile mapping"))
    attention: Literal["flash", "standard"] = Field(
        default=None, validate_default=False,
        description="override of the stack's: flash: fused attention (no s^2 activations); standard: Megatron 2022 softmax path"
    )
    tp_comm_overlap: bool = Field(default=None, validate_default=False, description=(
        "override of the stack's: TP collectives overlapped with GEMMs (Transformer Engine userbuffers)"))
    dp_comm_overlap: bool = Field(default=None, validate_default=False, description=(
        "override of the stack's: gradient reduce-scatter / all-reduce overlapped with backward"))
    tokens: float | None = Field(default=None, gt=0, le=1e16, description="token budget of the whole run")
    fp8_param_gather: bool = Field(default=False, description=(
        "FP8 parameters, gathered in FP8 by the distributed optimizer (Megatron --fp8-param-gather; fp8/mxfp8 only)"))
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(default="fp32", description=(
        "main-grad buffer and data-parallel gradient reduce: fp32 (4 B per parameter) or bf16 (2 B; "
        "Megatron --grad-reduce-in-bf16, Megatron-Core DDP grad_reduce_in_fp32=False)"))
    moe_dispatcher: Literal["alltoall", "flex"] = Field(default="alltoall", description=(
        "MoE token dispatcher: alltoall (every routed copy to another NVLink domain crosses the network) or "
        "flex (DeepEP/HybridEP: a token crosses once per remote domain, then NVLink; "
        "Megatron --moe-token-dispatcher-type flex)"))
    moe_a2a_overlap: bool = Field(default=False, description=(
        "MoE dispatch/combine overlapped with another micro-batch's compute (combined 1F1B; Megatron "
        "--overlap-moe-expert-parallel-comm --delay-wgrad-compute)"))
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = Field(
        default="none", description=(
            "CUDA graphs (Megatron --cuda-graph-impl): full_iteration replays the whole step, MoE dispatch "
            "with static per-rank shapes (--moe-expert-rank-capacity-factor): no host launch floor and no "
            "host sync per dropless MoE layer; local and transformer_engine graph parts of a layer, priced "
            "as none (dropless MoE dispatch outside them still syncs)"))
    te_op_fuser: bool = Field(default=False, description=(
        "MoE expert MLP through Transformer Engine's op fuser (Megatron --use-transformer-engine-op-fuser, "
        "Megatron-Bridge cutedsl_fused_grouped_mlp): a clamped GLU and the experts' output biases fused "
        "into the grouped GEMMs; off: they run as separate PyTorch ops"))

    _stack_name = field_validator("stack", mode="before")(_stack_profile)

    @property
    def numerics(self) -> Precision:
        """Bytes per value and peaks of this run's precision (planner/precision.py)."""
        return precision(self.precision, self.fp8_param_gather, self.grad_reduce_dtype)

    @model_validator(mode="after")
    def _stack_defaults(self) -> "TrainingSpec":
        if self.fp8_param_gather and self.precision not in ("fp8", "mxfp8"):
            raise ValueError(f"fp8_param_gather needs precision fp8 or mxfp8, not {self.precision}")
        # Unset overrides take the stack's choice (frozen model: set once, here).
        for key in ("attention", "tp_comm_overlap", "dp_comm_overlap"):
            if getattr(self, key) is None:
                object.__setattr__(self, key, getattr(self.stack, key))
        return self


class MoeSpec(_Spec):
    """Mixture-of-experts MLPs (Megatron-Core's --num-experts, --moe-router-topk, --moe-ffn-hidden-size,
    --moe-shared-expert-intermediate-size, --moe-layer-freq)."""

    experts: int = Field(gt=0, le=1_000_000, description="routed experts per MoE layer")
    top_k: int = Field(gt=0, le=1_000_000, description="routed experts each token goes to")
    expert_ffn_hidden: int = Field(gt=0, le=10_000_000, description="FFN width of one routed expert")
    shared_experts: int = Field(default=0, ge=0, le=1024, description="experts every token goes to")
    shared_expert_ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000, description=(
        "FFN width of one shared expert (default: expert_ffn_hidden)"))
    dense_layers: int = Field(default=0, ge=0, le=10_000, description="the first k layers are dense")
    layer_every: int = Field(default=1, gt=0, le=10_000, description="after those, every n-th layer is MoE")
    capacity_factor: float | None = Field(default=None, gt=0, le=1000, description=(
        "tokens an expert takes, relative to an even share (null: dropless)"))
    load_imbalance: float = Field(default=1.0, ge=1, le=1000, description=(
        "busiest expert rank's tokens / the mean (1.0: force-balanced benchmarks; real routing is above)"))

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoeSpec":
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most experts ({self.experts})")
        return self

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden or self.expert_ffn_hidden


class MlaSpec(_Spec):
    """Multi-head latent attention (DeepSeek-V2 Sec. 2.1, DeepSeek-V3): queries and keys/values
    projected down to low-rank latents and back up per head; a decoupled RoPE part."""

    q_lora_rank: int | None = Field(gt=0, le=1_000_000, description="query latent rank (null: no query compression)")
    kv_lora_rank: int = Field(gt=0, le=1_000_000)
    qk_nope_head_dim: int = Field(gt=0, le=100_000)
    qk_rope_head_dim: int = Field(gt=0, le=100_000)
    v_head_dim: int = Field(gt=0, le=100_000)


class ModelSpec(_Spec):
    name: str = Field(min_length=1, max_length=128)
    layers: int = Field(gt=0, le=10_000)
    hidden: int = Field(gt=0, le=1_000_000)
    heads: int = Field(gt=0, le=100_000)
    kv_heads: int | None = Field(default=None, gt=0, le=100_000)
    head_dim: int | None = Field(default=None, gt=0, le=100_000, description="width of one head (default: hidden / heads)")
    ffn_hidden: int | None = Field(default=None, gt=0, le=10_000_000)
    ffn_act: Literal["gelu", "swiglu"] = "gelu"
    vocab: int = Field(gt=0, le=100_000_000)
    seq_len: int = Field(gt=0, le=100_000_000)
    tied_embeddings: bool = False
    position_embedding: Literal["learned", "rope"] = "learned"
    sliding_window: int | None = Field(default=None, gt=0, le=100_000_000, description=(
        "sliding-window (local) attention: keys each query attends to, itself included (HF sliding_window; "
        "Megatron --window-size w-1,0); null: full causal attention on every layer"))
    full_attention_every: int | None = Field(default=None, ge=2, le=10_000, description=(
        "with sliding_window: every n-th layer keeps full attention, the others use the window (Megatron "
        "--window-attn-skip-freq, HF Gemma 3 sliding_window_pattern; GPT-OSS and Gemma 2: 2, Gemma 3: 6); "
        "null: every layer uses the window"))
    swiglu_limit: float | None = Field(default=None, gt=0, le=1e6, description=(
        "clamp of a SwiGLU's gate (above) and linear half (both sides) before the activation (HF "
        "swiglu_limit, Megatron --activation-func-clamp-value; GPT-OSS: 7.0); null: no clamp"))
    linear_bias: bool | None = Field(default=None, description=(
        "biases on every linear layer, the experts' too (Megatron's default add_bias_linear; GPT-OSS: "
        "true); false: none (Megatron --disable-bias-linear); null: not stated, as the parameter count "
        "has them (QKV and output biases, GeLU MLPs with biases, SwiGLU MLPs and experts without)"))
    rope_mscale: float = Field(default=1.0, gt=0, le=100, description=(
        "factor YaRN puts on RoPE's cos and sin (GPT-OSS: 0.1 ln 32 + 1 = 1.347; DeepSeek-V3: 1, its "
        "mscale and mscale_all_dim cancel); Megatron's fused RoPE takes only 1"))
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    training: TrainingSpec

    @model_validator(mode="after")
    def _shapes_divide(self) -> "ModelSpec":
        if self.head_dim is None and self.mla is None and self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden}), or give head_dim")
        if self.moe is not None and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) is more than the {self.layers} layers")
        if self.num_kv_heads > self.heads or self.heads % self.num_kv_heads:
            raise ValueError(f"kv_heads ({self.num_kv_heads}) must divide heads ({self.heads})")
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError("full_attention_every needs sliding_window (the window of the other layers)")
        if self.full_attention_every is not None and self.full_attention_every > self.layers:
            raise ValueError(f"full_attention_every ({self.full_attention_every}) is more than the {self.layers} "
                             "layers: no layer would keep full attention (leave it out to window every layer)")
        t = self.training
        if self.moe is None:
            given = [k for k, on in (("moe_dispatcher", t.moe_dispatcher != "alltoall"), ("moe_a2a_overlap", t.moe_a2a_overlap),
                                     ("te_op_fuser", t.te_op_fuser)) if on]
            if given:
                raise ValueError(f"training.{', training.'.join(given)} need a moe: section (a MoE model)")
            if self.swiglu_limit is not None:
                raise ValueError("swiglu_limit needs a moe: section: Megatron clamps the GLU of expert MLPs only")
        if self.swiglu_limit is not None and self.ffn_act != "swiglu":
            raise ValueError(f"swiglu_limit clamps a SwiGLU; ffn_act is {self.ffn_act}")
        return self

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads * head_dim."""
        return self.num_kv_heads * self.head_width

    @property
    def moe_layers(self) -> int:
        """MoE layers: after the first `dense_layers`, every `layer_every`-th (Megatron --moe-layer-freq)."""
        return 0 if self.moe is None else (self.layers - self.moe.dense_layers) // self.moe.layer_every

    def moe_layers_before(self, n):
        """MoE layers among the first n (n an int or an array): layer i >= k is MoE when
        (i - k + 1) % layer_every == 0 (Llama 4 Maverick: every second layer)."""
        if self.moe is None:
            return np.zeros_like(np.asarray(n))
        return np.maximum(np.asarray(n) - self.moe.dense_layers, 0) // self.moe.layer_every

    def layer_params(self) -> int:
        """Parameters of one dense transformer layer, biases and layer norms included (planner/layers.py)."""
        return LayerKind("dense", 1, attention_matrices(self) + mlp_matrices(self, self.ffn), norm_params=layer_norm_params(self)).params

    def embedding_params(self) -> int:
        pos = self.seq_len * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + pos

    def output_params(self) -> int:
        """Output projection (logits) weights; zero when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def total_params(self) -> int:
        layers = sum(k.count * k.params for k in layer_kinds(self))
        return layers + self.embedding_params() + self.output_params() + 2 * self.hidden

    def active_params(self) -> int:
        """Parameters one token passes through (top_k routed experts of each MoE layer)."""
        layers = sum(k.count * k.active_params for k in layer_kinds(self))
        return layers + self.embedding_params() + self.output_params() + 2 * self.hidden
