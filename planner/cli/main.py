"""The `plan` command line: parses arguments, calls the library (planner.api), prints. No planning logic here.

The commands live in modules of their own, each imported only when its command runs or prints its
help (`COMMANDS`): `plan --help` lists them from static one-line helps without loading any. Options
of layout axes, limits and search settings are generated from their declarations
(planner/cli/common.py); each command only adds its own arguments."""
from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from planner.cli.edge import PlanApp

# One example per command, shown at the end of its --help (the README runs each: tests/test_readme.py).
EXAMPLES = {
    "search": "plan search llama3-70b dgx-h100-1024 --top 3",
    "estimate": ("plan estimate gpt3-175b dgx-a100-1024 --gpus 64 --global-batch 64 --tp 8 --pp 8 --micro-batch 1 "
                 "--vpp 3 --recompute selective"),
    "validate": "plan validate",
    "list": "plan list models",
    "check": "plan check configs/",
    "schema": "plan schema cluster > cluster.schema.json",
    "sweep": ("plan sweep --scale-model gpt3-1.3b --params 1e9:1e10:2 --gpus 8,64 --batch-tokens 1048576 "
              "--tokens 3e11 --out rows.csv"),
    "allocate": "plan allocate configs/jobs/three-jobs.yaml dgx-h100-1024",
    "import": "plan import configs/hf/qwen3-30b-a3b.json -o qwen3-30b-a3b.yaml",
    "calibrate": "plan calibrate configs/runs/dgxc-h100-gpt3.yaml -o h100.yaml",
    "replan": "plan replan gpt3-175b dgx-a100-1024 --gpus 1024 --lost-gpus 16 --tp 8 --pp 4 --micro-batch 4 --vpp 12",
}


def _plain_help(command) -> None:
    """Help that reads as the docs write it: no `<bool>`/`<str>`/`<int>` tags. A switch shows
    none, a value a word for what it takes; an argument its name in capitals (`[MODEL]`)."""
    from typer.core import TyperArgument

    for param in command.params:
        if isinstance(param, TyperArgument):
            param.metavar = param.metavar or param.name.upper()
            param.display_type_rich = lambda ctx: None  # the name says it; the help says what it is
        elif param.metavar is None:
            param.metavar = "" if getattr(param, "is_flag", False) else _METAVARS.get(_bare_type(param), "VALUE")
    if not getattr(command, "_plain_help_option", False):  # --help is made on demand: untag it then
        made = command.get_help_option

        def help_option(ctx, made=made):
            option = made(ctx)
            if option is not None:
                option.metavar = ""
            return option

        command.get_help_option, command._plain_help_option = help_option, True
    if command.name in EXAMPLES and "Example:" not in (command.help or ""):
        command.help = f"{command.help or ''}\n\nExample: {EXAMPLES[command.name]}"


_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH", "list[str]": "TEXT"}


def _bare_type(param) -> str:
    try:
        return param.bare_type()
    except Exception:  # a type typer cannot name: the generic word
        return ""


# Every command: (the module that registers it, its one-line help as `plan --help` lists it). The help
# is the command's docstring's first line; tests/cli/test_cli.py checks that the two agree.
COMMANDS = {
    "search": ("planner.cli.layouts", "Find the best layouts for MODEL on CLUSTER (default: GPT-3 175B on 1024 A100s)."),
    "estimate": ("planner.cli.layouts", "Score one layout and say whether and why it is infeasible."),
    "validate": ("planner.cli.shipped", "Replay the published measurements in data/calibration (or a profile's own "
                 "runs) and print predicted vs measured."),
    "list": ("planner.cli.shipped", "List the shipped specs of a kind, the names MODEL, CLUSTER, a GPU preset and "
             "--stack take."),
    "check": ("planner.cli.check", "Validate GPU, cluster, model, layout and plan files for CI: exit 0 clean, 1 a "
              "check failed, 2 unreadable."),
    "schema": ("planner.cli.check", "Print the JSON Schema of a spec file kind, for editors (yaml-language-server)."),
    "sweep": ("planner.cli.sweep", "Best layout over model sizes x clusters x GPU counts x objectives: a table, a file, "
              "plots."),
    "allocate": ("planner.cli.allocate", "Share one cluster among several jobs: GPUs and layout per job, chosen with "
                 "CP-SAT."),
    "import": ("planner.cli.hf_import", "Turn a Hugging Face config.json into a model spec YAML (planner/specs/hf.py's "
               "mapping table)."),
    "calibrate": ("planner.cli.calibrate", "Fit the planner's constants to runs measured on your own cluster; predict "
                  "with --profile."),
    "replan": ("planner.cli.replan", "After K of N GPUs fail: the best layout on the GPUs left, the change's cost, and "
               "shrink now or wait for spares."),
    "runs": ("planner.cli.calibrate", "Measured runs: read training logs into a runs file."),
}


def load_command(name: str):
    """The command `name` (a click command, typer's), built from the module that registers it
    (imported now), or None."""
    if name not in COMMANDS:
        return None
    holder = typer.Typer()
    importlib.import_module(COMMANDS[name][0]).register(holder)
    return typer.main.get_group(holder).commands.get(name)


class _Group(typer.core.TyperGroup):
    """`plan` alone prints the help and exits 0; commands are loaded on first use (click's lazy
    group); every command's help without type tags and with its example."""

    def parse_args(self, ctx, args):
        if not args and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name):
        if getattr(self, "_listing", False) and cmd_name in COMMANDS and cmd_name not in self.commands:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])  # `plan --help`'s line only
        command = self.commands.get(cmd_name)
        if command is None:
            command = load_command(cmd_name)
            if command is None:
                return None
            self.commands[cmd_name] = command
        _plain_help(command)
        return command

    def format_help(self, ctx, formatter):
        _plain_help(self)
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = PlanApp(add_completion=False, no_args_is_help=True, help="Plan the parallel layout of a large-model training run.",
              pretty_exceptions_enable=False, cls=_Group)

def _version(value: bool) -> None:
    if value:
        from planner import DISTRIBUTION, version

        print(f"plan {version()} ({DISTRIBUTION})")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                                                help="print the version and exit")] = False) -> None:
    """Plan the parallel layout of a large-model training run."""


def __getattr__(name: str):
    """Names tests and scripts import from here, kept where they were: `parse_split` (planner.api.plan)."""
    if name == "parse_split":
        from planner.api.plan import parse_split

        return parse_split
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
