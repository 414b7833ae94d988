"""Peak-memory mechanisms of the measured sources (issue 37 item 7): fp16 gradients of Megatron --fp16,
torchtitan's op-level selective checkpointing, its fp32 cross-entropy and FSDP2's held parameters,
each derived by hand; and the published peaks they bring within 5 %."""
from __future__ import annotations

import pytest
from pytest import approx

from planner.costs.memory import activation_bytes_per_layer, memory_breakdown, memory_per_rank
from planner.layout.space import single_layout
from planner.specs.precision import precision
from .conftest import TOY_STACK, job_on

GIB = 2**30
# A small Llama-like layer: head_dim 128, q 8 x 128 = 1024, k = v = 2 x 128 = 256, SwiGLU 2816, RoPE.
LLAMA = dict(layers=4, hidden=1024, heads=8, kv_heads=2, ffn_hidden=2816, ffn_act="swiglu", vocab=8192, seq_len=512,
             position_embedding="rope")


def _stack(**kw) -> dict:
    return dict(TOY_STACK, **kw)


# --- Megatron --fp16: gradients in the parameters' dtype -------------------------------------


def test_fp16_gradients_are_two_bytes():
    # Megatron-LM forces fp32 accumulation for --bf16 only (arguments.py); with --fp16 the DDP grad
    # buffer has param.dtype: 2 (weights) + 2 (grads) + 4 (master) + 8 (moments) = 16 B a parameter.
    p = precision("fp16", grad_reduce_dtype="fp16")
    assert (p.grad_bytes, p.state_bytes) == (2, 16)
    assert precision("fp16").state_bytes == 18  # fp32 main_grad (--accumulate-allreduce-grads-in-fp32)


def test_fp16_gradients_need_fp16(make_model):
    with pytest.raises(ValueError, match="grad_reduce_dtype fp16 needs precision fp16"):
        make_model(training=dict(precision="bf16", grad_reduce_dtype="fp16"))


# --- torchtitan's op-level selective activation checkpointing ----------------------------------


def test_op_sac_keeps_every_other_matmul_output(make_model):
    model = make_model(**LLAMA, training=dict(stack=_stack(selective_ac="op")))
    layout = single_layout(tp=1, pp=1, dp=1, micro_batch=2, num_microbatches=1, recompute="selective")
    tokens = 512 * 2
    # Kept per token (bf16): wq 1024 + wv 256 + w1 2816 + w2 1024 (matmuls 1, 3, 5, 7 of wq wk wv wo
    # w1 w3 w2) + SDPA output 1024 + block input 1024 = 7,168 values = 14,336 B, and the fp32
    # log-sum-exp of 8 heads, 32 B: 14,368 B x 1,024 tokens = 14,712,832 B.
    kept = 14_368 * tokens
    # The whole layer (no recomputation, flash, bf16 GEMM inputs): outside the TP region 2 norm inputs,
    # QKV and MLP inputs, 2 masks: 10 x 1024 = 10,240 B; Q K V 2 x 1,536 = 3,072, attention-output input
    # 2 x 1024 = 2,048, SwiGLU (gate and up 4 B + down input 2 B) x 2816 = 16,896: 32,256 B per token.
    whole = 32_256 * tokens
    stored, rebuilt = activation_bytes_per_layer(model, layout)
    assert stored[0] == approx(kept, rel=1e-12)
    assert rebuilt[0] == approx(whole - kept, rel=1e-12)  # what the backward rebuilds beyond it, one layer
    # 4 layers kept + one layer rebuilt: 4 x 14,712,832 + 18,317,312 = 77,168,640 B
    job = job_on(model, _gpu(), layout)
    assert memory_breakdown(job).activations[0] == approx(77_168_640 / GIB, rel=1e-12)
    # The module policy (Megatron's) is unchanged: the same layer without op SAC keeps more than it
    plain = make_model(**LLAMA, training=dict(stack=_stack(), recompute_modules=("core_attn",)))
    assert activation_bytes_per_layer(plain, layout)[0][0] == approx(whole, rel=1e-12)


def _gpu():
    from planner.specs import GpuSpec
    from .conftest import _toy_gpu_data
    return GpuSpec.model_validate(_toy_gpu_data())


# --- the loss's fp32 copies ----------------------------------------------------------------------


