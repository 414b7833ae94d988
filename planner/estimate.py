"""Score one given layout (the `plan estimate` command) with the same models and constraints."""
from __future__ import annotations

import numpy as np

from .constraints import Limits, evaluate
from .errors import SpecError
from .report import layout_json
from .score import score
from .space import RECOMPUTE_MODES, single_layout
from .specs import ClusterSpec, ModelSpec


def structural_violations(model: ModelSpec, gpus: int, dp: int, tp: int, pp: int, mb: int, vpp: int, sp: bool,
                          zero: int) -> list[dict]:
    """The layout-space rules of planner.space, as messages for one layout."""
    b = model.training.global_batch
    out = []

    def bad(rule, msg):
        out.append({"constraint": rule, "message": msg})

    if model.heads % tp or model.num_kv_heads % tp:
        bad("tp_divides_heads", f"tp={tp} must divide heads ({model.heads}) and kv_heads ({model.num_kv_heads})")
    if pp > model.layers:
        bad("pp_at_most_layers", f"pp={pp} is more than the {model.layers} layers")
    if b % (dp * mb):
        bad("batch_divides", f"global batch {b} is not a multiple of dp*micro_batch = {dp}*{mb}")
    elif vpp > 1:
        m = b // (dp * mb)
        if pp < 2 or m % pp or model.layers % (pp * vpp):
            bad("interleaving", f"vpp={vpp} needs pp >= 2, num_microbatches ({m}) divisible by pp ({pp}) "
                f"and layers ({model.layers}) divisible by pp*vpp ({pp * vpp})")
    if sp and tp == 1:
        bad("sequence_parallel_needs_tp", "sequence parallelism needs tp > 1")
    if zero and dp == 1:
        bad("zero_needs_dp", f"ZeRO stage {zero} shards over dp, but dp = 1")
    return out


def estimate_layout(model: ModelSpec, cluster: ClusterSpec, *, tp: int, pp: int, micro_batch: int, dp: int | None = None,
                    gpus: int | None = None, vpp: int = 1, recompute: str = "none", sequence_parallel: bool = False,
                    zero: int = 0, limits: Limits = Limits()) -> dict:
    for flag, v in (("--tp", tp), ("--pp", pp), ("--micro-batch", micro_batch), ("--vpp", vpp)):
        if v <= 0:
            raise SpecError(f"must be positive, got {v}", path=flag, expected="an integer > 0")
    if recompute not in RECOMPUTE_MODES:
        raise SpecError(f"unknown mode '{recompute}'", path="--recompute", expected=" | ".join(RECOMPUTE_MODES))
    if zero not in (0, 1, 2, 3):
        raise SpecError(f"ZeRO stage {zero} does not exist", path="--zero", expected="0, 1, 2 or 3")
    if dp is None:
        total = gpus or cluster.total_gpus
        if total % (tp * pp):
            raise SpecError(f"tp*pp = {tp * pp} does not divide the {total} GPUs", path="--tp/--pp",
                            expected=f"degrees whose product divides {total}, or --dp")
        dp = total // (tp * pp)
    elif gpus is not None and dp * tp * pp != gpus:
        raise SpecError(f"dp*tp*pp = {dp}*{tp}*{pp} = {dp * tp * pp}, but --gpus is {gpus}", path="--dp/--tp/--pp",
                        expected=f"degrees whose product is {gpus}")
    structural = structural_violations(model, dp * tp * pp, dp, tp, pp, micro_batch, vpp, sequence_parallel, zero)
    nmb = max(model.training.global_batch // (dp * micro_batch), 1)
    lay = single_layout(dp=dp, tp=tp, pp=pp, micro_batch=micro_batch, vpp=vpp, recompute=recompute,
                        sequence_parallel=sequence_parallel, zero=zero, num_microbatches=nmb)
    scores = score(model, cluster, lay)
    masks = evaluate(model, cluster, scores, limits)
    violations = structural + [{"constraint": m.name, "message": m.explain(0)} for m in masks if not bool(np.asarray(m.ok)[0])]
    return layout_json(scores, 0, violations)
