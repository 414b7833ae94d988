"""Host-memory offload in the exports (issue 40 item 2): each framework's own settings, refusals where a
framework has none (planner/export/frameworks.py RESTRICTIONS, sources in tests/data/frameworks/restrictions.txt;
names against the vendored lists of tests/export/test_export.py)."""
import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from tests.export.test_export import megatron_flags, nemo_paths

runner = CliRunner()
# Llama 3 8B (32 layers) on one DGX H100: pp 1, as Megatron Core's activation offload needs
ESTIMATE = ["estimate", "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"]


def export(kind, *extra):
    r = runner.invoke(app, [*ESTIMATE, *extra, "--export", kind])
    assert r.exit_code in (0, 1), r.output  # 1: exported, and the layout does not fit (memory is not the point here)
    return r.stdout


def test_megatron_lm_optimizer_offload_flags_are_its_own():
    text = export("megatron", "--zero", "1", "--offload", "optimizer")
    flags = ["--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0", "--overlap-cpu-optimizer-d2h-h2d",
             "--use-precision-aware-optimizer", "--use-distributed-optimizer"]
    assert all(f in text for f in flags)
    assert {f.split()[0] for f in flags} <= set(megatron_flags())
    assert "--optimizer-cpu-offload" not in export("megatron", "--zero", "1")


def test_bridge_and_nemo_offload_fields():
    bridge = export("megatron-bridge", "--zero", "1", "--offload", "both")
    for field in ("optimizer.optimizer_cpu_offload=true", "optimizer.overlap_cpu_optimizer_d2h_h2d=true",
                  "optimizer.use_precision_aware_optimizer=true", "model.cpu_offloading=true",
                  # the fewest layers that fit 80 GiB less 5 %: 89.2469 GiB without activation offload (its
                  # optimizer offload alone), 36 GiB of activations over 32 layers = 1.125 per layer:
                  # ceil((89.2469 - 76) / 1.125) = ceil(11.78) = 12 (tests/costs/test_offload_layers.py)
                  "model.cpu_offloading_num_layers=12"):
        assert field in bridge, bridge
    nemo = export("nemo", "--zero", "1", "--offload", "both")
    for field in ("optim.config.optimizer_cpu_offload=True", "optim.config.optimizer_offload_fraction=1.0",
                  "model.config.cpu_offloading=True", "model.config.cpu_offloading_num_layers=12"):
        assert field in nemo, nemo
    names = nemo_paths()
    assert {"optimizer_cpu_offload", "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
            "use_precision_aware_optimizer"} <= names["optim.config"]
    assert {"cpu_offloading", "cpu_offloading_num_layers"} <= names["model.config"]


def test_torchtitan_offloads_through_fsdp():
    text = runner.invoke(app, [*ESTIMATE, "--zero", "3", "--offload", "optimizer", "--export", "torchtitan"]).output
    assert "--training.enable_cpu_offload" in text and "CPUOffloadPolicy" in text


def test_deepspeed_offload_sections():
    cfg = json.loads(export("deepspeed", "--zero", "2", "--offload", "optimizer"))
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    cfg = json.loads(export("deepspeed", "--zero", "1", "--recompute", "full", "--offload", "activations"))
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is True
    assert "offload_optimizer" not in cfg["zero_optimization"]


@pytest.mark.parametrize("export_kind, extra, fragment", [
    ("megatron", ["--offload", "activations"], "no command-line flag for activation offload"),
    ("megatron-bridge", ["--offload", "activations", "--recompute", "full"], "refuses activation recomputation"),
    ("nemo", ["--offload", "optimizer", "--zero", "0"], "needs the distributed optimizer"),
    ("torchtitan", ["--offload", "activations", "--zero", "3"], "it has no activation offload"),
    ("torchtitan@0.2", ["--offload", "both", "--zero", "3"], "it has no activation offload"),
    ("deepspeed", ["--offload", "activations"], "offload activations needs recompute full"),
    ("deepspeed", ["--offload", "optimizer", "--zero", "0"], "offload optimizer needs ZeRO stage 1 or more"),
])
def test_a_framework_without_the_offload_refuses_it(export_kind, extra, fragment):
    for option in ("--export", "--framework"):
        r = runner.invoke(app, [*ESTIMATE, *extra, option, export_kind])
        assert r.exit_code == 2 and fragment in r.output, (option, r.output)


def test_megatron_core_activation_offload_refuses_pipelines():
    r = runner.invoke(app, ["estimate", "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "2",
                            "--micro-batch", "1", "--offload", "activations", "--export", "nemo"])
    assert r.exit_code == 2 and "refuses pipeline parallelism" in r.output
