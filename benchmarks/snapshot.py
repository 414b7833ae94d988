"""Every number the tool prints for a fixed set of commands, as one JSON file, to prove a refactor
changed none of them (issue 28: "every number bit-identical").

    python benchmarks/snapshot.py before.json       # on the old tree
    python benchmarks/snapshot.py after.json        # on the new tree
    python benchmarks/snapshot.py --compare before.json after.json

The commands: the README's and docs' searches, estimates and exports (with --json where they have
it), `plan validate --json`, `plan allocate --json`, and `benchmarks/speed.py`'s searches. Wall
times (keys ending in `wall_s` or `_ms`, and "... ms" in text) are blanked, since they are not
predictions. Floats are written with repr, so equal files mean bit-identical numbers.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typer.testing import CliRunner  # noqa: E402

from planner.cli.main import app  # noqa: E402

SPEED = (  # benchmarks/speed.py's CASES as CLI searches
    "plan search gpt3-175b dgx-a100-1024 --gpus 1024 --json",
    "plan search megatron-530b dgx-a100-2240 --gpus 2240 --json",
    "plan search megatron-1t dgx-a100-3072 --gpus 3072 --json",
    "plan search megatron-1t big-h100-131072 --gpus 131072 --global-batch 65536 --json",
    "plan search llama3-405b big-h100-131072 --gpus 131072 --global-batch 65536 --json",
    "plan search deepseek-v3 dgx-h100-1024 --gpus 1024 --json",
    "plan search mixtral-8x7b dgx-h100-1024 --gpus 256 --json",
    "plan search llama3.1-405b-128k dgx-h100-16384 --gpus 16384 --json",
)
README = (
    "plan search --json",
    "plan search llama3-70b dgx-h100-1024 --top 3 --json",
    "plan search gpt3-175b dgx-a100-1024 --gpus 512 --tp 8 --max-step-time 40 --json",
    "plan estimate gpt3-175b dgx-a100-1024 --gpus 64 --global-batch 64 --tp 8 --pp 8 --micro-batch 1 "
    "--vpp 3 --recompute selective --sequence-parallel --json",
    "plan validate --json",
    "plan search configs/hf/qwen3-30b-a3b.json dgx-h100-1024 --top 3 --json",
    "plan search gpt3-175b dgx-a100-1024 --export megatron",
    "plan search gpt3-175b dgx-a100-1024 --export nemo",
    "plan estimate gpt3-175b dgx-a100-1024 --tp 4 --pp 8 --cp 2 --micro-batch 3 --vpp 6 "
    "--sequence-parallel --zero 1 --export deepspeed",
    "plan estimate llama3-405b dgx-h100-16384 --gpus 8192 --tp 8 --pp 16 --micro-batch 1 "
    "--stage-layers 7,8x14,7 --sequence-parallel --recompute full --export torchtitan",
    "plan estimate llama3-405b dgx-h100-16384 --gpus 8192 --tp 8 --pp 16 --micro-batch 1 "
    "--stage-layers 7,8x14,7 --sequence-parallel --recompute full --json",
    "plan search llama3-405b dgx-h100-16384 --gpus 8192 --tp 8 --pp 16 --cp 1 --top 3 --json",
    "plan search gpt3-175b mixed-h100-a100 --json",
    "plan allocate configs/jobs/three-jobs.yaml dgx-h100-1024 --json",
    "plan allocate configs/jobs/three-jobs.yaml dgx-h100-1024 --objective makespan --json",
    "plan search --objective energy --max-step-time 19 --json",
    "plan search --frontier --json",
    "plan search --objective carbon --json",
    "plan search --max-power-kw 800 --max-gpu-power-w 300 --json",
    "plan search llama3-405b dgx-h100-16384 --gpus-range 2048:16384 --min-scaling-efficiency 0.8 --json",
    "plan search deepseek-v3 dgx-gb200-nvl72-1152 --gpus 256 --top 3 --json",
    "plan search gpt-oss-120b dgx-b200-1024 --gpus 64 --top 3 --json",
    "plan search qwen3-235b-a22b dgx-h100-1024 --gpus 256 --top 3 --json",
    "plan search mixtral-8x22b dgx-h200-1024 --gpus 128 --top 3 --json",
    "plan search llama3-8b mi300x-1024 --gpus 64 --top 3 --json",
    "plan search kimi-k2 dgx-gb300-nvl72-1152 --gpus 512 --top 3 --json",
)
TIMING = re.compile(r"(wall_s|_ms)$")


def blank(value):
    if isinstance(value, dict):
        return {k: (None if TIMING.search(k) else blank(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [blank(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    return value


def run(command: str) -> dict:
    args = [str(ROOT / a) if "/" in a and (ROOT / a).exists() else a for a in shlex.split(command)[1:]]
    result = CliRunner().invoke(app, args)
    out = result.stdout
    try:
        body = blank(json.loads(out))
    except ValueError:
        body = re.sub(r"\d+(\.\d+)? ?ms\b", "<ms>", out)
    return {"exit": result.exit_code, "out": body}


def snapshot(path: Path) -> None:
    commands = README + SPEED
    out = {}
    for i, command in enumerate(commands, 1):
        t0 = time.perf_counter()
        out[command] = run(command)
        print(f"[{i}/{len(commands)}] {time.perf_counter() - t0:5.1f} s  {command}", file=sys.stderr)
    path.write_text(json.dumps(out, indent=1, sort_keys=True))


def compare(a: Path, b: Path) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    bad = [c for c in before if before[c] != after.get(c)]
    for c in bad:
        print(f"DIFFERS: {c}")
    print(f"{len(before) - len(bad)} of {len(before)} commands identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    snapshot(Path(sys.argv[1]))
