"""How long the planner takes to start (issue 39 item 3): CPU time of a few commands, best of N.

    python benchmarks/startup.py            # the table
    python benchmarks/startup.py --json     # the same figures as JSON
    python benchmarks/startup.py --repeat 3
    python benchmarks/startup.py --compile  # every run compiles the planner's sources (no bytecode cache)

CPU time is user + system time of the child process (resource.getrusage(RUSAGE_CHILDREN), the
difference across one run), not wall time: on a machine shared with other work, wall time measures
the neighbours. The best of N runs is kept (the least disturbed by caches and other processes).
`plan` is run as its console script runs it, by this interpreter and from the tree this file is in
(not through a pyenv shim, which adds a shell of its own). The issue's target: `plan --help` and `plan check FILE` under 0.3 s.

Bytecode: an installed planner runs from compiled bytecode (pip writes the .pyc files at install,
a checkout writes __pycache__ on its first run). Unless --compile, the runs read and write bytecode
in a temporary directory (PYTHONPYCACHEPREFIX: the tree is not written) after one warm-up run per
command that is not counted. With --compile (PYTHONDONTWRITEBYTECODE=1) the libraries run from their
installed bytecode and every run compiles the planner's modules from source, as a checkout that
cannot write bytecode does (and as this script measured before it had the option).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `plan` as its console script runs it (`from planner.cli import app`), from the tree this file is in:
# PYTHONPATH comes before the editable install's finder, so a checkout elsewhere measures itself.
PLAN = [sys.executable, "-c", "import sys; from planner.cli import app; sys.argv[0] = 'plan'; sys.exit(app())"]
TARGET_S = 0.3

CASES = (  # (label, argv)
    ("python -c 'import sys' (the interpreter alone)", [sys.executable, "-c", "import sys"]),
    ("python -c 'import planner'", [sys.executable, "-c", "import planner"]),
    ("plan --help", [*PLAN, "--help"]),
    ("plan check configs/models/gpt3-1.3b.yaml", [*PLAN, "check", "configs/models/gpt3-1.3b.yaml"]),
    ("plan check configs/models/gpt3-1.3b.yaml --format github",
     [*PLAN, "check", "configs/models/gpt3-1.3b.yaml", "--format", "github"]),
    ("plan search (default)", [*PLAN, "search"]),
)


def child_env(pycache: str | None) -> dict[str, str]:
    """The environment of the runs: this tree first on the path; bytecode in `pycache` (None: none)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if pycache is None:  # the libraries' installed bytecode is read; the tree's sources compile (no __pycache__ there)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of `argv` (from the repository root, output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(repeat: int, compile_sources: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="planner-pycache-") as pycache:
        env = child_env(None if compile_sources else pycache)
        rows = []
        for label, argv in CASES:
            if not compile_sources:
                cpu_seconds(argv, env)  # warm-up: writes the bytecode
            rows.append({"command": label, "cpu_s": min(cpu_seconds(argv, env) for _ in range(repeat))})
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command; the best is kept (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--compile", action="store_true",
                        help="no bytecode cache: every run compiles the planner's sources")
    args = parser.parse_args()
    rows = measure(args.repeat, args.compile)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    width = max(len(r["command"]) for r in rows)
    cache = "no bytecode cache" if args.compile else "bytecode cached"
    print(f"{'command':<{width}}  CPU s (best of {args.repeat}, {cache})")
    for r in rows:
        print(f"{r['command']:<{width}}  {r['cpu_s']:.3f}")
    print(f"target: plan --help and plan check FILE under {TARGET_S} s of CPU")


if __name__ == "__main__":
    main()
