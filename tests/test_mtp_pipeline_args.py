"""The uneven split shown for a model with multi-token-prediction layers (`plan estimate`/`plan search` JSON
`megatron_pipeline_args` and the text line) is the one the Megatron export writes: the layout string places the
MTP layers ("m" each) in the last virtual stage before the loss (planner/export/megatron.py megatron_layout;
Megatron-Core pipeline_parallel_layer_layout.py validate_layer_layout asserts their count)."""
from typer.testing import CliRunner

from planner.cli.main import app
from planner.estimate import estimate_layout
from planner.export.megatron import megatron_pipeline_args
from planner.specs.loading import load_cluster, load_model

ESTIMATE = ["estimate", "deepseek-v3", "dgx-h100-16384", "--gpus", "2048", "--tp", "1", "--pp", "16", "--ep", "64",
            "--micro-batch", "1", "--vpp", "2"]


def test_the_json_split_of_deepseek_v3_places_its_mtp_layer():
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h100-16384")
    assert model.mtp_layers == 1
    scored = estimate_layout(model, cluster, gpus=2048, tp=1, pp=16, ep=64, micro_batch=1, vpp=2)
    # 61 layers on 16 x 2 = 32 virtual stages, the first and the last a layer short of even where it can:
    # 29 stages of 2 and 3 of 1 (58 + 3 = 61); the default split ends [..., 2, 1, 1, 1]
    split = scored.layout["stage_layers"]
    assert split == [2] * 29 + [1] * 3
    # E + 2 layers | 28 runs of 2 | 2 of 1 | the last stage's layer, its MTP layer, the loss
    assert scored.to_dict()["megatron_pipeline_args"] == ["--pipeline-model-parallel-layout", "Et*2|(t*2|)*28(t|)*2tmL"]
    assert scored.to_dict()["megatron_pipeline_args"] == megatron_pipeline_args(split, 16, 2, model.mtp_layers)


def test_the_text_line_shows_the_same_split():
    r = CliRunner().invoke(app, ESTIMATE)
    assert "  --pipeline-model-parallel-layout 'Et*2|(t*2|)*28(t|)*2tmL'\n" in r.output, r.output


def test_a_model_without_mtp_has_no_m():
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    scored = estimate_layout(model, cluster, tp=8, pp=16, micro_batch=1, stage_layers=[7] + [6] * 14 + [5])
    # first 7, last 5 and 14 middle ranks of 6 (7 + 84 + 5 = 96): first/last flags, no layout string, no m
    assert scored.to_dict()["megatron_pipeline_args"] == ["--decoder-first-pipeline-num-layers", "7",
                                                          "--decoder-last-pipeline-num-layers", "5"]
