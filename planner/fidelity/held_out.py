"""Held-out published runs (data/calibration/new-sources.yaml): predicted, never fitted.

torchtitan on H100 96GB, Hugging Face's Ultra-Scale Playbook (nanotron, hundreds of layouts of one
job) and NeMo's long-context Llama 2 7B table. `benchmarks/calibrate.py` never reads this file: each
row is predicted with the shipped constants, as a user of these stacks would get it. Every row
becomes a `Case` of planner.fidelity.calibration (model, cluster with the row's GPUs and network,
layout, measured step time), or is listed with the reason it cannot be (never dropped silently).
What a row states and the planner cannot express is priced with the closest setting and named in
the row's `unexpressed`; what the planner assumes where a source is silent is in `assumed`.

Step times are derived from what the rows print (see `derive_step_time`):
- tokens/s per GPU (torchtitan, the Playbook): step = global batch x seq_len / (tokens/s/GPU x GPUs);
- model TFLOP/s per GPU (NeMo): step = NeMo's model FLOPs per step / (TFLOP/s x GPUs), with the
  FLOP count of NeMo's `llama2` formula (nemo/utils/flops_formulas.py, before its causal-attention
  halving; the same count reproduces NeMo 24.07's printed Llama 2 7B 767 TFLOP/s from its 16,634
  tokens/s to 0.1 %).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import yaml

from planner.costs.power_caps import cap_levels, capped_cluster
from planner.errors import PlannerError
from planner.fidelity.calibration import DATA_DIR, Case, Source, _cluster, fitting
from planner.layout.axes import SpaceContext
from planner.layout.space import Layouts, rule_violations, single_layout
from planner.specs import ClusterSpec, ModelSpec
from planner.specs.loading import load_stack
from planner.specs.stack import StackSpec
from planner.units import TERA

HELD_OUT_FILE = DATA_DIR / "new-sources.yaml"


@dataclass(frozen=True)
class HeldOutSource:
    """One publication's runs: the stack profile and GPU preset they are predicted with, its
    nodes' links (GB/s per GPU per direction) and what is assumed for all of its rows."""

    key: str
    label: str
    prefix: str  # row ids start with it
    stack: str  # shipped profile (configs/stacks/)
    gpu: str  # shipped preset (configs/gpus/)
    nvlink_gbps: float
    network_gbps: float
    power_cap_w: float | None
    assumed: str
    attention_kernel: str | None = None  # the stack profile's, unless the source's era ran another


SOURCES = {
    "torchtitan": HeldOutSource(
        "torchtitan", "torchtitan Llama 3.1 8B-405B, 8-512 H100 96GB (FSDP2, TP, PP, CP)", "tt1212_",
        "torchtitan", "h100-sxm-96gb", 450, 50, 500,
        "Grand Teton hosts: 8 H100 96GB HBM2e fully connected by NVLink (450 GB/s per direction, "
        "NVLink4), 400 Gb/s RDMA per GPU (50 GB/s), the 500 W default power limit (the preset's 500 W "
        "cap level); FSDP2 over dp x cp (zero 3); local batch = micro-batch without pipelining"),
    "playbook": HeldOutSource(
        "playbook", "Ultra-Scale Playbook, nanotron 1B/3B, 8-512 H100 80GB", "usp_",
        "nanotron", "h100-sxm-80gb", 450, 50, None,
        "8 H100 80GB per node (NVLink4, 450 GB/s per direction); AWS EFA between nodes (the playbook's "
        "text), taken as a p5 instance's 3,200 Gb/s per 8 GPUs = 50 GB/s per GPU (AWS EC2 P5); "
        "sequence parallelism with tp > 1 (tp_mode REDUCE_SCATTER), 1F1B, no recomputation"),
    "nemo_longseq": HeldOutSource(
        "nemo_longseq", "NeMo 24.03 long context, Llama 2 7B FP8, cp 1-32, 4-1024 H100 80GB", "nemo_longseq_",
        "megatron-core", "h100-sxm-80gb", 450, 50, None,
        "DGX H100: NVLink4 450 GB/s per direction, one 400 Gb/s InfiniBand HCA per GPU (50 GB/s); "
        "distributed optimizer (zero 1); micro-batch and recomputation not printed: the fastest "
        "that fits of micro-batch 1, 2, 4 x none/selective/full; step from NeMo's llama2 model FLOPs; "
        "attention at FlashAttention-2's rate: Transformer Engine 1.4 (NeMo 24.03) runs cuDNN's fused "
        "attention on sm90, whose early-2024 releases are taken as FA2-class (not documented; the "
        "July 2024 cuDNN of the FlashAttention-3 paper is 1.6x faster)",
        attention_kernel="fa2"),
}

