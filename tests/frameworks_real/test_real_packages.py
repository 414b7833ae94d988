"""The exports fed to the real packages a user installs (issue 38): torchtitan 0.3.0's ConfigManager (tyro over
Trainer.Config, with Trainer.Config's own checks) and ParallelDims, DeepSpeed 0.19.8's DeepSpeedConfig with its batch
check, each on the CPU, config parsing and validation only; what they parsed is compared with what was planned.

Install: `pip install -e ".[test,frameworks]"` in a separate environment (torch 2.13.0 is the CPU wheel on the
machines' disk); .ci/run's second step does it. Skipped, saying why, where a package does not import. megatron-core
0.19 (Python >= 3.12) and Megatron-Bridge (builds Transformer Engine, ~20 min) are not installed: their exports are
checked against the vendored parser text (tests/export/test_roundtrip.py)."""
from __future__ import annotations

import json
import types

import pytest

from planner.estimate import estimate_layout
from planner.export import export_settings
from planner.specs.loading import load_cluster, load_model

# a few shipped models, dense and MoE, at 64-256 GPUs; 2-3 layouts each that both frameworks run
MODELS = ("llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt3-175b")


def titan_layouts(m) -> list[dict]:
    """FSDP with pp and full recompute; DDP (ZeRO-0) with cp; FSDP with interleaved stages (ep within dp_shard*cp*tp)."""
    moe = dict(ep=4) if m.moe is not None else {}
    return [dict(gpus=64, tp=2, pp=2, micro_batch=1, zero=3, recompute="full", sequence_parallel=True) | moe,
            dict(gpus=64, tp=2, cp=2, pp=1, micro_batch=1, zero=0, sequence_parallel=True) | (dict(ep=2) if moe else {}),
            dict(gpus=128, tp=4, pp=4, vpp=2, micro_batch=1, zero=2, sequence_parallel=True) | moe]


def ds_layouts(m) -> list[dict]:
    """What DeepSpeed runs: cp 1, vpp 1, ZeRO 0/1 with pp, no ZeRO-3 with MoE."""
    return [dict(gpus=64, tp=2, pp=2, micro_batch=1, zero=1, recompute="full", sequence_parallel=True),
            dict(gpus=64, tp=1, pp=1, micro_batch=2, zero=2 if m.moe else 3),
            dict(gpus=128, tp=4, pp=1, micro_batch=1, zero=2, recompute="selective")]


def _cases(layouts):
    return [pytest.param(name, i, id=f"{name}-{i}") for name in MODELS for i in range(len(layouts(load_model(name))))]


def _scored(name, given):
    m, c = load_model(name), load_cluster("dgx-h100-1024")
    return m, c, estimate_layout(m, c, **given)


# --- torchtitan 0.3.0 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def titan():
    pytest.importorskip("torch", reason="torch (CPU 2.13.0) is not installed: pip install -e '.[frameworks]'")
    tt = pytest.importorskip("torchtitan", reason="torchtitan is not installed: pip install -e '.[frameworks]'")
    from importlib.metadata import version

    assert version("torchtitan") == "0.3.0", "--export torchtitan writes for the release 0.3.0"
    try:
        from torchtitan.config.manager import ConfigManager
        from torchtitan.distributed import ParallelDims
    except ImportError as e:  # e.g. triton missing beside a CPU torch
        pytest.skip(f"torchtitan does not import here: {e}")
    return types.SimpleNamespace(module=tt, ConfigManager=ConfigManager, ParallelDims=ParallelDims)


def titan_parse(titan, argv):
    """ConfigManager.parse_args as `torchtitan/train.py --module llama3 --config llama3_debugmodel <argv>` runs it:
    tyro over Trainer.Config (an unknown name or a bad value exits), then Trainer.Config.__post_init__'s checks.
    The layout settings are the model's no matter which model module loads them."""
    try:
        return titan.ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel", *argv])
    except SystemExit as e:  # tyro prints the unknown or malformed argument and exits
        raise AssertionError(f"torchtitan's CLI refused {argv}") from e


