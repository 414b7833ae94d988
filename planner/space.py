"""The layout space: every valid dp x tp x pp x micro-batch x vpp x recompute x sp x zero layout,
as a struct of aligned numpy arrays (one row per candidate layout).

Rules (Megatron-LM conventions):
- dp * tp * pp = gpus; tp divides heads and kv_heads; pp <= layers.
- global_batch = dp * micro_batch * num_microbatches.
- Layers split over pp * vpp stages. With pp dividing layers, vpp is a divisor of layers / pp and
  the split is even. When pp does not divide layers the split is uneven (the heaviest rank holds
  ceil(layers / pp) layers) and only vpp = 1 is allowed.
- vpp > 1 needs pp >= 2 and num_microbatches divisible by pp (Megatron's interleaved schedule).
- sequence_parallel only with tp > 1; zero in 0..3 (0 plain DP, 1 optimizer states sharded
  (Megatron's distributed optimizer), 2 + gradients, 3 + parameters); zero > 0 only with dp > 1.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
import numpy as np

RECOMPUTE_MODES = ("none", "selective", "full")
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = 0, 1, 2


@dataclass(frozen=True)
class Layouts:
    """Aligned int arrays, one entry per candidate layout."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    micro_batch: np.ndarray
    vpp: np.ndarray
    recompute: np.ndarray  # index into RECOMPUTE_MODES
    sequence_parallel: np.ndarray  # 0/1
    zero: np.ndarray
    num_microbatches: np.ndarray

    def __len__(self) -> int:
        return int(self.dp.shape[0])

    @property
    def gpus(self) -> np.ndarray:
        return self.dp * self.tp * self.pp

    def take(self, index: np.ndarray) -> "Layouts":
        return Layouts(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def row(self, i: int) -> dict:
        out = {f.name: int(getattr(self, f.name)[i]) for f in fields(self)}
        out["recompute"] = RECOMPUTE_MODES[out["recompute"]]
        out["sequence_parallel"] = bool(out["sequence_parallel"])
        return out


@dataclass(frozen=True)
class SpaceLimits:
    """What to enumerate; a value given fixes that dimension (`--tp 8`)."""

    max_micro_batch: int = 32
    max_vpp: int = 16
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    vpp: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    zero: int | None = None


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _pick(fixed, values):
    return [fixed] if fixed is not None else values


def enumerate_layouts(
    *, gpus: int, layers: int, heads: int, kv_heads: int, global_batch: int, limits: SpaceLimits = SpaceLimits()
) -> Layouts:
    """All valid layouts for `gpus` GPUs. The loops run over parallel-degree triples (a few hundred
    at most); the per-layout options are expanded as array products."""
    blocks: list[np.ndarray] = []
    rc_values = _pick(None if limits.recompute is None else RECOMPUTE_MODES.index(limits.recompute), [0, 1, 2])
    for tp in _pick(limits.tp, divisors(gpus)):
        if heads % tp or kv_heads % tp or gpus % tp:
            continue
        for pp in _pick(limits.pp, divisors(gpus // tp)):
            if pp > layers or (gpus // tp) % pp:
                continue
            dp = gpus // (tp * pp)
            if (limits.dp is not None and dp != limits.dp) or global_batch % dp:
                continue
            per_replica = global_batch // dp
            mbs = [m for m in divisors(per_replica) if m <= limits.max_micro_batch]
            if layers % pp == 0:
                vpps = [v for v in divisors(layers // pp) if v <= limits.max_vpp and (v == 1 or pp >= 2)]
            else:
                vpps = [1]
            sps = [0, 1] if tp > 1 else [0]
            zeros = [0, 1, 2, 3] if dp > 1 else [0]
            grid = np.array(
                np.meshgrid(
                    _pick(limits.micro_batch, mbs),
                    _pick(limits.vpp, vpps),
                    rc_values,
                    _pick(None if limits.sequence_parallel is None else int(limits.sequence_parallel), sps),
                    _pick(limits.zero, zeros),
                    indexing="ij",
                ),
                dtype=np.int64,
            ).reshape(5, -1)
            mb, vpp, rc, sp, z = grid
            nmb = per_replica // mb
            ok = (per_replica % mb == 0) & ((sp == 0) | (tp > 1)) & ((z == 0) | (dp > 1))
            ok &= (vpp == 1) | ((pp >= 2) & (nmb % pp == 0) & (layers % (pp * vpp) == 0))
            n = int(ok.sum())
            if n:
                const = np.array([[dp], [tp], [pp]], dtype=np.int64).repeat(n, axis=1)
                blocks.append(np.vstack([const, mb[ok], vpp[ok], rc[ok], sp[ok], z[ok], nmb[ok]]))
    arr = np.hstack(blocks).T if blocks else np.zeros((0, 9), dtype=np.int64)
    return Layouts(*(np.ascontiguousarray(arr[:, i]) for i in range(9)))


def single_layout(**values) -> Layouts:
    """One layout as a one-row Layouts (for `plan estimate` and tests)."""
    rc = values.get("recompute", "none")
    row = dict(
        dp=values["dp"],
        tp=values["tp"],
        pp=values["pp"],
        micro_batch=values["micro_batch"],
        vpp=values.get("vpp", 1),
        recompute=RECOMPUTE_MODES.index(rc) if isinstance(rc, str) else int(rc),
        sequence_parallel=int(bool(values.get("sequence_parallel", False))),
        zero=values.get("zero", 0),
        num_microbatches=values["num_microbatches"],
    )
    return Layouts(**{k: np.array([v], dtype=np.int64) for k, v in row.items()})
