"""torchtitan logs (pytorch/torchtitan v0.2.2 73a0e697 and main b5bcd76c; the prints are in
tests/data/logs/torchtitan-prints.txt).

torchtitan prints no step time. Its metrics line (components/metrics.py `MetricsProcessor.log`),
`step: N  loss: ...  memory: X GiB(Y%)  tps: T  tflops: ...  mfu: ...%` in ANSI colours, gives
tps = tokens since the last line / (seconds x non-data-parallel size), per device. A rank's tokens
per step are the global batch's over the data-parallel degree, so
    step time [s] = global batch x sequence length / (tps x GPUs).
GPUs are the product of the degrees `ParallelDims` logs (`Building device mesh with parallelism:
pp=.., dp_replicate=.., dp_shard=.., cp=.., tp=.., ep=..`; ep is carved from dp_shard x cp, so it
does not multiply). The batch comes from `Trainer is initialized with ...` (v0.2: local and global
batch size and sequence length; main: tokens per train step and maximum context length). Memory is
torch's peak *reserved* GiB since the last line (torchtitan prints no allocated peak).
"""
from __future__ import annotations

import json
import re
from typing import Any

from planner.errors import SpecError
from planner.fidelity.logs.common import (NUMBER, InOrder, Step, checked_rate, checked_seconds, count, keep,
                                          number, positive_int, run, strip_ansi)

STEP_LINE = InOrder(r"(?<!validate )step:\s*(\d+)\s+loss:",
                    rf"memory:\s*({NUMBER})\s*GiB\(({NUMBER})%\)\s+tps:\s*({NUMBER})\s+tflops:\s*({NUMBER})"
                    rf"\s+mfu:\s*(\S+)")
MESH = re.compile(r"Building device mesh with parallelism: ((?:\w+=-?\d+(?:, )?)+)")
DEGREE = re.compile(r"([A-Za-z_]\w*?)=(-?\d+)")
TRAINER_V02 = re.compile(r"Trainer is initialized with local batch size (\d+), global batch size "
                         r"(\d+), gradient accumulation steps (\d+), sequence length (\d+)")
TRAINER_MAIN = re.compile(r"Trainer is initialized with (\d+) tokens per DP rank, (\d+) tokens per "
                          r"train step, gradient accumulation steps (\d+), maximum context length "
                          r"(\d+)")
# What the trainer's line gives, as the runs file names it: a restart printing another value is a second run
TRAINER_FIELDS = ("global_batch", "seq_len", "tokens_per_step", "micro_batch")
CHECKPOINTING = re.compile(r"Applied (\w+) activation checkpointing to the model")
# llama3/infra/parallelize.py apply_compile (v0.2.2), distributed/compile.py (main): printed only when
# compile.enable; its absence is torchtitan's default, eager blocks
COMPILE = re.compile(r"Compiling each TransformerBlock with torch\.compile")
MODEL_ARGS = re.compile(r"Building (\S+) (\S+?)\s*with (\{.*)$")
MAX_WIDTH = 2**40  # beyond any model's dim or multiple_of; the FFN width is computed in floats below it
MODEL_KEYS = {"n_layers": "layers", "dim": "hidden", "n_heads": "heads", "n_kv_heads": "kv_heads",
              "vocab_size": "vocab"}


def _mesh(lines: list[str], path: str) -> dict[str, int]:
    """The degrees of the mesh line; a later one (a restart) must give the same."""
    mesh: dict[str, tuple[Any, int]] = {}
    for line_no, line in enumerate(lines, 1):
        if (match := MESH.search(line)):
            degrees: dict[str, int] = {}
            for key, value in DEGREE.findall(match.group(1)):
                if key in degrees:
                    raise SpecError(f"{key} given twice", file=path, line=line_no, path=key,
                                    expected="each degree once, as ParallelDims logs them")
                digits = count(value.removeprefix("-"), path=path, line=line_no, field=key)
                degrees[key] = positive_int(-digits if value.startswith("-") else digits, path=path,
                                            line=line_no, field=key)
            keep(mesh, "device mesh", degrees, line_no, path=path, read={"device mesh"})
    return mesh["device mesh"][0] if mesh else {}


def _model(lines: list[str]) -> dict[str, int] | None:
    """v0.2 logs the model arguments as indented JSON after `Building <name> <flavor>with`."""
    for index, line in enumerate(lines):
        if not (match := MODEL_ARGS.search(line)):
            continue
        text, depth = "", 0
        for part in [match.group(3)] + lines[index + 1:]:
            text += part + "\n"
            depth += part.count("{") - part.count("}")
            if depth <= 0:
                break
        try:
            args = json.loads(text)
        except json.JSONDecodeError:
            return None
        model = {key: args[arg] for arg, key in MODEL_KEYS.items()
                 if isinstance(args.get(arg), int)}
        if "heads" in model and "kv_heads" not in model:
            model["kv_heads"] = model["heads"]  # n_kv_heads None: one K/V head per query head
        # Only a dense Llama-style block is read whole (its FFN width from multiple_of and ffn_dim_multiplier);
        # other arguments (experts, MLA) leave the model to --model
        if any("moe" in str(k) or "expert" in str(k) or "lora" in str(k) for k in args):
            return None
        if not (isinstance(args.get("multiple_of"), int) and args["multiple_of"] > 0 and "hidden" in model):
            return None
        if not 0 < model["hidden"] <= MAX_WIDTH >= args["multiple_of"]:
            return model  # no width: the model check names the printed dim (a float of it overflowed)
        model.update(ffn_hidden=_ffn_hidden(model["hidden"], args["multiple_of"], args.get("ffn_dim_multiplier")),
                     ffn_act="swiglu", position_embedding="rope", normalization="rmsnorm")
        return model
    return None


