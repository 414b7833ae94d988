"""A name from a spec never starts a line of its own (issue 38): a model, cluster, GPU, job or sweep name holding a
newline, a carriage return, an ANSI escape or U+2028 was printed raw into the table titles of `plan search`,
`plan estimate`, `plan sweep` and into `plan allocate`'s table, where it began a line that looked like output."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app
from planner.specs.shipped import config_dir

HOSTILE = "x\nNEWLINE\rRETURN\x1b[31mESCAPE\u2028SEPARATOR"
SHOWN = r"\nNEWLINE\rRETURN\x1b[31mESCAPE\u2028SEPARATOR"  # as planner.errors.printable spells it
RAW = ("\r", "\x1b", "\u2028", "\x85", "\u2029")


def _shipped(kind: str, name: str) -> dict:
    return yaml.safe_load((config_dir() / kind / f"{name}.yaml").read_text())


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    model = {**_shipped("models", "llama3.1-8b"), "name": "model-" + HOSTILE}
    gpu = {**_shipped("gpus", "h100-sxm-80gb"), "name": "gpu-" + HOSTILE}
    cluster = {**_shipped("clusters", "dgx-h100-1024"), "name": "cluster-" + HOSTILE, "gpu": gpu}
    jobs = {"kind": "jobs", "jobs": [{"name": "job-" + HOSTILE, "model": str(tmp_path / "model.yaml"), "min_gpus": 8,
                                      "max_gpus": 64, "tokens": 1.0e11}]}
    sweep = {"kind": "sweep", "name": "sweep-" + HOSTILE, "models": [str(tmp_path / "model.yaml")],
             "cluster": str(tmp_path / "cluster.yaml"), "gpus": [8]}
    out = {}
    for name, data in (("model", model), ("cluster", cluster), ("jobs", jobs), ("sweep", sweep)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, allow_unicode=False))  # YAML escapes: "\n", "\e", "\L"
        out[name] = str(path)
    return out


def _commands(f: dict[str, str]) -> dict[str, list[str]]:
    return {
        "search": ["search", f["model"], f["cluster"], "--gpus", "8", "--top", "2"],
        "estimate": ["estimate", f["model"], f["cluster"], "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"],
        "sweep": ["sweep", f["sweep"], "--quiet"],
        "allocate": ["allocate", f["jobs"], f["cluster"]],
    }


@pytest.mark.parametrize("command", ["search", "estimate", "sweep", "allocate"])
def test_every_name_printed_stays_on_its_line(files, command):
    out = CliRunner().invoke(app, _commands(files)[command])
    assert out.exit_code in (0, 1), (out.stdout, out.stderr)
    text = out.stdout + out.stderr
    for c in RAW:
        assert c not in text, (command, repr(c))
    lines = text.split("\n")
    for word in ("NEWLINE", "RETURN", "ESCAPE", "SEPARATOR"):  # never the first word of a line
        assert not any(line.lstrip().startswith(word) for line in lines), (command, word)
    names = {"search": ("model", "cluster", "gpu"), "estimate": ("gpu",), "sweep": ("sweep", "model"),
             "allocate": ("job", "model", "cluster", "gpu")}[command]
    for name in names:  # each name is there, spelled with its escapes (a narrow table cell may clip its end)
        assert f"{name}-x{SHOWN[:12]}" in text, (command, name, text)
    assert SHOWN in text
