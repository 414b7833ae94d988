"""Every shipped model's --export megatron and --export megatron-bridge, at the layouts below, through the checks the
framework runs at start-up (issue 38, real frameworks), as code where it is pure Python:

- megatron-layout.txt: Megatron-LM's own PipelineParallelLayerLayout (parser, validate_layer_layout) and
  TransformerConfig.__post_init__'s pipeline statements, verbatim (BSD-3-Clause, its licence in the file's header),
  at core_v0.15.0 (--export megatron) and at cd4afffa64 (Megatron-Bridge v0.6.0's Megatron-LM), exec'd here;
- megatron-bridge-checks.txt: the Megatron-Bridge v0.6.0 lines that need torch to run (Megatron-FSDP's checkpoint
  format, the precision-aware optimizer's distributed optimizer, the activation names), re-implemented exactly
  below, each citing its section.

A Bridge recipe's own values count where an override leaves them: the worst a shipped recipe sets (DeepSeek-V3's
16-stage layout and precision-aware optimizer, Llama 3's embedding/loss accounting, GPTModelProvider's F.gelu)."""
from __future__ import annotations

import argparse
import enum
import importlib.util
import sys
import types
from functools import cache
from pathlib import Path

import pytest

from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.export.common import launch
from planner.specs.loading import load_cluster, load_model
from planner.specs.shipped import shipped_names

HERE = Path(__file__).resolve().parent
FRAMEWORKS = HERE.parent / "data" / "frameworks"
# hybrid models: their exports are tests/export/test_hybrid_export.py's
MODELS = [n for n in shipped_names("model") if load_model(n).layer_pattern is None]
CORE, BRIDGE_CORE = "core_v0.15.0", "cd4afffa64"


