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


@pytest.mark.parametrize("schedule", ["zb-v", "dualpipev"])
def test_torchtitan_numbers_a_v_split_along_the_path(schedule):
    # Llama 3 405B, 126 layers on pp 8 x 2 chunks: the V's default split gives path stages 1..14 the
    # 126 mod 16 = 14 extra layers, 7 8x14 7 along the path (rank 0 holds both 7s). torchtitan numbers
    # its stages along the path (stage_ids_this_rank style "v"), and its generate_llm_fqn_per_model_part
    # with the embedding and the output counted as a layer each gives (126 + 2) / 16 = 8 a stage less
    # one on the first and the last: exactly this split, so first/last_stage_less_layers 1 and 1.
    r = runner.invoke(app, ["estimate", "llama3-405b", "dgx-h100-16384", "--gpus", "2048", "--tp", "8", "--pp", "8",
                            "--vpp", "2", "--schedule", schedule, "--micro-batch", "1", "--export", "torchtitan"])
    assert r.exit_code == 0, r.output
    for flag in ("first_stage_less_layers=1", "last_stage_less_layers=1", "layers_per_stage=8"):
        assert f"--parallelism.pipeline_parallel_{flag}" in r.output, r.output
