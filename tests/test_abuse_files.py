"""Adversarial spec files and names (issue 15), reproduced the way they were found: real FIFOs,
real unreadable directories, real over-long names, real processes with timeouts, so that a
regression fails instead of hanging. Every case: exit 2 (never 3), a message naming the file,
line and field where there is one, of bounded length, quickly."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
MODEL = (CONFIGS / "models" / "gpt3-1.3b.yaml").read_text()
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
CLUSTER = "name: c\ngpu: {gpu}\nnodes: 1\nnode: {{gpus: 8, nvlink_gbps: 300, network_gbps: 25}}\n"
LONG = "a" * 300  # over the 255 bytes a file name may have
MAX_OUTPUT = 4000  # a few bounded lines


def plan(*args, cwd: Path | None = None, preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "150", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    r = subprocess.run(PLAN + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env=env, preexec_fn=preexec_fn)
    r.elapsed = time.monotonic() - started
    assert "Traceback" not in r.stderr and r.returncode != 3, r.stderr[-2000:]
    return r


def bad(r: subprocess.CompletedProcess, *fragments: str) -> str:
    """The output of a run that must fail with exit 2, bounded, with all `fragments`."""
    text = r.stdout + r.stderr
    assert r.returncode == 2, text[-2000:]
    assert len(text) < MAX_OUTPUT, f"{len(text)} characters"
    for fragment in fragments:
        assert fragment in text, text
    return text


# --- FIFOs: a FIFO opened for reading waits for a writer forever --------------------------------

@pytest.fixture
def fifo_dir(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    os.mkfifo(tmp_path / "pipe.yaml")
    os.mkfifo(tmp_path / "config.json")
    return tmp_path


@pytest.mark.parametrize("args, fragment", [
    (["check", "pipe.yaml"], "pipe.yaml: not a regular file"),
    (["check", "."], "pipe.yaml: not a regular file"),  # inside a directory it walks
    (["search", "pipe.yaml", "dgx-a100-1024"], "pipe.yaml: not a regular file"),
    (["search", "config.json", "dgx-a100-1024"], "config.json: not a regular file"),  # JSON specs too
    (["search", "gpt3-1.3b", "pipe.yaml"], "pipe.yaml: not a regular file"),
])
def test_fifo_is_refused_not_waited_for(fifo_dir, args, fragment):
    bad(plan(*args, cwd=fifo_dir, timeout=60), fragment)


def test_fifo_as_a_plans_model_is_refused(fifo_dir):
    (fifo_dir / "plan.yml").write_text("model: pipe.yaml\ncluster: dgx-a100-1024\n"
                                       "layout: {tp: 8, pp: 8, micro_batch: 1}\n")
    bad(plan("check", "plan.yml", cwd=fifo_dir, timeout=60), "plan.yml:1: model: not a regular file")


# --- names longer than a file system allows -----------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["search", LONG, "dgx-a100-1024"], "no model file or shipped model named 'aaa"),
    (["search", "gpt3-1.3b", LONG], "no cluster file or shipped cluster named 'aaa"),
    (["search", LONG + ".yaml", "dgx-a100-1024"], "file name too long (the system allows 255 bytes per name)"),
    (["check", LONG + ".yaml"], "file name too long"),
])
def test_long_names_are_bad_input(tmp_path, args, fragment):
    text = bad(plan(*args, cwd=tmp_path), fragment, "characters)")  # the name is shown cut, with its length
    assert "Errno" not in text and LONG not in text


def test_long_gpu_and_stack_names_in_files(tmp_path):
    (tmp_path / "c.yaml").write_text(CLUSTER.format(gpu=LONG))
    bad(plan("check", "c.yaml", cwd=tmp_path), "c.yaml:2: gpu: GPU preset", "300 characters")
    (tmp_path / "m.yaml").write_text(MODEL.replace("training:\n", f"training:\n  stack: {LONG}\n", 1))
    line = MODEL.splitlines().index("training:") + 2
    bad(plan("check", "m.yaml", cwd=tmp_path), f"m.yaml:{line}: training.stack: software stack", "300 characters")


# --- message length and count -------------------------------------------------------------------

def test_a_huge_key_is_echoed_cut(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL + "? " + "x" * 900_000 + "\n: 1\n")
    line = len(MODEL.splitlines()) + 1
    bad(plan("check", "m.yaml", cwd=tmp_path), f"m.yaml:{line}:", "unknown key 'xxx", "(900000 characters)")


def test_many_unknown_keys_are_counted_not_listed(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL + "".join(f"k{i}: 1\n" for i in range(900)))
    r = plan("check", "m.yaml", "--format", "json", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stdout) < 20_000
    findings = json.loads(r.stdout)["findings"]
    assert len(findings) == 21 and findings[0]["path"] == "k0" and findings[0]["line"] == len(MODEL.splitlines()) + 1
    assert findings[-1]["message"] == "and 880 more problems (the first 20 are shown)"


def test_forty_thousand_keys_fail_fast(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL + "".join(f"k{i}: 1\n" for i in range(40_000)))
    r = plan("check", "m.yaml", cwd=tmp_path)
    bad(r, "a mapping with more than 1000 keys")
    assert r.elapsed < 20  # was 12 s of parsing and 9 MB of messages; now it stops at key 1001


# --- what the terminal shows is what the file says ----------------------------------------------

def test_emoji_codes_and_markup_print_literally(tmp_path):
    (tmp_path / ":fire:.yaml").write_text(MODEL.replace("name: gpt3-1.3b", 'name: "[bold]x[/bold]"').replace(
        "layers: 24", 'layers: ":fire: line100"'))
    line = MODEL.splitlines().index("layers: 24") + 1
    for args in (["check", ":fire:.yaml"], ["search", ":fire:.yaml", "dgx-a100-1024"]):
        text = bad(plan(*args, cwd=tmp_path), f":fire:.yaml:{line}: layers:", "':fire: line100'")
        assert "\N{FIRE}" not in text


def test_a_newline_in_a_file_name_cannot_start_a_line(tmp_path):
    name = "a\n::error file=x.yaml::pwned.yaml"
    (tmp_path / name).write_text("x: 1\n")
    r = plan("check", ".", "--format", "github", cwd=tmp_path)
    commands = [line for line in r.stdout.splitlines() if line.startswith("::")]
    assert r.returncode == 2 and len(commands) == 1
    assert commands[0].startswith("::error file=./a%0A%3A%3Aerror file=x.yaml%3A%3Apwned.yaml,line=1,")
    r = plan("check", ".", cwd=tmp_path)
    assert r.returncode == 2 and not any(line.startswith("::") for line in r.stdout.splitlines())
    assert "./a\\n::error file=x.yaml::pwned.yaml:1:" in r.stdout


# --- what cannot be read is a finding, never a silent skip --------------------------------------

def _without_read_override():
    """preexec_fn for root: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set,
    so that the exec'd process obeys file modes as any user does (root reads chmod 000 files)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def unreadable(tmp_path):
    """(make a directory unreadable, preexec_fn) or a skip where modes cannot stop this process."""
    if os.name != "posix":
        pytest.skip("POSIX file modes")
    preexec = _without_read_override if os.geteuid() == 0 else None
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0)
    try:
        r = subprocess.run([sys.executable, "-c", f"import os; os.listdir({str(probe)!r})"], capture_output=True,
                           preexec_fn=preexec, timeout=60)
    except subprocess.SubprocessError:
        r = None
    finally:
        probe.chmod(0o700)
    if r is None or r.returncode == 0:
        pytest.skip("running as root, and dropping CAP_DAC_OVERRIDE failed: chmod 000 cannot stop reads here")
    made = []
    yield lambda path: (made.append(path), path.chmod(0)), preexec
    for path in made:
        path.chmod(0o700)


