"""Launch settings of a layout for a training framework (`plan search/estimate --export KIND`).

Each framework is one module (export_megatron, export_nemo, export_torchtitan, export_deepspeed) whose
names are checked in tests/export/test_export.py against that framework's own source, vendored with its tag
and commit in tests/data/frameworks/. What a layout has that the framework cannot express is said in
`Export.notes` (and, for the line-oriented formats, as `# ...` lines at the top of the text), never
guessed. The Megatron-LM split helpers live in export_megatron and are re-exported here.
"""
from __future__ import annotations

from dataclasses import replace

from planner.export.bridge import bridge_settings
from planner.export.common import Export, comments, is_even, launch, runs, visible
from planner.export.deepspeed import deepspeed_settings
from planner.export.frameworks import framework_of_export, refuse_unrunnable
from planner.export.megatron import megatron_first_last, megatron_layout, megatron_pipeline_args, megatron_settings
from planner.export.nemo import nemo_settings
from planner.export.torchtitan import torchtitan_settings
from planner.results import ScoredLayout
from planner.specs import ClusterSpec, ModelSpec

__all__ = ["EXPORTS", "Export", "export_settings", "is_even", "megatron_first_last", "megatron_layout",
           "megatron_pipeline_args", "runs"]

# torchtitan: the release on PyPI, 0.3.0; torchtitan@main: main at b5bcd76 (2026-08-21); torchtitan@0.2: release
# v0.2.2's older names; megatron-bridge: Megatron-Bridge v0.6.0 run_recipe.py overrides
EXPORTS = ("megatron", "nemo", "torchtitan", "deepspeed", "torchtitan@0.2", "megatron-bridge", "torchtitan@main")
_TITAN_REV = {"torchtitan": "0.3", "torchtitan@main": "main", "torchtitan@0.2": "0.2"}


def export_settings(kind: str, scored: ScoredLayout, model: ModelSpec, cluster: ClusterSpec) -> Export:
    """The launch settings of `scored.layout` for framework `kind` (one of EXPORTS)."""
    if kind not in EXPORTS:
        raise ValueError(f"unknown export {kind!r}; choose one of: {', '.join(EXPORTS)}")
    refuse_unrunnable(framework_of_export(kind), scored.layout, model)
    lay = launch(scored.layout, model)
    serialized = _fsdp_without_tp_overlap(kind, lay, model, cluster)
    if serialized:
        model = model.model_copy(update={"training": model.training.model_copy(update={"tp_comm_overlap": False})})
    if kind == "megatron":
        settings = megatron_settings(lay, model)
    elif kind == "megatron-bridge":
        settings = bridge_settings(lay, model, tp_overlap_off=bool(serialized))
    elif kind == "nemo":
        settings = nemo_settings(lay, model, cluster)
    elif kind in _TITAN_REV:
        settings = torchtitan_settings(lay, model, rev=_TITAN_REV[kind])
    else:
        settings = deepspeed_settings(lay, model)
    if serialized:
        settings = replace(settings, text="\n".join([*comments([serialized]), settings.text]),
                           notes=[visible(serialized), *settings.notes])
    return _with_power_cap(settings, kind, scored)


def _fsdp_without_tp_overlap(kind: str, lay, model: ModelSpec, cluster: ClusterSpec) -> str | None:
    """The note of a Megatron FSDP layout (ZeRO-2/3) with tp > 1 on a GPU before Blackwell, which the
    search prices without TP overlap (planner/costs/comm.py fsdp_blocks_tp_overlap); None otherwise."""
    from planner.costs.comm import fsdp_blocks_tp_overlap

    if kind not in ("megatron", "megatron-bridge", "nemo") or lay.zero < 2 or lay.tp == 1 or not model.training.tp_comm_overlap:
        return None
    if not fsdp_blocks_tp_overlap(model, cluster.gpu):
        return None
    note = (f"no TP communication overlap: Megatron FSDP (ZeRO-{lay.zero}) needs CUDA_DEVICE_MAX_CONNECTIONS unset, "
            f"which TP overlap before Blackwell wants set to 1 (Megatron-LM arguments.py: 'Try not to using them "
            f"together'); priced so")
    if kind == "megatron-bridge":  # a recipe's CommOverlapConfig writes its own tp_comm_overlap at setup
        note += ("; a recipe that sets a CommOverlapConfig (the Llama 3 70B/405B H100 recipes do) writes its "
                 "tp_comm_overlap into the model at setup: add comm_overlap.tp_comm_overlap=false there")
    return note


def _with_power_cap(settings: Export, kind: str, scored: ScoredLayout) -> Export:
    """A power cap the layout was scored under is no framework's setting: said, with how to set it."""
    if scored.power_cap is None:
        return settings
    note = (f"the layout was scored with GPUs capped at {scored.power_cap.power_cap_w:g} W: no {kind} setting; "
            f"set it on every node, e.g. nvidia-smi -pl {scored.power_cap.power_cap_w:g}")
    text = settings.text if kind == "deepspeed" else "\n".join([*comments([note]), settings.text])
    return replace(settings, text=text, notes=[visible(note), *settings.notes])
