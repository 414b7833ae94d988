"""The run stated on the command line (--seq-len, --precision, --nvlink-domain-gpus), `plan list`,
`plan` alone, help pages, and `plan estimate`'s defaults and memory hint (issue 30, items 4-5)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import EXAMPLES, app

ROOT = Path(__file__).resolve().parents[2]
ESTIMATE = ["estimate", "llama3-8b", "dgx-h100-1024", "--gpus", "16", "--tp", "2", "--pp", "2", "--micro-batch", "1"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def edited(tmp_path: Path, kind: str, name: str, old: str, new: str) -> Path:
    """A copy of a shipped spec with one line changed: what a user would write instead of the flag."""
    text = (ROOT / "configs" / kind / f"{name}.yaml").read_text()
    assert re.search(old, text, flags=re.M), old
    path = tmp_path / f"{name}.yaml"
    path.write_text(re.sub(old, new, text, count=1, flags=re.M))
    return path


def test_seq_len_is_as_if_the_spec_said_so(tmp_path):
    spec = edited(tmp_path, "models", "llama3-8b", r"^seq_len: \d+", "seq_len: 4096")
    flag = invoke(*ESTIMATE, "--seq-len", 4096, "--json")
    file = invoke("estimate", spec, *ESTIMATE[2:], "--json")
    assert flag.exit_code == file.exit_code == 0, flag.output
    assert json.loads(flag.stdout) == json.loads(file.stdout)
    assert json.loads(flag.stdout) != json.loads(invoke(*ESTIMATE, "--json").stdout)  # 8192 in the spec


def test_precision_is_as_if_the_spec_said_so(tmp_path):
    spec = edited(tmp_path, "models", "llama3-8b", r"^  precision: bf16", "  precision: fp8")
    flag = invoke(*ESTIMATE, "--precision", "fp8", "--json")
    file = invoke("estimate", spec, *ESTIMATE[2:], "--json")
    assert flag.exit_code == 0 and json.loads(flag.stdout) == json.loads(file.stdout)


@pytest.mark.parametrize("args,flag,says", [
    (["--seq-len", "0"], "--seq-len", "greater than 0"),
    (["--seq-len", "100000001"], "--seq-len", "less than or equal to 100000000"),
    (["--precision", "fp9"], "--precision", "'bf16', 'fp16', 'fp8', 'mxfp8' or 'nvfp4'"),
])
def test_bad_run_values_are_one_line_naming_the_flag(args, flag, says):
    for command in (ESTIMATE, ["search", "llama3-8b", "dgx-h100-1024", "--gpus", "8"]):
        result = invoke(*command, *args)
        assert result.exit_code == 2 and "Traceback" not in result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and says in lines[0], lines


def test_fp8_on_an_a100_names_the_flag():
    result = invoke("search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--precision", "fp8")
    assert result.exit_code == 2 and result.stderr.startswith("error: --precision: precision fp8 needs a fp8 peak")


def test_nvlink_domain_gpus_is_the_clusters_segment(tmp_path):
    spec = edited(tmp_path, "clusters", "dgx-gb200-nvl72-1152", r"^  nvlink_segment_gpus: 64", "  nvlink_segment_gpus: 48")
    args = ["llama3.1-70b", "--gpus", 144, "--tp", 4, "--pp", 4, "--micro-batch", 1, "--json"]
    flag = invoke("estimate", "llama3.1-70b", "dgx-gb200-nvl72-1152", *args[1:], "--nvlink-domain-gpus", 48)
    file = invoke("estimate", "llama3.1-70b", spec, *args[1:])
    assert flag.exit_code == file.exit_code and json.loads(flag.stdout) == json.loads(file.stdout)
    # 144 GPUs span two racks: 48-GPU segments place the groups otherwise than the shipped 64
    whole = invoke("estimate", "llama3.1-70b", "dgx-gb200-nvl72-1152", *args[1:])
    assert json.loads(whole.stdout)["step_time_s"] != json.loads(flag.stdout)["step_time_s"]
    bad = invoke("search", "llama3.1-70b", "dgx-gb200-nvl72-1152", "--nvlink-domain-gpus", 100)
    assert bad.exit_code == 2
    assert bad.stderr.strip() == ("error: --nvlink-domain-gpus: got 100, and an NVLink domain of dgx-gb200-nvl72-1152 "
                                  "has 72 GPUs (expected GPUs from 1 to 72)")


def test_sweep_takes_the_run_flags(tmp_path):
    # --batch-tokens 1,048,576 over 4,096-token sequences: 256 sequences a step (8,192: 128)
    args = ["sweep", "--models", "llama3-8b", "--cluster", "dgx-h100-1024", "--gpus", "8", "--batch-tokens", 1048576,
            "--quiet", "--out"]
    assert invoke(*args, tmp_path / "a.jsonl", "--seq-len", 4096).exit_code == 0
    assert invoke(*args, tmp_path / "b.jsonl").exit_code == 0
    a, b = (json.loads((tmp_path / f).read_text().splitlines()[0]) for f in ("a.jsonl", "b.jsonl"))
    assert (a["seq_len"], a["global_batch"]) == (4096, 256) and (b["seq_len"], b["global_batch"]) == (8192, 128)


@pytest.mark.parametrize("kind,name,says", [
    ("models", "gpt3-175b", "175.2B parameters, 96 layers, seq_len 2,048, bf16"),
    ("clusters", "dgx-a100-1024", "1,024 x a100-sxm-80gb GPUs, 8 per node, NVLink domain 8 GPUs"),
    ("gpus", "h100-sxm-80gb", "80 GiB, BF16 989, FP8 1,979 TFLOP/s dense, TDP 700 W"),
    ("stacks", "megatron-core", "Megatron-Core"),
])
def test_list_shipped(kind, name, says):
    table = invoke("list", kind)
    data = json.loads(invoke("list", kind, "--json").stdout)
    assert table.exit_code == 0 and name in table.stdout
    assert [i["name"] for i in data["items"]] == sorted(p.stem for p in (ROOT / "configs" / kind).glob("*.yaml"))
    assert says in {i["name"]: i["description"] for i in data["items"]}[name]


def test_list_unknown_kind():
    result = invoke("list", "model")
    assert result.exit_code == 2 and result.stderr.strip() == (
        "error: KIND: unknown kind 'model' (expected models | clusters | gpus | stacks)")


def test_plan_alone_prints_the_help():
    result = CliRunner().invoke(app, [], prog_name="plan")
    assert result.exit_code == 0 and "Usage: plan [OPTIONS] COMMAND" in result.stdout and "estimate" in result.stdout


@pytest.mark.parametrize("command", list(EXAMPLES))
def test_help_has_an_example_and_no_type_tags(command):
    text = CliRunner().invoke(app, [command, "--help"], terminal_width=200).stdout
    assert f"Example: {EXAMPLES[command]}"[:60] in " ".join(text.split())
    assert not re.search(r"<(bool|str|int|float|path)>|\b(INTEGER|FLOAT|BOOLEAN)\b", text), text


def test_estimate_defaults_are_search_defaults():
    # dp 4 tp 2 pp 2 on 16 GPUs: search picks sequence parallelism (tp > 1) and the distributed
    # optimizer (ZeRO 1, dp > 1); estimate without them scores the same as with them stated
    plain = json.loads(invoke(*ESTIMATE, "--json").stdout)
    stated = json.loads(invoke(*ESTIMATE, "--sequence-parallel", "--zero", 1, "--json").stdout)
    assert plain == stated and plain["layout"]["sequence_parallel"] is True and plain["layout"]["zero"] == 1
    # tp 1 and dp 1 leave nothing to default to: sp off, zero 0
    one = json.loads(invoke("estimate", "gpt3-1.3b", "dgx-a100-1024", "--gpus", 1, "--tp", 1, "--pp", 1,
                            "--micro-batch", 1, "--json").stdout)
    assert one["layout"]["sequence_parallel"] is False and one["layout"]["zero"] == 0


def test_memory_hint_names_a_change_that_fits():
    # search's best row for llama3-70b on dgx-h100-1024, with sequence parallelism and ZeRO 1 taken away
    args = ["estimate", "llama3-70b", "dgx-h100-1024", "--tp", 8, "--pp", 2, "--micro-batch", 2, "--vpp", 8]
    result = invoke(*args, "--no-sequence-parallel", "--zero", 0)
    assert result.exit_code == 1 and "best layout" not in result.stdout and "this layout" in result.stdout
    hint = re.search(r"violates memory: needs [\d.]+ GiB .*: fits with ((?:--[\w-]+(?: \w+)? ?)+) \(", result.stdout)
    assert hint, result.stdout
    fixed = invoke(*args, *hint.group(1).split())  # the options the hint names, on top of the layout
    assert fixed.exit_code == 0 and ": feasible" in fixed.stdout


def test_memory_hint_says_when_nothing_fits():
    # gpt3-175b on 8 A100s: 18 B x 175B parameters = 3.15 TB of states against 8 x 76 GiB: no layout
    # fits; that is the floor message, not a hint
    result = invoke("estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", 8, "--tp", 8, "--pp", 1, "--micro-batch", 1)
    assert result.exit_code == 1 and "need at least" in result.stdout and "fits with" not in result.stdout
