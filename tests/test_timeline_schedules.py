"""`--timeline` draws Megatron-LM's 1F1B and interleaved schedules; the zero-bubble and DualPipe schedules
(issue 40) are priced but not simulated yet: asked for, the drawing is refused (exit 2), never drawn as 1F1B."""
import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
ESTIMATE = ["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64", "--tp", "8", "--pp", "8",
            "--micro-batch", "1"]


@pytest.mark.parametrize("schedule, vpp", [("zb-h1", 1), ("zb-v", 2), ("interleaved-zb", 2), ("dualpipe", 1),
                                           ("dualpipev", 2)])
def test_timeline_of_a_schedule_not_simulated_is_refused(schedule, vpp, tmp_path):
    r = runner.invoke(app, [*ESTIMATE, "--vpp", str(vpp), "--schedule", schedule, "--timeline", str(tmp_path / "t.svg")])
    assert r.exit_code == 2 and f"no drawing of the {schedule} schedule yet" in r.output, r.output
    assert not (tmp_path / "t.svg").exists()
