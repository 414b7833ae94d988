"""The CLI contract: output, JSON keys, exit codes and messages."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parents[2] / "configs"

LAYOUT_KEYS = {"dp", "tp", "pp", "micro_batch", "vpp", "recompute", "sequence_parallel", "zero", "num_microbatches"}
SCORED_KEYS = {"layout", "feasible", "violations", "step_time_s", "time_breakdown_s", "memory_gib", "tokens_per_s",
               "model_tflops_per_gpu", "mfu", "energy_j_per_step", "avg_power_kw"}


def invoke(*args):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


@pytest.fixture(scope="module")
def default_search():
    return invoke("search", "--json")


def test_search_with_no_arguments_runs_the_default(default_search):
    assert default_search.exit_code == 0, default_search.output
    data = json.loads(default_search.stdout)
    assert data["model"] == "gpt3-175b" and data["gpus"] == 1024
    assert {"best", "results", "solver", "candidates", "rejected"} <= set(data)
    assert data["solver"]["status"] == "OPTIMAL"
    assert data["candidates"]["total"] >= data["candidates"]["feasible"] > 0
    best = data["best"]
    assert SCORED_KEYS <= set(best) and LAYOUT_KEYS <= set(best["layout"])
    assert {"compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble"} <= set(best["time_breakdown_s"])
    assert {"weights", "gradients", "optimizer", "activations", "other", "total"} <= set(best["memory_gib"])
    lay = best["layout"]
    assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == 1024
    assert lay["dp"] * lay["micro_batch"] * lay["num_microbatches"] == 1536
    assert sum(best["time_breakdown_s"].values()) == pytest.approx(best["step_time_s"], rel=1e-9)
    assert best["time_parts_s"] == {"moe_imbalance": 0.0}  # a dense model: parts of the terms, none priced
    assert "placement" not in data  # DGX A100: an NVLink domain is a node, nothing to say
    assert best["memory_gib"]["total"] <= 80
    # tokens/s = 1536 sequences * 2048 tokens / step
    assert best["tokens_per_s"] == pytest.approx(1536 * 2048 / best["step_time_s"])
    steps = [r["step_time_s"] for r in data["results"]]
    assert steps == sorted(steps) and len(steps) == 5


def test_search_table_output():
    r = invoke("search", "gpt3-175b", "dgx-a100-1024", "--top", "3")
    assert r.exit_code == 0
    assert "tokens/s" in r.stdout and "rejected by" in r.stdout and "best layout" in r.stdout


def test_search_infeasible_exits_1_and_explains():
    r = invoke("search", "--gpus", "8")
    assert r.exit_code == 1
    assert "no feasible layout" in r.output and "GiB on 80 GiB" in r.output and "memory" in r.output


def test_search_constraint_counts_appear_in_json():
    r = invoke("search", "--json", "--max-step-time", "0.001")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["results"] == [] and data["rejected"]["max_step_time"] == data["candidates"]["total"]
    assert any(v["constraint"] == "max_step_time" for v in data["nearest"]["violations"])


def test_estimate_feasible_layout():
    # The Korthikanti 175B layout with selective recompute on 64 GPUs fits in 80 GiB.
    r = invoke("estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "8", "--micro-batch", "1",
               "--vpp", "3", "--recompute", "selective", "--sequence-parallel", "--gpus", "64",
               "--global-batch", "64", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["feasible"] and data["layout"]["dp"] == 1 and data["layout"]["num_microbatches"] == 64


def test_estimate_infeasible_prints_numbers_and_violations():
    r = invoke("estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "1", "--micro-batch", "1",
               "--gpus", "8", "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert not data["feasible"] and data["step_time_s"] > 0
    assert any(v["constraint"] == "memory" for v in data["violations"])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["search", "no-such-model"], "no model file or shipped model named 'no-such-model'"),
        (["search", "gpt3-175b", "no-such-cluster"], "no cluster file or shipped cluster"),
        (["search", "--objective", "speed"], "unknown objective 'speed'"),
        (["search", "--recompute", "some"], "unknown mode 'some'"),
        (["search", "--zero", "4"], "ZeRO stage 4 does not exist"),
        (["search", "--gpus", "64", "--tp", "8", "--pp", "8", "--dp", "2"], "dp*tp*pp = 2*8*8 = 128, but --gpus is 64"),
        (["search", "--gpus", "4096"], "more than the 1024 GPUs"),
        (["search", "--memory-headroom", "1.5"], "--memory-headroom"),
        (["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "3", "--pp", "1", "--micro-batch", "1", "--dp", "1",
          "--gpus", "8"], "dp*tp*pp = 1*3*1 = 3, but --gpus is 8"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, fragment):
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert fragment in r.output


def test_estimate_structural_violation():
    # tp=5 does not divide 96 heads.
    r = invoke("estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "5", "--pp", "1", "--micro-batch", "1",
               "--gpus", "5", "--dp", "1", "--json")
    assert r.exit_code == 1
    assert "tp=5 must divide heads (96)" in r.stdout


def test_validate_prints_the_table(plan_once):
    r = plan_once("validate")  # one run of `plan validate` shared by the tests that read it
    assert "Traceback" not in r.output
    assert r.exit_code == 0 and "mean |error|" in r.stdout


def test_validate_says_its_error_is_in_sample(plan_once):
    # The replay uses the constants fitted on these runs: its mean error is not what a new run can expect (the
    # README quotes the left-out error), so the summary line says so and where the left-out figures are
    r = plan_once("validate")
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "figures: mean |error|" in line)
    assert lines[at].endswith("in sample (the shipped constants were fitted on these runs)")
    assert "left out of the fit" in lines[at + 1] and lines[at + 1].endswith("docs/fidelity.md")


# --- issue #15: strict JSON, literal values, a solver that stops is not "infeasible" ----------------

def strict_json(text: str):
    """json.loads that refuses NaN and Infinity (Python's json accepts them; JSON does not)."""
    def refuse(constant):
        raise AssertionError(f"{constant} in the JSON output")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("args", [
    ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--json", "--objective", "cost",
     "--critical-batch-tokens", "1e15", "--frontier"],
    ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--json", "--critical-batch-tokens", "1e-300"],
    ["search", "gpt3-1.3b", "dgx-a100-1024", "--json", "--gpus-range", "1:16", "--min-scaling-efficiency", "1e-300"],
    ["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "8", "--json"],
    ["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--gpus", "1",
     "--json", "--max-step-time", "1e-300", "--min-mfu", "1e-300", "--max-power-kw", "1e-300"],
])
def test_json_output_is_strict_json(args):
    """The tester got bare NaN from `--critical-batch-tokens nan`: now refused (tests/test_options.py);
    the extremes still allowed must give numbers JSON can carry."""
    r = invoke(*args)
    assert r.exit_code in (0, 1), r.output
    strict_json(r.stdout)


@pytest.fixture
def marked_up_model(tmp_path):
    text = (CONFIGS / "models" / "gpt3-1.3b.yaml").read_text()
    path = tmp_path / "model.yaml"
    path.write_text(text.replace("name: gpt3-1.3b", "name: '[red]x[/red] [bold]y :fire:'", 1))
    return path


def test_names_from_files_print_literally(marked_up_model):
    """A spec's name is text, not rich markup or an emoji code: the table title shows it as written."""
    r = invoke("search", str(marked_up_model), "dgx-a100-1024", "--gpus", "8", "--top", "1")
    assert r.exit_code == 0, r.output
    assert "[red]x[/red] [bold]y :fire: on 8 x" in r.stdout


def test_paths_print_literally(tmp_path):
    """`plan import` names the file it read and the one it wrote, brackets and all."""
    folder = tmp_path / "[red]x["
    folder.mkdir()
    config = folder / "red]cfg.json"
    config.write_text((CONFIGS / "hf" / "qwen3-30b-a3b.json").read_text())
    r = invoke("import", str(config))
    assert r.exit_code == 0, r.output
    assert f"{tmp_path}/[red]x[/red]cfg.json: qwen3_moe family" in r.stderr
    r = invoke("import", str(config), "-o", str(folder / "[bold]out.yaml"))
    assert r.exit_code == 0, r.output
    assert f"wrote {folder}/[bold]out.yaml:" in r.stderr


def test_a_solver_that_stops_is_not_reported_as_infeasible():
    """`--time-limit` too short for CP-SAT: the placement across pools ends UNKNOWN. The tester
    saw "no feasible layout" for such a stop; the report says the solver stopped and what to do."""
    r = invoke("search", "gpt3-1.3b", "mixed-h100-a100", "--gpus", "64", "--time-limit", "1e-9")
    assert r.exit_code == 0, r.output  # each pool alone has feasible layouts
    assert "across pools: CP-SAT stopped (UNKNOWN) before placing" in r.stdout and "raise --time-limit" in r.stdout
    assert "no pipeline that spans pools" not in r.stdout



# --- start-up: commands load on demand (issue 39 item 3) ----------------------------------------------------

def test_each_commands_static_help_is_its_docstrings_first_line():
    # `plan --help` lists COMMANDS' static lines without importing the commands: they must say what
    # each command's own help says.
    from planner.cli.main import COMMANDS, load_command

    for name, (_, line) in COMMANDS.items():
        command = load_command(name)
        assert command is not None, name
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert first == line and command.name == name, name


def test_help_and_check_load_no_command_they_do_not_run():
    import subprocess
    import sys

    probe = ("import sys; from planner.cli import app; sys.argv = ['plan', *sys.argv[1:]]\n"
             "try:\n    app()\nexcept SystemExit:\n    pass\n"
             "sys.stderr.write(' '.join(sorted(m for m in sys.modules if m.startswith(('planner', 'numpy', 'ortools', "
             "'rich.progress', 'rich.table', 'rich.console', 'matplotlib')))))")
    root = Path(__file__).resolve().parents[2]

    def loaded(*args) -> set[str]:
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=root, timeout=60)
        return set(r.stderr.split())

    helped = loaded("--help")
    assert not helped & {"planner.cli.layouts", "planner.cli.sweep", "planner.cli.check", "planner.cli.common",
                         "numpy", "rich.progress"}, helped  # (typer draws the help with rich.table)
    checked = loaded("check", str(CONFIGS / "models" / "gpt3-1.3b.yaml"))
    assert "planner.check" in checked
    assert not checked & {"planner.cli.layouts", "planner.cli.sweep", "planner.search", "ortools", "matplotlib",
                          "rich.progress"}, checked
    assert "rich.console" in checked  # the text format draws with rich
    # A model or cluster file is validated, not scored: no numpy and no limits (numpy through
    # planner.constraints) in their start-up; a plan file's layout is scored, and that needs both.
    # The machine-read formats print without rich.
    for spec, fmt in ((CONFIGS / "models" / "gpt3-1.3b.yaml", "json"), (CONFIGS / "clusters" / "dgx-a100-1024.yaml", "github")):
        checked = loaded("check", str(spec), "--format", fmt)
        assert "planner.check" in checked and not checked & {"numpy", "planner.constraints", "rich.console"}, \
            (spec.name, checked)
    planned = loaded("check", str(Path(__file__).resolve().parents[1] / "golden" / "inputs" / "plan-ok.yaml"))
    assert {"numpy", "planner.constraints", "planner.estimate"} <= planned, planned


