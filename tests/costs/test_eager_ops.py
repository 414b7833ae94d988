"""Eager elementwise ops of torchtitan's Llama block (StackSpec.eager_block_ops) and torch.compile,
which fuses them (TrainingSpec.torch_compile): bytes counted by hand from the op list in
planner/costs/compute.py's comment (torchtitan@9dec370 norms.py and model.py)."""
from __future__ import annotations

from pytest import approx

from planner.layout.space import RECOMPUTE_SELECTIVE, single_layout
from planner.specs.layers import layer_kinds

from .conftest import layer_compute_on

# 2 layers, hidden 64, 4 heads of 16 (2 KV heads), SwiGLU of 32, RoPE; 64 tokens a micro-batch of 1.
SMALL = dict(layers=2, hidden=64, heads=4, kv_heads=2, ffn_act="swiglu", ffn_hidden=32, vocab=100, seq_len=64,
             position_embedding="rope")
HBM = 1000e9 * 0.5  # the toy GPU's achieved HBM bandwidth


def _layer(make_model, toy_gpu, eager=True, compiled=False, mscale=1.0, **layout):
    stack = {**make_model().training.stack.model_dump(), "eager_block_ops": eager, "selective_ac": "op"}
    model = make_model(**SMALL, rope_mscale=mscale, training=dict(stack=stack, torch_compile=compiled))
    lay = single_layout(**{**dict(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1), **layout})
    return layer_compute_on(model, toy_gpu, lay, layer_kinds(model)[0])


def test_eager_norms_swiglu_and_rope_bytes_by_hand(make_model, toy_gpu):
    fused = _layer(make_model, toy_gpu, eager=False)
    eager = _layer(make_model, toy_gpu)
    # norms: 2 x 64 tokens x 64 = 8,192 elements, 32 B more forward and 86 B more backward each;
    # SwiGLU: 64 x 32 = 2,048 hidden units, 4 B and 12 B more;
    # RoPE: q 4 x 16 + k 2 x 16 = 96 elements a token, 64 x 96 = 6,144, 20 B each way
    fwd = 32 * 8192 + 4 * 2048 + 20 * 6144  # 393,216 B
    bwd = 86 * 8192 + 12 * 2048 + 20 * 6144  # 851,968 B
    assert eager.gpu_fwd_s[0] - fused.gpu_fwd_s[0] == approx(fwd / HBM, rel=1e-9)  # 786.432 ns
    assert eager.gpu_bwd_s[0] - fused.gpu_bwd_s[0] == approx(bwd / HBM, rel=1e-9)  # 1,703.936 ns


def test_eager_rope_is_counted_once(make_model, toy_gpu):
    # a YaRN-scaled RoPE (mscale != 1) runs Megatron's eager path: 20 B more a q/k element, 6,144 elements
    # (above); torchtitan's eager block already runs RoPE op by op, and counts those 20 B once, not twice
    fused = _layer(make_model, toy_gpu, eager=False)
    assert _layer(make_model, toy_gpu, eager=False, mscale=1.2).gpu_fwd_s[0] - fused.gpu_fwd_s[0] == approx(
        20 * 6144 / HBM, rel=1e-9)
    eager = _layer(make_model, toy_gpu)
    assert _layer(make_model, toy_gpu, mscale=1.2).gpu_fwd_s[0] == approx(eager.gpu_fwd_s[0], rel=1e-12)


def test_torch_compile_fuses_them(make_model, toy_gpu):
    fused = _layer(make_model, toy_gpu, eager=False)
    compiled = _layer(make_model, toy_gpu, compiled=True)
    assert compiled.gpu_fwd_s[0] == fused.gpu_fwd_s[0] and compiled.gpu_bwd_s[0] == fused.gpu_bwd_s[0]
    # a stack whose blocks are fused kernels already gains nothing from the flag
    assert _layer(make_model, toy_gpu, eager=False, compiled=True).gpu_fwd_s[0] == fused.gpu_fwd_s[0]


def test_op_level_checkpointing_runs_the_eager_ops_again(make_model, toy_gpu):
    # torchtitan's op SAC saves matmul outputs only: its recomputation reruns the eager forward bytes
    fused = _layer(make_model, toy_gpu, eager=False, recompute=RECOMPUTE_SELECTIVE)
    eager = _layer(make_model, toy_gpu, recompute=RECOMPUTE_SELECTIVE)
    assert eager.recompute_s[0] - fused.recompute_s[0] == approx(393_216 / HBM, rel=1e-9)


def test_sequence_parallel_shards_the_norms_not_the_rest(make_model, toy_gpu):
    # tp 2 with sequence parallelism: norms over 32 tokens (4,096 elements), SwiGLU over 64 tokens x 16
    # units (1,024), RoPE over 64 tokens x 48 (3,072): 32 x 4,096 + 4 x 1,024 + 20 x 3,072 = 196,608 B
    fused = _layer(make_model, toy_gpu, eager=False, tp=2, sequence_parallel=True)
    eager = _layer(make_model, toy_gpu, tp=2, sequence_parallel=True)
    assert eager.gpu_fwd_s[0] - fused.gpu_fwd_s[0] == approx(196_608 / HBM, rel=1e-9)