def test_an_unreadable_subdirectory_fails_the_check(tmp_path, unreadable):
    make, preexec = unreadable
    (tmp_path / "specs" / "secret").mkdir(parents=True)
    (tmp_path / "specs" / "m.yaml").write_text(MODEL)
    (tmp_path / "specs" / "secret" / "m.yaml").write_text(MODEL)
    make(tmp_path / "specs" / "secret")
    r = plan("check", "specs", cwd=tmp_path, preexec_fn=preexec)
    bad(r, "specs/secret: cannot list this directory (permission denied)", "1 file checked, 1 error")
    assert "ok:" not in r.stdout


def test_an_unreadable_top_directory_fails_the_check(tmp_path, unreadable):
    make, preexec = unreadable
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "m.yaml").write_text(MODEL)
    make(tmp_path / "specs")
    text = bad(plan("check", "specs", cwd=tmp_path, preexec_fn=preexec),
               "specs: cannot list this directory (permission denied)")
    assert "no *.yaml" not in text


# --- numbers as YAML 1.2 reads them; names that are names; lines as editors count ---------------

@pytest.mark.parametrize("value, fragment", [
    ("024", "layers: 024 is ambiguous: YAML 1.1 reads it as octal 20, YAML 1.2 as 24; write 24"),
    ("1:30", "layers: wrong type: got the string '1:30' (expected an integer)"),
])
def test_yaml_1_1_numbers_are_not_guessed(tmp_path, value, fragment):
    (tmp_path / "m.yaml").write_text(MODEL.replace("layers: 24", f"layers: {value}"))
    line = MODEL.splitlines().index("layers: 24") + 1
    bad(plan("check", "m.yaml", cwd=tmp_path), f"m.yaml:{line}: {fragment}")


