"""`plan sweep --scale-model` of bases whose layers follow a period (issue 38). Found: every size of
gpt-oss-120b was exit 3 (a pydantic error: its one-layer probe shape had full_attention_every 2 > 1
layer), and llama4-maverick (MoE every 2nd layer) was refused as "counts above the embeddings" for
counts far above them (10B, embeddings about 2.07B)."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.errors import SpecError
from planner.specs.loading import load_model
from planner.sweep.family import scale_model
from planner.sweep.points import _scaled


def _sweep(tmp_path, *args):
    return CliRunner().invoke(app, ["sweep", *args, "--gpus", "64", "--out", str(tmp_path / "rows.csv")])


def test_gpt_oss_scales_with_its_windows_kept(tmp_path):
    r = _sweep(tmp_path, "--scale-model", "gpt-oss-120b", "--params", "5e9:1e11:3")
    assert r.exit_code == 0, r.output
    rows = (tmp_path / "rows.csv").read_text().splitlines()
    assert len(rows) == 4 and all("gpt-oss-120b-scaled-" in row for row in rows[1:])


@pytest.mark.parametrize("params", [3e9, 5e9, 2.24e10, 1e11])
def test_a_scaled_gpt_oss_is_the_windowless_family_with_every_second_layer_full(params):
    base = load_model("gpt-oss-120b")
    model = _scaled(base, params)
    # windows hold no parameters: the shape is the one of the base without full_attention_every
    plain = scale_model(base.model_copy(update={"full_attention_every": None}), params)
    assert (model.layers, model.hidden, model.heads) == (plain.layers, plain.hidden, plain.heads)
    assert model.total_params() == plain.total_params()
    assert model.full_attention_every == 2 and model.sliding_window == base.sliding_window
    assert abs(model.total_params() / params - 1) <= 0.03


def test_a_shape_with_fewer_layers_than_the_period_is_refused_by_name():
    base = load_model("gpt-oss-120b").model_copy(update={"full_attention_every": 9})
    # 3B: 7 layers (the test above), fewer than 9
    with pytest.raises(SpecError, match=r"7 layers, fewer than full_attention_every \(9\)"):
        _scaled(base, 3e9)


def test_maverick_is_refused_for_its_alternating_moe_layers(tmp_path):
    r = _sweep(tmp_path, "--scale-model", "llama4-maverick", "--params", "1e10:4e11:3")
    assert r.exit_code == 2
    assert "scale_model.base" in r.stderr and "one layer in 2 is MoE (moe.layer_every 2)" in r.stderr
    assert "embeddings" not in r.stderr
