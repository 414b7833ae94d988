"""Rewrite the outputs the README and docs show for their `plan ...` commands with what the commands
print now (tests/test_readme.py compares them line by line; run this after a change of the output).

    python benchmarks/shown_outputs.py
"""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.cli.main import app  # noqa: E402

# The same pattern as tests/test_readme.py shown_outputs: a ```sh block with one `plan ...` line,
# at most one paragraph, then the plain ``` block of its output.
PAIR = re.compile(r"(```(?:sh|bash|console)\n(plan [^\n]*?)\s*(?:#[^\n]*)?\n```\n\n(?:(?:(?!```).)*?\n\n)?```\n)(.*?)(```)",
                  flags=re.S)


def main() -> None:
    import os
    os.chdir(ROOT)
    for name in ("README.md", "docs/commands.md", "docs/cpsat.md"):
        path = ROOT / name
        text = path.read_text()

        def fresh(m: re.Match) -> str:
            result = CliRunner().invoke(app, shlex.split(m.group(2))[1:], terminal_width=150)
            if result.exit_code != 0:
                raise SystemExit(f"{name}: `{m.group(2)}` exited {result.exit_code}")
            out = "\n".join(line.rstrip() for line in result.output.splitlines())
            print(f"{name}: {m.group(2)}", file=sys.stderr)
            return m.group(1) + out.rstrip("\n") + "\n" + m.group(4)

        new = PAIR.sub(fresh, text)
        if new != text:
            path.write_text(new)


if __name__ == "__main__":
    main()
