"""`plan check` and `plan schema`: kind detection, plausibility, plan feasibility, formats, exit codes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import Finding, check_file, exit_code, yaml_files
from planner.cli.main import app
from planner.cli.check import render_github, render_junit, render_text
from planner.specs.loading import detect_kind

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
GOLDEN = Path(__file__).resolve().parent / "golden"


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and result.exit_code != 3, result.output
    return result


def test_shipped_configs_pass_without_warnings():
    r = invoke("check", CONFIGS, "--strict", "--format", "json")
    assert r.exit_code == 0, r.stdout
    data = json.loads(r.stdout)
    assert data["findings"] == [] and data["summary"]["files"] == len(list(CONFIGS.rglob("*.y*ml")))


@pytest.mark.parametrize("fmt", ["github", "junit"])
def test_golden_output(monkeypatch, fmt):
    monkeypatch.chdir(GOLDEN)  # relative paths keep the golden files stable
    r = invoke("check", "inputs", "--format", fmt)
    assert r.exit_code == 2  # model-types.yaml and broken-syntax.yaml are malformed
    golden = GOLDEN / f"check.{fmt}.{'xml' if fmt == 'junit' else 'txt'}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(r.stdout)
    assert r.stdout == golden.read_text()


# (data, kind) -- design notes of the issue: `kind:` first, else the keys present.
KINDS = [
    ({"kind": "plan", "name": "x"}, "plan"),
    ({"peak_tflops": {}, "name": "g"}, "gpu"),
    ({"hbm_gbps": 1}, "gpu"),
    ({"nodes": 2, "gpu": "a100-sxm-80gb"}, "cluster"),
    ({"node": {}}, "cluster"),
    ({"layers": 2}, "model"),
    ({"model": "m", "cluster": "c", "layout": {}}, "plan"),
    ({"layout": {"tp": 1}}, "layout"),
    ({"tp": 2, "pp": 1}, "layout"),
    ({"name": "x"}, None),
]


@pytest.mark.parametrize("data, kind", KINDS)
def test_detect_kind(data, kind):
    assert detect_kind(data) == kind


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


PLAN = """\
kind: plan
model: gpt3-175b
cluster: dgx-a100-1024
gpus: 64
global_batch: 64
layout: {{tp: 8, pp: 8, micro_batch: 1, vpp: 3, recompute: {rc}, sequence_parallel: true}}
{extra}"""


def test_feasible_plan_is_clean(tmp_path):
    assert check_file(write(tmp_path, "p.yaml", PLAN.format(rc="selective", extra=""))) == []


def test_plan_over_memory_names_the_layout_line(tmp_path):
    # 175e9 params * 18 bytes (bf16 weights and grads, fp32 Adam states and master copy) / 8 GPUs = 394 GB > 80 GiB.
    text = PLAN.format(rc="full", extra="").replace("gpus: 64", "gpus: 8").replace("pp: 8, ", "pp: 1, ")
    found = check_file(write(tmp_path, "p.yaml", text.replace("vpp: 3, ", "")))
    assert [(f.code, f.line, f.severity) for f in found] == [("memory", 6, "error")]
    assert "GiB on 80 GiB" in found[0].message


def test_plan_limits_stated_in_the_file(tmp_path):
    text = PLAN.format(rc="selective", extra="constraints:\n  max_step_time_s: 0.001\n  max_power_kw: 0.5\n")
    found = check_file(write(tmp_path, "p.yaml", text))
    assert {(f.code, f.line) for f in found} == {("max_step_time", 8), ("max_power", 9)}


def test_a_limit_stated_as_zero_is_stated(tmp_path):
    # max_bubble: 0 with pp 8: the bubble is above 0, and the finding points at the stated limit (line 8)
    found = check_file(write(tmp_path, "p.yaml", PLAN.format(rc="selective", extra="constraints:\n  max_bubble: 0\n")))
    assert [(f.code, f.line, f.path) for f in found] == [("max_bubble", 8, "constraints.max_bubble")]


def test_headroom_flag_overrides_the_file(tmp_path):
    text = PLAN.format(rc="selective", extra="constraints:\n  memory_headroom: 0\n")
    path = write(tmp_path, "p.yaml", text)
    assert check_file(path) == []
    assert [f.code for f in check_file(path, headroom=0.9)] == ["memory"]


def test_plan_with_inline_and_relative_parts(tmp_path):
    write(tmp_path, "m.yaml", (CONFIGS / "models" / "gpt3-175b.yaml").read_text())
    text = ("model: m.yaml\ncluster:\n  name: two\n  gpu: a100-sxm-80gb\n  nodes: 2\n"
            "  node: {gpus: 8, nvlink_gbps: 300, network_gbps: 400}\nlayout: {tp: 16, pp: 1, micro_batch: 1}\n")
    found = {(f.code, f.line, f.path) for f in check_file(write(tmp_path, "p.yaml", text))}
    assert ("bandwidth-unit", 6, "cluster.node.network_gbps") in found
    assert ("network-faster-than-nvlink", 6, "cluster.node.network_gbps") in found
    assert ("tp_in_nvlink_domain", 7, "layout") in found


def test_plan_parts_errors_point_at_the_plan(tmp_path):
    text = "model: no-such-model\ncluster: {name: c, gpu: a100-sxm-80gb, nodes: 0, node: {gpus: 8, nvlink_gbps: 300, network_gbps: 25}}\nlayout: {tp: 1, pp: 1, micro_batch: 1, zero: 5}\n"
    found = check_file(write(tmp_path, "p.yaml", text))
    got = {(f.path, f.line) for f in found}
    assert ("model", 1) in got and ("cluster.nodes", 2) in got and ("layout.zero", 3) in got
    assert exit_code(found) == 2


def test_layout_product(tmp_path):
    text = PLAN.format(rc="selective", extra="").replace("tp: 8,", "dp: 2, tp: 8,")
    (f,) = check_file(write(tmp_path, "p.yaml", text))
    assert f.code == "layout" and "dp*tp*pp = 2*8*8 = 128, but the plan uses 64 GPUs" in f.message


def test_against_best(tmp_path):
    # Full recompute costs about a third more compute (Korthikanti et al. 2022, Sec. 5): plan search does better.
    path = write(tmp_path, "p.yaml", PLAN.format(rc="full", extra=""))
    r = invoke("check", path, "--against-best", "5")
    assert r.exit_code == 1
    assert "slower than the best layout plan search finds" in r.output and "tp=" in r.output
    assert invoke("check", path, "--against-best", "1000").exit_code == 0


GPU = (CONFIGS / "gpus" / "a100-sxm-80gb.yaml").read_text()
CLUSTER = (CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text()
# (file text, code, field path): each a unit slip of the list.
IMPLAUSIBLE = [
    (GPU.replace("memory_gib: 80", "memory_gib: 4000"), "gpu-memory", "memory_gib"),
    (GPU.replace("tdp_w: 400", "tdp_w: 7").replace("idle_w: 55", "idle_w: 5"), "gpu-tdp", "tdp_w"),
    (GPU.replace("hbm_gbps: 2039", "hbm_gbps: 2.039"), "gpu-hbm", "hbm_gbps"),
    (GPU.replace("bf16: 312", "bf16: 0.312"), "gpu-tflops", "peak_tflops.bf16"),
    (CLUSTER.replace("network_gbps: 25", "network_gbps: 400"), "network-faster-than-nvlink", "node.network_gbps"),
    (CLUSTER.replace("network_gbps: 25", "network_gbps: 200"), "bandwidth-unit", "node.network_gbps"),
    (CLUSTER.replace("nvlink_gbps: 300", "nvlink_gbps: 2400"), "bandwidth-unit", "node.nvlink_gbps"),
    (CLUSTER.replace("pue: 1.1", "pue: 0.8"), "pue", "power.pue"),
]


@pytest.mark.parametrize("text, code, path", IMPLAUSIBLE)
def test_plausibility_warnings(tmp_path, text, code, path):
    file = write(tmp_path, "x.yaml", text)
    found = [f for f in check_file(file) if f.code == code]
    assert found and found[0].severity == "warning" and found[0].path == path and found[0].line
    assert invoke("check", file).exit_code == 0
    assert invoke("check", file, "--strict").exit_code == 1


def test_exit_codes():
    w = Finding("f", 1, "warning", "pue", "power.pue", "m")
    e = Finding("f", 1, "error", "memory", "layout", "m")
    bad = Finding("f", 1, "error", "invalid", "x", "m")
    assert [exit_code([]), exit_code([w]), exit_code([w], strict=True), exit_code([e]), exit_code([e, bad])] == [0, 0, 1, 1, 2]


def test_directories_recurse_and_skip_hidden(tmp_path):
    for name in ("a/x.yaml", "a/b/y.yml", "a/.hidden/z.yaml", "a/.w.yaml", "a/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a: 1\n")
    files, findings = yaml_files([str(tmp_path / "a")])
    assert [Path(f).relative_to(tmp_path).as_posix() for f in files] == ["a/x.yaml", "a/b/y.yml"] and not findings


def test_github_escapes_and_junit_is_xml():
    import xml.etree.ElementTree as ET

    found = [Finding("d/a,b.yaml", 3, "error", "memory", "layout", "100% full\nreally"),
             Finding("c.yaml", None, "warning", "pue", None, "low")]
    gh = render_github(["d/a,b.yaml", "c.yaml"], found).splitlines()
    assert gh[0] == "::error file=d/a%2Cb.yaml,line=3,title=plan check%3A memory::layout: 100%25 full%0Areally"
    assert gh[1] == "::warning file=c.yaml,title=plan check%3A pue::low"
    root = ET.fromstring(render_junit(["d/a,b.yaml", "c.yaml"], found))
    assert root.get("tests") == "2" and root.get("failures") == "1" and root.get("errors") == "0"


def test_schema_validates_shipped_configs():
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when built: the same data, faster
    def validator(schema):  # checked once: jsonschema.validate re-checks the schema on every call
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema)

    r = invoke("schema")
    assert r.exit_code == 0
    anything = validator(json.loads(r.stdout))
    for kind, folder in (("gpu", "gpus"), ("cluster", "clusters"), ("model", "models")):
        schema = json.loads(invoke("schema", kind).stdout)
        assert schema["properties"]["kind"] == {"const": kind, "description": "what this file is (optional)"}
        one = validator(schema)
        for path in sorted((CONFIGS / folder).glob("*.yaml")):
            data = yaml.load(path.read_text(), Loader=SAFE_LOADER)
            one.validate(data)
            anything.validate(data)
        with pytest.raises(jsonschema.ValidationError):
            one.validate({"name": "x", "unknown_key": 1})
    plan = yaml.safe_load(PLAN.format(rc="full", extra=""))
    validator(json.loads(invoke("schema", "plan").stdout)).validate(plan)


def test_docs_examples_run(tmp_path):
    # The README's plan file (section on plan check) must pass as shown.
    text = (ROOT / "README.md").read_text()
    blocks = text.split("```")
    plan = next(b.removeprefix("yaml\n") for b in blocks if b.startswith("yaml\n") and "kind: plan" in b)
    r = invoke("check", write(tmp_path, "plan.yaml", plan), "--strict")
    assert r.exit_code == 0, r.output
    # (every `plan ...` command of the README is run by tests/test_readme.py)


def test_union_fields_get_one_error(tmp_path):
    found = check_file(write(tmp_path, "p.yaml", "model: 5\ncluster: dgx-a100-1024\nlayout: [1]\n"))
    assert [(f.path, f.message) for f in found] == [
        ("model", "wrong type: got 5 (expected a string or a mapping)"),
        ("layout", "wrong type: got a list (expected a mapping)")]


def test_file_names_and_messages_print_literally():
    # issue 15: rich emoji codes, markup and newlines in file names or values are shown as written.
    from rich.console import Console

    found = [Finding("a\n::error file=x::y.yaml", 2, "error", "invalid", "[b]k[/b]", ":fire: [red]x\n")]
    console = Console(record=True, width=300, emoji=True)  # even a console with emoji codes on
    render_text(["a\n::error file=x::y.yaml"], found, console)
    text = console.export_text()
    assert text.splitlines()[0] == "error a\\n::error file=x::y.yaml:2: [b]k[/b]: :fire: [red]x\\n (invalid)"
    assert len(text.splitlines()) == 2
    gh = render_github(["x"], [Finding("a\n::error file=x::\udcff%,y.yaml", 2, "error", "invalid", None, "m:\r\n,")])
    first, summary = gh.splitlines()
    assert first == ("::error file=a%0A%3A%3Aerror file=x%3A%3A\\udcff%25%2Cy.yaml,line=2,"
                     "title=plan check%3A invalid::m:%0D%0A,")
    assert summary.startswith("plan check: 1 file checked")


def test_control_characters_are_escaped_in_ci_formats_and_junit_parses():
    # An ESC (an ANSI colour) in a file name and in a key of a jobs file. Before: written raw, so the JUnit
    # report was not XML ("not well-formed (invalid token)") and the GitHub annotations coloured the log.
    import xml.etree.ElementTree as ET

    found = [Finding("d/\x1b[31mx.yaml", 2, "error", "invalid", "jobs.0.\x1b[31mk\nx", "unknown key")]
    root = ET.fromstring(render_junit(["d/\x1b[31mx.yaml"], found))
    case = root.find("testsuite/testcase")
    assert case.get("name") == "d/\\x1b[31mx.yaml"
    assert case.find("error").get("message") == "jobs.0.\\x1b[31mk\nx: unknown key"  # XML keeps the newline
    first = render_github(["x"], found).splitlines()[0]
    assert "\x1b" not in first
    assert first == "::error file=d/\\x1b[31mx.yaml,line=2,title=plan check%3A invalid::jobs.0.\\x1b[31mk%0Ax: unknown key"


@pytest.mark.parametrize("stack", ["../../etc/passwd", "megatron-cor"])
def test_a_profile_of_a_stack_no_command_takes_is_an_error(tmp_path, stack):
    # Before: `plan check` passed it while --profile refused it on every command ("not a shipped stack name").
    text = (CONFIGS / "profiles" / "dgxc-h100-gpt3.yaml").read_text().replace("stack: megatron-core", f"stack: {stack}")
    found = check_file(write(tmp_path, "p.yaml", text))
    assert [(f.severity, f.line, f.path) for f in found] == [("error", 4, "stack")]  # line 4 of the shipped file
    assert f"unknown software stack '{stack}'" in found[0].message


def test_findings_of_huge_values_are_bounded(tmp_path):
    key = "k" * 200_000
    model = (CONFIGS / "models" / "gpt3-1.3b.yaml").read_text()
    found = check_file(write(tmp_path, "m.yaml", model + f"? {key}\n: 1\n"))
    assert len(found) == 1 and len(found[0].message) < 1000 and len(found[0].path) < 200
    assert "(200000 characters)" in found[0].message


def test_a_plan_pins_its_offloaded_layers(tmp_path):
    # plan search --json writes layout.offload_layers for an activation-offloading layout; a plan file takes it
    # as the model's training.offload_layers: llama3-70b on 16 A100 40GB fits offloading 66 of 80 layers, not 2
    text = ("model: llama3-70b\ncluster: dgx-a100-40gb-64\ngpus: 16\nglobal_batch: 64\nlayout:\n  tp: 4\n  pp: 1\n"
            "  dp: 4\n  micro_batch: 1\n  recompute: none\n  sequence_parallel: true\n  zero: 3\n  offload: both\n"
            "  offload_layers: {n}\n")
    assert check_file(write(tmp_path, "p.yaml", text.format(n=66))) == []
    assert [f.code for f in check_file(write(tmp_path, "q.yaml", text.format(n=2)))] == ["memory"]
    assert [(f.code, f.path) for f in check_file(write(tmp_path, "r.yaml", text.format(n=0)))] == [
        ("invalid", "layout.offload_layers")]