def test_search_says_the_placement_on_rack_scale_nvlink():
    # GB200 NVL72 (72-GPU racks, the shipped cluster states a segment of 64): the line and the JSON say it
    out = invoke("search", "llama3-8b", "dgx-gb200-nvl72-1152", "--gpus", "128")
    assert out.exit_code == 0, out.output
    assert "placement: consecutive ranks" in out.output and "72-GPU NVLink domain" in out.output
    data = json.loads(invoke("search", "llama3-8b", "dgx-gb200-nvl72-1152", "--gpus", "128", "--json").stdout)
    assert data["placement"]["nvlink_domain_gpus"] == 72 and data["placement"]["stated"] is True


def test_the_memory_table_lists_gib_only():
    # the offloaded layer count is in the layout cell (offload=activations:N), not a GiB row of the breakdown
    out = invoke("estimate", "llama3-8b", "dgx-h100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1")
    assert out.exit_code in (0, 1), out.output  # infeasible or not, the breakdown is printed
    assert "weights" in out.output and "offload_layers" not in out.output


def test_search_and_estimate_warn_of_a_unit_slip_plan_check_finds(tmp_path):
    # dgx-a100-1024's 25 GB/s per GPU written as its NIC's 200 (Gb/s): plan check warns "bandwidth-unit";
    # a search of that file must say so too, not price 200 GB/s in silence. A shipped name is not checked.
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "configs" / "clusters" / "dgx-a100-1024.yaml"
    slip = tmp_path / "c.yaml"
    slip.write_text(shipped.read_text().replace("network_gbps: 25", "network_gbps: 200"))
    runner = CliRunner()
    for cmd in (["search", "gpt3-175b", str(slip), "--gpus", "64", "--top", "1"],
                ["estimate", "gpt3-175b", str(slip), "--gpus", "64", "--tp", "8", "--pp", "8", "--micro-batch", "1"]):
        res = runner.invoke(app, cmd)
        assert "200 Gb/s is 25 GB/s" in res.stderr and "node.network_gbps" in res.stderr, res.stderr
    quiet = runner.invoke(app, ["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--top", "1"])
    assert "warning" not in quiet.stderr


