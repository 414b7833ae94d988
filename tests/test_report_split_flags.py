"""The uneven split's Megatron-LM flags in the terminal text of `plan estimate`/`plan search` paste into a shell
as they are: every word shell-quoted (a layout string holds `|`, `(`, `*`: a pipe, a subshell, a glob unquoted)
and the flags on one line that is never wrapped, whatever the terminal's width (a 150-column pipe broke
`--pipeline-model-parallel-layout` from its value, and `--decoder-first-pipeline-num-layers` from its 7)."""
from __future__ import annotations

import io
import shlex

import pytest
from rich.console import Console
from typer.testing import CliRunner

from planner.cli.main import app
from planner.estimate import estimate_layout
from planner.report import render_estimate
from planner.specs.loading import load_cluster, load_model

# deepseek-v3: 61 layers on pp 16 x vpp 2 = 32 virtual stages, 29 of 2 and 3 of 1 (58 + 3 = 61), and one MTP
# layer: E + 2 layers | 28 runs of 2 | 2 runs of 1 | the last layer, the MTP layer, the loss
# (tests/test_mtp_pipeline_args.py derives the same string)
DEEPSEEK = (["estimate", "deepseek-v3", "dgx-h100-16384", "--gpus", "2048", "--tp", "1", "--pp", "16", "--ep", "64",
             "--micro-batch", "1", "--vpp", "2"],
            ["--pipeline-model-parallel-layout", "Et*2|(t*2|)*28(t|)*2tmL"])
# gpt3-175b: 96 layers as 7 + 14 x 6 + 5 = 96 on pp 16: the first and last rank differ, the middle are even
GPT3 = (["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "1024", "--tp", "8", "--pp", "16", "--micro-batch", "1",
         "--stage-layers", "7,6x14,5"],
        ["--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "5"])


def _flags_line(text: str) -> str:
    """The one line of flags after the split's line (whose words a narrow terminal may wrap: it is prose)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("uneven stages"))
    return next(line for line in lines[at + 1:] if line.startswith("  --"))


@pytest.mark.parametrize("argv,flags", [DEEPSEEK, GPT3], ids=["layout-string", "first-last"])
def test_the_printed_flags_parse_back_to_the_exact_values(argv, flags):
    r = CliRunner().invoke(app, argv)  # exit 1 where the layout does not fit: its split is printed all the same
    assert r.exit_code in (0, 1), r.output
    assert shlex.split(_flags_line(r.stdout)) == flags


def test_the_layout_string_is_quoted_so_a_shell_reads_no_pipe_or_glob():
    r = CliRunner().invoke(app, DEEPSEEK[0])
    assert "'Et*2|(t*2|)*28(t|)*2tmL'" in _flags_line(r.stdout)


@pytest.mark.parametrize("width", [40, 80])
def test_a_narrow_terminal_does_not_break_a_flag_from_its_value(width):
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100-16384")
    scored = estimate_layout(model, cluster, gpus=2048, tp=1, pp=16, ep=64, micro_batch=1, vpp=2)
    buf = io.StringIO()
    render_estimate(scored, Console(file=buf, width=width, color_system=None), cluster.gpu.memory_gib)
    line = _flags_line(buf.getvalue())
    assert shlex.split(line) == DEEPSEEK[1]