def _roundtrip():
    """tests/export/test_roundtrip.py's readers (parse_megatron, parse_bridge): --import-mode=importlib has no
    sibling imports."""
    spec = importlib.util.spec_from_file_location("export_roundtrip_readers", HERE / "test_roundtrip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


READ = _roundtrip()


@cache
def megatron_code(rev: str) -> tuple[type, types.FunctionType, type]:
    """(PipelineParallelLayerLayout, TransformerConfig's pipeline statements as a function of `self`, LayerType)
    of Megatron-LM at `rev`, exec'd from the vendored source. The layout module's two megatron imports are
    the vendored LayerType and parallel_state (which only get_num_layers_to_build reads: not called here)."""
    text = (FRAMEWORKS / "megatron-layout.txt").read_text()
    sections = {s.splitlines()[0]: "\n".join(s.splitlines()[1:]) for s in text.split("\n## ")[1:]}
    [enums] = [v for k, v in sections.items() if k.startswith(f"{rev} megatron/core/transformer/enums.py")]
    [layout] = [v for k, v in sections.items() if k.startswith(f"{rev} megatron/core/transformer/pipeline_parallel_layer_layout.py")]
    [checks] = [v for k, v in sections.items() if k.startswith(f"{rev} megatron/core/transformer/transformer_config.py")]
    env: dict = {"enum": enum}
    exec(enums, env)
    imports = ("from megatron.core import parallel_state", "from megatron.core.transformer.enums import LayerType")
    assert all(line in layout.splitlines() for line in imports)
    code = {"__name__": "pipeline_parallel_layer_layout", "LayerType": env["LayerType"], "parallel_state": None}
    exec("\n".join(line for line in layout.splitlines() if line not in imports), code)
    fn: dict = {"PipelineParallelLayerLayout": code["PipelineParallelLayerLayout"]}
    exec("def pipeline_checks(self):\n" + "\n".join("    " + line for line in checks.splitlines()), fn)
    return code["PipelineParallelLayerLayout"], fn["pipeline_checks"], env["LayerType"]


@pytest.fixture(autouse=True)
def _megatron_utils(monkeypatch):
    """PipelineParallelLayerLayout.from_str logs through megatron.core.utils.log_single_rank: a no-op here."""
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = lambda *args, **kwargs: None
    for name, module in (("megatron", types.ModuleType("megatron")), ("megatron.core", types.ModuleType("megatron.core")),
                         ("megatron.core.utils", utils)):
        monkeypatch.setitem(sys.modules, name, module)


def built_split(cfg: types.SimpleNamespace, rev: str) -> list[int]:
    """Decoder layers per virtual stage in schedule order (j pp + r) as Megatron builds them after the checks:
    from the parsed layout, or (transformer_block.py get_num_layers_to_build) first/last rank counts with the
    middle ranks sharing the rest evenly, else an even split; each rank's count split evenly over its chunks."""
    layer_type = megatron_code(rev)[2]
    pp, vpp = cfg.pipeline_model_parallel_size, cfg.virtual_pipeline_model_parallel_size or 1
    layout = cfg.pipeline_model_parallel_layout
    if layout is not None:
        return [layout.layout[r][j].count(layer_type.decoder) for j in range(vpp) for r in range(pp)]
    first, last = cfg.num_layers_in_first_pipeline_stage, cfg.num_layers_in_last_pipeline_stage
    if first is None and last is None:
        return [cfg.num_layers // pp // vpp] * (pp * vpp)
    middle = (cfg.num_layers - first - last) // (pp - 2)
    return [(first if r == 0 else last if r == pp - 1 else middle) // vpp for j in range(vpp) for r in range(pp)]


def layouts(m) -> list[dict]:
    """pp 4 at the default split with ZeRO-1 and with ZeRO-3; an uneven split first/last counts state; one only
    a layout states (uneven middle ranks); pp 2 x vpp 2 uneven (a layout, interleaved)."""
    L, moe = m.layers, m.moe is not None
    base = dict(gpus=64, tp=1, micro_batch=1, ep=8 if moe else 1)
    b = L // 4
    out = [base | dict(pp=4, zero=1), base | dict(pp=4, zero=3),
           base | dict(pp=4, zero=1, stage_layers=[b - 1, b, b, L - 3 * b + 1]),
           base | dict(pp=4, zero=0, stage_layers=[b + 1, b - 1, b, L - 3 * b])]
    q = L // 4
    out.append(base | dict(pp=2, vpp=2, zero=1, stage_layers=[q - 1, q, q, L - 3 * q + 1]))
    return out


CASES = [(name, k) for name in MODELS for k in range(5)]


@cache
def exported(name: str, k: int, kind: str):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    given = layouts(m)[k]
    scored = estimate_layout(m, c, **given)
    return m, scored, export_settings(kind, scored, m, c)


@pytest.mark.parametrize("name,k", CASES)
def test_megatron_lm_pipeline_checks_pass(name, k):
    """--export megatron through core_v0.15.0's arguments.py layout handling and TransformerConfig's pipeline
    checks (validate_layer_layout: "Number of mtp layers in layout must match mtp_num_layers"), then the split
    Megatron builds is the one planned."""
    m, scored, export = exported(name, k, "megatron")
    ns = READ.parse_megatron(export.text)
    layout_cls, checks, _ = megatron_code(CORE)
    vpp = ns.num_virtual_stages_per_pipeline_rank
    if ns.pipeline_model_parallel_layout is not None:
        # arguments.py validate_args: the stage count divides by pp and gives vpp (None for 1)
        stages = layout_cls.get_num_stages_from_str(ns.pipeline_model_parallel_layout)
        assert stages % ns.pipeline_model_parallel_size == 0
        vpp = stages // ns.pipeline_model_parallel_size if stages > ns.pipeline_model_parallel_size else None
    cfg = types.SimpleNamespace(
        num_layers=ns.num_layers, mtp_num_layers=ns.mtp_num_layers, pipeline_model_parallel_size=ns.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=vpp, pipeline_model_parallel_layout=ns.pipeline_model_parallel_layout,
        num_layers_in_first_pipeline_stage=ns.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=ns.decoder_last_pipeline_num_layers,
        account_for_embedding_in_pipeline_split=ns.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=ns.account_for_loss_in_pipeline_split)
    checks(cfg)
    assert built_split(cfg, CORE) == list(launch(scored.layout, m).stage_layers)


def test_the_mtp_layer_sits_with_the_loss():
    # DeepSeek-V3: 61 layers, one MTP layer; [16, 14, 15, 16] has no first/last form (uneven middle ranks)
    m, c = load_model("deepseek-v3"), load_cluster("dgx-h100-1024")
    scored = estimate_layout(m, c, gpus=64, tp=1, pp=4, ep=8, micro_batch=1, zero=1, stage_layers=[16, 14, 15, 16])
    ns = READ.parse_megatron(export_settings("megatron", scored, m, c).text)
    assert ns.pipeline_model_parallel_layout == "Et*16|t*14|t*15|t*16mL"
    layout_cls = megatron_code(CORE)[0]
    # the vendored check refuses the layout without its "m", with Megatron's own message
    with pytest.raises(AssertionError, match="Number of mtp layers in layout must match mtp_num_layers"):
        layout_cls("Et*16|t*14|t*15|t*16L", 4).validate_layer_layout(num_layers=61, mtp_num_layers=1)


# --- Megatron-Bridge v0.6.0 -------------------------------------------------------------------------------------------
def recipe_worst(m) -> dict:
    """What a shipped recipe may leave set where no override says otherwise (megatron-bridge-checks.txt): the
    DeepSeek-V3 recipe's pp 16 layout (set_deepseek_v3_pipeline_model_parallel_layout's (16, 1) entry) and its
    precision-aware optimizer, Llama 3's accounting flags, the checkpoint format's default (torch_dist) and
    GPTModelProvider's F.gelu."""
    last = ["decoder"] + ["mtp"] * (m.mtp_layers or 0) + ["loss"]
    return {"model.pipeline_model_parallel_layout": [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + [last],
            "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
            "model.account_for_embedding_in_pipeline_split": True, "model.account_for_loss_in_pipeline_split": True,
            "optimizer.use_precision_aware_optimizer": True, "checkpoint.ckpt_format": "torch_dist",
            "model.activation_func": "gelu", "model.mtp_num_layers": None, "ddp.use_megatron_fsdp": False}


def bridge_config(name: str, k: int):
    m, scored, export = exported(name, k, "megatron-bridge")
    _, got = READ.parse_bridge(export.text)
    return m, scored, recipe_worst(m) | got


@pytest.mark.parametrize("name,k", CASES)
def test_megatron_bridge_pipeline_checks_pass(name, k):
    """Bridge's model provider finalizes into Megatron Core's TransformerConfig (cd4afffa64): its pipeline
    statements run as code over the overrides (a recipe's layout of another length, its accounting flags beside
    first/last counts, are refused there), then the split Bridge builds is the one planned."""
    m, scored, cfg = bridge_config(name, k)
    ns = types.SimpleNamespace(
        num_layers=cfg["model.num_layers"], mtp_num_layers=cfg["model.mtp_num_layers"],
        pipeline_model_parallel_size=cfg["model.pipeline_model_parallel_size"],
        virtual_pipeline_model_parallel_size=cfg["model.virtual_pipeline_model_parallel_size"],
        **{key: cfg["model." + key] for key in ("pipeline_model_parallel_layout", "num_layers_in_first_pipeline_stage",
                                                 "num_layers_in_last_pipeline_stage", "account_for_embedding_in_pipeline_split",
                                                 "account_for_loss_in_pipeline_split")})
    megatron_code(BRIDGE_CORE)[1](ns)
    assert built_split(ns, BRIDGE_CORE) == list(launch(scored.layout, m).stage_layers)


@pytest.mark.parametrize("name,k", CASES)
def test_megatron_bridge_optimizer_and_checkpoint_checks_pass(name, k):
    """Re-implemented from megatron-bridge-checks.txt (they need torch): OptimizerConfig.__post_init__ asserts
    `self.use_distributed_optimizer` under `if self.use_precision_aware_optimizer:` and runs in
    ConfigContainer.validate's `self.optimizer.finalize()`, before `_validate_and_apply_megatron_fsdp_configs`
    turns the distributed optimizer on; that one asserts `self.checkpoint.ckpt_format == "fsdp_dtensor"` (the
    recipes save checkpoints) when ddp.use_megatron_fsdp."""
    m, scored, cfg = bridge_config(name, k)
    if cfg["optimizer.use_precision_aware_optimizer"]:
        assert cfg["optimizer.use_distributed_optimizer"], "--use-precision-aware-optimizer only supported with distributed optimizer"
    if cfg["ddp.use_megatron_fsdp"]:
        assert cfg["checkpoint.ckpt_format"] == "fsdp_dtensor", "Megatron-FSDP requires the fsdp_dtensor checkpointing format!"
    zero = scored.layout["zero"]
    assert cfg["ddp.use_megatron_fsdp"] == (zero >= 2) and cfg["optimizer.use_distributed_optimizer"] == (zero >= 1)


@pytest.mark.parametrize("name", MODELS)
def test_megatron_bridge_builds_the_planned_activation(name):
    """The MLP activation Bridge builds (gated_linear_unit with activation_func, read back by name through
    activation_map.py) is the spec's: SwiGLU is silu gated, GeLU ungated gelu. A clamped SwiGLU (GPT-OSS) stays
    the recipe provider's quick_gelu, said in a note."""
    m, _, cfg = bridge_config(name, 0)
    _, _, export = exported(name, 0, "megatron-bridge")
    if m.swiglu_limit is not None:
        assert "model.activation_func" not in READ.parse_bridge(export.text)[1]
        assert any("quick_gelu" in note for note in export.notes)
    elif m.ffn_act == "swiglu":
        assert (cfg["model.activation_func"], cfg["model.gated_linear_unit"]) == ("silu", True)
    else:
        assert (cfg["model.activation_func"], cfg["model.gated_linear_unit"]) == ("gelu", False)


def test_mixtral_is_swiglu_in_bridge():
    # the case: Mixtral 8x7B has no v0.6.0 recipe; vanilla_gpt_pretrain_config's provider is F.gelu
    _, _, export = exported("mixtral-8x7b", 0, "megatron-bridge")
    recipe, got = READ.parse_bridge(export.text)
    assert recipe == "vanilla_gpt_pretrain_config" and got["model.activation_func"] == "silu"
    assert "silu" in READ.activation_names() and "activation_func" in READ.serializable_callables()
