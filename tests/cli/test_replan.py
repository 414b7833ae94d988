"""`plan replan` (planner/cli/replan.py), on a local app that registers the command as planner/cli/main.py
does: the table and decision line, the JSON, exit 1 when nothing runs on the GPUs left, exit 2 naming the
flag for bad input."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import replan as cli_replan
from planner.cli.edge import PlanApp

app = PlanApp(add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _main() -> None:
    """A test app with `replan` alone."""


cli_replan.register(app)

# gpt3-1.3b on 64 of dgx-a100-1024's GPUs: dp16 tp2 pp2, 16 GPUs lost
BASE = ["replan", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "64", "--lost-gpus", "16", "--tp", "2", "--pp", "2",
        "--micro-batch", "2"]


def plan(*args):
    return CliRunner().invoke(app, [*BASE, *args] if args and args[0].startswith("--") else list(args))


def test_table_and_decision_line():
    out = plan("--spares-in-h", "2")
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "gpt3-1.3b: 16 of 64 x a100-sxm-80gb lost (dgx-a100-1024), 48 left" in lines[0]
    running = next(line for line in lines if line.strip().startswith("running"))
    assert running.split()[1:6] == ["64", "dp16", "tp2", "pp2", "mb2"]
    assert any(line.strip().startswith("new") and line.split()[1] == "48" for line in lines)
    assert any(line.startswith("tokens/s lost: ") for line in lines)
    assert any(line.startswith("change: reshard the 0.02 TB checkpoint") for line in lines)  # 1.42e9 x 14 bytes
    decision = [line for line in lines if line.startswith("decision: ")]
    assert len(decision) == 1 and "spares in 2 h (--spares-in-h)" in decision[0]
    assert "over the next 24.0 h (the default: no tokens left given)" in decision[0]


def test_json_holds_the_decision_and_its_arithmetic():
    out = plan("--spares-in-h", "2", "--tokens", "1e11", "--json")
    assert out.exit_code == 0, out.stderr
    d = json.loads(out.stdout)
    r, dec = d["running"]["tokens_per_s"], d["decision"]
    assert (d["gpus"], d["lost_gpus"], d["gpus_left"], d["new_gpus"]) == (64, 16, 48, 48)
    assert d["global_batch"] == d["new_global_batch"] == 512 and d["change_note"] is None
    assert d["tokens_per_s_lost"] == pytest.approx(r - d["new"]["tokens_per_s"])
    # H = 1e11 / r; wait: r (H - E - R) = 1e11 - r (2 x 3600 + 600)
    assert dec["horizon_h"] == pytest.approx(1e11 / r / 3600)
    assert dec["wait_tokens"] == pytest.approx(1e11 - r * 7800)
    assert dec["margin_tokens"] == pytest.approx(abs(dec["shrink_tokens"] - dec["wait_tokens"]))
    assert dec["winner"] == ("shrink" if dec["shrink_tokens"] > dec["wait_tokens"] else "wait")
    assert d["change"]["total_s"] == pytest.approx(d["change"]["reshard_s"] + d["change"]["restart_s"])
    assert d["change"]["restart_s"] == 600.0


def test_unused_nodes_make_the_spares_immediate_and_waiting_wins():
    # 64 GPUs = 8 of 128 nodes: spares in 0 h; wait costs R = 600 s, shrinking C1 + C2 > 1,200 s
    out = plan("--json")
    dec = json.loads(out.stdout)["decision"]
    assert dec["spares_in_h"] == 0 and dec["winner"] == "wait"


def test_nothing_on_the_gpus_left_is_exit_1():
    out = plan("replan", "gpt3-175b", "dgx-a100-1024", "--gpus", "1024", "--lost-gpus", "1016", "--tp", "8", "--pp",
               "4", "--micro-batch", "4")
    assert out.exit_code == 1
    assert out.stderr.startswith("infeasible: no layout runs on the 8 GPUs left") and out.stdout == ""


@pytest.mark.parametrize("args,message", [
    (["--lost-gpus", "64"], "error: --lost-gpus: got 64 of the 64 GPUs running"),
    (["--lost-gpus", "0"], "error: --lost-gpus: got 0 of the 64 GPUs running"),
    (["--dp", "8"], "error: --dp/--tp/--pp: dp*tp*pp = 8*2*2 = 32, but --gpus is 64"),
    (["--gpus", "62"], "error: --tp/--pp: tp*pp = 4 does not divide the 62 GPUs"),
    (["--gpus", "60"], "error: --dp/--micro-batch: global batch 512 is not a multiple of dp*micro_batch = 15*2"),
    (["--tp", "3", "--gpus", "48"], "error: --tp: tp=3 must divide heads (16)"),
    (["--spares-in-h", "-1"], "error: --spares-in-h: got -1.0"),
    (["--tokens", "0"], "error: --tokens: got 0.0"),
])
def test_bad_input_is_exit_2_with_one_line_naming_the_flag(args, message):
    out = plan(*args)  # later flags override BASE's
    assert out.exit_code == 2, out.stdout
    assert out.stderr.startswith(message) and len(out.stderr.strip().splitlines()) == 1
    assert out.stdout == ""


def test_register_adds_the_command():
    fresh = typer.Typer()

    @fresh.callback()
    def _cb() -> None:
        """test"""

    cli_replan.register(fresh)
    assert [c.name for c in fresh.registered_commands] == ["replan"]


def test_one_gpu_left_says_no_fewer_gpus_are_left_to_try():
    # Before: "none of the 0 GPU counts with a valid layout from 0 down to 1 runs batch 512"
    out = plan("replan", "qwen3-next-80b-a3b", "dgx-h100-1024", "--gpus", "128", "--lost-gpus", "127", "--tp", "2",
               "--pp", "1", "--micro-batch", "1")
    assert out.exit_code == 1
    assert out.stderr.startswith("infeasible: no layout runs on the 1 GPUs left")
    assert out.stderr.rstrip().endswith("no fewer GPUs are left to try") and "from 0 down to" not in out.stderr