_GROUP = re.compile(r"ranking_group=([A-Za-z0-9_-]+)")
_GRAD_ACCUM = re.compile(r"grad_accum=(\d+)")


@dataclass(frozen=True)
class HeldOutRun:
    """One held-out row as the planner predicts it."""

    case: Case
    source: str  # SOURCES key
    stack_printed: str  # the row's training.stack, as published
    group: str | None  # ranking_group= in the row's notes: one job measured in several layouts
    derivation: str  # how the measured step time was derived, with the row's numbers
    unexpressed: tuple[str, ...] = ()  # stated by the source, not expressible: priced with the closest setting
    assumed: tuple[str, ...] = ()  # not stated by the source: what the planner takes
    violations: tuple[str, ...] = ()  # rules of the planner's layout space the stated layout breaks
    source_notes: str = ""  # the row's own `notes`, as published

    @property
    def notes(self) -> str:
        """What the planner could not express and what it assumed for this row, in one line."""
        parts = []
        if self.unexpressed:
            parts.append("not expressible, priced with the closest setting: " + "; ".join(self.unexpressed))
        if self.assumed:
            parts.append("assumed: " + "; ".join(self.assumed))
        if self.violations:
            parts.append("breaks the layout rules: " + "; ".join(self.violations))
        return ". ".join(parts) or "every stated setting expressed"

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def gpus(self) -> int:
        return int(np.atleast_1d(self.case.layouts.gpus)[0])

    @property
    def measured_s(self) -> float:
        return float(self.case.measured["iteration_s"])

    @property
    def fits(self) -> bool:
        """Whether any of the row's layouts fits in memory in the planner's memory model."""
        return bool(np.asarray(self.case.fits).any())


@dataclass(frozen=True)
class Unpredictable:
    id: str
    source: str | None
    reason: str


@dataclass(frozen=True)
class HeldOut:
    runs: list[HeldOutRun]
    unpredictable: list[Unpredictable] = field(default_factory=list)


def source_of(row_id: str) -> str | None:
    return next((k for k, s in SOURCES.items() if row_id.startswith(s.prefix)), None)


def nemo_llama2_flops(model: ModelSpec) -> float:
    """Model FLOPs of one step as NeMo counts them for Llama 2 (nemo/utils/flops_formulas.py
    `llama2`, full attention): gbs s L h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(L h))."""
    b, s, n, h = model.training.global_batch, model.seq_len, model.layers, model.hidden
    g, a, f, v = model.num_kv_heads, model.heads, model.ffn_hidden, model.vocab
    return b * s * n * h * h * (12 + 12 * g / a + 18 * f / h + 12 * s / h + 6 * v / (n * h))


def derive_step_time(raw: dict, model: ModelSpec) -> tuple[float, str]:
    """(measured step time [s], the arithmetic with the row's numbers)."""
    me, gpus = raw["measured"], raw["layout"]["gpus"]
    gb, seq = model.training.global_batch, model.seq_len
    if me.get("tokens_per_s_per_gpu"):
        tps = me["tokens_per_s_per_gpu"]
        t = gb * seq / (tps * gpus)
        return t, (f"global batch x seq_len / (tokens/s/GPU x GPUs) = {gb} x {seq} / ({tps:g} x {gpus}) "
                   f"= {t:.4g} s")
    if me.get("tflops_per_gpu"):
        tf = me["tflops_per_gpu"]
        flops = nemo_llama2_flops(model)
        t = flops / (tf * TERA * gpus)
        return t, (f"NeMo llama2 model FLOPs / (TFLOP/s/GPU x GPUs) = {flops:.4g} / ({tf:g}e12 x {gpus}) "
                   f"= {t:.4g} s")
    raise ValueError("neither tokens_per_s_per_gpu nor tflops_per_gpu is given")


