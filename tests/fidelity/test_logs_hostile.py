"""Hostile training logs (planner.fidelity.logs): the sample logs of tests/data/logs with one line
made absurd are a SpecError naming the log's line and the field, never a Python error (plan runs
import and plan calibrate said "internal error: ValueError/OverflowError/ZeroDivisionError/TypeError/
AttributeError", exit 3); a line of repeated heads is read in linear time and a huge printed list
in bounded memory (a 780 kB line took 183 s, a 10 MB list argument 4.9 GB)."""
from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli.main import app
from planner.errors import SpecError
from planner.fidelity.logs import MAX_LOG_LINES, parse_log
from planner.fidelity.logs.common import MAX_COUNT_DIGITS

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
DIGITS = "9" * 5000  # past Python's 4,300-digit int() limit, and past a float's range


def read(name: str) -> str:
    return (DATA / name).read_text()


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


@pytest.mark.parametrize("framework, old, new, field", [
    # a count of 5,000 digits: int() raised ValueError
    ("megatron", "iteration       20/", f"iteration       {DIGITS}/", "iteration"),
    ("megatron", "global batch size:    64 | lm loss: 1.010000E+01", f"global batch size:    {DIGITS} | lm loss: 1.010000E+01",
     "global batch size"),
    ("torchtitan", "dp_shard=8", f"dp_shard={DIGITS}", "dp_shard"),
    ("torchtitan", "global batch size 16", f"global batch size {DIGITS}", "global batch size"),
    ("torchtitan", "sequence length 8192", f"sequence length {DIGITS}", "sequence length"),
    ("torchtitan", "step: 20 ", f"step: {DIGITS} ", "step"),
    ("nemo", "iteration 3/99", f"iteration {DIGITS}/99", "iteration"),
    ("deepspeed", "global_step=30,", f"global_step={DIGITS},", "global_step"),
    ("megatron-bridge", "microbatches to constant 16", f"microbatches to constant {DIGITS}", "number of microbatches"),
    # 1e400 is a float infinity: int(inf) raised OverflowError
    ("megatron", "world_size ...................................... 16", "world_size ...................................... 1e400",
     "world_size"),
    ("megatron", "tensor_model_parallel_size ...................... 4",
     "tensor_model_parallel_size ...................... 1e400", "tensor_model_parallel_size"),
    ("megatron-bridge", "micro_batch_size: 1", "micro_batch_size: 1e400", "micro_batch_size"),
    ("deepspeed", "train_batch_size ............. 256", "train_batch_size ............. 1e400", "train_batch_size"),
    ("nemo", "global_batch_size: 128 | global_step: 3", "global_batch_size: 1e400 | global_step: 3", "global_batch_size"),
    ("nemo", "global_batch_size: 128 | global_step: 3", "global_batch_size: nan | global_step: 3", "global_batch_size"),
    # a metric that is no number: float('abc') raised ValueError
    ("nemo", "train_step_timing in s: 4.049 ", "train_step_timing in s: tensor(4.049) ", "train_step_timing in s"),
    ("nemo", "global_batch_size: 128 | global_step: 3", "global_batch_size: abc | global_step: 3", "global_batch_size"),
    ("megatron-bridge", "mem-max-allocated-gigabytes: 44.871", "mem-max-allocated-gigabytes: abc",
     "mem-max-allocated-gigabytes"),
    # 0 microbatches: the world size from them divided by zero
    ("megatron-bridge", "microbatches to constant 16", "microbatches to constant 0", "number of microbatches"),
    # a degree printed twice: the last one was taken, silently
    ("torchtitan", "dp_shard=8,", "dp_shard=8, dp_shard=4,", "dp_shard"),
], ids=lambda value: value[:40] if isinstance(value, str) else value)
def test_an_absurd_line_is_named(framework, old, new, field):
    text = read(f"{framework}.log")
    assert old in text
    with pytest.raises(SpecError) as error:
        parse_log(text.replace(old, new, 1), "bad.log")
    assert (error.value.file, error.value.line, error.value.path) == ("bad.log", line_of(text, old), field)
    assert error.value.expected


def test_a_bridge_batch_printed_as_a_string_gives_no_world_size():
    # `'32' % 16` raised TypeError; the GPUs are not derived from a batch that is no count
    text = read("megatron-bridge.log").replace("global_batch_size: 32", "global_batch_size: '32'")
    with pytest.raises(SpecError, match="does not state the number of GPUs"):
        parse_log(text, "b.log")