def test_loss_logit_bytes(make_model):
    layout = single_layout(tp=1, pp=1, dp=1, micro_batch=2, num_microbatches=1)
    logits = 512 * 2 * 8192  # s x b x vocab = 8,388,608
    reserve = 2 * GIB  # toy GPU
    megatron = memory_breakdown(job_on(make_model(**LLAMA), _gpu(), layout)).other[0]
    # Megatron's vocab-parallel cross-entropy: bf16 logits + their fp32 copy, worked on in place: 6 B
    assert megatron == approx((reserve + 6 * logits) / GIB, rel=1e-12)
    titan = make_model(**LLAMA, training=dict(stack=_stack(loss_logit_bytes=12)))
    # torchtitan's F.cross_entropy(pred.float()): log_softmax's output, nll_loss's gradient and
    # log_softmax's input gradient, 3 x 4 B, at the backward's start
    assert memory_breakdown(job_on(titan, _gpu(), layout)).other[0] == approx((reserve + 12 * logits) / GIB, rel=1e-12)


# --- FSDP2: the root unit and pipeline stages kept gathered ------------------------------------


def test_fsdp2_root_unit_stays_gathered(make_model):
    layout = single_layout(tp=1, pp=1, dp=8, micro_batch=1, num_microbatches=1, zero=3)
    base = memory_breakdown(job_on(make_model(**LLAMA), _gpu(), layout))
    root = memory_breakdown(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_root_unsharded=True))), _gpu(), layout))
    # untied embedding and output, 2 x 8192 x 1024 = 16,777,216 parameters in bf16 (2 B)
    assert root.weights[0] - base.weights[0] == approx(16_777_216 * 2 / GIB, rel=1e-12)
    assert root.gradients[0] == base.gradients[0]


def test_fsdp2_under_pp_holds_the_stage_unsharded(make_model):
    layout = single_layout(tp=1, pp=2, dp=4, micro_batch=1, num_microbatches=4, zero=3)
    # both bounding ranks, one by one (memory_per_rank: the heavier one may differ between the two)
    base = memory_per_rank(job_on(make_model(**LLAMA), _gpu(), layout))
    held = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_pp_unsharded=True))), _gpu(), layout))
    # A layer: q 1024 x 1024, k and v 1024 x 256 each, o 1024 x 1024, w1 w3 w2 3 x 1024 x 2816,
    # 2 norms 2 x 1024 and the QKV and attention-output biases the spec counts (1,536 + 1,024):
    # 1,048,576 + 524,288 + 1,048,576 + 8,650,752 + 2,048 + 2,560 = 11,278,848.
    layer = 11_278_848
    # Each rank holds 2 layers and a vocabulary matrix 8192 x 1024 = 8,388,608: 30,946,304 parameters.
    whole = 2 * layer + 8_388_608
    # Gathered in bf16: the whole stage instead of the 2 layers in flight; gradients in fp32: the
    # whole stage instead of one layer awaiting its reduce-scatter.
    for k in range(2):
        assert (held.weights[k, 0] - base.weights[k, 0]) * GIB == approx(2 * (whole - 2 * layer), rel=1e-12)
        assert (held.gradients[k, 0] - base.gradients[k, 0]) * GIB == approx(4 * (whole - layer), rel=1e-12)


def test_fp8_weight_cache_is_the_stacks(make_model):
    # Transformer Engine keeps an FP8 copy of each weight (1 B a parameter beside the 2-byte weight);
    # torchao's Float8Linear casts on every use and keeps none (fp8_weight_cache false).
    layout = single_layout(tp=1, pp=1, dp=1, micro_batch=1, num_microbatches=1)
    te = memory_breakdown(job_on(make_model(**LLAMA, training=dict(precision="fp8")), _gpu(), layout))
    ao = memory_breakdown(job_on(make_model(**LLAMA, training=dict(precision="fp8", stack=_stack(fp8_weight_cache=False))),
                                 _gpu(), layout))
    # 4 layers of 11,278,848 + embedding and output 2 x 8,388,608 = 61,892,608 parameters (a rank's
    # split, planner/costs/pipeline_ranks.py rank_param_split, leaves the final norm out)
    params = 4 * 11_278_848 + 2 * 8_388_608
    assert te.weights[0] * GIB == approx(3 * params, rel=1e-12)
    assert ao.weights[0] * GIB == approx(2 * params, rel=1e-12)


