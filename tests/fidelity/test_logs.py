"""The training-log parsers (planner.fidelity.logs) on logs in the frameworks' exact formats.

tests/data/logs/<framework>.log are hand-written from the print statements vendored, verbatim, in
tests/data/logs/<framework>-prints.txt; the expected numbers below are derived here by hand from the
numbers typed into those logs.
"""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.fidelity.logs import detect_framework, parse_log
from planner.fidelity.logs.common import WARMUP_MIN_LOGGED, strip_ansi, warmup_count

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
FRAMEWORKS = ["megatron", "megatron-bridge", "nemo", "torchtitan", "deepspeed"]


def read(name: str) -> str:
    return (DATA / name).read_text()


def parsed(framework: str) -> dict:
    return parse_log(read(f"{framework}.log"), f"logs/{framework}.log")


# --- the sample logs follow the vendored format strings ---------------------------------------

LITERAL = re.compile(r"""[fFrRbB]*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


def vendored_lines(framework: str) -> dict[str, re.Pattern[str]]:
    """Each `### line` block of the prints file as a regex: its string literals joined in order,
    each {...} field matching any text, an escaped newline at a literal's start dropped."""
    blocks, name, body = {}, None, []
    for line in read(f"{framework}-prints.txt").splitlines():
        if line.startswith("### line "):
            name, body = line[len("### line "):].split(":")[0], []
        elif line.startswith("### end") and name:
            literals = [m.group(1)[1:-1] for m in LITERAL.finditer("\n".join(body))]
            text = "".join(lit.removeprefix("\\n") for lit in literals)
            parts = re.split(r"\{[^{}]*\}", text)
            blocks[name] = re.compile(".*?".join(re.escape(p) for p in parts))
            name = None
        elif name:
            body.append(line)
    return blocks


EXPECTED_BLOCKS = {  # every `### line` block must match at least one line of the sample log
    "megatron": ["arguments-header", "arguments-entry", "iteration", "memory"],
    "megatron-bridge": ["config-summary-header", "config-summary-section", "config-summary-entry",
                        "config-summary-other-section", "config-summary-other-entry", "iteration",
                        "memory"],
    "nemo": ["progress", "tensor-groups", "pipeline-groups", "context-groups"],
    "torchtitan": ["metrics", "mesh", "trainer", "model-args", "checkpointing", "compile"],
    "deepspeed": ["config-header", "config-entry", "config-json", "throughput"],
}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sample_log_lines_match_the_vendored_format(framework):
    blocks = vendored_lines(framework)
    lines = read(f"{framework}.log").splitlines()
    for name in EXPECTED_BLOCKS[framework]:
        assert any(blocks[name].search(line) for line in lines), (framework, name)


def test_vendored_regex_rejects_a_changed_line():
    """The regex built from the format is strict enough to tell a reworded line apart."""
    iteration = vendored_lines("megatron")["iteration"]
    line = next(l for l in read("megatron.log").splitlines() if "iteration      100/" in l)
    assert iteration.search(line)
    changed = line.replace("elapsed time per iteration (ms)", "time per iter (ms)")
    assert not iteration.search(changed)


# --- what each parser reads --------------------------------------------------------------------

def test_warmup_rule():
    # the first 2 logged lines, or the first 10 % when that is more
    assert [warmup_count(n) for n in (1, 2, 10, 20, 21, 100)] == [2, 2, 2, 2, 3, 10]
    assert WARMUP_MIN_LOGGED == 2


def test_megatron():
    run = parsed("megatron")
    # 11 iteration lines (1, 10, 20, ..., 100): warm-up leaves out iterations 1 and 10 (5012.3 and
    # 1620.4 ms). The 9 kept, sorted: 1517.8 1518.9 1519.5 1519.9 [1520.3] 1520.6 1521.0 1522.1
    # 1560.2 -> median 1520.3 ms (the mean, 1526.7 ms, would be pulled by the slow 1560.2).
    kept = [1520.3, 1518.9, 1522.1, 1519.5, 1521.0, 1517.8, 1560.2, 1520.6, 1519.9]
    assert run["measured"]["step_time_s"] == pytest.approx(1520.3 / 1000)
    assert statistics.median(kept) == 1520.3
    # max allocated over the memory reports of ranks 0 and 8: 63488.00 MB / 1024 = 62.0 GiB
    assert run["measured"]["peak_memory_gib"] == pytest.approx(63488.00 / 1024) == 62.0
    assert run["source"] == {"framework": "megatron", "path": "logs/megatron.log",
                             "steps_used": 9, "steps_skipped_warmup": 2}
    assert (run["name"], run["gpus"], run["global_batch"], run["seq_len"], run["precision"]) == \
        ("megatron", 16, 64, 4096, "bf16")
    assert run["layout"] == {"tp": 4, "pp": 2, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 1,
                             "recompute": "selective", "sequence_parallel": True, "zero": 1}
    assert run["model"] == {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                            "ffn_hidden": 14336, "vocab": 128256, "seq_len": 4096}


def test_megatron_bridge():
    run = parsed("megatron-bridge")
    # 10 lines (iterations 5..50): warm-up leaves out 2105.4 and 1880.2 ms; the 8 kept, sorted:
    # 1848.8 1849.6 1850.0 [1850.6 1851.2] 1851.8 1852.4 1853.0 -> median (1850.6 + 1851.2) / 2
    assert run["measured"]["step_time_s"] == pytest.approx((1850.6 + 1851.2) / 2 / 1000)
    # 45.123 GB (1e9 bytes) = 45.123e9 / 2**30 GiB = 42.024 GiB
    assert run["measured"]["peak_memory_gib"] == pytest.approx(45.123e9 / 2**30)
    assert run["source"]["steps_used"] == 8 and run["source"]["steps_skipped_warmup"] == 2
    # 16 microbatches of 1 make the global batch of 32: dp = 32 / (1 x 16) = 2; GPUs = 2 x tp 2 x
    # pp 2 x cp 2 = 16
    assert (run["gpus"], run["global_batch"], run["seq_len"], run["precision"]) == \
        (16, 32, 8192, "bf16")
    # left out of the non-default summary: ep 1, vpp None, recompute None (Megatron Core defaults)
    assert run["layout"] == {"tp": 2, "pp": 2, "cp": 2, "ep": 1, "vpp": 1, "micro_batch": 1,
                             "recompute": "none", "sequence_parallel": True, "zero": 1}
    assert run["model"] == {"layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8,
                            "ffn_hidden": 8192, "seq_len": 8192}


def test_nemo():
    run = parsed("nemo")
    # 12 lines: warm-up leaves out 14.52 and 4.612 s; the 10 kept, sorted: 4.047 4.048 4.049
    # 4.049 [4.05 4.05] 4.051 4.051 4.052 4.053 -> median 4.05 s
    assert run["measured"] == {"step_time_s": pytest.approx(4.05)}
    assert run["source"]["steps_used"] == 10
    # tensor groups [[0..3], [4..7]]: tp 4, 8 ranks; pipeline groups of 2; context groups of 1
    assert (run["gpus"], run["global_batch"], run["model"]) == (8, 128, None)
    assert run["layout"] == {"tp": 4, "pp": 2, "cp": 1}


def test_torchtitan():
    run = parsed("torchtitan")
    # step time = global batch x seq len / (tps x GPUs) = 16 x 8192 / (tps x 8) = 16384 / tps.
    # Steps 1 and 10 are warm-up; the 9 kept tps, sorted: 6899 6902 6905 6908 [6910] 6911 6912
    # 6915 6920 -> median step time 16384 / 6910 s
    assert run["measured"]["step_time_s"] == pytest.approx(16 * 8192 / (6910 * 8))
    # memory: the peak reserved over every line, 71.23 GiB at step 1
    assert run["measured"]["peak_memory_gib"] == pytest.approx(71.23)
    assert (run["gpus"], run["global_batch"], run["seq_len"]) == (8, 16, 8192)
    # "local batch size 2": train.py's local_batch_size, the DP rank's micro-batch at pp 1
    assert run["layout"] == {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "zero": 3,
                             "recompute": "selective", "micro_batch": 2}
    # FeedForward's width from the printed multiple_of 1024 and ffn_dim_multiplier 1.3: int(2 x 4 x 4096 / 3)
    # = 10,922, x 1.3 = 14,198, rounded up to 1,024s: 14,336 (Llama 3 8B's published intermediate size)
    assert run["model"] == {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "vocab": 128256,
                            "ffn_hidden": 14336, "ffn_act": "swiglu", "position_embedding": "rope",
                            "normalization": "rmsnorm"}
    assert "precision" not in run
    assert run["torch_compile"] is True  # "Compiling each TransformerBlock with torch.compile"


def test_torchtitan_main_branch_lines():
    """torchtitan main prints tokens per train step and the maximum context length instead."""
    text = "\n".join([
        "Building device mesh with parallelism: pp=2, dp_replicate=1, dp_shard=4, cp=1, tp=2, ep=1",
        "Trainer is initialized with 16384 tokens per DP rank, 65536 tokens per train step, "
        "gradient accumulation steps 1, maximum context length 4096, total steps 10 (warmup 2)",
    ] + [f"\x1b[31mstep: {s:2}  \x1b[32mloss:  8.00000  \x1b[38;2;180;60;0mgrad_norm:  1.0000  "
         f"\x1b[38;2;54;234;195mmemory: 50.00GiB(63.21%)  \x1b[34mtps: {t:,}  "
         f"\x1b[36mtflops: 100.00  \x1b[35mmfu: N/A\x1b[39m" for s, t in
         [(1, 100), (2, 900), (3, 1024), (4, 1024)]])
    run = parse_log(text, "main.log")
    # GPUs = pp 2 x dp_shard 4 x tp 2 = 16; 65536 tokens / (1024 tps x 16) = 4.0 s
    assert run["gpus"] == 16 and run["global_batch"] == 65536 // 4096 == 16
    # pp 2: the schedule's micro-batch size is not printed (16,384 tokens a DP rank are pp micro-batches' worth)
    assert "micro_batch" not in run["layout"]
    assert run["torch_compile"] is False  # no "Compiling each TransformerBlock" line: eager blocks
    # a log without its start-up lines says nothing of compilation (nor of the GPUs: refused for those)
    assert run["measured"]["step_time_s"] == pytest.approx(65536 / (1024 * 16)) == 4.0


def test_deepspeed():
    run = parsed("deepspeed")
    # step time = train_batch_size / CurrSamplesPerSec = 256 / C. Global steps 10 and 20 are
    # warm-up; the 8 kept C, sorted: 79.8 79.9 80.0 [80.1 80.2] 80.3 80.4 80.5 -> the median step
    # time is the mean of 256/80.1 and 256/80.2 = 3.1940 s
    assert run["measured"]["step_time_s"] == pytest.approx((256 / 80.1 + 256 / 80.2) / 2)
    assert run["measured"]["peak_memory_gib"] == pytest.approx(39.02)  # /1024**3: GiB
    assert (run["gpus"], run["global_batch"], run["precision"]) == (16, 256, "bf16")
    assert run["layout"] == {"micro_batch": 4, "zero": 2}
    assert run["model"] is None and "seq_len" not in run


# --- detection ----------------------------------------------------------------------------------

@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_detect_framework(framework):
    assert detect_framework(read(f"{framework}.log")) == framework


def test_detect_nothing():
    assert detect_framework("hello\nworld\n") is None


def test_megatron_deepspeed_reads_as_megatron():
    """Megatron-DeepSpeed prints both; Megatron's arguments block gives the layout."""
    assert detect_framework(read("deepspeed.log") + read("megatron.log")) == "megatron"


def test_ansi_colours_are_stripped():
    assert strip_ansi("\x1b[31mstep:  1  \x1b[39m") == "step:  1  "


# --- errors -------------------------------------------------------------------------------------

def test_unrecognised_log_names_file_and_line():
    with pytest.raises(SpecError) as error:
        parse_log("epoch 1 loss 2.0\nepoch 2 loss 1.9\nepoch 3 loss 1.8\n", "runs/mine.log")
    assert error.value.file == "runs/mine.log" and error.value.line == 3
    assert str(error.value).startswith("runs/mine.log:3: not a training log")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_only_warmup_steps(framework):
    """Keep the log up to its second timed line: both are warm-up, so no step is left."""
    lines = read(f"{framework}.log").splitlines()
    run = parse_log("\n".join(lines), "x.log")
    timed = run["source"]["steps_used"] + run["source"]["steps_skipped_warmup"]
    assert timed > WARMUP_MIN_LOGGED
    cut = _cut_after_timed(framework, lines, WARMUP_MIN_LOGGED)
    with pytest.raises(SpecError, match="all of them warm-up") as error:
        parse_log("\n".join(lines[:cut]), "x.log")
    assert error.value.file == "x.log" and error.value.line == cut


TIMED = {"megatron": "elapsed time per iteration", "megatron-bridge": "elapsed time per iteration",
         "nemo": "train_step_timing in s", "torchtitan": "tps:",
         "deepspeed": "CurrSamplesPerSec="}


def _cut_after_timed(framework: str, lines: list[str], count: int) -> int:
    seen = 0
    for number, line in enumerate(lines, 1):
        if TIMED[framework] in line:
            seen += 1
            if seen == count:
                return number
    raise AssertionError("too few timed lines")


@pytest.mark.parametrize("bad", ["-1520.3", "nan", "inf"])
def test_bad_megatron_time(bad):
    lines = read("megatron.log").splitlines()
    number = next(i for i, l in enumerate(lines, 1) if "iteration       50/" in l)
    lines[number - 1] = lines[number - 1].replace("(ms): 1519.5", f"(ms): {bad}")
    with pytest.raises(SpecError, match="not a positive finite number") as error:
        parse_log("\n".join(lines), "bad.log")
    assert error.value.line == number and error.value.path == "elapsed time per iteration (ms)"


@pytest.mark.parametrize("framework,old,new", [
    ("nemo", "train_step_timing in s: 4.053", "train_step_timing in s: -4.053"),
    ("nemo", "train_step_timing in s: 4.053", "train_step_timing in s: nan"),
    ("deepspeed", "CurrSamplesPerSec=80.3", "CurrSamplesPerSec=-80.3"),
    ("deepspeed", "CurrSamplesPerSec=80.3", "CurrSamplesPerSec=0.0"),
])
def test_bad_times_other_frameworks(framework, old, new):
    text = read(f"{framework}.log")
    assert text.count(old) == 1
    line = text[:text.index(old)].count("\n") + 1
    with pytest.raises(SpecError, match="not a positive finite number") as error:
        parse_log(text.replace(old, new), "bad.log")
    assert error.value.line == line


def test_no_world_size():
    lines = [l for l in read("megatron.log").splitlines() if "world_size" not in l]
    with pytest.raises(SpecError, match="does not state the number of GPUs"):
        parse_log("\n".join(lines), "x.log")


def test_result_is_finite_and_pure():
    text = read("megatron.log")
    first, second = parse_log(text, "a.log"), parse_log(text, "a.log")
    assert first == second and math.isfinite(first["measured"]["step_time_s"])


def test_a_torchtitan_log_imports_as_a_torchtitan_run_without_model():
    """plan runs import of the sample log with --cluster only: the model from the log's printed arguments (its
    sequence from the trainer's line), the torchtitan stack, torch.compile as logged; it loads as a run."""
    from planner.fidelity.runs import log_entries, runs_from_log

    entry = log_entries(str(DATA / "torchtitan.log"), cluster="dgx-h100-1024", model=None)["runs"][0]
    assert entry["stack"] == "torchtitan" and entry["torch_compile"] is True and entry["model"]["seq_len"] == 8192
    run = runs_from_log(str(DATA / "torchtitan.log"), cluster="dgx-h100-1024", model=None)[0]
    assert run.model.training.stack.name == "torchtitan" and run.model.training.torch_compile
    assert run.model.ffn_hidden == 14336 and run.gpus == 8


def test_a_torchtitan_model_without_its_ffn_width_is_left_to_model():
    """Without multiple_of the FFN width cannot be read: no half-read model (GeLU, no width), --model instead."""
    text = "\n".join(line for line in read("torchtitan.log").splitlines() if '"multiple_of"' not in line)
    assert parse_log(text, "t.log")["model"] is None


def test_megatron_shape_switches_make_the_model_they_trained():
    # Megatron-LM's arguments block prints every argument (arguments.py _print_args); a Llama 3 8B run passes --swiglu,
    # --untie-embeddings-and-output-weights, --position-embedding-type rope, --normalization RMSNorm. Without reading
    # them the log's model was a tied GeLU one of 6.17 B parameters; Meta's Llama 3 8B has 8.03 B.
    from planner.specs import ModelSpec

    text = (DATA / "megatron.log").read_text().replace(
        "  tokenizer_type ..", "  swiglu .......................................... True\n"
        "  untie_embeddings_and_output_weights ............. True\n  position_embedding_type ......................... rope\n"
        "  normalization ................................... RMSNorm\n  tokenizer_type ..")
    dims = parse_log(text, "m.log")["model"]
    assert (dims["ffn_act"], dims["tied_embeddings"], dims["position_embedding"], dims["normalization"]) == (
        "swiglu", False, "rope", "rmsnorm")
    spec = ModelSpec.model_validate({**dims, "name": "m", "training": {"global_batch": 64}})
    assert spec.total_params() / 1e9 == pytest.approx(8.03, abs=0.01)
    # --swiglu false prints False: GeLU, Megatron's default; not printed: the spec's default stands
    gelu = parse_log(text.replace("  swiglu .......................................... True",
                                  "  swiglu .......................................... False"), "m.log")["model"]
    assert gelu["ffn_act"] == "gelu" and "ffn_act" not in parse_log((DATA / "megatron.log").read_text(), "m.log")["model"]


def test_bridge_summary_shape_fields_as_transformer_config_names_them():
    # Megatron-Bridge prints the model config's fields that differ from Megatron Core's (gated_linear_unit False,
    # share_embeddings_and_output_weights True by default): a Llama-style model prints a gated MLP, untied embeddings
    text = (DATA / "megatron-bridge.log").read_text().replace(
        "  hidden_size: 2048  (Mcore default: 0)", "  hidden_size: 2048  (Mcore default: 0)\n"
        "  gated_linear_unit: True  (Mcore default: False)\n  share_embeddings_and_output_weights: False  (Mcore default: True)")
    dims = parse_log(text, "b.log")["model"]
    assert dims["ffn_act"] == "swiglu" and dims["tied_embeddings"] is False