def _model(raw: dict, src: HeldOutSource) -> ModelSpec:
    """The row's model and job; rows of one shape, batch and precision share one spec (named after
    the shape: the row's id is the case's)."""
    m, tr = raw["model"], raw["training"]
    if m.get("moe"):
        raise ValueError("mixture-of-experts rows are not read by this loader")
    arch = str(m.get("arch", "")).lower()
    precision = "fp8" if str(tr["precision"]).lower().startswith("fp8") else "bf16"
    # torchtitan's "selective" is op-level SAC (torchtitan/parallelisms/parallelize_llama.py@9dec370,
    # _apply_ac_to_transformer_block, ac_mode "op"): the stack's selective_ac: op, priced as such
    # (planner/costs/memory.py _op_sac_bytes, compute.py _op_sac_gemms_s).
    return _model_of(src.stack, src.attention_kernel, m["layers"], m["hidden"], m["heads"], m.get("kv_heads"), m["ffn"],
                     "swiglu" if "swiglu" in arch else "gelu", m["vocab"], m["seq_len"], "tied embeddings" in arch,
                     tr["global_batch"], precision, None, "torch.compile" in _stated(raw),
                     # torchao's Float8 "tensorwise" is dynamic scaling: each tensor's amax read first (current scaling)
                     "tensorwise" if src.key == "torchtitan" and precision == "fp8" else "delayed")


def _stated(raw: dict) -> str:
    """What the row's stack and its table's title state (Table 6's stack omits what its title names)."""
    return f"{raw['training']['stack']} {raw.get('table_or_figure', '')}".lower().replace(" ", "")


@lru_cache(maxsize=4096)
def _model_of(stack: str, kernel: str | None, layers: int, hidden: int, heads: int, kv_heads: int | None, ffn: int, act: str,
              vocab: int, seq_len: int, tied: bool, global_batch: int, precision: str,
              recompute_modules: tuple[str, ...] | None = None, torch_compile: bool = False,
              fp8_recipe: str = "delayed") -> ModelSpec:
    return ModelSpec.model_validate(dict(
        name=f"{stack}-l{layers}-h{hidden}-s{seq_len}", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        ffn_hidden=ffn, ffn_act=act, vocab=vocab, seq_len=seq_len, position_embedding="rope", tied_embeddings=tied,
        training=dict(global_batch=global_batch, precision=precision, stack=_stack(stack, kernel),
                      recompute_modules=recompute_modules, torch_compile=torch_compile, fp8_recipe=fp8_recipe)))


@lru_cache(maxsize=16)
def _stack(name: str, kernel: str | None = None) -> StackSpec:
    """A shipped profile, read once (a name in a model spec is looked up for every row), with the
    source's attention kernel where its era ran another than the profile's."""
    stack = load_stack(name)
    return stack if kernel is None else stack.model_copy(update={"attention_kernel": kernel})


def _context(model: ModelSpec, gpus: int) -> SpaceContext:
    return SpaceContext(gpus=gpus, layers=model.layers, heads=model.heads, kv_heads=model.num_kv_heads,
                        global_batch=model.training.global_batch, seq_len=model.seq_len)


