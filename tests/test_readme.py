"""Every `plan ...` command shown in the README runs and exits 0, from a scratch directory."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(console|sh|bash)\n(.*?)```", text, flags=re.S)
    out = []
    for _, body in blocks:
        for line in body.splitlines():
            line = line.strip().removeprefix("$ ")
            if not line.startswith("plan "):
                continue
            line = re.split(r"\s+#\s", line)[0]  # a trailing comment
            line = re.split(r"\s[|>]\s", line)[0]  # a pipe or a redirect
            out.append(line.strip())
    return out


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert "plan search" in COMMANDS and any(c.startswith("plan sweep") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = shlex.split(command)[1:]
    # Paths in the README are relative to the repository root.
    args = [str(ROOT / a) if (ROOT / a).exists() and "/" in a else a for a in args]
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output
    assert result.exit_code == 0, (command, result.output[-2000:])
