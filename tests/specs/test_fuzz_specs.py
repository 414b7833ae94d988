"""Mutated valid specs (types, values, keys, structure) never make the tool raise: exit 0, 1 or 2, no traceback."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.check import check_file
from planner.cli.main import app

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BASES = {
    "model": yaml.safe_load((CONFIGS / "models" / "gpt3-175b.yaml").read_text()),
    "cluster": yaml.safe_load((CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text()),
    "gpu": yaml.safe_load((CONFIGS / "gpus" / "a100-sxm-80gb.yaml").read_text()),
    "plan": {"kind": "plan", "model": "gpt3-175b", "cluster": "dgx-a100-1024", "gpus": 64, "global_batch": 64,
             "layout": {"tp": 8, "pp": 8, "micro_batch": 1, "vpp": 3, "recompute": "selective",
                        "sequence_parallel": True}, "constraints": {"max_step_time_s": 60}},
}
VALUES = st.one_of(
    st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=8), st.sampled_from([0, -1, 1, 7, 95, 2**63, 1e308, "96", "a100-sxm-80gb", "gpt3-175b", [], {}]),
    st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths(data, prefix=()):
    yield prefix
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        yield from paths(value, prefix + (key,))


def mutate(data, path, op, value):
    if not path:
        return value if op == "replace" else [data] if op == "wrap" else data
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if op == "replace":
        parent[key] = value
    elif op == "delete":
        del parent[key]
    elif op == "wrap":
        parent[key] = [parent[key]]
    elif op == "rename" and isinstance(parent, dict):
        parent[f"{key}x"] = parent.pop(key)
    elif op == "add" and isinstance(parent, dict):
        parent["extra_key"] = value
    return data


@st.composite
def mutated(draw):
    kind = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[kind])
    for _ in range(draw(st.integers(1, 3))):
        choices = list(paths(data))
        path = draw(st.sampled_from(choices))
        data = mutate(data, path, draw(st.sampled_from(["replace", "delete", "wrap", "rename", "add"])), draw(VALUES))
    return kind, data


def dump(data) -> str:
    # Plain YAML; NaN and infinities come out as .nan/.inf, which the loader reads back.
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_mutated_specs_never_crash(tmp_path_factory, case):
    kind, data = case
    path = tmp_path_factory.mktemp("fuzz") / f"{kind}.yaml"
    path.write_text(dump(data))
    for finding in check_file(str(path)):
        assert finding.message and finding.severity in ("error", "warning")
    if kind in ("model", "cluster"):
        model, cluster = (path, "dgx-a100-1024") if kind == "model" else ("gpt3-175b", path)
        r = runner.invoke(app, ["estimate", str(model), str(cluster), "--tp", "8", "--pp", "8", "--micro-batch", "1",
                                "--gpus", "64", "--global-batch", "64", "--json"])
        assert r.exit_code in (0, 1, 2), r.output
        assert "Traceback" not in r.output and "internal error" not in r.output, r.output


def test_mutation_helpers():
    data = {"a": {"b": 1}}
    assert list(paths(data)) == [(), ("a",), ("a", "b")]
    assert mutate(copy.deepcopy(data), ("a", "b"), "wrap", None) == {"a": {"b": [1]}}
    assert math.isnan(yaml.safe_load(dump({"x": float("nan")}))["x"])
