"""Messages that say what an input is (issue 31, item 8): a shipped preset that is a FIFO, a link to
/dev/zero or a symlink loop once got "no ... named 'X'; did you mean 'X'?"; a `.json` input skipped
the nesting, value and key bounds a YAML file gets."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs.yamlio import MAX_DEPTH, MAX_KEYS, MAX_NODES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
runner = CliRunner()


@pytest.fixture()
def odd_config_dir(tmp_path, monkeypatch) -> Path:
    for kind in ("gpus", "clusters", "models", "stacks"):
        shutil.copytree(CONFIGS / kind, tmp_path / kind)
    for kind in ("models", "gpus"):
        os.mkfifo(tmp_path / kind / "fifo.yaml")
        (tmp_path / kind / "zero.yaml").symlink_to("/dev/zero")
        (tmp_path / kind / "loop.yaml").symlink_to("loop.yaml")
    monkeypatch.setenv("PLANNER_CONFIG_DIR", str(tmp_path))
    return tmp_path


WHAT = {"fifo": "not a regular file (a FIFO)", "zero": "not a regular file (a device or socket)",
        "loop": "Too many levels of symbolic links"}


@pytest.mark.parametrize("name", WHAT)
def test_a_model_preset_that_is_no_file_says_what_it_is(name, odd_config_dir):
    r = runner.invoke(app, ["search", name])
    assert r.exit_code == 2, r.output
    assert "did you mean" not in r.output
    assert f"models/{name}.yaml" in r.output and WHAT[name] in r.output


@pytest.mark.parametrize("name", WHAT)
def test_a_gpu_preset_that_is_no_file_says_what_it_is(name, odd_config_dir, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text((CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text().replace(
        "gpu: a100-sxm-80gb", f"gpu: {name}"))
    r = runner.invoke(app, ["search", "gpt3-1.3b", str(cluster)])
    assert r.exit_code == 2, r.output
    assert "did you mean" not in r.output
    assert f"gpus/{name}.yaml" in r.output and WHAT[name] in r.output


def _nested(depth: int) -> dict:
    data = inner = {"model_type": "llama"}
    for _ in range(depth):
        inner["n"] = {}
        inner = inner["n"]
    return data


JSONS = {
    "deep": (_nested(MAX_DEPTH + 20), f"nesting deeper than {MAX_DEPTH} levels"),
    "wide": ({"model_type": "llama", **{f"k{i}": i for i in range(MAX_KEYS + 1)}}, f"more than {MAX_KEYS} keys"),
    "many": ({"model_type": "llama", "x": [0] * (MAX_NODES + 10)}, f"more than {MAX_NODES} values"),
}


@pytest.mark.parametrize("kind", JSONS)
@pytest.mark.parametrize("command", ["import", "search", "check"])
def test_json_inputs_get_the_yaml_bounds(kind, command, tmp_path):
    data, message = JSONS[kind]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    r = runner.invoke(app, [command, str(path)])
    assert r.exit_code == 2, r.output
    assert message in r.output