def test_loss_parallel_logit_bytes(make_model):
    # torch's loss parallel (tp > 1): the saved log_softmax output x, zeros_like(x), exp(x) and their
    # sum, 4 x 4 B a logit over vocab / tp; tp = 1 keeps F.cross_entropy's 12 B.
    titan = make_model(**LLAMA, training=dict(stack=_stack(loss_logit_bytes=12, loss_parallel_logit_bytes=16)))
    reserve = 2 * GIB
    for tp, per_logit in ((1, 12), (2, 16)):
        layout = single_layout(tp=tp, pp=1, dp=1, micro_batch=2, num_microbatches=1)
        logits = 512 * 2 * 8192 / tp  # s x b x vocab / tp
        assert memory_breakdown(job_on(titan, _gpu(), layout)).other[0] == approx(
            (reserve + per_logit * logits) / GIB, rel=1e-12)


# --- FSDP: the fp32 shard is the master ------------------------------------------------------------


def test_fsdp_shard_is_the_fp32_master(make_model):
    layout = single_layout(tp=1, pp=1, dp=8, micro_batch=1, num_microbatches=1, zero=3)
    base = memory_breakdown(job_on(make_model(**LLAMA), _gpu(), layout))
    fsdp = memory_breakdown(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_master_is_param=True))), _gpu(), layout))
    # 4 layers of 11,278,848 + embedding and output 2 x 8,388,608 = 61,892,608 parameters over 8 GPUs:
    # 7,736,576 each. DeepSpeed stage 3 holds a bf16 shard beside the fp32 master (2 B each); FSDP's
    # shard is the fp32 master, its 16-bit copy exists only gathered (the two layers in flight, unchanged).
    shard = 61_892_608 / 8
    assert (base.weights[0] - fsdp.weights[0]) * GIB == approx(2 * shard, rel=1e-12)
    assert fsdp.optimizer[0] * GIB == approx(12 * shard, rel=1e-12)  # fp32 shard 4 B + moments 8 B
    assert fsdp.gradients[0] == base.gradients[0]
    # below ZeRO-3 the 16-bit parameters are whole (FSDP SHARD_GRAD_OP keeps them gathered): unchanged
    z2 = single_layout(tp=1, pp=1, dp=8, micro_batch=1, num_microbatches=1, zero=2)
    assert (memory_breakdown(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_master_is_param=True))), _gpu(), z2)).weights[0]
            == memory_breakdown(job_on(make_model(**LLAMA), _gpu(), z2)).weights[0])


# --- DeepSpeed's fp16 optimizers: 16-bit param.grad, fp32 copies at the step ------------------------


@pytest.mark.parametrize("zero, grad_bytes", [
    # ZeRO-0 (FP16_Optimizer.step): fp16 grads 2 B + p.grad.to(fp32) 4 B + their flat copy 4 B, every parameter
    (0, 10 * 61_892_608),
    # ZeRO-1 (stage_1_and_2.py): the backward's fp16 grads of every parameter, 2 x 61,892,608 = 123,785,216 B,
    # against the step's partition (fp16 2 B, its flat copy 2 B, fp32 4 B over dp 4): 8 x 15,473,152 = 123,785,216
    # B, the same at dp 4
    (1, 2 * 61_892_608),
    # ZeRO-2: fp16 grads partitioned, 8 B over dp 4
    (2, 8 * 61_892_608 / 4),
])
def test_deepspeed_fp16_gradients(make_model, zero, grad_bytes):
    layout = single_layout(tp=1, pp=1, dp=4, micro_batch=1, num_microbatches=1, zero=zero)
    model = make_model(**LLAMA, training=dict(precision="fp16", stack=_stack(deepspeed_fp16_grads=True)))
    assert memory_breakdown(job_on(model, _gpu(), layout)).gradients[0] * GIB == approx(grad_bytes, rel=1e-12)
    # bf16 runs use BF16_Optimizer (fp32 gradients of every parameter): the planner's 4 B, untouched
    bf16 = make_model(**LLAMA, training=dict(precision="bf16", stack=_stack(deepspeed_fp16_grads=True)))
    want = 4 * 61_892_608 / (4 if zero >= 2 else 1)
    assert memory_breakdown(job_on(bf16, _gpu(), layout)).gradients[0] * GIB == approx(want, rel=1e-12)


