"""What tests across folders share.

`bench_module` loads a script of benchmarks/ as a module (tests that check a benchmark's data or its
tables), without changing sys.path.

`plan_once` runs a `plan` command in-process once per session and hands every test that asks for
the same arguments the same result: for commands whose output depends on nothing but their
arguments and the shipped files (`plan validate` replays every published measurement, seconds of
YAML parsing, and four tests check what it prints). Each caller still asserts on a real run; the
run happens from a scratch folder, so none depends on the working directory.
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner


@pytest.fixture(scope="session")
def bench_module():
    """bench_module("nvfp4"): benchmarks/nvfp4.py as a module, loaded once a session."""
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", root / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load


@pytest.fixture(scope="session")
def plan_once(tmp_path_factory):
    from planner.cli.main import app

    results = {}

    def run(*args):
        key = tuple(str(a) for a in args)
        if key not in results:
            with contextlib.chdir(tmp_path_factory.mktemp("plan-once")):
                results[key] = CliRunner().invoke(app, list(key))
        return results[key]

    return run