def test_layernorm_is_one_fused_kernel_and_shared_experts_count(make_model, toy_gpu):
    # torchtitan's "layernorm" is nn.LayerNorm: only the SwiGLU and RoPE bytes remain, 4 x 2,048 + 20 x 6,144
    stack = {**make_model().training.stack.model_dump(), "eager_block_ops": True}
    fused = make_model(**SMALL, normalization="layernorm", training=dict(stack={**stack, "eager_block_ops": False}))
    eager = make_model(**SMALL, normalization="layernorm", training=dict(stack=stack))
    lay = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1)
    one = [layer_compute_on(m, toy_gpu, lay, layer_kinds(m)[0]).gpu_fwd_s[0] for m in (fused, eager)]
    assert one[1] - one[0] == approx((4 * 2048 + 20 * 6144) / HBM, rel=1e-9)
    # a MoE layer with a shared expert of width 16 and 4 experts of 32, top 2: SwiGLU units 64 x 16 shared and
    # 128 routed rows x 32 = 1,024 + 4,096; with the norms (8,192 elements) and RoPE as above:
    # 32 x 8,192 + 4 x 5,120 + 20 x 6,144 = 405,504 B forward
    moe = dict(SMALL, layers=3, moe=dict(experts=4, top_k=2, expert_ffn_hidden=32, shared_experts=1,
                                         shared_expert_ffn_hidden=16, dense_layers=1))
    plain, titan = (make_model(**moe, training=dict(stack={**stack, "eager_block_ops": e})) for e in (False, True))
    f0, f1 = (layer_compute_on(m, toy_gpu, lay, layer_kinds(m)[1]) for m in (plain, titan))
    assert f1.gpu_fwd_s[0] - f0.gpu_fwd_s[0] == approx(405_504 / HBM, rel=1e-9)
    # op-level checkpointing is the dense layers' policy: a MoE layer's recomputation reruns no eager bytes
    sel = single_layout(dp=1, tp=1, pp=1, micro_batch=1, num_microbatches=1, recompute=RECOMPUTE_SELECTIVE)
    stack_op = {**stack, "selective_ac": "op"}
    r0, r1 = (layer_compute_on(make_model(**moe, training=dict(stack={**stack_op, "eager_block_ops": e})), toy_gpu, sel,
                               layer_kinds(plain)[1]).recompute_s[0] for e in (False, True))
    assert r1 == r0


def test_op_level_checkpointing_reruns_every_second_matmul(make_model, toy_gpu):
    # torchtitan's op SAC keeps wq, wv, w1, w2 (every other mm in call order) and SDPA: wk, wo and w3 run again,
    # with every non-matmul op. On the toy GPU (50e12 FLOP/s, 500e9 B/s, no waves), 64 rows:
    # wk 64x64x32: 262,144 FLOP, 2 x (4,096 + 2,048 + 2,048) = 16,384 B; wo 64x64x64: 524,288 FLOP, 24,576 B;
    # w3 64x64x32: 262,144 FLOP, 16,384 B -> 1,048,576 / 50e12 + 57,344 / 500e9 = 135.6595 ns;
    # the fused ops' traffic: SwiGLU 6 x 64 x 32 = 12,288 B and norms + residuals 22 x 64 x 64 = 90,112 B,
    # 204.8 ns; compiled, nothing eager: 340.4595 ns
    compiled = _layer(make_model, toy_gpu, compiled=True, recompute=RECOMPUTE_SELECTIVE)
    assert compiled.recompute_s[0] == approx(1_048_576 / 50e12 + 57_344 / 500e9 + 102_400 / 500e9, rel=1e-9)


def test_op_level_checkpointing_runs_the_tp_gathers_again(make_model, make_cluster):
    # torchtitan's op policy keeps the reduce-scatters' outputs only: with sequence parallelism its recomputation
    # runs the all-gathers again, half a forward's TP traffic (2 passes -> 2.5); without it the all-reduces, a
    # whole pass (2 -> 3); none without recomputation
    from planner.costs.layer_times import kind_times

    cluster = make_cluster()
    stack = {**make_model().training.stack.model_dump(), "selective_ac": "op"}
    model = make_model(**SMALL, training=dict(stack=stack))
    st = model.training.stack.for_gpu(cluster.gpu.name)

    def tp(**layout):
        lay = single_layout(**{**dict(dp=1, tp=2, pp=1, micro_batch=1, num_microbatches=1), **layout})
        return kind_times(model, cluster, st, lay)[0].tp[0]

    assert tp(sequence_parallel=True, recompute=RECOMPUTE_SELECTIVE) == approx(2.5 / 2 * tp(sequence_parallel=True), rel=1e-12)
    assert tp(sequence_parallel=False, recompute=RECOMPUTE_SELECTIVE) == approx(3 / 2 * tp(sequence_parallel=False), rel=1e-12)