def _ffn_hidden(dim: int, multiple_of: int, multiplier) -> int:
    """The SwiGLU width torchtitan's Llama FeedForward builds (models/llama3/model/model.py): int(2 x 4 dim / 3),
    times ffn_dim_multiplier, rounded up to multiple_of (Llama 3 8B: 4,096 x 8 / 3 = 10,922 x 1.3 = 14,198 -> 14,336)."""
    width = int(2 * 4 * dim / 3)
    if isinstance(multiplier, (int, float)) and not isinstance(multiplier, bool) and 0 < multiplier < 100:
        width = int(multiplier * width)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def _trainer(lines: list[str], path: str) -> tuple:
    """(global batch, sequence length, tokens a step, micro-batch) from the trainer's line; the same line
    printed again with other numbers is a restarted run (exit 2 naming both)."""
    batch = seq_len = tokens = micro = None
    trainer: dict[str, tuple[Any, int]] = {}
    for line_no, line in enumerate(lines, 1):
        def whole(index: int, field: str) -> int:
            return count(match.group(index), path=path, line=line_no, field=field)

        if (match := TRAINER_V02.search(line)):
            batch, seq_len = whole(2, "global batch size"), whole(4, "sequence length")
            tokens = batch * seq_len
            micro = whole(1, "local batch size")  # train.py: local_batch_size, a DP rank's micro-batch (split again under pp)
        elif (match := TRAINER_MAIN.search(line)):
            tokens = whole(2, "tokens per train step")
            seq_len = positive_int(whole(4, "maximum context length"), path=path, line=line_no,
                                   field="maximum context length")
            batch = tokens // seq_len if tokens % seq_len == 0 else None
            # trainer.py: tokens per DP rank = a micro-batch's tokens x num_pp_microbatches (1 without pp)
            per_rank = whole(1, "tokens per DP rank")
            micro = per_rank // seq_len if per_rank % seq_len == 0 else None
        else:
            continue
        for key, value in zip(TRAINER_FIELDS, (batch, seq_len, tokens, micro)):
            keep(trainer, key, value, line_no, path=path, read=frozenset(TRAINER_FIELDS))
    return batch, seq_len, tokens, micro


def parse_torchtitan(lines: list[str], path: str, name: str) -> dict[str, Any]:
    """A torchtitan log: the mesh, trainer and checkpointing lines, then the metrics lines."""
    lines = [strip_ansi(line) for line in lines]
    degrees = _mesh(lines, path)
    gpus = None
    if degrees:
        gpus = 1
        for key in ("pp", "dp_replicate", "dp_shard", "cp", "tp"):
            gpus *= degrees.get(key, 1)
    batch, seq_len, tokens, micro = _trainer(lines, path)
    steps: list[Step] = []
    peaks = []
    for line_no, line in enumerate(lines, 1):
        if not (match := STEP_LINE.search(line)):
            continue
        if gpus is None or tokens is None:
            raise SpecError("a metrics line before the lines that give the GPUs and the batch",
                            file=path, line=line_no, expected="'Building device mesh with "
                            "parallelism: ...' and 'Trainer is initialized with ...' first")
        tps = checked_rate(number(match.group(4)), path=path, line=line_no, field="tps")
        seconds = checked_seconds(tokens / (tps * gpus), path=path, line=line_no, field="tps")
        steps.append(Step(line_no, count(match.group(1), path=path, line=line_no, field="step"), seconds))
        peaks.append(number(match.group(2)))
    layout: dict[str, Any] = {key: degrees[key] for key in ("tp", "pp", "cp", "ep", "etp")
                              if key in degrees}
    if degrees:
        # dp_shard > 1 is FSDP (parameters, gradients and optimizer states sharded: ZeRO-3).
        layout["zero"] = 3 if degrees.get("dp_shard", 1) > 1 else 0
    if micro and degrees.get("pp", 1) == 1:  # under pp the schedule's micro-batch size is not printed
        layout["micro_batch"] = micro
    for line in lines:
        if (match := CHECKPOINTING.search(line)):
            mode = match.group(1).lower()
            layout["recompute"] = "full" if "full" in mode else "selective" if "selective" in mode \
                else layout.get("recompute", "none")
    # Said only where the log holds its start-up (the mesh line comes before apply_compile's): else unknown
    compiled = any(COMPILE.search(line) for line in lines) if degrees else None
    return run(name=name, path=path, framework="torchtitan", steps=steps, gpus=gpus,
               global_batch=batch, seq_len=seq_len, precision=None, layout=layout,
               model=_model(lines), peak_memory_gib=max(peaks, default=None), torch_compile=compiled)
