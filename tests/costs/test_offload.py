"""Host-memory offload (planner/costs/offload.py): what leaves the GPU, the host bytes and the time,
derived by hand below from the datasheet figures of the shipped DGX H100 node (PCIe Gen5 x16 64 GB/s
per direction, 2 x 8 DDR5-4800 channels = 614.4 GB/s, 2 TB) and the mechanisms the module cites."""
import pytest

from planner.costs import offload
from planner.estimate import estimate_layout
from planner.specs import NodeSpec
from planner.specs.loading import load_cluster, load_model
from planner.specs.precision import precision

GIB = 2**30
BF16 = precision("bf16")  # 2 B weights, 4 B fp32 main grads, 12 B master weights + moments


def node(**host):
    fields = dict(gpus=8, nvlink_gbps=450, network_gbps=50, host_memory_gib=2048, host_link_gbps=64,
                  host_memory_gbps=614.4)
    return NodeSpec(**{**fields, **host})


def test_link_is_the_datasheets_rate_or_the_host_memory_shared_both_ways():
    # 64 GB/s x 0.85 = 54.4 GB/s; 8 GPUs both ways on 614.4 GB/s of DDR5: 614.4 / 16 = 38.4 GB/s, less
    assert offload.host_link_bytes_per_s(node(), 8) == pytest.approx(38.4e9)
    # with 2,000 GB/s of host memory (125 GB/s per GPU per direction) the link's 54.4 binds
    assert offload.host_link_bytes_per_s(node(host_memory_gbps=2000), 8) == pytest.approx(54.4e9)
    # a job of 2 GPUs on the node: 614.4 / 4 = 153.6 GB/s each, the link binds
    assert offload.host_link_bytes_per_s(node(), 2) == pytest.approx(54.4e9)


def test_a_7b_models_optimizer_on_the_host_of_8_gpus():
    # 7e9 parameters over dp 8 (ZeRO-1): 875e6 per GPU
    shard = 7e9 / 8
    # host: (12 B master weights and moments + 4 B fp32 gradients) x 875e6 = 14.0e9 B
    assert offload.host_optimizer_bytes(shard, BF16) == pytest.approx(14.0e9)
    # gradients 4 B x 875e6 / 38.4e9 = 0.0911 s; weights 2 B x 875e6 / 38.4e9 = 0.0456 s;
    # CPU Adam 30 B x 875e6 over 614.4 / 8 = 76.8 GB/s = 0.3418 s: the CPU step is the slowest
    assert offload.optimizer_step_s(shard, node(), 8, BF16) == pytest.approx(30 * 875e6 / 76.8e9)
    # with 20,000 GB/s of host memory the link binds: 4 x 875e6 / 54.4e9 = 0.0643 s
    assert offload.optimizer_step_s(shard, node(host_memory_gbps=20000), 8, BF16) == pytest.approx(4 * 875e6 / 54.4e9)
    # one GPU of the node alone gets all of its memory bandwidth: 30 x 875e6 / 614.4e9 = 0.0427 s,
    # and the link's 54.4 GB/s: the gradients' copy (4 x 875e6 / 54.4e9 = 0.0643 s) is then the slowest
    assert offload.optimizer_step_s(shard, node(), 1, BF16) == pytest.approx(4 * 875e6 / 54.4e9)


@pytest.mark.parametrize("fwd_s, bwd_s, expected_s", [
    # a 1.088 GB layer: 1.088e9 / 54.4e9 = 20 ms each way
    (0.005, 0.010, 0.015 + 0.010),  # copies outlast both: 20 - 5 + 20 - 10 ms
    (0.025, 0.050, 0.0),  # hidden behind the layer's compute
    (0.010, 0.030, 0.010),  # forward exposes 10 ms, backward hides its copy
])
def test_activation_copies_hide_behind_the_layers_compute(fwd_s, bwd_s, expected_s):
    got = offload.activation_exposed_s(1.088e9, fwd_s, bwd_s, node(host_memory_gbps=2000), 8)
    assert got == pytest.approx(expected_s, abs=1e-12)


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama3-8b"), load_cluster("dgx-h100-1024")


