"""Bad input through every command: one clear line with file, line, field and what was expected; exit 2.

Each row of BAD is a broken model or cluster file (issue "plan check", section "Bad input, everywhere");
each is fed to `plan search`, `plan estimate` and `plan check` through typer's CliRunner.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.layout.axes import MAX_DIVISOR_INPUT
from planner.cli.main import app
from planner.layout.space import divisors
from planner.specs.yamlio import MAX_FILE_BYTES

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MODEL = (CONFIGS / "models" / "gpt3-175b.yaml").read_text()
CLUSTER = (CONFIGS / "clusters" / "dgx-a100-1024.yaml").read_text()
GPU = (CONFIGS / "gpus" / "a100-sxm-80gb.yaml").read_text()


def model(old: str, new: str) -> bytes:
    assert old in MODEL
    return MODEL.replace(old, new, 1).encode()


def cluster(old: str, new: str) -> bytes:
    assert old in CLUSTER
    return CLUSTER.replace(old, new, 1).encode()


def inline_gpu(old: str, new: str) -> bytes:
    body = "".join(f"  {line}\n" for line in GPU.replace(old, new, 1).splitlines() if not line.startswith("#"))
    return cluster("gpu: a100-sxm-80gb\n", "gpu:\n" + body)


LOL = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefg", "bcdefgh"))
LINE = {k: i + 1 for i, k in enumerate(l.split(":")[0] for l in MODEL.splitlines())}
END = len(MODEL.splitlines())  # lines appended to MODEL start at END + 1

# (id, role, content (None: no file; "dir": a directory), message fragment, line or None)
BAD = [
    ("missing-file", "model", None, "file not found", None),
    ("directory", "model", "dir", "is a directory, not a file", None),
    ("empty", "model", b"", "file is empty", 1),
    ("not-utf8", "model", b"name: caf\xe9\n", "not valid UTF-8: byte 0xe9", 1),
    ("yaml-syntax", "model", b"name: a\nlayers: b: c\n", "invalid YAML at column 10", 2),
    ("tab", "model", b"name: a\ntraining:\n\tglobal_batch: 8\n", "tab character used for indentation", 3),
    ("list-at-top", "model", b"- name: a\n- layers: 2\n", "expected a mapping at the top level, found a list", 1),
    ("list-for-mapping", "model", model("training:\n", "training: [1]\nx:\n"), "training: wrong type: got a list "
     "(expected a mapping)", LINE["training"]),
    ("duplicate-key", "model", model("layers: 96\n", "layers: 96\nlayers: 48\n"),
     f"duplicate key 'layers' (first at line {LINE['layers']}, again at line {LINE['layers'] + 1})", LINE["layers"] + 1),
    ("unknown-key", "model", model("layers:", "layrs:"), "unknown key 'layrs'; did you mean 'layers'?", LINE["layers"]),
    ("wrong-type", "model", model("name: gpt3-175b", "name: [gpt3]"), "name: wrong type: got a list (expected a string)",
     LINE["name"]),
    ("string-for-number", "model", model("layers: 96", "layers: '96'"), "got the string '96'; remove the quotes "
     "(expected an integer)", LINE["layers"]),
    ("bool-for-number", "model", model("layers: 96", "layers: yes"), "got the boolean true (expected an integer)",
     LINE["layers"]),
    ("negative", "model", model("vocab: 51200", "vocab: -5"), "vocab: Input should be greater than 0", LINE["vocab"]),
    ("zero", "cluster", cluster("nodes: 128", "nodes: 0"), "nodes: Input should be greater than 0", 5),
    ("nan", "cluster", cluster("nvlink_gbps: 300", "nvlink_gbps: .nan"), "node.nvlink_gbps: got nan (expected a finite "
     "number)", 8),
    ("infinite", "cluster", cluster("network_gbps: 25", "network_gbps: .inf"), "got inf (expected a finite number)", 9),
    ("absurdly-large", "cluster", inline_gpu("memory_gib: 80", "memory_gib: 80000"),
     "gpu.memory_gib: Input should be less than or equal to 4096", 6),
    ("huge-integer", "model", model("layers: 96", "layers: 1e400"), "layers: wrong type: got inf", LINE["layers"]),
    ("heads-not-dividing-hidden", "model", model("heads: 96", "heads: 95"), "heads: heads (95) must divide hidden (12288)",
     LINE["heads"]),
    ("kv-heads-not-dividing-heads", "model", model("heads: 96\n", "heads: 96\nkv_heads: 7\n"),
     "kv_heads: kv_heads (7) must divide heads (96)", LINE["heads"] + 1),
    ("unknown-gpu-preset", "cluster", cluster("gpu: a100-sxm-80gb", "gpu: a100-80gb"),
     "gpu: unknown GPU preset 'a100-80gb'; did you mean 'a100-sxm-80gb'? (expected a mapping or one of: a100-", 4),
    ("python-object-tag", "model", b"name: !!python/object/apply:os.system [echo hi]\n",
     "YAML tag !!python/object/apply:os.system is not allowed", 1),
    ("alias-bomb", "model", LOL.encode(), "document too large: more than 100000 values once aliases are expanded", 6),
    ("too-big", "model", b"name: x\n" + b"#" * MAX_FILE_BYTES, "file too large", None),
    ("wrong-kind-of-file", "model", CLUSTER.encode(), "this looks like a cluster file, but a model spec is expected", 1),
    ("top-k-above-experts", "model", (MODEL + "moe:\n  experts: 8\n  top_k: 9\n  expert_ffn_hidden: 1024\n").encode(),
     "moe.top_k: top_k (9) must be at most experts (8)", END + 3),
    ("mla-ranks-missing", "model", (MODEL + "mla:\n  q_lora_rank: 64\n  kv_lora_rank: 32\n").encode(),
     "mla.qk_nope_head_dim: missing required key 'qk_nope_head_dim'", END + 1),
]
# `plan check` takes directories (an empty one is the problem there) and files of any kind.
CHECK_FRAGMENT = {"is a directory, not a file": "no *.yaml or *.yml files in this directory",
                  "this looks like a cluster file, but a model spec is expected": None}
COMMANDS = {
    "search": lambda m, c: ["search", m, c],
    "estimate": lambda m, c: ["estimate", m, c, "--tp", "8", "--pp", "8", "--micro-batch", "1"],
    "check": lambda m, c: ["check", m, c],
    "sweep": lambda m, c: ["sweep", "--models", m, "--cluster", c, "--gpus", "64", "--quiet", "--workers", "1"],
}


def invoke(*args):
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exit_code != 3, result.output  # 3: an internal error, i.e. a bug
    return result


def write(tmp_path: Path, content) -> Path:
    path = tmp_path / "bad.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("role, content, fragment, line", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_file_exits_2_with_one_clear_line(tmp_path, command, role, content, fragment, line):
    if command == "check" and CHECK_FRAGMENT.get(fragment, fragment) is None:
        pytest.skip("not bad input for plan check")
    bad = write(tmp_path, content)
    before = bad.read_bytes() if bad.is_file() else None
    good_model, good_cluster = str(CONFIGS / "models" / "gpt3-175b.yaml"), str(CONFIGS / "clusters" / "dgx-a100-1024.yaml")
    m, c = (str(bad), good_cluster) if role == "model" else (good_model, str(bad))
    r = invoke(*COMMANDS[command](m, c))
    assert r.exit_code == 2, r.output
    assert (CHECK_FRAGMENT.get(fragment, fragment) if command == "check" else fragment) in r.output
    assert f"{bad}:{line}:" in r.output if line else str(bad) in r.output
    if before is not None:
        assert bad.read_bytes() == before  # loading never changes an input file


def test_all_problems_of_a_file_are_reported(tmp_path):
    bad = write(tmp_path, cluster("nodes: 128", "nodes: -1\nnodez: 3").replace(b"gpu: a100-sxm-80gb", b"gpu: z900"))
    r = invoke("check", str(bad))
    assert r.exit_code == 2
    for fragment in ("unknown GPU preset 'z900'", "nodes: Input should be greater than 0", "unknown key 'nodez'"):
        assert fragment in r.output
    assert "missing required key 'gpu'" not in r.output


@pytest.mark.parametrize("args, fragment", [
    (["search", "no-such-model"], "no model file or shipped model named 'no-such-model'"),
    (["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--tp", "8", "--pp", "4", "--dp", "4"],
     "dp*tp*pp = 4*8*4 = 128, but --gpus is 64"),
    (["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "7", "--micro-batch", "1"],
     "tp*pp = 56 does not divide the 1024 GPUs"),
    (["estimate", "gpt3-175b", "dgx-a100-1024", "--tp", "8", "--pp", "8", "--micro-batch", "1", "--dp", "3",
      "--gpus", "64"], "dp*tp*pp = 3*8*8 = 192, but --gpus is 64"),
    (["check", "--format", "xml", "configs"], "unknown format 'xml'"),
    (["check", "--memory-headroom", "2", "configs"], "--memory-headroom"),
    (["schema", "sweeps"], "unknown kind 'sweeps'"),  # `sweep` has a schema (issue 31)
    # mixture-of-experts and context-parallel degrees that break a rule of the space on their own
    (["search", "mixtral-8x7b", "dgx-h100-1024", "--gpus", "64", "--ep", "3"], "--ep: ep=3 must divide the 8 experts"),
    (["search", "mixtral-8x7b", "dgx-h100-1024", "--gpus", "64", "--cp", "3"],
     "--cp: cp=3 needs seq_len (4096) divisible by 2*cp = 6"),
    (["search", "mixtral-8x7b", "dgx-h100-1024", "--gpus", "64", "--tp", "1", "--cp", "1", "--dp", "4", "--pp", "16",
      "--ep", "8", "--etp", "1"], "ep*etp = 8*1 must divide tp*cp*dp = 1*1*4"),
    (["search", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--ep", "2"], "ep=2 needs a mixture-of-experts model"),
])
def test_bad_arguments(args, fragment):
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert fragment in r.output


def test_fp8_on_a_gpu_without_an_fp8_peak(tmp_path):
    fp8 = write(tmp_path, model("precision: bf16", "precision: fp8") if "precision: bf16" in MODEL
                else model("global_batch: 1536\n", "global_batch: 1536\n  precision: fp8\n"))
    line = next(i + 1 for i, text in enumerate(fp8.read_text().splitlines()) if "precision: fp8" in text)
    for command in ("search", "estimate"):
        r = invoke(*COMMANDS[command](str(fp8), "dgx-a100-1024"))
        assert r.exit_code == 2, r.output
        assert f"{fp8}:{line}: training.precision: precision fp8 needs a fp8 peak" in r.output
    # H100 has an FP8 peak but no MXFP8 one
    mx = write(tmp_path, fp8.read_bytes().replace(b"precision: fp8", b"precision: mxfp8"))
    r = invoke("search", str(mx), "dgx-h100-1024", "--gpus", "64")
    assert r.exit_code == 2 and "precision mxfp8 needs a mxfp8 peak" in r.output


# --- bad values of command-line options (issue #15, found by an adversarial tester) ---------------

SEARCH = ["search", "gpt3-1.3b", "dgx-a100-1024", "--gpus", "8"]
ESTIMATE = ["estimate", "gpt3-1.3b", "dgx-a100-1024", "--tp", "1", "--pp", "1", "--micro-batch", "1"]
HF = str(CONFIGS / "hf" / "qwen3-30b-a3b.json")
GB_EXPECTED = "(expected an integer > 0 and <= 100,000,000)"  # TrainingSpec.global_batch's bounds
# (id, args, the message; every one exits 2)
BAD_OPTIONS = [
    # hangs: trial division over 2**62 ran past a minute; 1e15 took 12 s and printed a 10^13 s step
    ("global-batch-2**62", SEARCH + ["--global-batch", str(2**62)], f"--global-batch: out of range: got 4.612e+18 {GB_EXPECTED}"),
    ("global-batch-1e15", SEARCH + ["--global-batch", str(10**15)], f"out of range: got 1000000000000000 {GB_EXPECTED}"),
    ("global-batch-above-spec", ESTIMATE + ["--global-batch", "100000001"], f"out of range: got 100000001 {GB_EXPECTED}"),
    # exit 3 (OverflowError) on integers beyond int64
    ("global-batch-1e30", ESTIMATE + ["--global-batch", str(10**30)], f"--global-batch: out of range: got 1e+30 {GB_EXPECTED}"),
    ("gpus-2**63", ESTIMATE + ["--gpus", str(2**63)], "--gpus: out of range: got 9.223e+18 (expected an integer > 0 and <= 10,000,000)"),
    ("micro-batch-1e30", ESTIMATE[:-1] + [str(10**30)], "--micro-batch: must be at most 100,000"),
    ("degrees-overflow-int64", ESTIMATE + ["--dp", "10000000", "--tp", "100000", "--cp", "100000", "--pp", "100000"],
     "--dp/--tp/--pp/--cp: dp*tp*pp*cp = 1e+22 GPUs (expected degrees whose product is at most 10,000,000)"),
    ("top-1e30", SEARCH + ["--top", str(10**30)], "--top: out of range: got 1e+30 (expected an integer > 0 and <= 1,000)"),
    ("stage-layers-5000-digits", ESTIMATE + ["--stage-layers", "1" * 5000], "--stage-layers: cannot read"),
    ("gpus-range-5000-digits", SEARCH[:3] + ["--gpus-range", "1:" + "9" * 5000], "--gpus-range: cannot read"),
    ("stack-10000-chars", SEARCH + ["--stack", "x" * 10_000], "--stack: 'xxxxxxxx"),
    ("stack-a-path", SEARCH + ["--stack", "../../etc/passwd"], "--stack: '../../etc/passwd' is not a stack name"),
    ("import-seq-len-0", ["import", HF, "--seq-len", "0"], "--seq-len: out of range: got 0"),
    ("import-global-batch-2**63", ["import", HF, "--global-batch", str(2**63)], "--global-batch: out of range"),
    # confident nonsense: --gpus 0 meant the whole cluster
    ("gpus-0", SEARCH[:3] + ["--gpus", "0"], "--gpus: out of range: got 0"),
    ("gpus-range-0:0", SEARCH[:3] + ["--gpus-range", "0:0"], "--gpus-range: bad range 0:0"),
    ("critical-batch-nan", SEARCH + ["--json", "--critical-batch-tokens", "nan"], "--critical-batch-tokens: out of range: got nan"),
    ("max-step-time-nan", SEARCH + ["--max-step-time", "nan"], "--max-step-time: out of range: got nan"),
    ("memory-headroom-inf", ESTIMATE + ["--memory-headroom", "inf"], "--memory-headroom: out of range: got inf"),
    # misleading exit codes: "no feasible layout" (exit 1) for a time limit that cannot be
    ("time-limit-0", SEARCH + ["--time-limit", "0"], "--time-limit: out of range: got 0"),
    ("time-limit-nan", SEARCH + ["--time-limit", "nan"], "--time-limit: out of range: got nan"),
    ("time-limit-negative", SEARCH + ["--time-limit", "-5"], "--time-limit: out of range: got -5"),
    ("max-micro-batch-0-search", SEARCH + ["--max-micro-batch", "0"], "--max-micro-batch: out of range: got 0"),
    ("max-micro-batch-0-sweep", ["sweep", "--models", "gpt3-1.3b", "--cluster", "dgx-a100-1024", "--gpus", "8", "--quiet",
                                 "--max-micro-batch", "0"], "--max-micro-batch"),
    # output files: a directory or a missing folder is bad input, not an IsADirectoryError (exit 3)
    ("import-output-a-directory", ["import", HF, "-o", str(CONFIGS)], "--output: not a regular file"),
    ("import-output-no-folder", ["import", HF, "-o", str(CONFIGS / "no-such-folder" / "x.yaml")],
     "--output: cannot write: No such file or directory"),
    ("import-output-empty", ["import", HF, "-o", ""], "--output: not a regular file"),
]


@pytest.mark.parametrize("args, fragment", [b[1:] for b in BAD_OPTIONS], ids=[b[0] for b in BAD_OPTIONS])
def test_bad_option_values_exit_2_with_one_line(args, fragment):
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert fragment in r.output
    # stdout holds nothing, or with --json the error as JSON (planner/cli/common.py run)
    assert (json.loads(r.stdout)["error"]["exit_code"] == 2) if "--json" in args else r.stdout == ""
    assert len(r.output) < 4000


@pytest.mark.parametrize("value", [str(2**62), str(10**15), str(2**53 + 1)])
def test_a_huge_global_batch_returns_at_once(value):
    """Found as a hang: `plan search --global-batch 4611686018427387904` ran trial division past a
    minute. In a process of its own, with a deadline."""
    r = subprocess.run([sys.executable, "-m", "planner.cli.main", *SEARCH, "--global-batch", value],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "--global-batch: out of range" in r.stderr


def test_divisors_are_fast_and_bounded():
    """Trial division to sqrt(n): the largest batch a spec allows takes 10^4 steps; beyond the
    bound is a caller's bug (a ValueError), never a minute of work."""
    started = time.perf_counter()
    assert divisors(99_999_989) == [1, 99_999_989]  # the largest prime below 10^8
    assert divisors(100_000_000)[:4] == [1, 2, 4, 5] and len(divisors(100_000_000)) == 81
    assert divisors(0) == []
    assert time.perf_counter() - started < 1.0
    for n in (MAX_DIVISOR_INPUT + 1, 2**62, -1):
        with pytest.raises(ValueError):
            divisors(n)