def test_a_deepspeed_zero_section_that_is_no_mapping_leaves_the_printed_stage():
    # the user's ds_config with "zero_optimization": 5 raised AttributeError on .get; the engine's printed
    # zero_optimization_stage (2 in the sample log) is the stage
    text = read("deepspeed.log").replace('"zero_optimization":{', '"zero_optimization":5, "other":{')
    assert parse_log(text, "d.log")["layout"]["zero"] == 2


def test_mesh_degrees_without_separators_are_read_one_by_one():
    # `pp=1, dp_replicate=1dp_shard=8` matched MESH as one part and `part.split("=")` gave three values (ValueError);
    # the degrees are 1 x 1 x 8 x 1 x 1 = 8 GPUs as in the sample log
    text = read("torchtitan.log").replace("dp_replicate=1, dp_shard=8", "dp_replicate=1dp_shard=8")
    assert parse_log(text, "t.log")["gpus"] == 8


def test_a_torchtitan_dim_beyond_a_float_is_named_as_the_model_dim(tmp_path):
    # the FFN width int(2 x 4 x dim / 3) of a 5,000-digit dim raised OverflowError; the model check names it
    from planner.fidelity.runs import runs_from_log

    log = tmp_path / "t.log"
    log.write_text(read("torchtitan.log").replace('"dim": 4096', f'"dim": {DIGITS[:4000]}'))
    with pytest.raises(SpecError) as error:
        runs_from_log(str(log), cluster="dgx-h100-1024", model=None)
    assert error.value.path == "runs.0.model.hidden"


@pytest.mark.parametrize("framework, line", [
    ("torchtitan", "step: 1 loss: " * 20_000),  # was 22.8 s
    ("megatron", "iteration 1/ 1 |" * 20_000),  # 28 s
    ("nemo", "Training epoch 0, iteration 1/9 | a: b " * 20_000 + "|"),  # 183 s (66 s in Megatron's pattern)
    ("nemo", "All tensor model parallel group ranks: []" * 20_000 + "x"),  # 11 s
], ids=["torchtitan-step", "megatron-iteration", "nemo-progress", "nemo-groups"])
def test_a_line_of_repeated_heads_is_read_in_linear_time(framework, line):
    text = read(f"{framework}.log") + line + "\n"
    start = time.perf_counter()
    try:
        parse_log(text, "long.log")
    except SpecError:
        pass
    assert time.perf_counter() - start < 5.0  # linear: ~0.01 s; quadratic, above: 11-183 s


def test_a_bridge_entry_of_repeated_defaults_is_read_in_linear_time():
    # `^  (\w+): (.*?)(?:  \(Mcore default: .*\))?$` rescanned to the line's end after every "(Mcore default:" (7 s at 20,000; quadratic)
    text = read("megatron-bridge.log").replace("  lr: 0.0003", "  lr: " + "  (Mcore default: x)" * 40_000 + "y")
    start = time.perf_counter()
    parse_log(text, "b.log")
    assert time.perf_counter() - start < 5.0


def test_a_bridge_entry_still_drops_its_default():
    # `  lr: 0.0003  (Mcore default: None)`: the value is 0.0003; the layout reads tp 2 from `tensor_model_parallel_size:
    # 2  (Mcore default: 1)` as before
    assert parse_log(read("megatron-bridge.log"), "b.log")["layout"]["tp"] == 2


@pytest.mark.parametrize("framework, old, new", [
    # a 1.2 MB list: ast.literal_eval built ~100 B of syntax tree a character (10 MB: 4.9 GB)
    ("megatron", "tokenizer_type .................................. HuggingFaceTokenizer",
     "tokenizer_type .................................. [" + "0," * 600_000 + "]"),
    # NeMo's rank lists, 1.2 MB: read as Python lists, 2.2 GB for 10 MB
    ("nemo", "All context parallel group ranks: [[0], [1], [2], [3], [4], [5], [6], [7]]",
     "All context parallel group ranks: [" + ", ".join(f"[{i}]" for i in range(150_000)) + "]"),
    # a progress line of 170,000 metrics: the pattern's backtracking stack grew ~180 B a metric
    ("nemo", "| consumed_samples: 1536", "| consumed_samples: 1536" + " | a: b" * 170_000),
], ids=["megatron-argument", "nemo-groups", "nemo-progress"])
def test_a_huge_printed_list_is_read_in_bounded_memory(framework, old, new):
    text = read(f"{framework}.log")
    assert old in text
    text = text.replace(old, new)
    tracemalloc.start()
    try:
        parse_log(text, "big.log")
    except SpecError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 30 * 2**20  # a few copies of the 1.2 MB line; the syntax tree, lists or stack were 85-500 MB


