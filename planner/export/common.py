"""What every launch-settings export shares: the result record, the layout as the exporters read it,
the one rule that turns words and notes into text, and the small helpers on a pipeline split
(planner/export/__init__.py is the entry point)."""
from __future__ import annotations

import shlex
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from planner.costs.pipeline_ranks import default_split
from planner.layout.axes import V_SCHEDULES
from planner.specs import ModelSpec


@dataclass(frozen=True)
class Export:
    """Launch settings of one layout for one framework."""

    text: str  # what goes to stdout: flags, overrides or JSON
    notes: list[str] = field(default_factory=list)  # what the framework has no equivalent for, said, not guessed;
    # one line each, control characters written as visible escapes (visible())
    argv: tuple[str, ...] = ()  # the words the text's lines mean, in order, as the program receives them
    # (megatron: flags and values; megatron-bridge: the command after `python`; nemo, torchtitan: the
    # overrides); () for JSON


@dataclass(frozen=True, kw_only=True)
class Launch:
    """A scored layout's JSON `layout` and the job, as the exporters read them."""

    dp: int  # data-parallel degree: GPUs / (tp * pp * cp); ep folds into tp * cp * dp
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    vpp: int
    micro_batch: int  # [sequences]
    recompute: str  # none | selective | full
    sequence_parallel: bool
    zero: int
    stage_layers: tuple[int, ...]  # transformer layers per virtual stage, schedule order (j * pp + r)
    global_batch: int  # [sequences per optimizer step]
    schedule: str = "1f1b"  # pipeline schedule (planner/layout/axes.py SCHEDULES)
    offload: str = "none"  # host-memory offload (planner/layout/axes.py OFFLOADS)
    # Layers whose activations go to the host (JSON layout.offload_layers; planner/costs/offload.py);
    # without it, all layers of a stage but the last, as Megatron Core allows at most.
    offload_layers_given: int | None = None

    @property
    def offload_layers(self) -> int:
        """Megatron Core's cpu_offloading_num_layers for an activation-offloading layout."""
        return self.offload_layers_given or max(self.stage_layers[0] - 1, 0)

    @property
    def offloads_optimizer(self) -> bool:
        return self.offload in ("optimizer", "both")

    @property
    def offloads_activations(self) -> bool:
        return self.offload in ("activations", "both")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def accumulation(self) -> int:
        """Micro-batches per step per data-parallel rank: global batch / (micro-batch * dp)
        (Megatron-LM's num_microbatches; DeepSpeed's gradient_accumulation_steps)."""
        return self.global_batch // (self.micro_batch * self.dp)


def launch(layout: Mapping[str, Any], model: ModelSpec) -> Launch:
    """The exporters' view of a JSON `layout` (planner.layout.axes names; defaults where left out)."""
    pp, vpp = int(layout["pp"]), int(layout.get("vpp", 1))
    split = layout.get("stage_layers")
    schedule = str(layout.get("schedule") or ("interleaved" if vpp > 1 else "1f1b"))
    if split is None:
        split = default_split(model, pp, vpp, schedule in V_SCHEDULES)
    return Launch(dp=int(layout["dp"]), tp=int(layout["tp"]), pp=pp, cp=int(layout.get("cp", 1)),
                  ep=int(layout.get("ep", 1)), etp=int(layout.get("etp", 1)), vpp=vpp,
                  micro_batch=int(layout["micro_batch"]), recompute=str(layout.get("recompute", "none")),
                  sequence_parallel=bool(layout.get("sequence_parallel", False)), zero=int(layout.get("zero", 0)),
                  stage_layers=tuple(int(k) for k in split), global_batch=model.training.global_batch,
                  schedule=schedule, offload=str(layout.get("offload") or "none"),
                  offload_layers_given=int(layout["offload_layers"]) if layout.get("offload_layers") else None)


def is_even(stage_layers) -> bool:
    return len(set(stage_layers)) == 1


def runs(stage_layers) -> str:
    """`7 8x14 7`: layers per virtual stage, runs of equal counts written once with their length."""
    out, k = [], 0
    n = list(stage_layers)
    while k < len(n):
        j = k
        while j < len(n) and n[j] == n[k]:
            j += 1
        out.append(str(n[k]) if j - k == 1 else f"{n[k]}x{j - k}")
        k = j
    return " ".join(out)


