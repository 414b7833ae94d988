"""A cluster's node states host memory, its link and its bandwidth together (planner/specs/hardware.py
NodeSpec): offload is priced with all three. Before, one or two of them passed `plan check` and `--offload`
was then refused saying the cluster "does not state them"."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from planner.cli.main import app

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
HOST = ("host_memory_gib", "host_link_gbps", "host_memory_gbps")


@pytest.mark.parametrize("kept", [(k,) for k in HOST] + [tuple(k for k in HOST if k != m) for m in HOST])
def test_some_host_fields_without_the_others_are_refused(tmp_path, kept):
    cluster = yaml.safe_load((CONFIGS / "clusters" / "dgx-h100-1024.yaml").read_text())
    for k in HOST:
        if k not in kept:
            del cluster["node"][k]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    r = CliRunner().invoke(app, ["search", "llama3-8b", str(path), "--gpus", "8", "--offload", "optimizer"])
    assert r.exit_code == 2, r.output
    first_missing = next(k for k in HOST if k not in kept)
    assert f"{path}:" in r.output and f"node.{first_missing}: {first_missing} missing" in r.output
    assert f"the node states {', '.join(kept)}" in r.output
