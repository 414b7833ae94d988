"""Pipeline schedules in the exports (issue 40 item 3): torchtitan's names, refusals where a framework
has none (planner/export/frameworks.py RESTRICTIONS, sources in tests/data/frameworks/restrictions.txt)."""
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.export.torchtitan import TITAN_SCHEDULES

runner = CliRunner()
ESTIMATE = ["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64", "--tp", "8", "--pp", "8",
            "--micro-batch", "1"]
VPP = {"1f1b": 1, "interleaved": 2, "zb-h1": 1, "zb-v": 2, "interleaved-zb": 2, "dualpipe": 1, "dualpipev": 2}
TITAN_03 = (Path(__file__).parents[1] / "data" / "frameworks" / "torchtitan-0.3.txt").read_text()


def test_torchtitan_names_are_torch_pipelinings():
    """torch.distributed.pipelining.get_schedule_class's keys; torchtitan 0.3.0 imports ScheduleZBVZeroBubble and
    ScheduleDualPipeV by name (torchtitan/distributed/pipeline_parallel.py) and names Interleaved1F1B in its config."""
    assert TITAN_SCHEDULES == {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "interleaved-zb": "InterleavedZeroBubble",
                               "zb-v": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
    assert 'pipeline_parallel_schedule: str = "1F1B"' in TITAN_03 and "Interleaved1F1B" in TITAN_03


@pytest.mark.parametrize("schedule", sorted(TITAN_SCHEDULES))
def test_torchtitan_export_names_the_schedule(schedule):
    r = runner.invoke(app, [*ESTIMATE, "--vpp", str(VPP[schedule]), "--schedule", schedule, "--export", "torchtitan"])
    assert r.exit_code == 0, r.output
    assert f"--parallelism.pipeline_parallel_schedule={TITAN_SCHEDULES[schedule]}" in r.output


@pytest.mark.parametrize("export, schedule, fragment", [
    ("megatron", "zb-h1", "Megatron Core runs 1F1B and interleaved 1F1B only"),
    ("megatron", "dualpipev", "Megatron Core runs 1F1B and interleaved 1F1B only"),
    ("megatron-bridge", "zb-v", "Megatron Core runs 1F1B and interleaved 1F1B only"),
    ("nemo", "dualpipe", "Megatron Core runs 1F1B and interleaved 1F1B only"),
    ("torchtitan", "zb-h1", "no zb-h1 and no dualpipe"),
    ("torchtitan", "dualpipe", "no zb-h1 and no dualpipe"),
    ("torchtitan@0.2", "dualpipe", "no zb-h1 and no dualpipe"),
    ("deepspeed", "zb-h1", "TrainSchedule (1F1B) only"),
])
def test_a_framework_without_the_schedule_refuses_it(export, schedule, fragment):
    for option in ("--export", "--framework"):
        r = runner.invoke(app, [*ESTIMATE, "--vpp", str(VPP[schedule]), "--schedule", schedule, option, export])
        assert r.exit_code == 2 and fragment in r.output, (option, r.output)