def test_a_unit_slip_warning_prints_its_file_name_escaped(tmp_path):
    # the file's name went to the terminal raw: ESC [31m turned the rest red, ESC ]0;...BEL set the terminal's
    # title; printed as the visible \x1b and \x07, as every other message prints a file name (planner/errors.py)
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "configs" / "clusters" / "dgx-a100-1024.yaml"
    slip = tmp_path / "c\x1b[31mX\x1b]0;t\x07.yaml"
    slip.write_text(shipped.read_text().replace("network_gbps: 25", "network_gbps: 200"))
    res = CliRunner().invoke(app, ["search", "gpt3-175b", str(slip), "--gpus", "64", "--top", "1"])
    assert "200 Gb/s is 25 GB/s" in res.stderr, res.stderr
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr and "c\\x1b[31mX\\x1b]0;t\\x07.yaml" in res.stderr


def test_estimate_names_its_micro_batches_in_text_and_keeps_the_json_key():
    # gpt3-1.3b's global batch is 512 sequences (Brown et al. 2020 Table 2.1: 1M tokens / 2048); on 8 GPUs with
    # tp 1, pp 1: dp 8, micro-batch 1 -> 512 / (8 x 1) = 64 micro-batches per step per data-parallel rank
    argv = ["estimate", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1"]
    text = runner.invoke(app, argv).stdout
    first = text.splitlines()[0]
    assert "num_microbatches=64" in first and " m=64" not in first, first
    data = json.loads(runner.invoke(app, argv + ["--json"]).stdout)
    assert data["layout"]["num_microbatches"] == 64
