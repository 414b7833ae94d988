"""Bytes per value (planner/precision.py) against the published counts."""
from planner.precision import BF16, FP16, PRECISIONS
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
