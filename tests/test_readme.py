"""Every `plan ...` command shown in the README and in docs/*.md runs and exits 0, from a scratch directory."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

ROOT = Path(__file__).resolve().parent.parent


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands_of(text: str) -> list[str]:
    """The `plan ...` lines of the ```sh, ```console and ```bash blocks of a Markdown text."""
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


def readme_commands() -> list[str]:
    """Every command of the README and the docs, each once, in the order they are first shown."""
    return list(dict.fromkeys(c for path in DOCS for c in commands_of(path.read_text())))


COMMANDS = readme_commands()


def test_the_readme_shows_commands():
    assert "plan search" in COMMANDS and any(c.startswith("plan sweep") for c in COMMANDS)
    readme = commands_of((ROOT / "README.md").read_text())
    for command in ("search", "estimate", "list", "validate", "check", "schema", "sweep", "allocate", "import"):
        assert any(c.startswith(f"plan {command}") for c in readme), command  # one example per command
    assert any("--export" in c for c in readme)


def test_the_docs_pages_are_read():
    assert len(DOCS) > 10 and all(p.exists() for p in DOCS)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command, tmp_path, monkeypatch, plan_once):
    monkeypatch.chdir(tmp_path)
    args = shlex.split(command)[1:]
    # Paths in the README and the docs are relative to the repository root.
    args = [str(ROOT / a) if (ROOT / a).exists() and "/" in a else a for a in args]
    # `plan validate` (seconds of replaying measurements) runs once for the tests that read it, from a
    # scratch folder of its own
    result = plan_once(*args) if args == ["validate"] else CliRunner().invoke(app, args)
    assert "Traceback" not in result.output
    assert result.exit_code == 0, (command, result.output[-2000:])


# --- shown outputs: what the docs print is what the code prints ------------------------------------

def _normal(text: str) -> list[str]:
    """Lines without trailing blanks; wall-clock times (`113 ms`) as `N ms`: they differ run to run."""
    return [re.sub(r"\b\d+ ms\b", "N ms", line.rstrip()) for line in text.strip().splitlines() if line.strip()]


def shown_outputs(text: str) -> list[tuple[str, str]]:
    """(command, output) pairs: a ```sh block holding one `plan ...` line and a plain ``` block after
    it, with at most one paragraph between them (the README's `plan search` example)."""
    pairs = re.findall(r"```(?:sh|bash|console)\n(plan [^\n]*?)\s*(?:#[^\n]*)?\n```\n\n(?:(?:(?!```).)*?\n\n)?```\n(.*?)```",
                       text, flags=re.S)
    return [(command.strip(), output) for command, output in pairs]


SHOWN = [(path.name, command, output) for path in (ROOT / "README.md", ROOT / "docs" / "commands.md", ROOT / "docs" / "cpsat.md")
         for command, output in shown_outputs(path.read_text())]


def test_the_readme_shows_an_output():
    assert ("README.md", "plan search") in {(name, command) for name, command, _ in SHOWN}


@pytest.mark.parametrize("name,command,output", SHOWN, ids=[f"{n}: {c}" for n, c, _ in SHOWN])
def test_shown_output_is_what_the_command_prints(name, command, output, monkeypatch):
    # stdout and stderr as a terminal shows them (the tables, then the summary lines)
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, shlex.split(command)[1:], terminal_width=150)
    assert result.exit_code == 0, result.output[-2000:]
    assert _normal(result.output) == _normal(output), f"{name}: regenerate the output shown for `{command}`"


def test_version_comment_is_the_version():
    from planner import DISTRIBUTION, version

    shown = re.search(r"plan --version\s+# (.*)", (ROOT / "docs" / "commands.md").read_text()).group(1).strip()
    assert shown == f"plan {version()} ({DISTRIBUTION})"


def test_the_speed_tables_counts_are_what_a_search_finds(bench_module):
    """docs/speed.md's candidates and feasible columns, row by row as benchmarks/speed.py runs them
    (its timings vary run to run and are not compared)."""
    speed = bench_module("speed")
    rows = re.findall(r"^\| ([^|]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|", (ROOT / "docs" / "speed.md").read_text(), flags=re.M)
    assert len(rows) == len(speed.CASES)
    for (label, gpus, candidates, feasible), case in zip(rows, speed.CASES):
        assert label.startswith(case[0]) and int(gpus.replace(",", "")) == case[2]
        found = speed.counts(*case)
        assert (found["candidates"], found["feasible"]) == (int(candidates.replace(",", "")), int(feasible.replace(",", ""))), label
