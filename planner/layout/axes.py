"""The layout axes, each declared once, and the rules a valid layout obeys.

An axis is one dimension of a layout. Its `Axis` record is the only place that says
- how it is stored (an int64 column of `planner.layout.space.Layouts`; a choice by its index, a boolean
  as 0/1) and how its value reads in JSON, CSV and plan files (`to_json`, `to_stored`);
- which values the enumeration tries (`candidates`: a superset, validity is the `RULES`' job);
- the CLI option that fixes it in `plan search`/`plan sweep` (`flag`, `help`) and how `plan
  estimate` and plan files take it (`given`, `bounds`, `default`);
- its place in the tie-break among equally good layouts and, for a parallel degree, in the rank
  order of the process groups (Megatron-LM's `--order tp-cp-ep-dp-pp`, innermost first);
- how it prints: in the compact layout cell (`dp32 tp4 pp8 mb1 vpp6`), as a table column, or
  only in a layout's one-line summary.
`Layouts`, `SpaceLimits`, the fix-a-dimension masks, the plan-file layout schema, the sweep
columns, the CLI options and the report read this module; adding an axis is adding a record here
(and a rule if it has one), using it in the cost terms it changes, and testing it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

Role = Literal["degree", "option", "derived", "outer"]
Given = Literal["required", "optional", "default"]
Show = Literal["cell", "column", "detail", "hidden"]

MAX_DIVISOR_INPUT = 10**10  # trial division to sqrt: 10^5 steps at most; inputs are bounded far below


@dataclass(frozen=True)
class SpaceContext:
    """What the candidate values of an axis may depend on: the job, and the enumeration's limits."""

    gpus: int
    layers: int
    heads: int
    kv_heads: int
    global_batch: int
    seq_len: int = 0  # tokens per sequence (0: not known to the caller; cp is then 1)
    experts: int = 0  # routed experts per MoE layer (0: a dense model)
    max_micro_batch: int = 32
    max_vpp: int = 16
    # Context parallelism is enumerated down to this many tokens of a sequence per cp rank (a fixed
    # --cp may go below): shorter chunks cannot hide their K/V exchange behind attention, and no
    # top-20 layout of the shipped models on their clusters went below 512 (benchmarks/speed.py cases).
    min_cp_tokens: int = 512
    cap_levels: int = 1  # power-cap levels searched (1: the uncapped GPU only)
    fp8_param_gather: bool = False  # training.fp8_param_gather: FP8 weights gathered by the distributed optimizer
    mixer_heads: tuple = ()  # a hybrid model's (name, count) tp must divide too (ModelSpec.tp_split_heads)