def _estimate(model, cluster, off, **kw):
    return estimate_layout(model, cluster, gpus=8, tp=1, pp=1, micro_batch=1, dp=8, zero=1, offload=off, **kw)


def test_optimizer_offload_of_llama3_8b_on_a_dgx_h100(llama8b):
    model, cluster = llama8b
    none, off = _estimate(model, cluster, "none"), _estimate(model, cluster, "optimizer")
    # pp 1: every parameter on every rank, ZeRO-1 over dp 8 (the rank split counts 8,192 fewer of the
    # 8.03e9: within 1e-6)
    p = model.total_params() / 8
    assert none.memory_gib.optimizer == pytest.approx(12 * p / GIB, rel=1e-5)  # 12 B of master weights and moments
    assert off.memory_gib.optimizer == 0.0
    assert off.memory_gib.host == pytest.approx(16 * p / GIB, rel=1e-5)  # + the fp32 gradients the CPU reads
    assert off.memory_gib.weights == none.memory_gib.weights and off.memory_gib.gradients == none.memory_gib.gradients
    # CPU Adam: 30 B x 1.0e9 over 76.8 GB/s = 0.392 s replaces the GPU's optimizer step; the rest is unchanged
    assert off.time_breakdown_s.optimizer == pytest.approx(30 * p / 76.8e9, rel=1e-5)
    assert off.step_time_s - none.step_time_s == pytest.approx(30 * p / 76.8e9 - none.time_breakdown_s.optimizer, rel=1e-5)
    assert off.layout["offload"] == "optimizer" and none.layout["offload"] == "none"


def test_activation_offload_of_30_of_32_layers_keeps_two(llama8b):
    model, cluster = llama8b
    # the count stated (training.offload_layers; unset: the fewest that fit, tests/costs/test_offload_layers.py)
    model = model.model_copy(update={"training": model.training.model_copy(update={"offload_layers": 30})})
    none, off = _estimate(model, cluster, "none"), _estimate(model, cluster, "activations")
    # pp 1, no recomputation: 32 layers of one micro-batch in flight, 30 offloaded, 2 stay on the GPU
    assert off.memory_gib.activations == pytest.approx(none.memory_gib.activations * 2 / 32)
    assert off.memory_gib.host == pytest.approx(none.memory_gib.activations * 30 / 32)
    assert off.time_breakdown_s.offload > 0 and none.time_breakdown_s.offload == 0
    both = _estimate(model, cluster, "both")
    assert both.memory_gib.host == pytest.approx(off.memory_gib.host + 16 * model.total_params() / 8 / GIB, rel=1e-5)


def test_host_memory_constraint(llama8b):
    model, cluster = llama8b
    # 8 GPUs x 16 B x 1.0e9 = 120 GiB of optimizer states per node: 100 GiB of host memory (90 usable) is short
    small = cluster.model_copy(update={"node": cluster.node.model_copy(update={"host_memory_gib": 100.0})})
    r = _estimate(model, small, "optimizer", recompute="full")  # fits the GPU
    assert [v.constraint for v in r.violations] == ["host_memory"]
    assert "to the host memory of a node of 8 GPUs, which has 100 GiB (90 usable" in r.violations[0].message
    assert not [v for v in _estimate(model, cluster, "optimizer").violations if v.constraint == "host_memory"]


def test_the_models_training_offload_is_the_estimates_default(llama8b):
    model, cluster = llama8b
    offloading = model.model_copy(update={"training": model.training.model_copy(update={"offload": "optimizer"})})
    r = estimate_layout(offloading, cluster, gpus=8, tp=1, pp=1, micro_batch=1, dp=8, zero=1)
    assert r.layout["offload"] == "optimizer" and r.memory_gib.optimizer == 0.0
