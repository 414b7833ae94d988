"""Bytes per value (planner/specs/precision.py) against the published counts."""
from planner.specs.precision import BF16, FP16, PRECISIONS, precision
from planner.specs import TrainingSpec


def test_mixed_precision_adam_is_18_bytes_per_parameter():
    # Korthikanti et al. 2022 Fig. 1: 2 B weights + 4 B fp32 gradients + 12 B fp32 master weights
    # and Adam moments = 18 B per parameter
    for p in (BF16, FP16):
        assert (p.weight_bytes, p.grad_bytes, p.optimizer_state_bytes, p.state_bytes) == (2, 4, 12, 18)


def test_adam_step_traffic():
    # read master, m, v (12 B) and the gradient (4 B); write master, m, v (12 B) and 16-bit weights (2 B)
    assert BF16.adam_step_bytes == 12 + 4 + 12 + 2 == 30


def test_the_spec_accepts_exactly_the_declared_precisions():
    assert set(TrainingSpec.model_fields["precision"].annotation.__args__) == set(PRECISIONS)


def test_bf16_grad_reduce_halves_the_gradient_bytes():
    # Megatron-Core DDP grad_reduce_in_fp32=False: main_grad in BF16, 2 B instead of 4, so
    # 2 + 2 + 12 = 16 B of state per parameter and the Adam step reads 2 B less (12 + 2 + 12 + 2 = 28 B)
    for name in ("bf16", "fp16", "fp8", "mxfp8"):
        assert precision(name, grad_reduce_dtype="bf16").grad_bytes == 2
        assert precision(name).grad_bytes == 4
    p = precision("bf16", grad_reduce_dtype="bf16")
    assert p.state_bytes == 2 + 2 + 12 == 16 and p.adam_step_bytes == 12 + 2 + 12 + 2 == 28
    assert precision("bf16") is BF16  # the default is today's record, unchanged


def test_only_per_tensor_fp8_gathers_parameters_in_one_byte():
    # --fp8-param-gather: per-tensor FP8 gathers the 1-byte FP8 parameters; Megatron-Core gathers MXFP8
    # parameters in BF16 into the reused gradient buffer (param_and_grad_buffer.py), 2 bytes
    assert precision("fp8", fp8_param_gather=True).param_gather_bytes == 1
    assert precision("mxfp8", fp8_param_gather=True).param_gather_bytes == 2
    for name in PRECISIONS:
        assert precision(name).param_gather_bytes == 2  # without it: the 16-bit weights
    # what MXFP8 parameters hold is unchanged: 1 byte plus the column-wise copy of 1 + 1/32
    mx = precision("mxfp8", fp8_param_gather=True)
    assert (mx.weight_bytes, mx.weight_cache_bytes) == (1, 1 + 1 / 32)


def test_training_spec_passes_grad_reduce_dtype_to_the_record():
    t = TrainingSpec(global_batch=8, grad_reduce_dtype="bf16")
    assert t.numerics.grad_bytes == 2 and TrainingSpec(global_batch=8).numerics.grad_bytes == 4
