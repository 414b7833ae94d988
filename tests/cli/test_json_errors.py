"""With `--json`, stdout holds JSON whatever the outcome (planner/cli/common.py run, planner/cli/edge.py):
a refused input is {"error": {"kind", "exit_code", "errors": [{"message", "file", "line", "path",
"expected"}]}} beside the line on stderr. Before, stdout was empty: `plan search ... --json | jq` failed to
parse where the exit status said why."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args, code, kind, path", [
    (["search", "llama3-8b", "dgx-h100-1024", "--gpus", "0"], 2, "error", "--gpus"),
    (["search", "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--memory-headroom", "1"], 2, "error", "--memory-headroom"),
    (["estimate", "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1",
      "--offload-layers", "0"], 2, "error", "--offload-layers"),
    (["replan", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "16", "--lost-gpus", "16", "--tp", "1", "--pp", "1",
      "--micro-batch", "1"], 2, "error", "--lost-gpus"),
    (["list", "foo"], 2, "error", "KIND"),
    # 1,021 GPUs (a prime): no dp x tp x pp x cp of gpt3-1.3b (16 heads, 24 layers, batch 512) multiplies to it
    # but dp 1,021, which does not divide the batch: nothing to score, exit 1
    (["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "1021"], 1, "infeasible", None),
])
def test_a_refused_command_prints_its_error_as_json(args, code, kind, path):
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == code, r.output
    error = json.loads(r.stdout)["error"]
    assert error["kind"] == kind and error["exit_code"] == code and len(error["errors"]) == 1
    assert error["errors"][0].get("path") == path and error["errors"][0]["message"] in r.stderr


def test_a_bad_file_names_file_line_and_field_in_the_json(tmp_path):
    model = tmp_path / "m.yaml"
    model.write_text("name: m\nlayers: 2\nhidden: 64\nheads: 2\nvocab: 100\nseq_len: 64\n"
                     "training: {global_batch: 8, recompute_modules: [foo]}\n")
    r = runner.invoke(app, ["search", str(model), "dgx-h100-1024", "--gpus", "8", "--json"])
    assert r.exit_code == 2
    (e,) = json.loads(r.stdout)["error"]["errors"]
    assert (e["file"], e["line"], e["path"]) == (str(model), 7, "training.recompute_modules.0")
    assert "'foo'" in e["message"] and "'core_attn'" in e["expected"]


def test_without_json_stdout_stays_empty():
    r = runner.invoke(app, ["search", "llama3-8b", "dgx-h100-1024", "--gpus", "0"])
    assert r.exit_code == 2 and r.stdout == ""


@pytest.mark.parametrize("args", [["--gpus", "abc"], ["--no-such-option", "1"]])
def test_a_command_line_the_parser_refuses_is_json_too(args):
    # the option parser refuses these before any command runs: a generic error object, the message on stderr
    r = subprocess.run([sys.executable, "-m", "planner.cli", "search", "llama3-8b", "dgx-h100-1024", *args, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    error = json.loads(r.stdout)["error"]
    assert error["kind"] == "usage" and error["exit_code"] == 2 and r.stderr.strip()
