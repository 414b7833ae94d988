"""`plan check` and `plan schema` commands (registered on the main app), and the check's output formats."""
from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from planner.errors import clip_file, printable

if TYPE_CHECKING:
    from planner.check import Finding

FORMATS = ("text", "json", "github", "junit")


def summary(files: list[str], findings: list[Finding]) -> dict:
    from planner.api.checking import check_summary

    return check_summary(files, findings)


def _counts(s: dict) -> str:
    plural = lambda n, word: f"{n} {word}" + ("" if n == 1 else "s")  # noqa: E731
    return f"{plural(s['files'], 'file')} checked, {plural(s['errors'], 'error')}, {plural(s['warnings'], 'warning')}"


def _controls(text: str) -> str:
    """Control characters other than newline, CR and tab as escapes (ESC as \\x1b): an ANSI sequence in a
    file name or a key would colour a CI log, and XML 1.0 has no such characters at all (a JUnit report
    holding one did not parse); lone surrogates of undecodable names as \\udcXX."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\r\t" else repr(c)[1:-1] for c in text)


def _escape_data(text: str) -> str:
    """GitHub's workflow-command escaping: a newline in a file name or message cannot start a
    line of its own (`::error ...` that the runner would execute); other control characters and
    undecodable bytes of a file name (lone surrogates) as escapes (`_controls`)."""
    return _controls(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(files: list[str], findings: list[Finding], strict: bool = False) -> str:
    """GitHub Actions workflow commands: one `::error file=F,line=L,title=T::message` per finding."""
    lines = []
    for f in findings:
        level = "error" if f.severity == "error" or strict else "warning"
        props = [f"file={_escape_property(f.file)}"] + ([f"line={f.line}"] if f.line is not None else [])
        props.append(f"title={_escape_property(f'plan check: {f.code}')}")
        where = f"{f.path}: " if f.path else ""
        lines.append(f"::{level} {','.join(props)}::{_escape_data(where + f.message)}")
    s = summary(files, findings)
    lines.append(f"plan check: {_counts(s)}")
    return "\n".join(lines)


def render_junit(files: list[str], findings: list[Finding], strict: bool = False) -> str:
    """JUnit XML: one test case per file; unreadable or invalid files are errors, failed checks failures."""
    import xml.etree.ElementTree as ET

    from planner.check import INVALID, UNREADABLE

    by_file: dict[str, list[Finding]] = {file: [] for file in files}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    suites = ET.Element("testsuites", name="plan check")
    suite = ET.SubElement(suites, "testsuite", name="plan check")
    totals = Counter()
    for file, found in by_file.items():
        case = ET.SubElement(suite, "testcase", classname="plan check", name=_controls(file), time="0")
        failing = [f for f in found if f.severity == "error" or strict]
        for f in failing:
            tag = "error" if f.code in (UNREADABLE, INVALID) else "failure"
            totals[tag] += 1
            where = f"{f.file}:{f.line}" if f.line is not None else f.file
            node = ET.SubElement(case, tag, type=f.code, message=_controls(f"{f.path + ': ' if f.path else ''}{f.message}"))
            node.text = _controls(f"{where}: {f.message}")
        warnings = [f for f in found if f not in failing]
        if warnings:
            ET.SubElement(case, "system-out").text = "\n".join(
                _controls(f"warning: {f.file}:{f.line}: {f.path}: {f.message}") for f in warnings)
    attrs = {"tests": str(len(by_file)), "failures": str(totals["failure"]), "errors": str(totals["error"]),
             "skipped": "0", "time": "0"}
    suite.attrib.update(attrs)
    suites.attrib.update({k: v for k, v in attrs.items() if k != "skipped"})
    ET.indent(suites)
    xml = '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode")
    return xml.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates of undecodable names


def render_text(files: list[str], findings: list[Finding], console, strict: bool = False) -> None:
    """One line per finding. File names, paths and messages are shown literally: markup escaped, no
    emoji codes (`:fire:`), control characters and newlines as escapes (errors.printable)."""
    from rich.markup import escape

    for f in findings:
        color = "red" if f.severity == "error" or strict else "yellow"
        where = clip_file(f.file) + (f":{f.line}" if f.line is not None else "")
        path = f" {escape(printable(f.path))}:" if f.path else ""
        console.print(f"[{color}]{f.severity}[/{color}] {escape(where)}:{path} {escape(printable(f.message))} "
                      f"[dim]({f.code})[/dim]", highlight=False, soft_wrap=True, emoji=False)
    s = summary(files, findings)
    ok = "[green]ok[/green]" if not s["errors"] and not (strict and s["warnings"]) else "[red]failed[/red]"
    console.print(f"{ok}: {_counts(s)}", highlight=False, emoji=False)


def register(app: typer.Typer) -> None:
    """Add the commands of this module to `app`."""
    from planner.cli.common import run

    @app.command()
    def check(
        paths: Annotated[list[str], typer.Argument(help="files and directories (searched for *.yaml, *.yml)")],
        fmt: Annotated[str, typer.Option("--format", help="text | json | github | junit")] = "text",
        strict: Annotated[bool, typer.Option("--strict", help="fail on warnings too")] = False,
        memory_headroom: Annotated[Optional[float], typer.Option(
            "--memory-headroom", help="fraction of GPU memory kept free (default: the plan's, else 0.05)")] = None,
        against_best: Annotated[Optional[float], typer.Option(
            "--against-best", help="fail when a plan's layout is more than PCT % slower than plan search's best",
            metavar="PCT")] = None,
    ) -> None:
        """Validate GPU, cluster, model, layout and plan files for CI: exit 0 clean, 1 a check failed, 2 unreadable."""

        def go():
            from planner import api
            from planner.errors import SpecError

            if fmt not in FORMATS:
                raise SpecError(f"unknown format '{fmt}'", path="--format", expected=" | ".join(FORMATS))
            report = api.check(paths, memory_headroom=memory_headroom, against_best=against_best, strict=strict)
            files, findings, code = list(report.files), list(report.findings), report.exit_code
            try:
                if fmt == "json":
                    print(json.dumps(report.to_dict(), indent=2))
                elif fmt == "github":
                    print(render_github(files, findings, strict))
                elif fmt == "junit":
                    print(render_junit(files, findings, strict))
                else:
                    from planner.cli.common import out  # rich: only the text format draws with it

                    render_text(files, findings, out, strict)  # the report is the result: stdout, pass or fail
                sys.stdout.flush()
            except BrokenPipeError:  # `plan check ... | head`: the reader left; the verdict is the exit status
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if code:
                raise typer.Exit(code)

        run(go)

    @app.command()
    def schema(kind: Annotated[Optional[str], typer.Argument(
            help="gpu | cluster | model | stack | layout | plan | sweep | jobs (default: one schema for any of them)")] = None) -> None:
        """Print the JSON Schema of a spec file kind, for editors (yaml-language-server)."""

        def go():
            from planner import api

            print(json.dumps(api.schema(kind), indent=2))

        run(go)

