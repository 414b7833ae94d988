"""Bytes per value of each training precision, in one record instead of constants in formulas.

Mixed-precision Adam (Micikevicius et al. 2018; Megatron-LM's main_grad and distributed optimizer):
2-byte bf16/fp16 weights used by the GEMMs, 4-byte fp32 gradients accumulated across micro-batches,
4-byte fp32 master weights and two 4-byte fp32 Adam moments: 18 bytes per parameter, which
reproduces Korthikanti et al. 2022 Fig. 1 exactly. Activations are stored in 16 bits.
"""
from __future__ import annotations

from dataclasses import dataclass

FP32_BYTES = 4  # what loss kernels keep in fp32 (the logits' copy inside the cross-entropy)


@dataclass(frozen=True)
class Precision:
    name: str
    peak: str  # which `peak_tflops` field the GEMMs run at
    weight_bytes: int  # model weights the kernels read
    grad_bytes: int  # gradients as accumulated (fp32 main_grad)
    master_bytes: int  # fp32 master copy of the weights
    optimizer_bytes: int  # Adam's first and second moments
    activation_bytes: int  # stored and communicated activations, GEMM operands

    @property
    def optimizer_state_bytes(self) -> int:
        """What the optimizer shards hold per parameter: master weights and moments (12 B)."""
        return self.master_bytes + self.optimizer_bytes

    @property
    def state_bytes(self) -> int:
        """Weights, gradients and optimizer states per parameter (18 B, Korthikanti et al. 2022)."""
        return self.weight_bytes + self.grad_bytes + self.optimizer_state_bytes

    @property
    def adam_step_bytes(self) -> int:
        """HBM traffic of one Adam step per parameter: read master, moments and gradient, write
        master and moments back and the new 16-bit weights (2 x 12 + 4 + 2 = 30 B)."""
        return 2 * self.optimizer_state_bytes + self.grad_bytes + self.weight_bytes


BF16 = Precision("bf16", peak="bf16", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                 activation_bytes=2)
FP16 = Precision("fp16", peak="fp16", weight_bytes=2, grad_bytes=4, master_bytes=4, optimizer_bytes=8,
                 activation_bytes=2)
PRECISIONS: dict[str, Precision] = {p.name: p for p in (BF16, FP16)}


def precision(name: str) -> Precision:
    return PRECISIONS[name]
