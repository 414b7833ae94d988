"""Hardware specs: the GPU (peaks, efficiencies, power, caps), node, network, power, reliability,
pricing, pools and the cluster. Bandwidths are GB/s per GPU per direction; memory GiB; compute dense TFLOP/s."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict, model_validator

from planner.specs.base import MIN_FRACTION, MIN_GBPS, MIN_GIB, MIN_TFLOPS, MIN_W, Spec
from planner.units import GB, TERA, US


class PeakTflops(Spec):
    """Peak dense tensor-core throughput per precision [TFLOP/s]."""

    bf16: float = Field(ge=MIN_TFLOPS, le=1e5)
    fp16: float = Field(ge=MIN_TFLOPS, le=1e5)
    fp8: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5, description="FP8 with per-tensor scaling (Hopper, Blackwell)")
    mxfp8: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5, description="MXFP8: FP8 with a scale per 32 values (Blackwell, MI355X)")
    nvfp4: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5, description=(
        "NVFP4: E2M1 with an E4M3 scale per 16 values (Blackwell; Hopper and Ampere have no FP4 tensor cores)"))
    tf32: float | None = Field(default=None, ge=MIN_TFLOPS, le=1e5)


class Efficiency(Spec):
    """What the hardware reaches, fitted once per GPU type over every stack's measurements
    (benchmarks/calibrate.py). What the software does (overheads, overlap, kernel fusion) is in
    the stack profile (`StackSpec`, configs/stacks/).

    They are data, not code: each is the fraction of a datasheet peak that real kernels reach,
    or a fixed latency.
    """

    gemm: float = Field(ge=MIN_FRACTION, le=1, description="fraction of peak TFLOP/s that large, wave-aligned GEMMs reach")
    gemm_fp8: float | None = Field(default=None, ge=MIN_FRACTION, le=1, description=(
        "fraction of the FP8 (and MXFP8) peak that large GEMMs reach (None: `gemm`)"))
    gemm_fp4: float | None = Field(default=None, ge=MIN_FRACTION, le=1, description=(
        "fraction of the NVFP4 peak that large GEMMs reach (None: `gemm_fp8`, else `gemm`)"))
    gemm_half_gflop: float = Field(default=0.0, ge=0, le=1e6, description=(
        "GEMM work at which a GEMM reaches half of `gemm` [GFLOP] (saturating curve; 0: off)"))
    hbm: float = Field(ge=MIN_FRACTION, le=1, description="fraction of HBM bandwidth memory-bound kernels reach")
    flash_attention: float = Field(ge=MIN_FRACTION, le=1, description="fraction of peak the fused attention kernel reaches (forward, head dim 128)")
    flash_half_seq: float = Field(default=0.0, ge=0, le=1e7, description=(
        "sequence length at which fused attention reaches half its long-sequence rate (0: no dependence)"))
    flash_half_head_dim: float = Field(default=0.0, ge=0, le=1e4, description=(
        "head dim at which fused attention reaches half its large-head-dim rate (0: no dependence)"))
    flash_fa2_relative: float = Field(default=1.0, gt=0, le=1, description=(
        "rate of FlashAttention-2 (flash-attn 2, PyTorch SDPA's flash backend) relative to the fused kernel "
        "`flash_attention` describes, forward and backward together (1: the same kernel, as on A100)"))
    flash_window_tile_cost: float = Field(default=1.0, ge=1, le=10, description=(
        "time of a sliding-window layer's attention tile / a full causal layer's (1: no data, a tile is a tile): "
        "each query block computes its 2-3 key tiles behind the fixed cost of loading, masking and storing it"))
    nvlink: float = Field(ge=MIN_FRACTION, le=1, description="NCCL bus bandwidth / link bandwidth inside a node")
    network: float = Field(ge=MIN_FRACTION, le=1, description="NCCL bus bandwidth / link bandwidth between nodes")
    a2a_nvlink: float | None = Field(default=None, ge=MIN_FRACTION, le=1, description=(
        "bytes a GPU receives over NVLink in an expert-parallel dispatch or combine / time / link bandwidth, "
        "as measured for the dispatcher's kernels (None: `nvlink`, the all-reduce's bus efficiency)"))
    a2a_network: float | None = Field(default=None, ge=MIN_FRACTION, le=1, description=(
        "the same for the bytes that cross the network (None: `network`)"))
    latency_us: float = Field(ge=0, le=1e4, description="per-step latency of a collective or a p2p send inside a node [us]")
    network_latency_us: float | None = Field(default=None, ge=0, le=1e4, description=(
        "per-step latency of a collective step between nodes [us] (default: latency_us)"))
    message_half_mb: float = Field(default=0.0, ge=0, le=1e4, description="message size at which NCCL reaches half its bus bandwidth [MB]")
    nvls: float = Field(default=0.0, ge=0, le=1, description=(
        "NVLink SHARP bus bandwidth / NVLink bus bandwidth on the NVSwitch boards this GPU ships on, so NCCL "
        "may run NVLS collectives (src/graph/tuning.cc nvlsEfficiency: Hopper 0.85, Blackwell 0.74; "
        "0: no NVLink SHARP, as A100's NVSwitch)"))

    @property
    def latency_s(self) -> float:
        return self.latency_us * US

    @property
    def network_latency_s(self) -> float:
        return (self.latency_us if self.network_latency_us is None else self.network_latency_us) * US


class GpuPower(Spec):
    """Power drawn by one GPU in each state [W]; defaults are fractions of TDP unless given."""

    busy_w: float | None = Field(default=None, ge=MIN_W, le=1e5)
    comm_w: float | None = Field(default=None, ge=MIN_W, le=1e5)
    full_power_compute_fraction: float | None = Field(
        default=None, gt=0, le=1,
        description="achieved fraction of peak FLOP/s at which a computing GPU draws busy_w; below it busy "
        "power falls linearly toward comm_w (None: busy_w at any rate, the default)")


class PowerCap(Spec):
    """One power-cap level of a GPU: the cap, the tensor-core speed and the busy power it leaves."""

    cap_w: float = Field(ge=MIN_W, le=1e5, description="power limit set with nvidia-smi -pl [W]")
    speed: float = Field(ge=MIN_FRACTION, le=1, description="tensor-core (SM clock) throughput relative to the uncapped GPU")
    power: float = Field(ge=MIN_FRACTION, le=1, description="busy power relative to the uncapped busy power")


class GpuSpec(Spec):
    name: str = Field(min_length=1, max_length=128)
    memory_gib: float = Field(ge=MIN_GIB, le=4096)
    peak_tflops: PeakTflops
    hbm_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="HBM bandwidth [GB/s]")
    tdp_w: float = Field(ge=MIN_W, le=1e5)
    idle_w: float = Field(ge=MIN_W, le=1e5)
    memory_reserve_gib: float = Field(default=2.0, ge=0, le=4096, description="CUDA context, NCCL buffers, allocator fragmentation")
    sms: int | None = Field(default=None, gt=0, le=100_000, description=(
        "streaming multiprocessors: GEMM tiles run in waves of this many (None: no wave quantisation)"))
    sm_version: int | None = Field(default=None, ge=10, le=1000, description=(
        "NVIDIA compute capability x 10 (A100 80, H100/H200 90, B200/GB200 100, B300/GB300 103); None: not "
        "NVIDIA or not stated. Before 100, Megatron-LM wants CUDA_DEVICE_MAX_CONNECTIONS=1 for tp or cp > 1, "
        "which its FSDP cannot have (StackSpec.fsdp_serializes_tp_overlap)"))
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
        """Dense FLOP/s of the `peak_tflops` field `peak` (bf16, fp16, fp8, mxfp8, nvfp4, tf32)."""
        return getattr(self.peak_tflops, peak) * TERA

    @property
    def comm_w(self) -> float:
        # Communicating GPUs draw well under TDP: tensor cores idle, HBM and NVLink busy.
        return self.power.comm_w or self.idle_w + 0.4 * (self.tdp_w - self.idle_w)


class NodeSpec(Spec):
    gpus: int = Field(gt=0, le=1024)
    nvlink_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="GB/s per GPU per direction inside the node")
    network_gbps: float = Field(ge=MIN_GBPS, le=1e5, description="GB/s per GPU per direction between nodes")
    nvlink_domain_gpus: int | None = Field(default=None, gt=0, le=1_000_000, description="GPUs reachable over NVLink (default: the node)")
    nvlink_segment_gpus: int | None = Field(default=None, gt=0, le=1_000_000, description=(
        "GPUs of an NVLink domain a job's consecutive ranks fill before the next domain, when the job "
        "spans several (Slurm --segment x GPUs per node; default: the whole domain)"))

    host_memory_gib: float | None = Field(default=None, ge=MIN_GIB, le=1e6, description=(
        "CPU (host) memory of the node [GiB]: where offloaded optimizer states and activations live "
        "(planner/costs/offload.py; None: no offload is offered on this node)"))
    host_link_gbps: float | None = Field(default=None, ge=MIN_GBPS, le=1e5, description=(
        "GB/s per GPU per direction between a GPU and host memory, as the datasheet states it (PCIe Gen4 x16: 32, "
        "Gen5 x16: 64, NVLink-C2C: 900 GB/s per Grace shared by its GPUs; None: no offload)"))
    host_memory_gbps: float | None = Field(default=None, ge=MIN_GBPS, le=1e6, description=(
        "host memory bandwidth of the node [GB/s] (all CPU sockets): what bounds the CPU optimizer step of "
        "offloaded optimizer states (None: no optimizer offload)"))

    @model_validator(mode="after")
    def _host_fields_together(self) -> "NodeSpec":
        # offload is priced with all three (planner/costs/offload.py); one or two of them is a slip that left
        # --offload refused with "does not state them"
        host = {k: getattr(self, k) for k in ("host_memory_gib", "host_link_gbps", "host_memory_gbps")}
        missing = [k for k, v in host.items() if v is None]
        if 0 < len(missing) < len(host):
            raise ValueError(f"{missing[0]} missing: host_memory_gib, host_link_gbps and host_memory_gbps go together "
                             f"(offload is priced with all three; the node states {', '.join(k for k in host if k not in missing)})")
        return self

    @property
    def offload_ready(self) -> bool:
        """Whether the node states what offload is priced with (host memory, its link and bandwidth)."""
        return None not in (self.host_memory_gib, self.host_link_gbps, self.host_memory_gbps)

    @property
    def nvlink_domain(self) -> int:
        return self.nvlink_domain_gpus or self.gpus

    @property
    def nvlink_segment(self) -> int:
        return min(self.nvlink_segment_gpus or self.nvlink_domain, self.nvlink_domain)


class NetworkSpec(Spec):
    """The scale-out fabric between NVLink domains (planner/costs/comm.py). Defaults: a non-blocking,
    rail-optimised fat tree of 64-port switches (NVIDIA DGX SuperPOD reference architecture)."""

    oversubscription: float = Field(default=1.0, ge=1, le=64, description=(
        "downlink/uplink ratio above the leaf switches: traffic that leaves a leaf gets 1/x of the bandwidth"))
    switch_radix: int = Field(default=64, ge=4, le=4096, description="ports per switch (Quantum-2 NDR: 64)")
    switch_latency_us: float = Field(default=0.13, ge=0, le=1000, description="latency of one switch hop [us]")
    rail_optimized: bool = Field(default=True, description=(
        "GPU i of every node on the same leaf (rail): a leaf reaches radix/2 nodes, not radix/2 / gpus-per-node"))


class PowerSpec(Spec):
    pue: float = Field(default=1.1, gt=0, le=10, description="power usage effectiveness of the data centre")
    node_overhead_w: float = Field(default=3300.0, ge=0, le=1e6, description="non-GPU power per node [W]")
    grid_gco2_per_kwh: float = Field(
        default=429.0, ge=0, le=5000,
        description="grid carbon intensity [gCO2e/kWh] (default: the US average Patterson et al. 2021 used for GPT-3)")


class ReliabilitySpec(Spec):
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


class PricingSpec(Spec):
    """Prices for `--objective cost` (defaults: typical cloud on-demand A100/H100 rates, 2024)."""

    gpu_hour_usd: float = Field(default=2.0, ge=0, le=1e4)
    electricity_usd_per_kwh: float = Field(default=0.10, ge=0, le=100)


class PoolSpec(Spec):
    """One pool of identical nodes in a mixed cluster (planner/cpsat/pool_placement.py places pipeline stages on pools)."""

    name: str = Field(min_length=1, max_length=128, description="unique among the cluster's pools")
    gpu: GpuSpec = Field(description="a shipped GPU preset name (resolved by the loader), or a mapping with the preset's fields")
    nodes: int = Field(gt=0, le=1_000_000)
    node: NodeSpec


    @property
    def total_gpus(self) -> int:
        return self.nodes * self.node.gpus


_POOL_DERIVED = ("gpu", "nodes", "node")


class ClusterSpec(Spec):
    name: str = Field(min_length=1, max_length=128)
    gpu: GpuSpec = Field(description="with `pools:`: the first pool's (omit it, or give the same)")
    nodes: int = Field(gt=0, le=1_000_000, description="with `pools:`: the first pool's (omit it, or give the same)")
    node: NodeSpec = Field(description="with `pools:`: the first pool's (omit it, or give the same)")
    pools: tuple[PoolSpec, ...] | None = Field(default=None, strict=False, min_length=1, max_length=64, description=(
        "mixed GPU pools (planner/cpsat/pool_placement.py): a job runs in one pool or places its pipeline stages on "
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