def test_deepspeed_fp16_dp_8_step_partition_below_the_backward(make_model):
    # ZeRO-1 at dp 8: the step's 8 B over 8 = 1 B a parameter, under the backward's 2 B fp16 gradients
    layout = single_layout(tp=1, pp=1, dp=8, micro_batch=1, num_microbatches=1, zero=1)
    model = make_model(**LLAMA, training=dict(precision="fp16", stack=_stack(deepspeed_fp16_grads=True)))
    assert memory_breakdown(job_on(model, _gpu(), layout)).gradients[0] * GIB == approx(2 * 61_892_608, rel=1e-12)
    # dp 2: the step's 8 / 2 = 4 B a parameter is the larger
    layout = single_layout(tp=1, pp=1, dp=2, micro_batch=1, num_microbatches=1, zero=1)
    assert memory_breakdown(job_on(model, _gpu(), layout)).gradients[0] * GIB == approx(4 * 61_892_608, rel=1e-12)



# --- DTensor tensor parallelism: column-parallel linears save their gathered input -----------------


def test_tp_saves_gathered_inputs(make_model):
    layout = single_layout(tp=2, pp=2, dp=2, micro_batch=1, num_microbatches=2, sequence_parallel=True)
    base, dtensor = make_model(**LLAMA), make_model(**LLAMA, training=dict(stack=_stack(tp_saves_gathered_inputs=True)))
    # A layer's QKV and MLP inputs (bf16, 2 x 2 B a token and channel) stored whole instead of / tp 2:
    # 2 x 2 B x 512 tokens x 1024 x (1 - 1/2) = 1,048,576 B more
    more = activation_bytes_per_layer(dtensor, layout)[0][0] - activation_bytes_per_layer(base, layout)[0][0]
    assert more == approx(1_048_576, rel=1e-12)
    # the output layer's gathered input on the last stage: 512 tokens x 1024 x 2 B = 1,048,576 B; none on the first
    a, b = (memory_per_rank(job_on(m, _gpu(), layout)) for m in (base, dtensor))
    assert (b.other[1, 0] - a.other[1, 0]) * GIB == approx(1_048_576, rel=1e-12)
    assert b.other[0, 0] == a.other[0, 0]
    # without sequence parallelism the inputs are whole either way: unchanged
    plain = single_layout(tp=2, pp=2, dp=2, micro_batch=1, num_microbatches=2, sequence_parallel=False)
    assert activation_bytes_per_layer(dtensor, plain)[0][0] == activation_bytes_per_layer(base, plain)[0][0]


def test_fsdp2_reduce_scatter_copy_in(make_model):
    # A layer (the FSDP unit) has 11,278,848 parameters (test_fsdp2_under_pp_holds_the_stage_unsharded).
    layer = 11_278_848
    flat = single_layout(tp=1, pp=1, dp=8, micro_batch=1, num_microbatches=1, zero=3)
    base = memory_breakdown(job_on(make_model(**LLAMA), _gpu(), flat))
    copy_in = memory_breakdown(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_grad_copy_in=True))), _gpu(), flat))
    # the unit's bf16 autograd gradients (2 B) beside its fp32 reduce-scatter input (the 4 B already counted)
    assert (copy_in.gradients[0] - base.gradients[0]) * GIB == approx(2 * layer, rel=1e-12)
    # under pp with the stage's gradients accumulated unsharded in fp32: the fp32 input (4 B) beside them
    staged = single_layout(tp=1, pp=2, dp=4, micro_batch=1, num_microbatches=4, zero=3)
    held = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_pp_unsharded=True))), _gpu(), staged))
    both = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(zero3_pp_unsharded=True, zero3_grad_copy_in=True))),
                                  _gpu(), staged))
    for k in range(2):
        assert (both.gradients[k, 0] - held.gradients[k, 0]) * GIB == approx(4 * layer, rel=1e-12)


# --- torch's ring attention (torchtitan context parallelism): the backward's buffers ----------------