def test_more_lines_than_one_runs_log_is_refused_before_splitting():
    # 64 MiB of 3-byte lines took 3.5 GB as a list of lines; \r and \n\r count as breaks as str.splitlines has them
    with pytest.raises(SpecError, match=f"{MAX_LOG_LINES + 1:,} lines") as error:
        parse_log("x\r" * MAX_LOG_LINES, "many.log")
    assert error.value.file == "many.log" and "at most" in error.value.expected
    assert parse_log(read("torchtitan.log").replace("\n", "\r\n"), "crlf.log")["gpus"] == 8


def test_plan_runs_import_of_a_hostile_log_is_exit_2_naming_its_line(tmp_path):
    text = read("torchtitan.log")
    log = tmp_path / "t.log"
    log.write_text(text.replace("dp_shard=8", f"dp_shard={DIGITS}"))
    r = CliRunner().invoke(app, ["runs", "import", str(log), "--cluster", "dgx-h100-1024"])
    assert r.exit_code == 2, r.output
    assert f"{log}:{line_of(text, 'dp_shard=8')}: dp_shard: a count of 5000 digits" in r.output
    assert f"at most {MAX_COUNT_DIGITS} digits" in r.output and "internal error" not in r.output


@pytest.mark.parametrize("framework, old, new, said", [
    # the rate as printed, not the step time derived from it: a tps of nan read "step time -1.0 s", inf "0.0 s"
    ("torchtitan", "tps: 6,912", "tps: nan", "tps nan is not a positive finite number"),
    ("torchtitan", "tps: 6,912", "tps: inf", "tps inf is not a positive finite number"),
    ("torchtitan", "tps: 6,912", "tps: 0", "tps 0.0 is not a positive finite number"),
    ("deepspeed", "CurrSamplesPerSec=80.1", "CurrSamplesPerSec=nan", "CurrSamplesPerSec nan is not a positive finite"),
    ("deepspeed", "CurrSamplesPerSec=80.1", "CurrSamplesPerSec=inf", "CurrSamplesPerSec inf is not a positive finite"),
])
def test_a_bad_rate_is_said_as_printed(framework, old, new, said):
    text = read(f"{framework}.log")
    with pytest.raises(SpecError, match=said) as error:
        parse_log(text.replace(old, new), "bad.log")
    assert error.value.line == line_of(text, old)


def test_a_log_named_longer_than_a_run_name_imports_under_its_first_128_characters(tmp_path):
    # a file name may hold 255 bytes, a run's name 128 characters: a log named with 200 was refused
    # ("runs.0.name: String should have at most 128 characters") for a name the user never wrote
    from planner.fidelity.runs import log_entries

    log = tmp_path / ("a" * 200 + ".log")
    log.write_text(read("torchtitan.log"))
    entry = log_entries(str(log), cluster="dgx-h100-1024", model=None)["runs"][0]
    assert entry["name"] == "a" * 128 and entry["model"]["name"] == "a" * 100


@pytest.mark.parametrize("framework, block_start, block_end, old, new, field", [
    ("megatron", "------------------------ arguments", "-------------------- end of arguments ---------------------\n",
     "tensor_model_parallel_size ...................... 4", "tensor_model_parallel_size ...................... 8",
     "tensor_model_parallel_size"),
    ("deepspeed", "[2026-08-01 10:00:00,120] [INFO] [config.py:1009:print] DeepSpeedEngine configuration:",
     "zero_optimization_stage ...... 2\n", "world_size ................... 16", "world_size ................... 32",
     "world_size"),
])
def test_a_restart_with_other_settings_is_two_runs_not_one(framework, block_start, block_end, old, new, field):
    # a job restarted into the same log prints its settings again: the same values are one run (read as before);
    # another tp or world size means the steps that follow are another run's, which the median would mix
    text = read(f"{framework}.log")
    start, end = text.index(block_start), text.index(block_end) + len(block_end)
    block = text[start:end]
    assert parse_log(text + block, "same.log")["layout"] == parse_log(text, "one.log")["layout"]
    again = text + block.replace(old, new)
    with pytest.raises(SpecError, match="two runs of different settings in one log") as error:
        parse_log(again, "two.log")
    assert error.value.path == field and error.value.line == text.count("\n") + line_of(block, old)


@pytest.mark.parametrize("old, new", [
    ("dp_shard=8, cp=1, tp=1", "dp_shard=4, cp=1, tp=2"),  # the mesh: the first was read, steps of both mixed
    ("local batch size 2, global batch size 16", "local batch size 4, global batch size 32"),  # the last was read
])
def test_a_torchtitan_restart_with_another_mesh_or_batch_is_two_runs(old, new):
    text = read("torchtitan.log")
    start = text.index("[rank0]:[titan] 2026-08-01 10:00:00,000 - root - INFO - Building device mesh")
    restart = text[start:]
    assert parse_log(text + restart, "same.log")["gpus"] == 8  # the same settings again: one run
    with pytest.raises(SpecError, match="two runs of different settings in one log") as error:
        parse_log(text + restart.replace(old, new), "two.log")
    assert error.value.line == text.count("\n") + line_of(restart, old)