@pytest.mark.parametrize("gpu", ["../models/gpt3-1.3b", str(CONFIGS / "gpus" / "a100-sxm-80gb"), "../models/x.yaml"])
def test_a_gpu_preset_is_a_name_not_a_path(tmp_path, gpu):
    (tmp_path / "c.yaml").write_text(CLUSTER.format(gpu=gpu))
    bad(plan("check", "c.yaml", cwd=tmp_path), "c.yaml:2: gpu: GPU preset", "is not a shipped preset name")


def test_a_stack_is_a_name_not_a_path(tmp_path):
    (tmp_path / "m.yaml").write_text(MODEL.replace("training:\n", "training:\n  stack: ../stacks/megatron-core\n", 1))
    line = MODEL.splitlines().index("training:") + 2
    bad(plan("check", "m.yaml", cwd=tmp_path), f"m.yaml:{line}: training.stack: software stack '../stacks/")


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_unicode_line_separators_do_not_shift_lines(tmp_path, char):
    text = MODEL.replace("name: gpt3-1.3b", f'name: "gpt3{char}1.3b"').replace("layers: 24", "layrs: 24")
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    line = MODEL.splitlines().index("layers: 24") + 1  # as an editor shows it: '\n' only
    bad(plan("check", "m.yaml", cwd=tmp_path), f"m.yaml:{line}: layrs: unknown key 'layrs'")


# --- physically impossible hardware ---------------------------------------------------------------

@pytest.mark.parametrize("old, new, path", [
    ("nvlink_gbps: 300", "nvlink_gbps: 1e-300", "node.nvlink_gbps"),
    ("network_gbps: 25", "network_gbps: 1e-300", "node.network_gbps"),
])
def test_tiny_bandwidths_are_refused(tmp_path, old, new, path):
    (tmp_path / "c.yaml").write_text(CLUSTER.format(gpu="a100-sxm-80gb").replace(old, new))
    bad(plan("check", "c.yaml", cwd=tmp_path), f"c.yaml:4: {path}:", "expected a value >= 0.01")


@pytest.mark.parametrize("field, path, bound", [
    ("memory_gib", "gpu.memory_gib", "0.1"), ("hbm_gbps", "gpu.hbm_gbps", "0.01"),
    ("bf16", "gpu.peak_tflops.bf16", "0.01"), ("gemm", "gpu.efficiency.gemm", "0.01"),
])
def test_tiny_gpu_rates_are_refused(tmp_path, field, path, bound):
    gpu = (CONFIGS / "gpus" / "a100-sxm-80gb.yaml").read_text().splitlines()
    body = "".join(f"  {line.split(':')[0]}: 1e-300\n" if line.strip().startswith(f"{field}:") else f"  {line}\n"
                   for line in gpu if line.strip() and not line.startswith("#"))
    assert "1e-300" in body
    (tmp_path / "c.yaml").write_text(CLUSTER.format(gpu="\n" + body))
    bad(plan("check", "c.yaml", cwd=tmp_path), f": {path}:", f"expected a value >= {bound}")


def test_a_stack_name_too_long_for_the_file_system_is_bad_input():
    # `--stack` with 300 characters: stat() of '<300 chars>.yaml' raised ENAMETOOLONG (exit 3)
    from typer.testing import CliRunner

    from planner.cli.main import app

    r = CliRunner().invoke(app, ["search", "--stack", "a" * 300])
    assert r.exit_code == 2 and "--stack" in r.output and len(r.output) < 1000