def test_cp_ring_backward_buffers(make_model):
    # torch _attention.py _templated_ring_attention_backward (torch 2.6), cp 2, tp 1, micro-batch 1:
    # n = 512 x 1 / 2 = 256 tokens on a cp rank; q 8 heads x 128 = 1024; K and V 2 x 128 each,
    # repeated to the 8 query heads (cp_kv_expanded) before SDPA: k + v = 2 x 1024 = 2048.
    # - local K/V cat and its all-gather from 2 ranks, bf16: 2 B x (2 + 1) x 256 x 2048 = 3,145,728
    # - grad_query in fp32: 4 B x 256 x 1024 = 1,048,576
    # - the fp32 K/V gradients round the ring, received + cat sent + next received: 3 x 4 B x 256 x 2048 = 6,291,456
    ring = 3_145_728 + 1_048_576 + 6_291_456  # 10,485,760 B
    layout = single_layout(tp=1, cp=2, pp=2, dp=1, micro_batch=1, num_microbatches=2)
    base = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(cp_kv_expanded=True))), _gpu(), layout))
    titan = make_model(**LLAMA, training=dict(stack=_stack(cp_kv_expanded=True, cp_ring_buffers=True)))
    ringed = memory_per_rank(job_on(titan, _gpu(), layout))
    # the first rank holds them in its layers' backward
    assert (ringed.other[0, 0] - base.other[0, 0]) * GIB == approx(ring, rel=1e-12)
    # the last rank's loss holds more: bf16 logits + their fp32 copy, 6 B x 512 x 8192 / cp 2 = 12,582,912 B > ring,
    # and the two are never live at once (the loss's backward ends before the layers' starts): unchanged
    assert ringed.other[1, 0] == base.other[1, 0]
    # with a 1-byte loss (1 B x 512 x 8192 / 2 = 2,097,152 B) the ring's buffers are the last rank's larger:
    small = dict(cp_kv_expanded=True, loss_logit_bytes=1)
    lean = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(**small))), _gpu(), layout))
    lean_ring = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(**small, cp_ring_buffers=True))), _gpu(), layout))
    assert (lean_ring.other[1, 0] - lean.other[1, 0]) * GIB == approx(ring - 2_097_152, rel=1e-12)
    # K/V exchanged as grouped (2 heads, 256 wide each): 2 x 3 x 256 x 512 + 1,048,576 + 12 x 256 x 512 = 3,407,872 B
    grouped = memory_per_rank(job_on(make_model(**LLAMA, training=dict(stack=_stack(cp_ring_buffers=True))), _gpu(), layout))
    plain = memory_per_rank(job_on(make_model(**LLAMA), _gpu(), layout))
    assert (grouped.other[0, 0] - plain.other[0, 0]) * GIB == approx(3_407_872, rel=1e-12)
    # no context parallelism, no ring
    flat = single_layout(tp=1, cp=1, pp=2, dp=2, micro_batch=1, num_microbatches=2)
    assert memory_per_rank(job_on(titan, _gpu(), flat)).other[0, 0] == memory_per_rank(
        job_on(make_model(**LLAMA, training=dict(stack=_stack(cp_kv_expanded=True))), _gpu(), flat)).other[0, 0]


def test_cp_ring_backward_buffers_need_attention_layers():
    from planner.costs.memory import cp_ring_backward_bytes
    from planner.specs.loading import load_model, load_stack
    # Nemotron-H-56B (10 attention layers: 64 query heads, 8 K/V heads of 128), tp 1, cp 2, one sequence
    # of 8192 tokens: n = 4096; k + v = 2 x 1024 = 2048 (grouped), q = 8192:
    # 2 B x 3 x 4096 x 2048 + 4 B x 4096 x 8192 + 12 B x 4096 x 2048 = 50,331,648 + 134,217,728 + 100,663,296
    hybrid = load_model("nemotron-h-56b")
    stack = load_stack("megatron-core")  # exchanges grouped K/V (cp_kv_expanded false)
    layout = single_layout(tp=1, cp=2, pp=1, dp=1, micro_batch=1, num_microbatches=1)
    assert cp_ring_backward_bytes(hybrid, layout, stack, 2)[0] == approx(285_212_672, rel=1e-12)
    # its attention layers made Mamba layers: no attention, nothing held
    data = hybrid.model_dump(exclude_unset=True)
    data["layer_pattern"] = hybrid.layer_pattern.replace("*", "M")
    no_attention = type(hybrid).model_validate(data)
    assert cp_ring_backward_bytes(no_attention, layout, stack, 2)[0] == 0