def test_a_model_other_than_the_logs_is_refused_not_fitted():
    # the sample Bridge log prints hidden_size 2048, num_layers 16 and ffn_hidden_size 8192; llama3-8b is
    # 4096, 32 and 14336 (Meta's config.json): fitted on those shapes, the measured times of the log's
    # smaller model moved the GEMM constant 7 % with no word
    from planner.fidelity.runs import log_entries

    with pytest.raises(SpecError, match="layers 16 \\(the log\\) against 32.*hidden 2048 \\(the log\\) against 4096"):
        log_entries(DATA / "megatron-bridge.log", cluster="dgx-h100-1024", model="llama3-8b")


def test_the_right_model_passes_with_its_own_sequence_and_megatrons_padded_vocabulary(tmp_path):
    # the sample Megatron-LM log is llama3-8b's shape at 4,096 tokens (the preset's 8,192 is the run's to say),
    # tp 4: Megatron pads 128,256 to a multiple of 128 x 4 = 512, i.e. ceil(128256 / 512) x 512 = 251 x 512 = 128,512
    from planner.fidelity.runs import log_entries

    entry = log_entries(DATA / "megatron.log", cluster="dgx-h100-1024", model="llama3-8b")["runs"][0]
    assert entry["model"] == "llama3-8b" and entry["seq_len"] == 4096
    text = read("megatron.log")
    for vocab, ok in ((128512, True), (129024, False)):  # 129,024 = 252 x 512: beyond any padding of 128,256
        path = tmp_path / f"m{vocab}.log"
        path.write_text(text.replace("padded_vocab_size ............................... 128256",
                                     f"padded_vocab_size ............................... {vocab}"))
        if ok:
            log_entries(path, cluster="dgx-h100-1024", model="llama3-8b")
        else:
            with pytest.raises(SpecError, match="vocab 129024 \\(the log\\) against 128256"):
                log_entries(path, cluster="dgx-h100-1024", model="llama3-8b")


@pytest.mark.parametrize("framework, line, fill_in", [
    # the placeholder 1 put in for the check broke a rule with what the log does print: 'heads (32) must divide
    # hidden (1)' and 'kv_heads (8) must divide heads (1)', values neither the log nor the user wrote
    ("megatron-bridge", "  hidden_size: 2048  (Mcore default: 0)\n", "runs.0.model.hidden"),
    ("torchtitan", '  "n_heads": 32,\n', "runs.0.model.heads"),
])
def test_a_log_without_a_dimension_is_imported_to_fill_in(tmp_path, framework, line, fill_in):
    text = read(f"{framework}.log")
    assert line in text
    log = tmp_path / f"{framework}.log"
    log.write_text(text.replace(line, ""))
    r = CliRunner().invoke(app, ["runs", "import", str(log), "--cluster", "dgx-h100-1024", "-o", str(tmp_path / "runs.yaml")])
    assert r.exit_code == 0, r.output
    assert f"fill in: {fill_in}:" in r.output and "must divide" not in r.output


@pytest.mark.parametrize("log, spec, said", [
    # a --model that leaves kv_heads out has one K/V head per query head (32); the Bridge log prints 8 query groups
    ("megatron-bridge.log", "layers: 16\nhidden: 2048\nheads: 32\n", "kv_heads 8 (the log) against 32 (--model)"),
    # one that leaves ffn_hidden out has 4 h = 4 x 4096 = 16384; the Megatron-LM log prints ffn_hidden_size 14336
    ("megatron.log", "layers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\n", "ffn_hidden 14336 (the log) against 16384 (--model)"),
])
def test_a_model_whose_defaults_differ_from_the_log_is_refused(tmp_path, log, spec, said):
    # compared as the fields were written, a left-out kv_heads or ffn_hidden (None) matched anything: the fit ran on
    # the --model's shapes against the log's times, as _same_dimensions is there to prevent
    from planner.fidelity.runs import log_entries

    model = tmp_path / "m.yaml"
    model.write_text(f"name: m\n{spec}vocab: 128256\nseq_len: 8192\ntraining: {{global_batch: 32}}\n")
    with pytest.raises(SpecError, match=re.escape(said)):
        log_entries(DATA / log, cluster="dgx-h100-1024", model=str(model))
