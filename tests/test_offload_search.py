"""Where a search tries host-memory offload (planner/offload_search.py) and how the CLI shows it."""
import json

import numpy as np
from typer.testing import CliRunner

from planner.cli.main import app
from planner.search import search
from planner.specs.loading import load_cluster, load_model

runner = CliRunner()


def _without_host(cluster):
    return cluster.model_copy(update={"node": cluster.node.model_copy(update={"host_memory_gib": None})})


def test_a_job_nothing_fits_offloads():
    # Llama 3 70B on 8 H100s: 18 B x 70.6e9 parameters = 1,271 GB of states alone, on 640 GB of HBM
    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100-1024")
    r = search(model, cluster, gpus=8, top_k=3)
    assert r.best is not None and r.best.layout["offload"] != "none"
    assert r.best.memory_gib.host > 0
    # without the node's host memory no offload is scored and nothing fits
    bare = search(model, _without_host(cluster), gpus=8, top_k=3)
    assert bare.best is None and not np.any(bare.scores.layouts.offload)


def test_a_job_that_fits_scores_no_offload():
    r = search(load_model("llama3-8b"), load_cluster("dgx-h100-1024"), gpus=64, top_k=3)
    assert r.best is not None and not np.any(r.scores.layouts.offload)


def test_offload_fixed_by_the_option_or_the_model():
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100-1024")
    r = search(model, cluster, gpus=64, top_k=3, limits=r_limits(offload="optimizer"))
    assert r.best.layout["offload"] == "optimizer"
    fixed = model.model_copy(update={"training": model.training.model_copy(update={"offload": "activations"})})
    assert set(search(fixed, cluster, gpus=64, top_k=3).scores.layouts.offload) == {2}


def r_limits(**fixed):
    from planner.constraints import Limits

    return Limits(fixed=fixed)


def test_cli_row_and_json_name_the_offload():
    args = ["search", "llama3-70b", "dgx-h100-1024", "--gpus", "8", "--top", "1"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "offload=" in table.stdout
    out = json.loads(runner.invoke(app, args + ["--json"]).stdout)
    assert out["best"]["layout"]["offload"] in ("optimizer", "activations", "both")
    assert out["best"]["memory_gib"]["host"] > 0


def test_cli_refuses_offload_on_a_cluster_without_host_figures():
    r = runner.invoke(app, ["estimate", "llama3-8b", "mi300x-1024", "--gpus", "8", "--tp", "1", "--pp", "1",
                            "--micro-batch", "1", "--offload", "optimizer"])
    assert r.exit_code == 2
    assert "cluster mi300x-1024 does not state them" in r.output and "node.host_memory_gib" in r.output
    r = runner.invoke(app, ["search", "llama3-8b", "dgx-h100-1024", "--offload", "disk"])
    assert r.exit_code == 2 and "unknown offload 'disk'" in r.output


def test_a_search_offers_activation_offload_only_where_a_framework_runs_it():
    # Megatron Core's cpu_offloading refuses pp > 1 and any recompute granularity; DeepSpeed's cpu_checkpointing
    # needs full recomputation: llama3-70b on 16 A100 40GB fits only offloaded, and every activation-offloading
    # row the search returns has pp 1 and no selective recomputation
    from planner import api

    found = api.search("llama3-70b", "dgx-a100-40gb-64", gpus=16, global_batch=64, top=20)
    rows = [r.layout for r in found.results if r.layout["offload"] in ("activations", "both")]
    assert rows and all(r["pp"] == 1 and r["recompute"] != "selective" for r in rows)


def test_estimate_takes_the_models_training_offload():
    # training.offload holds in plan estimate as in plan search (it was overridden by the axis default, none)
    from planner import api
    from planner.specs.loading import load_model

    model = load_model("llama3-8b").model_dump(mode="json")
    model["training"]["offload"] = "optimizer"
    est = api.estimate(model, "dgx-h100-1024", gpus=8, tp=8, pp=1, micro_batch=2, global_batch=64)
    assert est.layout["offload"] == "optimizer" and est.memory_gib.optimizer == 0.0
    assert api.estimate(model, "dgx-h100-1024", gpus=8, tp=8, pp=1, micro_batch=2, global_batch=64,
                        offload="none").layout["offload"] == "none"
