"""The layout space: every valid layout as a struct of aligned numpy arrays (one row per layout).

The columns, the values each axis tries and the rules a layout obeys are declared in
`planner.layout.axes`; this module builds the arrays from them. Rules (Megatron-LM conventions):
- the parallel degrees multiply to the GPU count; tp divides heads and kv_heads; pp <= layers;
- global_batch = dp * micro_batch * num_microbatches;
- layers split over pp * vpp stages; when pp divides the layers vpp is a divisor of layers / pp
  (an even split); when it does not the split is uneven (the first ranks take one layer more)
  and only vpp = 1 is allowed;
- vpp > 1 needs pp >= 2 and num_microbatches divisible by pp (the interleaved schedule);
- sequence_parallel needs tp > 1; zero 0..3 (0 plain DP, 1 optimizer states sharded as
  Megatron's distributed optimizer, 2 + gradients, 3 + parameters) needs dp > 1 when above 0.
Enumeration loops over the parallel degrees (a few hundred combinations at most) and expands the
per-layout options of each as one array product.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import field, make_dataclass
from typing import Any, Mapping

import numpy as np

from planner.layout.axes import AXES, RULES, Axis, Rule, SpaceContext, axis, degrees, divisors, tiebreak_order
from planner.errors import SpecError

__all__ = ["Layouts", "SpaceLimits", "SpaceContext", "divisors", "enumerate_layouts", "single_layout",
           "rule_violations", "tiebreak_rank", "process_group", "derive_dp", "RECOMPUTE_MODES",
           "RECOMPUTE_NONE", "RECOMPUTE_SELECTIVE", "RECOMPUTE_FULL"]

RECOMPUTE_MODES: tuple[str, ...] = axis("recompute").choices
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = (RECOMPUTE_MODES.index(m) for m in ("none", "selective", "full"))


# --- Layouts: one int64 column per axis ----------------------------------------------------------

def _post_init(self) -> None:
    """Columns left out (an axis a caller does not know about) take the axis's default; an axis
    without one (the degrees, the micro-batch, the micro-batch count) must be given."""
    n = next((len(v) for v in (getattr(self, k) for k in self._axis_names) if v is not None), 0)
    for name in self._axis_names:
        value = getattr(self, name)
        if value is None:
            a = self._axis_by_name[name]
            if a.default_from is not None:
                value = np.broadcast_to(np.asarray(a.default_from(
                    {k: getattr(self, k) for k in self._axis_names if k != name}), dtype=np.int64), (n,))
            elif a.default is None:
                raise TypeError(f"Layouts needs the {name} column")
            else:
                value = np.full(n, a.to_stored(a.default), dtype=np.int64)
        object.__setattr__(self, name, np.asarray(value))


def _len(self) -> int:
    return int(getattr(self, self._axis_names[0]).shape[0])


def _gpus(self) -> np.ndarray:
    """GPUs of each layout: the product of its parallel degrees."""
    out = np.ones(len(self), dtype=np.int64)
    for a in self._degrees:
        out = out * getattr(self, a.name)
    return out


def _take(self, index):
    return type(self)(**{name: getattr(self, name)[index] for name in self._axis_names})


def _row(self, i: int) -> dict:
    """Layout i as JSON values (the `layout` object of the JSON output)."""
    return {a.name: a.to_json(getattr(self, a.name)[i]) for a in self._axes if a.json}


def _columns(self) -> dict[str, np.ndarray]:
    return {name: getattr(self, name) for name in self._axis_names}


def _concat(cls, parts: list) -> Any:
    return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in cls._axis_names})


def layouts_class(axes: tuple[Axis, ...] = AXES) -> type:
    """A frozen dataclass with one array field per axis (the registry's order)."""
    namespace = dict(
        _axes=axes, _axis_names=tuple(a.name for a in axes), _axis_by_name={a.name: a for a in axes},
        _degrees=degrees(axes), __post_init__=_post_init, __len__=_len, gpus=property(_gpus), take=_take,
        row=_row, columns=_columns, concat=classmethod(_concat), __module__=__name__,
        __doc__="Aligned int64 arrays, one entry per candidate layout, one field per axis of planner.layout.axes.",
    )
    return make_dataclass("Layouts", [(a.name, np.ndarray, field(default=None)) for a in axes], frozen=True,
                          namespace=namespace, eq=False)


Layouts = layouts_class()


def spacelimits_class(axes: tuple[Axis, ...] = AXES) -> type:
    """What to enumerate; an axis given a value is fixed to it (`SpaceLimits(tp=8)`)."""
    fixed = [(a.name, Any, field(default=None)) for a in axes if a.flag is not None]
    return make_dataclass("SpaceLimits", [("max_micro_batch", int, field(default=32)),
                                          ("max_vpp", int, field(default=16)), ("min_cp_tokens", int, field(default=512)),
                                          *fixed], frozen=True,
                          namespace={"__module__": __name__})


SpaceLimits = spacelimits_class()


# --- enumeration ----------------------------------------------------------------------------------

def _degree_combos(degs: list[Axis], remaining: int, limits, chosen: dict):
    """Every assignment of the non-filling degrees whose product divides `remaining`, in registry order."""
    if not degs:
        yield dict(chosen), remaining
        return
    a, rest = degs[0], degs[1:]
    fixed = getattr(limits, a.name, None)
    for value in ([fixed] if fixed is not None else divisors(remaining)):
        if value > 0 and remaining % value == 0:
            yield from _degree_combos(rest, remaining // value, limits, {**chosen, a.name: value})


def _product(values: list[list[int]]) -> np.ndarray:
    """Every combination of the value lists, one row per list, the first list varying slowest."""
    arrays = [np.asarray(v, dtype=np.int64) for v in values]
    shape = [a.size for a in arrays]
    out = np.empty([len(arrays), *shape], dtype=np.int64)
    for j, a in enumerate(arrays):
        out[j] = a.reshape([a.size if i == j else 1 for i in range(len(arrays))])  # broadcast along the others
    return out.reshape(len(arrays), -1)


def _passes(rules: tuple[Rule, ...], values: Mapping[str, Any], ctx: SpaceContext):
    ok = True
    for rule in rules:
        ok = ok & rule.ok(values, ctx)
    return ok


def enumerate_layouts(*, gpus: int, layers: int, heads: int, kv_heads: int, global_batch: int, seq_len: int = 0,
                      experts: int = 0, limits=None, cap_levels: int = 1, axes: tuple[Axis, ...] = AXES,
                      rules: tuple[Rule, ...] = RULES, fp8_param_gather: bool = False, mixer_heads: tuple = (),
                      include: Mapping[str, Any] | None = None) -> Any:
    """All valid layouts for `gpus` GPUs. Rows come degree by degree (tp, then pp, ...), the options
    of each as a product in registry order; outer axes (power caps) repeat the whole space.

    `include`: a value per option axis (as users write it) tried beside its candidates, which are a
    search's choice of values, narrower than the rules (vpp that split the layers unevenly, micro-
    batches above max_micro_batch, etp other than 1 and tp): an axis a search fixes by a constraint
    (`Limits.fixed`, `--vpp 8`) is then enumerated at every value the rules accept, as `plan estimate`
    accepts it. Unlike a `limits` value it does not drop the other values (whose rows the
    `fixed_<axis>` constraints count)."""
    limits = limits if limits is not None else (SpaceLimits() if axes is AXES else spacelimits_class(axes)())
    cls = Layouts if axes is AXES else layouts_class(axes)
    fixed_cp = getattr(limits, "cp", None)
    min_cp_tokens = getattr(limits, "min_cp_tokens", 512) if fixed_cp is None else 1
    ctx = SpaceContext(gpus=gpus, layers=layers, heads=heads, kv_heads=kv_heads, global_batch=global_batch,
                       seq_len=seq_len, experts=experts, max_micro_batch=limits.max_micro_batch, max_vpp=limits.max_vpp,
                       min_cp_tokens=min_cp_tokens, cap_levels=cap_levels, fp8_param_gather=fp8_param_gather,
                       mixer_heads=mixer_heads)
    degs = degrees(axes)
    filler = next(a for a in degs if a.fills)
    free = [a for a in axes if a.role == "degree" and not a.fills]  # registry order: the row order
    options = [a for a in axes if a.role == "option"]
    derived = [a for a in axes if a.role == "derived"]
    degree_names = {a.name for a in degs}
    early = tuple(r for r in rules if set(r.axes) <= degree_names)
    # Rules on the degrees and one option prune that option's values before the product.
    single = {a.name: tuple(r for r in rules if set(r.axes) - degree_names == {a.name}) for a in options}
    late = tuple(r for r in rules if r not in early and not any(r in s for s in single.values()))
    combos: list[dict] = []
    for chosen, rest in _degree_combos(free, gpus, limits, {}):
        chosen[filler.name] = rest
        fixed_fill = getattr(limits, filler.name, None)
        if (fixed_fill is None or rest == fixed_fill) and _passes(early, chosen, ctx):
            combos.append(chosen)
    include = {k: v for k, v in (include or {}).items() if v is not None}
    values = [_option_values(a, limits, ctx, combos, single[a.name], include.get(a.name)) for a in options]
    blocks = [(chosen, _product([v[i] for v in values])) for i, chosen in enumerate(combos)
              if all(v[i].size for v in values)]
    # Derived axes and the remaining rules run once over all blocks (one vectorised pass).
    counts = [g.shape[1] for _, g in blocks]
    cols = {a.name: np.repeat(np.array([c[a.name] for c, _ in blocks], dtype=np.int64), counts) for a in degs}
    grids = np.hstack([g for _, g in blocks]) if blocks else np.zeros((len(options), 0), dtype=np.int64)
    cols.update({a.name: grids[k] for k, a in enumerate(options)})
    for a in derived:
        cols[a.name] = np.asarray(a.derive(cols, ctx), dtype=np.int64)
    ok = _passes(late, cols, ctx)
    if not np.all(ok):
        keep = np.flatnonzero(ok)  # once: a boolean mask is turned into indices on every use
        cols = {k: np.take(v, keep) for k, v in cols.items()}
    return _expand_outer(cls, cols, [a for a in axes if a.role == "outer"], ctx, limits)


def _option_values(a: Axis, limits, ctx: SpaceContext, combos: list[dict], rules: tuple[Rule, ...],
                   extra: Any = None) -> list:
    """The values option `a` tries under each degree combination (with `extra`, as a user writes it,
    where the candidates leave it out), less those breaking `rules` (which read only `a` and the
    degrees; one vectorised test over all combinations): the product of the options shrinks, its
    row order stays."""
    fixed = getattr(limits, a.name, None)
    lists = [[a.to_stored(fixed)] if fixed is not None else a.candidates(ctx, c) for c in combos]
    if fixed is None and extra is not None:
        value = a.to_stored(extra)
        lists = [x if value in x else sorted([*x, value]) for x in lists]
    sizes = np.array([len(x) for x in lists], dtype=np.int64)
    values = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(sizes.sum()))
    if rules and values.size:
        owner = np.repeat(np.arange(len(combos)), sizes)
        degrees = {k: np.array([c[k] for c in combos], dtype=np.int64)[owner] for k in combos[0]}
        ok = np.broadcast_to(_passes(rules, {**degrees, a.name: values}, ctx), values.shape)
        values, sizes = values[ok], np.bincount(owner[ok], minlength=len(combos))
    ends = np.cumsum(sizes).tolist()
    return [values[end - size:end] for end, size in zip(ends, sizes.tolist())]


def _expand_outer(cls, base: dict, outer: list[Axis], ctx: SpaceContext, limits) -> Any:
    """Repeat the space once per value of each outer axis, the outer value slowest."""
    cols = dict(base)
    for a in outer:
        fixed = getattr(limits, a.name, None)
        values = np.asarray([a.to_stored(fixed)] if fixed is not None else a.candidates(ctx, {}), dtype=np.int64)
        n = len(next(iter(cols.values())))
        if values.size > 1:
            cols = {k: np.tile(v, values.size) for k, v in cols.items()}
        cols[a.name] = np.repeat(values, n)
    return cls(**cols)


def single_layout(**values) -> Any:
    """One layout as a one-row Layouts (for `plan estimate` and tests): axes take JSON values
    ("selective", True) or stored ints; left-out axes take their defaults."""
    row = {}
    for a in AXES:
        if a.name in values:
            v = values[a.name]
            row[a.name] = a.to_stored(v) if isinstance(v, str) else int(v)
        elif a.default_from is not None:
            row[a.name] = int(a.default_from(row))
        elif a.default is not None:
            row[a.name] = a.to_stored(a.default)
        else:
            raise TypeError(f"single_layout() needs {a.name}")
    return Layouts(**{k: np.array([v], dtype=np.int64) for k, v in row.items()})


def rule_violations(layouts, ctx: SpaceContext, rules: tuple[Rule, ...] = RULES) -> list[tuple[str, str]]:
    """(rule, message) for every rule layout 0 breaks: the space's rules as a user reads them."""
    cols = layouts.columns()
    row = layouts.row(0)
    return [(r.name, r.message(row, ctx)) for r in rules if not bool(np.asarray(r.ok(cols, ctx)).reshape(-1)[0])]


def tiebreak_rank(layouts, axes: tuple[Axis, ...] = AXES) -> np.ndarray:
    """Rank of each row in the registry's tie-break order (smaller tp first, then pp, micro-batch,
    vpp, recompute, sp, zero, power cap); all ranks distinct, ties by row order."""
    keys = tuple(getattr(layouts, a.name) for a in reversed(tiebreak_order(axes)))
    order = np.lexsort(keys)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank


# --- process groups -------------------------------------------------------------------------------

def process_group(layouts, name: str, axes: tuple[Axis, ...] = AXES) -> tuple[np.ndarray, np.ndarray]:
    """(size, rank stride) of the `name` process group under the registry's rank order.

    Ranks are laid out degree by degree, innermost first: Megatron-LM's default order
    tp, cp, ep, dp, pp (`--order tp-cp-ep-dp-pp` in Megatron-Core's parallel_state), so the
    members of a group are `stride` ranks apart, stride = the product of the inner degrees."""
    stride = np.ones(len(layouts), dtype=np.int64)
    for a in degrees(axes):
        if a.name == name:
            return getattr(layouts, name), stride
        stride = stride * getattr(layouts, a.name)
    raise KeyError(f"{name} is not a parallel degree")


def derive_dp(gpus: int, given: Mapping[str, int | None], *, gpus_said: str, in_file: bool = False,
              axes: tuple[Axis, ...] = AXES) -> int:
    """The filling degree (dp) of `gpus` GPUs given the others; a mismatch is bad input.

    `given` holds every degree (the filling one may be None); `gpus_said` words where the GPU
    count came from ("--gpus is 64", "the plan uses 64 GPUs"); `in_file`: name keys, not flags."""
    degs = degrees(axes)
    filler = next(a for a in degs if a.fills)
    given = {**given, **{a.name: given.get(a.name) or a.default for a in degs if not a.fills and a.default is not None}}
    # Degrees at a hidden default (cp 1) are left out of the messages.
    named = [a for a in axes if a.role == "degree" and not (a.hide_default and given.get(a.name) == a.default)]
    others = [a for a in (x for x in axes if x.role == "degree") if not a.fills]
    product = math.prod(int(given[a.name]) for a in others)  # Python ints: no int64 overflow
    names = "*".join(a.name for a in others if a in named)
    flags = "/".join(a.flag for a in others if a.flag and a in named)
    if given.get(filler.name) is None:
        if gpus % product:
            raise SpecError(f"{names} = {product} does not divide the {gpus} GPUs", path=flags,
                            expected=f"degrees whose product divides {gpus}, or {filler.name if in_file else filler.flag}")
        return gpus // product
    fill = given[filler.name]
    if fill * product != gpus:
        all_names = "*".join(a.name for a in named)
        values = "*".join(str(given[a.name]) for a in named)
        raise SpecError(f"{all_names} = {values} = {fill * product}, but {gpus_said}",
                        path="/".join(a.flag for a in named if a.flag), expected=f"degrees whose product is {gpus}")
    return fill