@pytest.mark.parametrize("name, i", _cases(titan_layouts))
def test_torchtitan_release_parses_what_was_planned(titan, name, i):
    m = load_model(name)
    m, c, scored = _scored(name, titan_layouts(m)[i])
    lay = scored.layout
    export = export_settings("torchtitan", scored, m, c)
    cfg = titan_parse(titan, list(export.argv))
    p, t = cfg.parallelism, cfg.training
    gpus = lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]
    # parallel_dims.py: ParallelDims._validate (dp_shard -1 filled in, the product equal to the world size)
    dims = titan.ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                              cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                              ep=p.expert_parallel_degree, world_size=gpus)
    assert dims.dp_shard * dims.cp * dims.tp % dims.ep == 0  # the expert mesh efsdp = dp_shard*cp*tp // ep
    # trainer.py: the sequence divides by (tp if sequence parallel) x 2cp; accumulation and pipeline micro-batches
    divisor = (dims.tp if p.enable_sequence_parallel else 1) * (2 * dims.cp if dims.cp > 1 else 1)
    assert t.seq_len % divisor == 0
    batch_degree = dims.dp_replicate * dims.dp_shard
    accumulation = t.global_batch_size // (t.local_batch_size * batch_degree)
    assert t.global_batch_size % (t.local_batch_size * batch_degree) == 0
    pp_micro = t.local_batch_size // p.pipeline_parallel_microbatch_size if dims.pp > 1 else 1
    micro = p.pipeline_parallel_microbatch_size if dims.pp > 1 else t.local_batch_size
    per_step = m.training.global_batch // (lay["micro_batch"] * lay["dp"])
    fsdp = lay["zero"] >= 2
    assert dict(dp=batch_degree, dp_shard=dims.dp_shard, tp=dims.tp, pp=dims.pp, cp=dims.cp, ep=dims.ep,
                micro=micro, micro_batches=pp_micro * accumulation, global_batch=t.global_batch_size, seq=t.seq_len,
                reshard=p.fsdp_reshard_after_forward, precision=t.mixed_precision_param,
                full_ac=type(cfg.activation_checkpoint).__qualname__.startswith("FullAC"),
                sequence_parallel=p.enable_sequence_parallel or dims.tp == 1) == dict(
        dp=lay["dp"], dp_shard=lay["dp"] if fsdp else 1, tp=lay["tp"], pp=lay["pp"], cp=lay["cp"], ep=lay["ep"],
        micro=lay["micro_batch"], micro_batches=per_step, global_batch=m.training.global_batch, seq=m.seq_len,
        reshard={3: "always", 2: "never"}.get(lay["zero"], "default"), precision="bfloat16",
        full_ac=lay["recompute"] == "full", sequence_parallel=lay["sequence_parallel"] or lay["tp"] == 1)
    if lay["pp"] > 1:  # the planner's pipeline runs a step's micro-batches in one pass
        assert accumulation == 1 and p.pipeline_parallel_degree == lay["pp"]
        stages = lay["pp"] * lay.get("vpp", 1)
        assert p.pipeline_parallel_schedule == ("Interleaved1F1B" if stages > lay["pp"] else "1F1B")


def test_torchtitan_release_refuses_mains_names(titan):
    # issue 38: --export torchtitan wrote main's names, which 0.3.0 does not know (0 of 28 parsed)
    m, c, scored = _scored("llama3.1-8b", titan_layouts(load_model("llama3.1-8b"))[0])
    with pytest.raises(AssertionError, match="refused"):
        titan_parse(titan, list(export_settings("torchtitan@main", scored, m, c).argv))


# --- DeepSpeed 0.19.8 ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deepspeed_config():
    pytest.importorskip("torch", reason="torch (CPU 2.13.0) is not installed: pip install -e '.[frameworks]'")
    pytest.importorskip("deepspeed", reason="deepspeed is not installed: DS_BUILD_OPS=0 pip install -e '.[frameworks]'")
    try:
        from deepspeed.runtime import config as ds_config
    except ImportError as e:
        pytest.skip(f"deepspeed does not import here: {e}")
    return ds_config


def ds_parse(ds_config, cfg: dict, dp: int, monkeypatch):
    """DeepSpeedConfig(cfg, mpu) on `dp` data-parallel ranks: its world size is the mpu's data-parallel size (the
    model code's tp/pp groups excluded); no process group is started (rank 0)."""
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    mpu = types.SimpleNamespace(get_data_parallel_world_size=lambda: dp, get_sequence_parallel_world_size=lambda: 1)
    return ds_config.DeepSpeedConfig(cfg, mpu=mpu)


@pytest.mark.parametrize("name, i", _cases(ds_layouts))
def test_deepspeed_parses_what_was_planned(deepspeed_config, monkeypatch, name, i):
    m = load_model(name)
    m, c, scored = _scored(name, ds_layouts(m)[i])
    lay = scored.layout
    got = ds_parse(deepspeed_config, json.loads(export_settings("deepspeed", scored, m, c).text), lay["dp"], monkeypatch)
    assert got.world_size == lay["dp"]
    assert dict(micro=got.train_micro_batch_size_per_gpu, accumulation=got.gradient_accumulation_steps,
                global_batch=got.train_batch_size, zero=int(got.zero_optimization_stage), bf16=got.bfloat16_config.enabled,
                fp16=got.float16_config.enabled) == dict(
        micro=lay["micro_batch"], accumulation=m.training.global_batch // (lay["micro_batch"] * lay["dp"]),
        global_batch=m.training.global_batch, zero=lay["zero"], bf16=m.training.precision != "fp16",
        fp16=m.training.precision == "fp16")


def test_deepspeed_refuses_a_batch_that_does_not_multiply(deepspeed_config, monkeypatch):
    # _batch_assertion: train_batch_size = micro-batch x accumulation x world size, checked by DeepSpeed itself
    m, c, scored = _scored("llama3.1-8b", ds_layouts(load_model("llama3.1-8b"))[0])
    cfg = json.loads(export_settings("deepspeed", scored, m, c).text)
    with pytest.raises(AssertionError):
        ds_parse(deepspeed_config, cfg, scored.layout["dp"] * 2, monkeypatch)
