"""No output holds inf or nan (issue 31, items 3 and 7): in-bound reliability figures under which no job
progresses (ETTR 0: `gpu_mtbf_h: 1`, `restart_s: 1e6`, `storage_write_gbps: 0.01`) and an expert group
larger than a pipeline stage (ep*etp > tp*cp*dp) once killed `--json` (exit 3) and printed
`step inf s ... nan kW`; they are now an error naming the fields (exit 2), with no numpy warning."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
runner = CliRunner()
ONE = ["--tp", "1", "--pp", "1", "--micro-batch", "1", "--gpus", "8"]


@pytest.fixture()
def never_progresses(tmp_path) -> tuple[str, str]:
    cluster = tmp_path / "rel.yaml"
    cluster.write_text((CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text()
                       + "reliability:\n  gpu_mtbf_h: 1\n  restart_s: 1000000\n  storage_write_gbps: 0.01\n")
    model = tmp_path / "m.yaml"  # a token budget: time and energy to train
    model.write_text((CONFIGS / "models" / "gpt3-1.3b.yaml").read_text().replace("training:\n", "training:\n  tokens: 3.0e11\n"))
    return str(model), str(cluster)


def _no_inf(text: str) -> None:
    assert not re.search(r"\b(inf|nan|infinity)\b", text, re.I), text


@pytest.mark.parametrize("command", [["estimate", *ONE], ["estimate", *ONE, "--json"],
                                     ["search", "--gpus", "8", "--top", "1", "--json"],
                                     ["search", "--gpus", "8", "--top", "1"]])
def test_ettr_0_names_the_reliability_fields(command, never_progresses):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = runner.invoke(app, [command[0], *never_progresses, *command[1:]])
    assert r.exit_code == 2, r.output  # once: exit 3 (ValueError: Out of range float values) or `inf days`
    assert "never progresses (ETTR 0" in r.output and "gpu_mtbf_h, restart_s, storage_write_gbps" in r.output
    _no_inf(r.output)
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]  # once: divide by zero on stderr


@pytest.mark.parametrize("json_out", [[], ["--json"]])
def test_an_expert_group_larger_than_a_stage_is_bad_input(json_out):
    args = ["estimate", "mixtral-8x7b", "dgx-a100-1024", "--tp", "2", "--pp", "4", "--ep", "64", "--etp", "1",
            "--gpus", "64", "--micro-batch", "1", *json_out]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output  # once: --json exit 3, and 8 numpy warnings
    assert "--ep/--etp: ep*etp = 64*1 = 64 GPUs per expert group is more than the tp*cp*dp = 2*1*8 = 16" in r.output
    _no_inf(r.output)
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]


def test_a_goodput_short_of_zero_still_prints():
    """A slow but progressing job keeps its figures: only a non-finite one is refused."""
    r = runner.invoke(app, ["estimate", "gpt3-1.3b", "dgx-a100-1024", *ONE, "--json"])
    assert r.exit_code == 0, r.output
    _no_inf(r.output)