@dataclass(frozen=True)
class Axis:
    name: str  # Layouts column, JSON `layout` key, CSV column, plan-file and sweep-file key
    doc: str  # what it is, with its unit (CSV column meaning)
    role: Role  # degree: a process-group size (their product is the GPU count); option: a per-layout
    #             choice; derived: computed from the others; outer: expands the whole space when searched
    kind: type = int  # int | str (a choice) | bool, as users write it
    choices: tuple = ()  # allowed values as users write them; a str choice is stored by its index
    default: Any = None  # value when a plan file or `plan estimate` leaves it out (None: no default)
    given: Given | None = None  # how `plan estimate` and plan files take it (None: they do not)
    bounds: Mapping[str, Any] = field(default_factory=dict)  # pydantic Field arguments in plan files
    flag: str | None = None  # CLI option ("--tp"); booleans get "--x/--no-x"
    help: str = ""  # help of the option that fixes it in `plan search` and `plan sweep`
    give_help: str = ""  # help of the option in `plan estimate`
    invalid: str = "must be positive, got {value}"  # message for a value outside `choices`/bounds
    expected: str = "an integer > 0"
    candidates: Callable[[SpaceContext, Mapping[str, int]], list[int]] | None = None  # options and outer axes
    derive: Callable[[Mapping[str, Any], SpaceContext], Any] | None = None  # derived axes
    fills: bool = False  # a degree that takes whatever GPUs the other degrees leave (dp)
    tiebreak: float | None = None  # position in the tie-break (smaller values preferred first)
    rank_order: int | None = None  # position of a degree in the rank order, innermost first
    short: str = ""  # printed name: "mb" in "mb1", "sp" in "sp=True"
    show: Show = "hidden"
    hide_default: bool = False  # in the layout cell only when not at its default ("vpp" when > 1)
    column: str | None = None  # header of its own table column
    cell: Callable[[Any], str] = str  # a table cell from the shown value
    shown: Callable[[Any], Any] | None = None  # the value a table shows, from a scored layout (default: its layout value)
    justify: str = "right"  # of its table column
    # `plan estimate`'s value when not given, from the degrees (None: `default`): what `plan search`
    # picks where the layout allows it, so that search's best row pasted into estimate scores alike.
    estimate_default: Callable[[Mapping[str, int]], Any] | None = None
    # The stored default from the other columns where it follows them (the schedule: interleaved at
    # vpp > 1); `default` then only names the axis's first choice.
    default_from: Callable[[Mapping[str, Any]], Any] | None = None
    json: bool = True  # part of the JSON `layout` object
    csv: bool = True  # a column of `plan sweep --out`

    def to_json(self, stored: int) -> Any:
        """The user-facing value of a stored one."""
        if self.kind is str:
            return self.choices[int(stored)]
        if self.kind is bool:
            return bool(stored)
        return int(stored)

    def to_stored(self, value: Any) -> int:
        """The stored int of a user-facing value (a choice by its index)."""
        if self.kind is str:
            return self.choices.index(value)
        return int(value)

    def problem(self, value: Any) -> str | None:
        """Why a value given for this axis (on the command line) is out of its domain, else None."""
        if value is None or self.kind is bool:
            return None
        if self.choices:
            return None if value in self.choices else self.invalid.format(value=value)
        if value <= 0:
            return self.invalid.format(value=value)
        if "le" in self.bounds and value > self.bounds["le"]:
            return f"must be at most {self.bounds['le']:,}, got {value}"
        return None

    def as_option(self, value: Any) -> str:
        """How the option that fixes this axis to `value` is written: `--tp 8`, `--no-sequence-parallel`."""
        if self.kind is bool:
            return self.flag if value else f"--no-{self.flag.removeprefix('--')}"
        return f"{self.flag} {value}"

    @property
    def label(self) -> str:
        return self.short or self.name


SCHEDULES = ("1f1b", "interleaved", "zb-h1", "zb-v", "interleaved-zb", "dualpipe", "dualpipev")
OFFLOADS = ("none", "optimizer", "activations", "both")  # what goes to host memory (planner/costs/offload.py)
INTERLEAVED_SCHEDULES = ("interleaved", "interleaved-zb")  # vpp > 1 chunks in a loop
V_SCHEDULES = ("zb-v", "dualpipev")  # two chunks a rank in a V: vpp 2


