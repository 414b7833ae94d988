"""What must hold whatever the fitted constants: property tests over random layouts, models and
networks (issue 29, "physics first").

- No step is shorter than its model FLOPs at the GPU's peak.
- No step is shorter than the bytes its data-parallel collectives must move into a node (or over a
  GPU's NVLink port, for a group inside one node) at the links' peak bandwidth. The bound counts
  bytes per node, not per GPU: the k members of a group that share a node receive a collective's
  data once between them, over their k NICs, and exchange it over NVLink (NCCL's rings and trees
  do this, which is why a multi-node all-reduce's bus bandwidth approaches k NICs, nccl-tests
  PERFORMANCE.md). All-reduce (or reduce-scatter + all-gather, ZeRO 1-2) moves 2 (N - 1) / N of
  the data into each of N nodes (Patarasuk & Yuan 2009, the bandwidth lower bound of all-reduce);
  ZeRO-3 gathers the parameters for every micro-batch's forward and again for its backward and
  reduce-scatters its gradients (DeepSpeed stage 3, FSDP reshard_after_forward): 3 m (N - 1) / N.
- No step is shorter than the micro-batches' activations each pipeline rank must send.
- No MoE step is shorter than the routed tokens its all-to-alls must send off the node.
- More network or NVLink bandwidth, or a faster GPU, never makes a step slower.
- With the work per GPU fixed (dp doubled with the global batch, no ZeRO sharding), more GPUs never
  beat ideal scaling: the step never gets shorter.
"""
from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.costs.flops import model_flops_per_step
from planner.estimate import _context, layout_of
from planner.layout.space import rule_violations
from planner.score import score
from planner.search import with_global_batch
from planner.specs.loading import load_cluster, load_model
from planner.units import GB

MODELS = {name: load_model(name) for name in ("gpt3-1.3b", "llama3-8b", "gpt3-13b", "llama3-70b")}
CLUSTERS = {name: load_cluster(name) for name in ("dgx-a100-1024", "dgx-h100-1024", "dgx-b200-1024")}
BF16_BYTES = 2  # the fewest bytes any stack here moves a gradient or a parameter in
SLACK = 1 - 1e-9  # float rounding of the bound's own arithmetic

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def jobs(draw, zero=st.sampled_from([0, 1, 2, 3])):
    """(model, cluster, layout one-row Layouts, GPUs): a valid layout of a dense model on a cluster
    whose network is 1, 1/10 or 1/100 of the shipped one (communication-bound cases included)."""
    model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    cluster = CLUSTERS[draw(st.sampled_from(sorted(CLUSTERS)))]
    slower = draw(st.sampled_from([1.0, 0.1, 0.01]))
    node = cluster.node.model_copy(update={"network_gbps": cluster.node.network_gbps * slower})
    cluster = cluster.model_copy(update={"node": node})
    tp, pp, cp = draw(POW2), draw(POW2), draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    mb, m = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4, 8, 16]))
    gpus = dp * tp * pp * cp
    assume(gpus <= cluster.total_gpus)
    model = with_global_batch(model, dp * mb * m)
    given = dict(tp=tp, pp=pp, cp=cp, dp=dp, micro_batch=mb, zero=draw(zero),
                 recompute=draw(st.sampled_from(["none", "selective", "full"])),
                 sequence_parallel=draw(st.booleans()) and tp > 1, vpp=draw(st.sampled_from([1, 2])))
    lay = layout_of(model, gpus, given, gpus_said="test")
    assume(not rule_violations(lay, _context(model, gpus)))
    return model, cluster, lay, gpus


def step_s(model, cluster, lay) -> float:
    return float(score(model, cluster, lay).step_time_s[0])


