"""`--timeline` of a layout its schedule does not run (a rule of the layout space, planner/layout/axes.py
`schedule_fits`) is bad input: exit 2 naming --timeline and the rule, no picture. Before, a V schedule at
vpp 1 indexed past its stages (IndexError, exit 3) and DualPipe or ZB-V at an odd pp deadlocked the
simulation (AssertionError, exit 3); 1F1B at vpp 2 drew a picture of a layout nothing runs."""
import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


@pytest.mark.parametrize("pp, vpp, schedule, fragment", [
    (2, 1, "zb-v", "schedule zb-v runs two chunks a rank in a V: vpp=2 (got vpp=1)"),
    (2, 1, "dualpipev", "schedule dualpipev runs two chunks a rank in a V: vpp=2 (got vpp=1)"),
    (8, 1, "zb-v", "vpp=2 (got vpp=1)"),
    (3, 1, "dualpipe", "schedule dualpipe needs an even pp (got pp=3)"),
    (3, 3, "zb-v", "vpp=2 (got vpp=3)"),
    (2, 2, "1f1b", "schedule 1f1b runs one chunk a rank: vpp=1 (got vpp=2"),
])
def test_a_layout_the_schedule_does_not_run_is_not_drawn(tmp_path, pp, vpp, schedule, fragment):
    # 4 micro-batches a pipeline stage: global batch 4 pp x dp 1 x micro-batch 1 (llama3-8b: 32 layers)
    png = tmp_path / "t.png"
    r = runner.invoke(app, ["estimate", "llama3-8b", "dgx-h100-1024", "--gpus", str(pp), "--tp", "1", "--pp", str(pp),
                            "--vpp", str(vpp), "--micro-batch", "1", "--global-batch", str(4 * pp),
                            "--schedule", schedule, "--timeline", str(png)])
    assert r.exit_code == 2, r.output
    assert "--timeline" in r.output and fragment in r.output
    assert "internal error" not in r.output and not png.exists()


def test_a_timeline_of_thousands_of_ranks_is_refused_fast(tmp_path):
    # pp 600 x 1 micro-batch = 600 units, under MAX_UNITS; 600 ranks > 512 (MAX_RANKS): refused, not drawn.
    # Before: pp 10,000 with 5 micro-batches (50,000 units) drew for 95 s (a row and a memory bar a rank).
    model = tmp_path / "long.yaml"
    model.write_text("name: long\nlayers: 600\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 1024\n"
                     "training: {global_batch: 1}\n")
    png = tmp_path / "t.png"
    r = runner.invoke(app, ["estimate", str(model), "dgx-h100-1024", "--gpus", "600", "--tp", "1", "--pp", "600",
                            "--micro-batch", "1", "--timeline", str(png)])
    assert r.exit_code == 2, r.output
    assert "--timeline" in r.output and "pp 600 pipeline ranks to draw, more than 512" in r.output
    assert not png.exists()