def _torchtitan(raw: dict, model: ModelSpec) -> tuple[list[dict], list[str], list[str]]:
    tr, lay = raw["training"], raw["layout"]
    dp, tp, pp, cp = lay["dp"], lay["tp"], lay["pp"], lay["cp"]
    stated = _stated(raw)
    gb = tr["global_batch"]
    unexpressed, assumed = [], []
    if "fp8" in str(tr["precision"]).lower():
        unexpressed.append("torchao Float8 linears (priced as per-tensor FP8 GEMMs, tensorwise current scaling)")
    if "asynctp" in stated:
        unexpressed.append("async TP (priced as plain TP, all TP traffic exposed)")
    if cp > 1:
        unexpressed.append("CP all-gather overlapped with the first K/V chunk's attention (priced unoverlapped)")
    base = dict(dp=dp, tp=tp, pp=pp, cp=cp, recompute=tr["recompute"], sequence_parallel=bool(tr["seq_parallel"]) and tp > 1,
                zero=3 if dp * cp > 1 else 0)
    if pp == 1:
        mb = tr["micro_batch"] or gb // dp
        return [dict(base, micro_batch=mb, vpp=1, num_microbatches=gb // (dp * mb))], unexpressed, assumed
    unexpressed.append("FSDP2 without resharding under PP in time (one all-gather a step; priced once a micro-batch; "
                       "its memory, the stage's parameters and fp32 gradients unsharded, is priced)")
    # Not printed: torchtitan@9dec370's defaults. torchtitan/parallelisms/pipeline_llama.py: micro-batches
    # = experimental.pipeline_parallel_microbatches or the pp degree; pipelining_utils.py
    # generate_split_points: 2 stages per rank for a multi-stage schedule without split points.
    m = pp
    mb = gb // dp // m
    assumed.append(f"{m} micro-batches of {mb} (torchtitan's default: as many as pipeline ranks; not printed)")
    vpp = 2 if "interleaved" in str(tr["pipeline_schedule"]).lower() else 1
    if vpp > 1:
        assumed.append("2 stages per rank (torchtitan's default for interleaved 1F1B without split points; not printed)")
    return [dict(base, micro_batch=mb, vpp=vpp, num_microbatches=m)], unexpressed, assumed


def _playbook(raw: dict, model: ModelSpec) -> tuple[list[dict], list[str], list[str]]:
    tr, lay = raw["training"], raw["layout"]
    dp, tp, pp = lay["dp"], lay["tp"], lay["pp"]
    mb = tr["micro_batch"]
    found = _GRAD_ACCUM.search(str(raw.get("notes", "")))
    if found is None:
        raise ValueError("grad_accum= not in the notes")
    ga = int(found.group(1))
    if dp * mb * ga != tr["global_batch"]:
        raise ValueError(f"dp x micro-batch x grad_accum = {dp} x {mb} x {ga} is not the global batch {tr['global_batch']}")
    zero = 1 if str(tr["dist_optimizer"]).upper() == "ZERO-1" and dp > 1 else 0
    unexpressed = []
    if tp > 1:  # src/nanotron/parallel/tensor_parallel/functional.py, _Column/_RowLinearAsyncCommunication
        unexpressed.append("nanotron's async TP (backward all-gathers and reduce-scatters under GEMMs, the forward "
                           "all-gather under 1/tp of its GEMM; priced exposed)")
    if zero == 1:  # src/nanotron/trainer.py: the DDP hook's fp32_grads_allreduce_handle, then the sharded step
        unexpressed.append("nanotron's ZeRO-1 all-reduces the fp32 gradients (priced as a reduce-scatter, "
                           "as Megatron's distributed optimizer)")
    return [dict(dp=dp, tp=tp, pp=pp, cp=1, micro_batch=mb, vpp=1, recompute="none", sequence_parallel=tp > 1,
                 zero=zero, num_microbatches=ga)], unexpressed, []


def _nemo(raw: dict, model: ModelSpec) -> tuple[list[dict], list[str], list[str]]:
    tr, lay = raw["training"], raw["layout"]
    dp, tp, pp, cp = lay["dp"], lay["tp"], lay["pp"], lay["cp"]
    gb = tr["global_batch"]
    sp = bool(tr["seq_parallel"]) and tp > 1
    rows = [dict(dp=dp, tp=tp, pp=pp, cp=cp, micro_batch=mb, vpp=1, recompute=rc, sequence_parallel=sp,
                 zero=1 if dp * cp > 1 else 0, num_microbatches=gb // (dp * mb))
            for mb in (1, 2, 4) if gb % (dp * mb) == 0 for rc in ("none", "selective", "full")]
    assumed = ["micro-batch and recomputation not printed: the fastest that fits of micro-batch 1/2/4 x none/selective/full",
               ("step time from NeMo's llama2 model FLOPs with full (not causal) attention; counted causal, "
                "the long-sequence steps would be up to ~2x shorter")]
    return rows, [], assumed


_LAYOUTS = {"torchtitan": _torchtitan, "playbook": _playbook, "nemo_longseq": _nemo}


@lru_cache(maxsize=64)
def _cluster_of(src: HeldOutSource, gpus: int) -> ClusterSpec:
    """Nodes of 8 GPUs with the source's links (calibration.py's `_cluster`), at its power cap;
    one per source and GPU count (reading the GPU preset is most of the time of building a row)."""
    cluster = _cluster(src.gpu, gpus, Source(src.key, src.label, src.stack, "bf16", src.nvlink_gbps,
                                             src.network_gbps, 0, src.assumed))
    if src.power_cap_w is not None:
        cap = next(c for c in cap_levels(cluster.gpu) if c.cap_w == src.power_cap_w)
        cluster = capped_cluster(cluster, cap)
    return cluster


def _prepare(raw: dict) -> tuple:
    """Everything of a row but its memory check: (HeldOutRun fields, Case fields) before `fits`."""
    key = source_of(str(raw.get("id", "")))
    if key is None:
        raise ValueError("no held-out source has this id's prefix")
    src = SOURCES[key]
    model = _model(raw, src)
    lay = raw["layout"]
    gpus = lay["gpus"]
    if lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] != gpus:
        raise ValueError(f"dp x tp x pp x cp = {lay['dp'] * lay['tp'] * lay['pp'] * lay['cp']} is not the {gpus} GPUs")
    if (lay.get("ep") or 1) != 1:
        raise ValueError("expert parallelism in a dense row")
    rows, unexpressed, assumed = _LAYOUTS[key](raw, model)
    ctx = _context(model, gpus)
    candidates = [single_layout(**r) for r in rows]
    checked = [(c, rule_violations(c, ctx)) for c in candidates]
    if len(candidates) > 1:  # knobs the source does not state: only the alternatives the space allows
        allowed = [c for c, v in checked if not v]
        if not allowed:
            raise ValueError(f"no alternative for the unstated knobs obeys the layout rules: {checked[0][1][0][1]}")
        candidates, violations = allowed, ()
    else:
        violations = tuple(f"{name}: {message}" for name, message in checked[0][1])
    layouts = Layouts.concat(candidates) if len(candidates) > 1 else candidates[0]
    cluster = _cluster_of(src, gpus)
    t, derivation = derive_step_time(raw, model)
    if not np.isfinite(t) or t <= 0:
        raise ValueError(f"derived step time {t} is not a positive number")
    group = _GROUP.search(str(raw.get("notes", "")))
    return (raw["id"], key, model, cluster, layouts, t,
            dict(source=key, stack_printed=str(raw["training"]["stack"]), group=group.group(1) if group else None,
                 derivation=derivation, unexpressed=tuple(unexpressed), assumed=tuple(assumed), violations=violations,
                 source_notes=str(raw.get("notes", ""))))


def _run(prepared: tuple, fits: np.ndarray) -> HeldOutRun:
    rid, key, model, cluster, layouts, t, fields = prepared
    case = Case(rid, key, "iteration", model, cluster, layouts, {"iteration_s": t}, len(layouts), fits)
    return HeldOutRun(case, **fields)


def build(raw: dict) -> HeldOutRun:
    """One row as a HeldOutRun; raises ValueError (or a spec error) when it cannot be predicted."""
    prepared = _prepare(raw)
    _, _, model, cluster, layouts, _, _ = prepared
    return _run(prepared, fitting(model, cluster, layouts))


def load_raw(path=HELD_OUT_FILE) -> list[dict]:
    """The file's rows (libyaml's safe loader where PyYAML has it: the pure-Python one takes ~10 s
    over these 2.3 MB, libyaml ~2 s; the same plain mappings, numbers and strings either way)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    rows = yaml.load(path.read_text(), Loader=loader)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of rows")
    return rows


def load_held_out(path=HELD_OUT_FILE) -> HeldOut:
    """Every row of the held-out file: a HeldOutRun, or an Unpredictable with the reason. Rows of
    one model and cluster are checked for memory in one call (the Playbook's 1,117 rows are 14 jobs)."""
    prepared, skipped = [], []
    for raw in load_raw(path):
        rid = str(raw.get("id", "?")) if isinstance(raw, dict) else "?"
        try:
            prepared.append(_prepare(raw))
        except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError, PlannerError) as exc:  # pydantic's errors are ValueErrors
            skipped.append(Unpredictable(rid, source_of(rid), f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    jobs: dict[tuple[int, int], list[int]] = {}
    for i, (_, _, model, cluster, _, _, _) in enumerate(prepared):
        jobs.setdefault((id(model), id(cluster)), []).append(i)
    fits: list[np.ndarray | None] = [None] * len(prepared)
    for members in jobs.values():
        _, _, model, cluster, _, _, _ = prepared[members[0]]
        parts = [prepared[i][4] for i in members]
        together = fitting(model, cluster, Layouts.concat(parts) if len(parts) > 1 else parts[0])
        for i, piece in zip(members, np.split(together, np.cumsum([len(p) for p in parts])[:-1])):
            fits[i] = piece
    return HeldOut([_run(p, f) for p, f in zip(prepared, fits)], skipped)


def fitting_cases(held: HeldOut) -> list[Case]:
    """The runs as calibration Cases (benchmarks/calibrate.py): the rows of one model on one cluster
    with one layout each become one multi-row Case (as vTrain's runs by model shape), since a fit
    re-predicts every case hundreds of times and the Playbook's 1,117 rows are 14 jobs; rows with
    alternatives for unstated knobs (NeMo's) stay one Case each."""
    out, jobs = [], {}
    for run in held.runs:
        c = run.case
        if c.alternatives > 1:
            out.append(c)
        else:
            jobs.setdefault((run.source, id(c.model), id(c.cluster)), []).append(c)
    for (source, _, _), members in jobs.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        first = members[0]
        out.append(Case(f"{source}:{first.id}+{len(members) - 1}", source, "iteration", first.model, first.cluster,
                        Layouts.concat([c.layouts for c in members]),
                        {"iteration_s": np.array([c.measured["iteration_s"] for c in members], dtype=float)},
                        1, np.concatenate([np.atleast_1d(c.fits) for c in members])))
    return out
