"""A schema for every kind `plan check` reads (issue 31, item 8): the combined `plan schema` rejected
the 9 shipped stack, jobs and sweep files that `plan check configs/` passes (7 stacks, 1 jobs file,
1 sweep file: those kinds had no schema). Checked with jsonschema, as an editor would, on every file
the check reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import yaml_files
from planner.cli.main import app
from planner.specs.loading import FILE_KINDS, detect_kind
from planner.specs.yamlio import load_yaml_file

jsonschema = pytest.importorskip("jsonschema")  # a test dependency (pyproject.toml, [test])

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def _validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _schema(*kind: str) -> dict:
    r = CliRunner().invoke(app, ["schema", *kind])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def shipped() -> list[tuple[str, dict]]:
    files, findings = yaml_files([str(CONFIGS)])
    assert not findings
    return [(f, load_yaml_file(f).data) for f in files]


def test_plan_check_passes_every_shipped_file(shipped):
    r = CliRunner().invoke(app, ["check", str(CONFIGS)])
    assert r.exit_code == 0, r.output
    assert f"ok: {len(shipped)} files checked, 0 errors" in r.output
    kinds = {detect_kind(data) for _, data in shipped}
    assert {"stack", "sweep", "jobs"} <= kinds  # the kinds that had no schema are among them


def test_the_combined_schema_and_each_kinds_accept_every_shipped_file(shipped):
    anything = _validator(_schema())
    own = {kind: _validator(_schema(kind)) for kind in FILE_KINDS}
    rejected = [(f, e.message) for f, data in shipped for e in anything.iter_errors(data)]
    assert rejected == []  # once: 9 files (configs/stacks/*.yaml, configs/jobs/, configs/sweeps/)
    for f, data in shipped:
        assert list(own[detect_kind(data)].iter_errors(data)) == [], f


def test_an_empty_mapping_is_no_kind(shipped):
    """A sweep's keys are all optional: without `kind:` or one of its keys, plan check cannot tell it."""
    errors = list(_validator(_schema("sweep")).iter_errors({"name": "x"}))
    assert errors
    assert not list(_validator(_schema("sweep")).iter_errors({"kind": "sweep", "name": "x"}))


@pytest.mark.parametrize("change, path", [
    ("attention: standard", ("attention",)),  # attention: flashy
    ("zero3_units_in_flight: 1", ("zero3_units_in_flight",)),  # 0: at least 1
    ("gpus: {}", ("gpus", "h100-sxm-80gb", "fitted_on")),  # a number where a list of names goes
])
def test_a_wrong_stack_file_is_rejected_by_both_at_the_same_field(tmp_path, change, path):
    wrong = {"attention": "attention: flashy", "zero3_units_in_flight": "zero3_units_in_flight: 0",
             "gpus": "gpus: {h100-sxm-80gb: {fitted_on: 5}}"}[path[0]]
    text = (CONFIGS / "stacks" / "deepspeed-zero3.yaml").read_text()
    assert change in text
    stack = tmp_path / "stack.yaml"
    stack.write_text(text.replace(change, wrong))
    r = CliRunner().invoke(app, ["check", str(stack)])
    assert r.exit_code == 2, r.output
    line = next(i for i, t in enumerate(stack.read_text().splitlines(), 1) if t.startswith(wrong))
    assert re.search(rf"stack\.yaml:{line}: {re.escape('.'.join(path))}: ", r.output), r.output
    for schema in (_schema(), _schema("stack")):
        errors = list(_validator(schema).iter_errors(load_yaml_file(stack).data))
        assert errors, schema.get("$id")
        # the combined schema's anyOf: the stack branch's error is the deepest one
        deepest = max((e for err in errors for e in [err, *err.context]), key=lambda e: len(e.absolute_path))
        assert tuple(deepest.absolute_path) == path