def divisors(n: int) -> list[int]:
    """The divisors of n >= 0, ascending ([] for 0), by trial division up to sqrt(n): 10^4 steps
    for the largest global batch (10^8). Larger n is a caller's bug (inputs are bounded first)."""
    if not 0 <= n <= MAX_DIVISOR_INPUT:
        raise ValueError(f"divisors({n}): outside 0..{MAX_DIVISOR_INPUT:,}; bound the input first")
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _micro_batches(ctx: SpaceContext, chosen: Mapping[str, int]) -> list[int]:
    dp = chosen["dp"]
    if ctx.global_batch % dp:
        return []
    return [m for m in divisors(ctx.global_batch // dp) if m <= ctx.max_micro_batch]


def _virtual_stages(ctx: SpaceContext, chosen: Mapping[str, int]) -> list[int]:
    """The chunks per rank a search tries: even splits into pp*vpp virtual stages, and splits one
    or two layers short of even, the embedding and the loss each in a layer's place on the first
    and the last virtual stage (Megatron-LM --account-for-embedding/loss-in-pipeline-split; Llama 3
    405B: 126 layers on 16 ranks x 8 chunks, Dubey et al. 2024 Sec. 3.3.2). The stage split
    (planner/cpsat/stage_split.py) rebalances them. A given vpp may split the layers more unevenly
    (_chunks_fit); a search tries those only with --vpp, since every uneven choice would double a
    61-layer model's space (DeepSeek-V3: 345,408 to 737,970 layouts)."""
    pp = chosen["pp"]
    if pp < 2:
        return [1]
    sizes = divisors(ctx.layers // pp) + divisors(-(-ctx.layers // pp))
    return sorted({v for v in sizes if v <= ctx.max_vpp and bool(_short_of_even(ctx.layers, pp * v))} | {1})


def _short_of_even(layers, stages):
    """Whether `stages` virtual stages take `layers` evenly or with at most two layers missing."""
    return (stages <= layers + 2) & (-(-layers // stages) * stages - layers <= 2)


def _chunks_fit(layers, stages):
    """Whether `stages` virtual stages can take `layers`: as _short_of_even, or unevenly with at
    least a layer each (Megatron-LM --pipeline-model-parallel-layout states any split: DeepSeek-V3's
    and Kimi K2's 61 layers ran on pp 8 x vpp 2-4)."""
    return (stages <= layers) | _short_of_even(layers, stages)


def _expert_parallel(ctx: SpaceContext, chosen: Mapping[str, int]) -> list[int]:
    """ep: divisors of the experts that fold into the attention grid tp*cp*dp (Megatron-Core
    parallel folding: the expert grid etp*ep*edp reuses the same GPUs)."""
    if ctx.experts == 0:
        return [1]
    grid = chosen["tp"] * chosen.get("cp", 1) * chosen["dp"]
    return [e for e in divisors(ctx.experts) if grid % e == 0]


def _expert_tensor_parallel(ctx: SpaceContext, chosen: Mapping[str, int]) -> list[int]:
    """etp: 1 (Megatron-Bridge's recipes) or the attention's tp."""
    if ctx.experts == 0:
        return [1]
    return sorted({1, chosen["tp"]})


# numpy is imported inside the functions that compute on arrays: `plan check` of a model or cluster
# file reads these records but scores nothing, and importing numpy was a fifth of its start-up
# (docs/speed.md).
def _schedule_from_vpp(v):
    import numpy as np

    return np.where(np.asarray(v["vpp"]) > 1, 1, 0)


def _num_microbatches(v, ctx):
    import numpy as np

    return np.maximum(ctx.global_batch // (np.asarray(v["dp"]) * v["micro_batch"]), 1)


AXES: tuple[Axis, ...] = (
    Axis("dp", "data-parallel degree", "degree", given="optional", bounds=dict(gt=0, le=10_000_000),
         flag="--dp", help="fix the data-parallel degree", give_help="data-parallel degree (default: GPUs / (tp*pp))",
         fills=True, rank_order=3, show="cell"),
    Axis("tp", "tensor-parallel degree", "degree", given="required", bounds=dict(gt=0, le=100_000),
         flag="--tp", help="fix the tensor-parallel degree", give_help="tensor-parallel degree",
         tiebreak=0, rank_order=0, show="cell"),
    Axis("pp", "pipeline-parallel degree", "degree", given="required", bounds=dict(gt=0, le=100_000),
         flag="--pp", help="fix the pipeline-parallel degree", give_help="pipeline-parallel degree",
         tiebreak=1, rank_order=4, show="cell"),
    Axis("cp", "context-parallel degree (sequence split over GPUs in attention)", "degree", default=1, given="default",
         bounds=dict(gt=0, le=100_000), flag="--cp", help="fix the context-parallel degree",
         give_help="context-parallel degree (seq_len divisible by 2*cp)", tiebreak=1.5, rank_order=1, show="cell",
         hide_default=True),
    Axis("micro_batch", "micro-batch size [sequences]", "option", given="required",
         bounds=dict(gt=0, le=100_000, description="sequences per micro-batch"),
         flag="--micro-batch", help="fix the micro-batch size [sequences]", give_help="micro-batch size [sequences]",
         candidates=_micro_batches, tiebreak=2, short="mb", show="cell"),
    Axis("vpp", "virtual pipeline stages per rank", "option", default=1, given="default",
         bounds=dict(gt=0, le=10_000, description="virtual pipeline stages per rank"),
         flag="--vpp", help="fix the virtual stages per pipeline rank", give_help="virtual stages per pipeline rank",
         candidates=_virtual_stages, tiebreak=3, show="cell", hide_default=True),
    Axis("recompute", "none | selective | full", "option", kind=str, choices=("none", "selective", "full"),
         default="none", given="default", flag="--recompute", help="none | selective | full",
         give_help="none | selective | full", invalid="unknown mode '{value}'", expected="none | selective | full",
         candidates=lambda ctx, chosen: [0, 1, 2], tiebreak=4, show="column", column="recompute", justify="left"),
    Axis("sequence_parallel", "sequence parallelism on", "option", kind=bool, default=False, given="default",
         flag="--sequence-parallel", help="fix sequence parallelism",
         give_help="sequence parallelism (default: on when tp > 1, as search picks)",
         estimate_default=lambda v: v["tp"] > 1,
         candidates=lambda ctx, chosen: [0, 1] if chosen["tp"] > 1 else [0], tiebreak=5, short="sp",
         show="column", column="sp", cell=lambda on: "y" if on else "-", justify="center"),
    Axis("zero", "ZeRO stage", "option", choices=(0, 1, 2, 3), default=0, given="default",
         bounds=dict(description="ZeRO stage"), flag="--zero", help="fix the ZeRO stage (0-3)",
         give_help="ZeRO stage 0-3 (default: 1, the distributed optimizer, when dp*cp > 1, as search picks)",
         estimate_default=lambda v: 1 if v["dp"] * v["cp"] > 1 else 0,
         invalid="ZeRO stage {value} does not exist", expected="0, 1, 2 or 3",
         candidates=lambda ctx, chosen: [0, 1, 2, 3] if chosen["dp"] * chosen.get("cp", 1) > 1 else [0], tiebreak=6,
         show="column", column="zero"),
    Axis("ep", "expert-parallel degree (routed experts split over GPUs)", "option", default=1, given="default",
         bounds=dict(gt=0, le=1_000_000), flag="--ep", help="fix the expert-parallel degree (MoE)",
         give_help="expert-parallel degree (MoE; ep*etp divides tp*cp*dp)", candidates=_expert_parallel,
         tiebreak=1.6, show="cell", hide_default=True),
    Axis("etp", "expert tensor-parallel degree", "option", default=1, given="default",
         bounds=dict(gt=0, le=100_000), flag="--etp", help="fix the expert tensor-parallel degree (MoE)",
         give_help="expert tensor-parallel degree (MoE)", candidates=_expert_tensor_parallel,
         tiebreak=1.7, show="cell", hide_default=True),
    # Pipeline schedules (issue 40 item 3; costs in planner/costs/schedules.py). 1f1b and interleaved
    # follow vpp, as before the axis existed; the others a search tries only where --schedule names them.
    Axis("schedule", "pipeline schedule: " + " | ".join(SCHEDULES), "option", kind=str, choices=SCHEDULES,
         default="1f1b", given="default", flag="--schedule", help="fix the pipeline schedule: " + " | ".join(SCHEDULES),
         give_help="pipeline schedule (default: 1f1b, interleaved when vpp > 1)",
         estimate_default=lambda v: "interleaved" if (v.get("vpp") or 1) > 1 else "1f1b",
         default_from=_schedule_from_vpp,
         invalid="unknown schedule '{value}'", expected=" | ".join(SCHEDULES),
         candidates=lambda ctx, chosen: [0, 1] if chosen["pp"] > 1 else [0],
         short="sched=", show="cell", hide_default=True),  # `sched=zb-h1` in a row; 1f1b/interleaved (vpp's) not shown
    # Host-memory offload (issue 40 item 2; costs in planner/costs/offload.py). A search scores it only
    # where layouts without it do not fit the GPU (planner/offload_search.py), or where --offload or
    # training.offload names it: its candidates here are none alone.
    Axis("offload", "host-memory offload: " + " | ".join(OFFLOADS), "option", kind=str, choices=OFFLOADS,
         default="none", given="default", flag="--offload", help="fix the host-memory offload: " + " | ".join(OFFLOADS),
         give_help="host-memory offload: " + " | ".join(OFFLOADS) + " (default: none, or the model's training.offload)",
         invalid="unknown offload '{value}'", expected=" | ".join(OFFLOADS),
         # not given: left unset, so that the model's training.offload holds (planner/estimate.py), else none
         estimate_default=lambda v: None,
         candidates=lambda ctx, chosen: [0], tiebreak=6.5, short="offload=", show="cell", hide_default=True),
    Axis("num_microbatches", "micro-batches per step per data-parallel rank", "derived",
         derive=_num_microbatches,
         show="detail", csv=False),  # printed by its name: a bare `m=64` said nothing
    # Power caps expand the space (every layout under every cap level of the GPU preset) when the
    # search tries them; the level's cap and speed are reported by the scores, not in `layout`.
    Axis("power_cap", "power-cap level (index into the GPU preset's levels, 0 = uncapped)", "outer", default=0,
         candidates=lambda ctx, chosen: list(range(ctx.cap_levels)), tiebreak=7, json=False, csv=False,
         column="cap W", cell=lambda w: f"{w:g}", shown=lambda s: None if s.power_cap is None else s.power_cap.power_cap_w),
)
BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}
NAMES: tuple[str, ...] = tuple(a.name for a in AXES)


def axis(name: str) -> Axis:
    return BY_NAME[name]


def degrees(axes: tuple[Axis, ...] = AXES) -> tuple[Axis, ...]:
    """The parallel degrees in rank order, innermost first (their product is the GPU count)."""
    return tuple(sorted((a for a in axes if a.role == "degree"), key=lambda a: a.rank_order))


def filling(axes: tuple[Axis, ...] = AXES) -> Axis:
    """The degree that takes whatever GPUs the others leave (dp)."""
    return next(a for a in axes if a.fills)


def given_gpus(given: Mapping[str, Any], axes: tuple[Axis, ...] = AXES) -> int | None:
    """The GPU count every degree being given implies (None when one is missing)."""
    values = [given.get(a.name) for a in axes if a.role == "degree"]
    return None if any(v is None for v in values) else math.prod(int(v) for v in values)


def fixable(axes: tuple[Axis, ...] = AXES) -> tuple[Axis, ...]:
    """Axes a CLI option or a `constraints:` key can fix."""
    return tuple(a for a in axes if a.flag is not None)


def tiebreak_order(axes: tuple[Axis, ...] = AXES) -> tuple[Axis, ...]:
    return tuple(sorted((a for a in axes if a.tiebreak is not None), key=lambda a: a.tiebreak))


# --- rules ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """A rule every layout of the space obeys (Megatron-LM's), as a vectorised test and a message.

    `ok(v, ctx)` gets a mapping of axis name -> array (or scalar) and returns where the rule holds;
    `message(row, ctx)` says why one layout (a mapping of JSON values) breaks it."""

    name: str
    axes: tuple[str, ...]  # the axes it reads: rules on degrees alone prune the enumeration early
    ok: Callable[[Mapping[str, Any], SpaceContext], Any]
    message: Callable[[Mapping[str, Any], SpaceContext], str]


def _interleaving_ok(v, ctx):
    m = ctx.global_batch // (v["dp"] * v["micro_batch"])
    unsplit = ctx.global_batch % (v["dp"] * v["micro_batch"]) != 0  # reported by batch_divides instead
    return (v["vpp"] == 1) | unsplit | ((v["pp"] >= 2) & (m % v["pp"] == 0) & _chunks_fit(ctx.layers, v["pp"] * v["vpp"]))


_SCHEDULE_INDEX = {name: i for i, name in enumerate(SCHEDULES)}


def _schedule_is(v, names):
    import numpy as np

    return np.isin(v["schedule"], [_SCHEDULE_INDEX[n] for n in names])


def _schedule_ok(v, ctx):
    """1f1b, zb-h1 and dualpipe run one chunk a rank; interleaved and interleaved-zb vpp > 1;
    zb-v and dualpipev two chunks in a V (Qi et al. 2024 (ZB-V); DeepSeek-V3's DualPipeV: vpp 2);
    every schedule but 1f1b needs pp >= 2, and dualpipe an even pp (two directions that meet
    halfway, DeepSeek-V3 Sec. 3.2.1)."""
    import numpy as np

    vpp, pp = np.asarray(v["vpp"]), np.asarray(v["pp"])
    chunks = np.where(_schedule_is(v, INTERLEAVED_SCHEDULES), vpp > 1,
                      np.where(_schedule_is(v, V_SCHEDULES), vpp == 2, vpp == 1))
    pipelined = _schedule_is(v, ("1f1b",)) | (pp >= 2)
    even = ~_schedule_is(v, ("dualpipe",)) | (pp % 2 == 0)
    return chunks & pipelined & even


def _dualpipe_microbatches_ok(v, ctx):
    import numpy as np

    m = ctx.global_batch // (np.asarray(v["dp"]) * np.asarray(v["micro_batch"]))
    pp = np.asarray(v["pp"])
    dual, dualv = _schedule_is(v, ("dualpipe",)), _schedule_is(v, ("dualpipev",))
    return ~(dual | dualv) | ((m >= 2 * pp) & (~dual | (m % 2 == 0)))


def _dualpipe_microbatches_message(r, m):
    s, pp = r["schedule"], r["pp"]
    even = "an even number of " if s == "dualpipe" else ""
    return f"schedule {s} needs {even}micro-batches of at least 2 pp = {2 * pp} per step (got {m})"


def _schedule_message(r, ctx):
    s, vpp, pp = r["schedule"], r["vpp"], r["pp"]
    if s in INTERLEAVED_SCHEDULES and vpp == 1:
        return f"schedule {s} needs vpp > 1 (got vpp={vpp})"
    if s in V_SCHEDULES and vpp != 2:
        return f"schedule {s} runs two chunks a rank in a V: vpp=2 (got vpp={vpp})"
    if s not in INTERLEAVED_SCHEDULES + V_SCHEDULES and vpp != 1:
        return f"schedule {s} runs one chunk a rank: vpp=1 (got vpp={vpp}; interleaved schedules take vpp > 1)"
    if s == "dualpipe" and pp % 2:
        return f"schedule dualpipe needs an even pp (got pp={pp})"
    return f"schedule {s} needs pp >= 2 (got pp={pp})"


def _tp_divides_mixer_heads(v, ctx):
    import numpy as np

    return np.logical_and.reduce([n % v["tp"] == 0 for _, n in ctx.mixer_heads] + [v["tp"] > 0])


def _mamba_cp_ok(v, ctx):
    """Megatron-Core's MambaContextParallel (mamba_context_parallel.py): 'nheads must be evenly divisible by
    tp_size * cp_size', and a rank's groups (groups / tp) and cp divide one another."""
    import numpy as np

    found = dict(ctx.mixer_heads)
    tp, cp = np.asarray(v["tp"]), np.asarray(v["cp"])
    if "mamba.heads" not in found:
        return np.ones(np.broadcast(tp, cp).shape, dtype=bool)
    heads, groups = found["mamba.heads"], found["mamba.groups"]
    local = np.maximum(groups // np.maximum(tp, 1), 1)
    return (cp == 1) | ((heads % (tp * cp) == 0) & ((local % cp == 0) | (cp % local == 0)))


def _ep_divides_experts(v, ctx):
    import numpy as np

    return (v["ep"] == 1) | ((ctx.experts > 0) & (ctx.experts % np.maximum(v["ep"], 1) == 0))


RULES: tuple[Rule, ...] = (
    Rule("tp_divides_heads", ("tp",),
         lambda v, ctx: (ctx.heads % v["tp"] == 0) & (ctx.kv_heads % v["tp"] == 0),
         lambda r, ctx: f"tp={r['tp']} must divide heads ({ctx.heads}) and kv_heads ({ctx.kv_heads})"),
    # Megatron-Core MambaMixer asserts nheads % tp == 0 and ngroups % tp == 0 (mamba_mixer.py), its
    # GatedDeltaNet splits key and value heads over tp (gated_delta_net/common.py num_k_heads_local_tp)
    Rule("tp_divides_mixer_heads", ("tp",),
         _tp_divides_mixer_heads,
         lambda r, ctx: f"tp={r['tp']} must divide " + ", ".join(f"{name} ({n})" for name, n in ctx.mixer_heads)),
    Rule("mamba_cp_divides_heads", ("tp", "cp"), _mamba_cp_ok,
         lambda r, ctx: f"cp={r['cp']} with tp={r['tp']}: Megatron's Mamba context parallelism needs mamba.heads "
         f"({dict(ctx.mixer_heads).get('mamba.heads')}) divisible by tp*cp = {r['tp'] * r['cp']} and mamba.groups / tp "
         f"and cp dividing one another"),
    # Megatron-Core context parallelism splits each sequence into 2*cp chunks (causal load balancing).
    Rule("cp_divides_sequence", ("cp",),
         lambda v, ctx: (v["cp"] == 1) | ((ctx.seq_len > 0) & (ctx.seq_len % (2 * v["cp"]) == 0)
                                          & (ctx.seq_len >= v["cp"] * ctx.min_cp_tokens)),
         lambda r, ctx: f"cp={r['cp']} needs seq_len ({ctx.seq_len}) divisible by 2*cp = {2 * r['cp']}"
         + ("" if ctx.seq_len >= r["cp"] * ctx.min_cp_tokens else f" and at least {ctx.min_cp_tokens} tokens per cp rank")),
    Rule("ep_divides_experts", ("ep",),
         _ep_divides_experts,
         lambda r, ctx: (f"ep={r['ep']} must divide the {ctx.experts} experts" if ctx.experts
                         else f"ep={r['ep']} needs a mixture-of-experts model (this one is dense)")),
    Rule("etp_needs_experts", ("etp",), lambda v, ctx: (v["etp"] == 1) | (ctx.experts > 0),
         lambda r, ctx: f"etp={r['etp']} needs a mixture-of-experts model (this one is dense)"),
    # Parallel folding (Megatron-Core MoE): the expert grid etp x ep x edp covers the attention's tp x cp x dp.
    Rule("expert_grid_folds", ("tp", "cp", "dp", "ep", "etp"),
         lambda v, ctx: (v["tp"] * v["cp"] * v["dp"]) % (v["ep"] * v["etp"]) == 0,
         lambda r, ctx: f"ep*etp = {r['ep']}*{r['etp']} must divide tp*cp*dp = {r['tp']}*{r['cp']}*{r['dp']}"),
    # Megatron-LM: MoE with tensor parallelism requires sequence parallelism.
    Rule("moe_tp_needs_sequence_parallel", ("tp", "sequence_parallel"),
         lambda v, ctx: (ctx.experts == 0) | (v["tp"] == 1) | (v["sequence_parallel"] == 1),
         lambda r, ctx: "MoE with tp > 1 needs sequence parallelism (Megatron-LM)"),
    Rule("pp_at_most_layers", ("pp",), lambda v, ctx: v["pp"] <= ctx.layers,
         lambda r, ctx: f"pp={r['pp']} is more than the {ctx.layers} layers"),
    # Megatron-LM: global batch = dp x micro-batch x micro-batches per step.
    Rule("batch_divides", ("dp", "micro_batch"), lambda v, ctx: ctx.global_batch % (v["dp"] * v["micro_batch"]) == 0,
         lambda r, ctx: f"global batch {ctx.global_batch} is not a multiple of dp*micro_batch = {r['dp']}*{r['micro_batch']}"),
    # The interleaved schedule (Narayanan et al. 2021 Sec. 2.2) needs pp >= 2, micro-batches in
    # multiples of pp (Megatron-LM's default group of pp micro-batches per chunk) and pp*vpp virtual
    # stages that take the layers evenly, or with the embedding and the loss each in a layer's place
    # (_virtual_stages; Llama 3 405B, Dubey et al. 2024 Sec. 3.3.2).
    Rule("interleaving", ("dp", "pp", "micro_batch", "vpp"), _interleaving_ok,
         lambda r, ctx: f"vpp={r['vpp']} needs pp >= 2, num_microbatches ({ctx.global_batch // (r['dp'] * r['micro_batch'])}) "
         f"divisible by pp ({r['pp']}) and pp*vpp ({r['pp'] * r['vpp']}) virtual stages that take the {ctx.layers} layers "
         "with at least one layer each, or at most two short of even (the embedding's and the loss's place)"),
    Rule("schedule_fits", ("pp", "vpp", "schedule"), _schedule_ok, _schedule_message),
    # DeepSeek's DualPipe step() asserts an even count of at least 2 pp micro-batches (half from each end,
    # each half at least pp), DualPipeV at least 2 pp (dualpipe.py, dualpipev.py): fewer cannot run.
    Rule("schedule_microbatches", ("dp", "micro_batch", "pp", "schedule"), _dualpipe_microbatches_ok,
         lambda r, ctx: _dualpipe_microbatches_message(r, ctx.global_batch // (r["dp"] * r["micro_batch"]))),
    Rule("sequence_parallel_needs_tp", ("tp", "sequence_parallel"),
         lambda v, ctx: (v["sequence_parallel"] == 0) | (v["tp"] > 1),
         lambda r, ctx: "sequence parallelism needs tp > 1"),
    # The distributed optimizer and ZeRO shard over the data-parallel ranks of every context slice (dp*cp).
    # Megatron-LM arguments.py: "--fp8-param-gather only supported with distributed optimizer, torch
    # fsdp2, megatron fsdp": the FP8 weights (1 byte, planner/specs/precision.py) need ZeRO >= 1.
    Rule("fp8_param_gather_needs_zero", ("zero",), lambda v, ctx: (v["zero"] >= 1) | (not ctx.fp8_param_gather),
         lambda r, ctx: "fp8_param_gather needs the distributed optimizer (ZeRO stage >= 1), not zero 0"),
    Rule("zero_needs_dp", ("dp", "cp", "zero"), lambda v, ctx: (v["zero"] == 0) | (v["dp"] * v["cp"] > 1),
         lambda r, ctx: f"ZeRO stage {r['zero']} shards over dp, but dp = 1" if r.get("cp", 1) == 1
         else f"ZeRO stage {r['zero']} shards over dp*cp, but dp*cp = 1"),
)


# --- printing ------------------------------------------------------------------------------------

def layout_cell(layout: Mapping[str, Any], axes: tuple[Axis, ...] = AXES) -> str:
    """`dp32 tp4 pp8 mb1 vpp6`: the axes shown in the cell, those at their default left out."""
    def value(a):
        return layout.get(a.name, a.default)

    def hidden(a):  # at its default, or at the default the other axes give it (a schedule follows vpp)
        return a.hide_default and (value(a) == a.default or (a.estimate_default is not None and a.role != "degree"
                                                             and value(a) == a.estimate_default(layout)))

    def shown(a):  # offload=activations:20, the layers offloaded (planner/costs/offload.py)
        count = layout.get("offload_layers") if a.name == "offload" else None
        return f"{a.label}{value(a)}" + (f":{count}" if count else "")

    return " ".join(shown(a) for a in axes if a.show == "cell" and not hidden(a))


def layout_summary(layout: Mapping[str, Any], axes: tuple[Axis, ...] = AXES) -> str:
    """`dp32 tp4 pp8 mb1 vpp6 recompute=none sp=True zero=1 num_microbatches=48`: one layout on one line."""
    rest = " ".join(f"{a.label}={layout[a.name]}" for a in axes if a.show in ("column", "detail"))
    return f"{layout_cell(layout, axes)} {rest}"


def layout_assignments(layout: Mapping[str, Any], axes: tuple[Axis, ...] = AXES) -> str:
    """`dp=32 tp=4 ... sequence_parallel=true zero=1`: the layout as a plan file spells it."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    def at_default(a):
        value = layout.get(a.name, a.default)
        if a.default_from is not None:
            return a.name not in layout or a.to_stored(value) == int(a.default_from(layout))
        return a.hide_default and value == a.default

    return " ".join(f"{a.name}={text(layout.get(a.name, a.default))}" for a in axes if a.given is not None
                    and not at_default(a))