def collective_floor_s(cluster, size: int, stride: int, nbytes: float, passes: float) -> float:
    """Seconds `passes` all-gather-sized passes of `nbytes` per member need at least, for a group
    of `size` ranks `stride` apart (Megatron's rank order) on `cluster` at its links' peak."""
    if size == 1:
        return 0.0
    node_gpus = cluster.node.nvlink_domain
    per_node = min(size, node_gpus // stride) if stride < node_gpus else 1
    nodes = size // per_node
    if nodes == 1:  # every member on one node: each GPU's NVLink port takes (n - 1) / n of it
        return passes * (size - 1) / size * nbytes / (cluster.node.nvlink_gbps * GB)
    return passes * (nodes - 1) / nodes * nbytes / (per_node * cluster.node.network_gbps * GB)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(jobs())
def test_no_step_beats_its_flops_at_the_peak(job):
    model, cluster, lay, gpus = job
    peak = cluster.gpu.peak_flops(model.training.numerics.peak)
    assert step_s(model, cluster, lay) >= model_flops_per_step(model) / (gpus * peak) * SLACK


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(jobs())
def test_no_step_beats_the_bytes_its_data_parallel_collectives_move(job):
    model, cluster, lay, gpus = job
    tp, pp, cp, dp = (int(getattr(lay, a)[0]) for a in ("tp", "pp", "cp", "dp"))
    zero, m = int(lay.zero[0]), int(lay.num_microbatches[0])
    # the transformer layers' parameters of one rank, at least: layer norms are not split by tp,
    # and some rank holds at least layers / pp layers
    params = model.layer_params() * model.layers / (pp * tp)
    passes = 3 * m if zero >= 3 else 2  # module docstring
    # gradients reduce over dp * cp ranks, tp apart
    floor = collective_floor_s(cluster, dp * cp, tp, params * BF16_BYTES, passes)
    assert step_s(model, cluster, lay) >= floor * SLACK


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(jobs())
def test_no_step_beats_the_activations_each_pipeline_rank_sends(job):
    model, cluster, lay, gpus = job
    tp, pp, cp, dp = (int(getattr(lay, a)[0]) for a in ("tp", "pp", "cp", "dp"))
    assume(pp > 1)
    m, mb = int(lay.num_microbatches[0]), int(lay.micro_batch[0])
    # Rank 0 sends every micro-batch's activations of its first chunk forward: s b h values of 2 B,
    # split over tp (Megatron's scatter/gather) and cp; neighbours are tp*cp*dp ranks apart, on
    # another node once that reaches the node (each GPU then sends through its own NIC).
    nbytes = model.seq_len * mb * model.hidden * BF16_BYTES / (tp * cp)
    stride = tp * cp * dp
    gbps = cluster.node.nvlink_gbps if stride < cluster.node.nvlink_domain else cluster.node.network_gbps
    assert step_s(model, cluster, lay) >= m * nbytes / (gbps * GB) * SLACK


def _faster(cluster, **node):
    return cluster.model_copy(update={"node": cluster.node.model_copy(update=node)})


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(jobs(), st.sampled_from([1.5, 2.0, 10.0]))
def test_more_bandwidth_or_flops_never_makes_a_step_slower(job, factor):
    model, cluster, lay, gpus = job
    base = step_s(model, cluster, lay)
    network = _faster(cluster, network_gbps=cluster.node.network_gbps * factor)
    nvlink = _faster(cluster, nvlink_gbps=cluster.node.nvlink_gbps * factor)
    peak = cluster.gpu.peak_tflops
    flops = cluster.model_copy(update={"gpu": cluster.gpu.model_copy(update={
        "peak_tflops": peak.model_copy(update={k: v * factor for k, v in peak.model_dump().items() if v is not None}),
        "hbm_gbps": cluster.gpu.hbm_gbps * factor})})
    for faster in (network, nvlink, flops):
        assert step_s(model, faster, lay) <= base * (1 + 1e-9)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(jobs(zero=st.just(0)))
def test_more_gpus_with_the_work_per_gpu_fixed_never_beat_ideal_scaling(job):
    model, cluster, lay, gpus = job
    assume(2 * gpus <= cluster.total_gpus)
    given_ = {a: lay.row(0)[a] for a in ("tp", "pp", "cp", "micro_batch", "zero", "recompute", "sequence_parallel", "vpp")}
    wider = with_global_batch(model, 2 * model.training.global_batch)
    lay2 = layout_of(wider, 2 * gpus, {**given_, "dp": 2 * int(lay.dp[0])}, gpus_said="test")
    assume(not rule_violations(lay2, _context(wider, 2 * gpus)))
    assert int(lay2.num_microbatches[0]) == int(lay.num_microbatches[0])  # the same work per GPU
    assert step_s(wider, cluster, lay2) >= step_s(model, cluster, lay) * (1 - 1e-9)


MOE_MODELS = {name: load_model(name) for name in ("mixtral-8x7b", "qwen3-30b-a3b")}


@st.composite
def moe_jobs(draw):
    """(model, cluster, layout, GPUs): an expert-parallel layout of a MoE model, the network 1, 1/10
    or 1/100 of the shipped one, the ep group inside a node or spanning nodes."""
    model = MOE_MODELS[draw(st.sampled_from(sorted(MOE_MODELS)))]
    cluster = CLUSTERS[draw(st.sampled_from(["dgx-h100-1024", "dgx-b200-1024"]))]
    slower = draw(st.sampled_from([1.0, 0.1, 0.01]))
    cluster = _faster(cluster, network_gbps=cluster.node.network_gbps * slower)
    ep = draw(st.sampled_from([2, 4, 8, 16, 32]))
    assume(model.moe.experts % ep == 0)
    tp, pp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    dp = ep * draw(st.sampled_from([1, 2]))  # ep divides dp (etp 1, cp 1)
    mb, m = 1, draw(st.sampled_from([1, 2, 4]))
    gpus = dp * tp * pp
    model = with_global_batch(model, dp * mb * m)
    given = dict(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=mb, zero=1, recompute="none",
                 sequence_parallel=tp > 1, vpp=1)
    lay = layout_of(model, gpus, given, gpus_said="test")
    assume(not rule_violations(lay, _context(model, gpus)))
    return model, cluster, lay, gpus


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(moe_jobs())
def test_no_step_beats_the_tokens_its_all_to_alls_send_off_the_node(job):
    """Every micro-batch, each MoE layer sends each of the rank's s b / (tp cp) tokens to top_k
    experts and back, forward (dispatch, combine) and again backward: 4 all-to-alls. Under uniform
    routing a copy's expert is on another node with probability (ep - k) / ep, k of the ep ranks
    sharing the node; whatever the dispatcher, a token with any expert off the node crosses the
    network once per pass at least: P(some expert off-node) >= (ep - k) / ep for top_k >= 1. Each
    GPU sends through its own NIC. The rank with the most MoE layers holds >= moe_layers / pp."""
    model, cluster, lay, gpus = job
    tp, pp, ep = (int(getattr(lay, a)[0]) for a in ("tp", "pp", "ep"))
    m, mb = int(lay.num_microbatches[0]), int(lay.micro_batch[0])
    k = min(ep, cluster.node.nvlink_domain // tp)  # ep ranks tp apart on one node
    assume(ep > k)
    tokens = model.seq_len * mb / tp
    nbytes = tokens * model.hidden * BF16_BYTES * (ep - k) / ep
    layers = -(-model.moe_layers // pp)  # ceil: some rank holds at least this many
    floor = 4 * m * layers * nbytes / (cluster.node.network_gbps * GB)
    assert step_s(model, cluster, lay) >= floor * SLACK