# Characters that end or rewrite a line or hide text when printed: control (Cc: newline, CR, tab, ESC,
# U+0085), format (Cf: bidi overrides, zero-width), lone surrogates (Cs: no UTF-8 for them) and the
# line and paragraph separators (Zl U+2028, Zp U+2029)
_CONTROL = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    n = ord(c)
    return _NAMED.get(c) or (f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")


def _is_control(c: str) -> bool:
    return unicodedata.category(c) in _CONTROL


def visible(text: str) -> str:
    """`text` as one printable line: each control character as a visible escape (`\\n`, `\\x1b`, `\\u2028`)."""
    return "".join(_escape(c) if _is_control(c) else c for c in text)


def comments(notes: Sequence[str]) -> list[str]:
    """Notes as shell comments, exactly one `# ...` line each, whatever the note holds."""
    return [f"# {visible(n)}" for n in notes]


def word(value: Any) -> str:
    """One shell word that the shell gives back unchanged (shlex.quote: a plain word stays as it is).
    A word holding a control character is refused: no framework setting holds one, and quoted it would
    break the one-setting-per-line layout."""
    text = str(value)
    if any(_is_control(c) for c in text):
        raise ValueError(f"a launch setting holds a control character: '{visible(text)[:80]}'")
    return shlex.quote(text)


def shell_export(notes: Sequence[str], lines: Sequence[Sequence[Any]], *, continued: bool,
                 header: Sequence[str] = (), program: str | None = None) -> Export:
    """The one renderer of the line formats: `lines` are the intended words, grouped as printed (megatron:
    a flag and its values; bridge: the command, then one override; nemo, torchtitan: one override). Every
    word through word(), every note through comments(); `continued` joins the lines with ` \\` into one
    command. `header`: constant comment lines first; `program`: the first word, which argv leaves out."""
    assert all(h.startswith("# ") and h == visible(h) for h in header), header
    words = [[str(w) for w in line] for line in lines]
    body = (" \\\n" if continued else "\n").join(" ".join(map(word, line)) for line in words)
    argv = tuple(w for line in words for w in line)
    if program is not None:
        assert argv[:1] == (program,), argv[:1]
        argv = argv[1:]
    return Export(text="\n".join([*header, *comments(notes), body]), notes=[visible(n) for n in notes], argv=argv)


def window_pattern(model: ModelSpec) -> str | None:
    """The model's sliding window in words, for the exports' notes (None without a window): layer numbers
    1-based, every n-th one keeping full attention (Megatron-Core's is_layer_window_attention)."""
    if model.sliding_window is None:
        return None
    n = model.full_attention_every
    where = "on every layer" if n is None else f"on all but every {_ordinal(n)} layer (layers {n}, {2 * n}, ... full attention)"
    return f"sliding-window attention of {model.sliding_window} keys (the query's own included) {where}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def architecture_extras(model: ModelSpec) -> list[str]:
    """The model's norm, RoPE base and scaling, q/k norm, clamped SwiGLU, linear biases and YaRN factor
    in words, for the exports' notes."""
    out = []
    if model.normalization is not None:
        out.append({"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[model.normalization] + " (normalization)")
    if model.rope_theta is not None:
        out.append(f"RoPE base {model.rope_theta:g} (rope_theta)")
    if model.rope_scaling_factor is not None:
        out.append(f"Llama 3.1 RoPE scaling x{model.rope_scaling_factor:g} (rope_scaling_factor)")
    if model.qk_norm:
        out.append("a norm on queries and keys (qk_norm)")
    if model.swiglu_limit is not None:
        out.append(f"SwiGLU clamped at {model.swiglu_limit:g} (swiglu_limit)")
    if model.linear_bias:
        out.append("biases on every linear layer (linear_bias)")
    if model.rope_mscale != 1.0:
        out.append(f"YaRN RoPE, cos and sin x {model.rope_mscale:g} (rope_mscale)")
    return out


def torch_compile_note(framework: str) -> str:
    """training.torch_compile where the framework's blocks are fused kernels already (Transformer Engine)."""
    return (f"torch_compile: {framework} compiles no transformer block (Transformer Engine's fused kernels run its "
            "norms, RoPE and activations); not exported, and priced as those kernels")
