"""Megatron-LM flags of an uneven pipeline split (planner/export.py). Names and semantics checked
against NVIDIA/Megatron-LM core_v0.15 (commit d98e8a64dd): megatron/training/arguments.py defines
--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers and
--pipeline-model-parallel-layout; transformer_block.py get_num_layers_to_build gives the first and
the last rank their counts over all their virtual stages and shares the rest evenly;
pipeline_parallel_layer_layout.py reads "|" between virtual stages (vpp rank x pp + pp rank), "E",
"t", "L", "x*n" and "(...)*n"."""
from __future__ import annotations

import re

from planner.export import megatron_first_last, megatron_layout, megatron_pipeline_args, runs


def _unroll(layout: str) -> list[str]:
    """Megatron's parse_str_to_list, as its source reads: commas dropped, (...)*n and x*n unrolled."""
    layout = layout.replace(",", "")
    layout = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    return layout.split("|")


def test_llama3_split_uses_first_and_last_flags():
    # 126 layers on 16 ranks, 7 on the first and the last: middle ranks (126 - 14) / 14 = 8 each
    split = [7] + [8] * 14 + [7]
    assert megatron_first_last(split, 16, 1) == (7, 7)
    assert megatron_pipeline_args(split, 16, 1) == ["--decoder-first-pipeline-num-layers", "7",
                                                     "--decoder-last-pipeline-num-layers", "7"]


def test_interleaved_first_last_counts_all_chunks_of_a_rank():
    # pp 4, vpp 2, 14 layers: first rank 2 (1 per chunk), last 4 (2 per chunk), middle (14 - 6) / 2
    # = 4 per rank, 2 per chunk; schedule order j * 4 + r: [1, 2, 2, 2, 1, 2, 2, 2]
    assert megatron_first_last([1, 2, 2, 2, 1, 2, 2, 2], 4, 2) == (2, 4)
    # the first rank's count must divide by vpp: [1, 2, 2, 2, 2, 2, 2, 2] has 3 on rank 0
    assert megatron_first_last([1, 2, 2, 2, 2, 2, 2, 2], 4, 2) is None


def test_other_splits_use_the_layout_string():
    split = [0] + [1] * 126 + [0]  # Llama 3: embedding and loss alone on their virtual stages
    args = megatron_pipeline_args(split, 16, 8)
    assert args[0] == "--pipeline-model-parallel-layout"
    stages = _unroll(args[1])
    assert len(stages) == 128 and stages[0] == "E" and stages[-1] == "L"
    assert [s.count("t") for s in stages] == split


def test_layout_roundtrip_and_runs():
    split = [5, 3, 3] + [4] * 12 + [2]
    assert [s.count("t") for s in _unroll(megatron_layout(split))] == split
    assert runs(split) == "5 3x2 4x12 2"
    assert megatron_pipeline_args([4] * 8, 8, 1) == []  # even: nothing to say


# --- launch settings of whole layouts, names checked against each framework's own source ----------
# tests/data/frameworks/ holds the names, extracted verbatim from (header of each file for details):
#   megatron-lm.txt  NVIDIA/Megatron-LM core_v0.15.0 (0d7e02bd26) megatron/training/arguments.py, BSD-3-Clause
#   nemo.txt         NVIDIA/NeMo v2.4.0 (2381f42f69) MegatronStrategy, MegatronMixedPrecision, MockDataModule,
#                    GPTConfig, recipes/gpt3_175b.py; Megatron Core core_v0.15.0 dataclasses, Apache-2.0
#   torchtitan.txt   pytorch/torchtitan v0.2.2 (73a0e6979d) torchtitan/config/job_config.py, BSD-3-Clause
#   torchtitan-main.txt  pytorch/torchtitan main (b5bcd76c66, 2026-08-21) config/configs.py, trainer.py Trainer.Config,
#                    distributed/activation_checkpoint.py, BSD-3-Clause
#   deepspeed.txt    deepspeedai/DeepSpeed v0.19.5 (cf44300453) deepspeed/runtime/{constants,precision_config,
#                    zero/config,activation_checkpointing/config}.py, Apache-2.0
#   nemo-run.txt     NVIDIA/NeMo-Run v0.4.0 (33458c85ff) nemo_run/cli/cli_parser.py TypeParser's value parsers, Apache-2.0
import ast
import json
import shlex
from functools import cache
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.estimate import estimate_layout
from planner.export import EXPORTS, export_settings
from planner.export.megatron import moe_layer_pattern
from planner.export.torchtitan import titan_counts
from planner.specs.loading import load_cluster, load_model

FRAMEWORKS = Path(__file__).resolve().parents[1] / "data" / "frameworks"
# Names later than the vendored core_v0.15.0, read in NVIDIA/Megatron-LM core_v0.18.0 (ba7b5ebce1) and d98e8a64dd
# megatron/core/transformer/transformer_config.py: TransformerConfig fields use_transformer_engine_op_fuser: bool
# = False and cuda_graph_impl: Literal['none', 'local', 'transformer_engine', 'full_iteration'], which
# megatron/training/argument_utils.py ArgumentGroupFactory makes `--` + name.replace("_", "-") (store_true for a
# False bool); not in arguments.py's exclude list. NeMo (model.config) sees the same TransformerConfig field.
LATER_MEGATRON = {"--use-transformer-engine-op-fuser": None,
                  "--cuda-graph-impl": ["none", "local", "transformer_engine", "full_iteration"]}
LATER_NEMO = {"model.config": {"use_transformer_engine_op_fuser"}}


def _lines(name: str) -> list[str]:
    return [line for line in (FRAMEWORKS / name).read_text().splitlines() if not line.startswith("# ")]


@cache
def megatron_flags() -> dict[str, list | None]:
    """flag -> its `choices` (None: any value), from the vendored add_argument lines."""
    flags: dict[str, list | None] = {}
    last, pending = None, ""
    for line in _lines("megatron-lm.txt") + ["group.add_argument('--end-of-file'"]:
        if line.startswith("    "):
            pending += line.strip()
            continue
        found = re.search(r"choices=(\[[^\]]*\]|\([^)]*\))", pending)
        try:  # a computed list (a comprehension) checks the name only
            flags[last] = list(ast.literal_eval(found.group(1))) if found and last else flags.get(last)
        except ValueError:
            pass
        pending = ""
        found = re.search(r"add_argument\(\s*'(--[a-z0-9-]+)'", line)
        if found:
            last = found.group(1)
            flags.setdefault(last, None)
    return flags


@cache
def nemo_paths() -> dict[str, set[str]]:
    """override prefix -> attribute names, from the vendored signatures and dataclass fields."""
    paths: dict[str, set[str]] = {}
    section = None
    for line in _lines("nemo.txt"):
        if line.startswith("## section: "):
            section = line.removeprefix("## section: ")
            paths.setdefault(section, set())
        elif not line.startswith("## ") and section and re.match(r"^\w+\s*[:=]", line):
            paths[section].add(re.match(r"^(\w+)", line).group(1))
    return paths


TITAN_FILES = {"torchtitan": "torchtitan-0.3.txt", "torchtitan@main": "torchtitan-main.txt", "torchtitan@0.2": "torchtitan.txt"}
TITAN_ROOT = {"torchtitan": "Trainer.Config", "torchtitan@main": "Trainer.Config", "torchtitan@0.2": "JobConfig"}
TYRO = ("torchtitan", "torchtitan@main")  # Trainer.Config: activation checkpointing a tyro subcommand, no etp


@cache
def torchtitan_classes(kind: str = "torchtitan@0.2") -> dict[str, dict[str, str]]:
    """config class -> field -> the field's vendored line (job_config.py at v0.2.2; configs.py and trainer.py at main)."""
    classes: dict[str, dict[str, str]] = {}
    current = None
    for line in _lines(TITAN_FILES[kind]):
        if line.startswith("class "):
            current = classes.setdefault(line.removeprefix("class ").rstrip(":"), {})
        elif line.startswith("## "):
            current = None
        elif current is not None and re.match(r"^\s+\w+:", line):
            current[line.split(":")[0].strip()] = line
    return classes


def titan_subcommands() -> set[str]:
    """main's activation-checkpoint subcommand names (the vendored ActivationCheckpointingConfig union)."""
    return set(re.findall(r'tyro\.conf\.subcommand\("([\w-]+)"\)', (FRAMEWORKS / "torchtitan-main.txt").read_text()))


@cache
def deepspeed_names() -> tuple[set[str], set[str], set[int]]:
    """(string constants of the runtime config files, DeepSpeedZeroConfig fields, ZeroStageEnum values)."""
    constants, zero, stages = set(), set(), set()
    section = ""
    for line in _lines("deepspeed.txt"):
        if line.startswith("## "):
            section = line
        elif "DeepSpeedZeroConfig" in section:
            zero.add(line.split(":")[0])
        elif "ZeroStageEnum" in section:
            stages.add(int(line.split("=")[1]))
        else:
            constants.add(ast.literal_eval(line.split("=", 1)[1].split("#")[0].strip()))
    return constants, zero, stages


def _model(name: str, **training):
    m = load_model(name)
    return m if not training else m.model_copy(update={"training": m.training.model_copy(update=training)})


# (model, cluster, model training overrides, layout): dense, interleaved, cp, the two uneven-split
# spellings, MoE with ep and etp, MLA, fp8 and mxfp8, fp16, ZeRO 0-3, every recompute mode, pp = 1.
CASES = {
    "gpt3-cp-interleaved": ("gpt3-175b", "dgx-a100-1024", {}, dict(tp=4, pp=8, cp=2, micro_batch=3, vpp=6, sequence_parallel=True, zero=1)),
    "llama405-layout": ("llama3.1-405b", "dgx-h100-16384", {}, dict(tp=8, pp=16, vpp=8, micro_batch=1, sequence_parallel=True, zero=1,
                                                                    stage_layers=[0] + [1] * 126 + [0])),
    "llama405-first-last-zero3": ("llama3.1-405b", "dgx-h100-16384", {}, dict(tp=8, pp=16, micro_batch=1, sequence_parallel=True,
                                                                              zero=3, recompute="full", stage_layers=[7] + [8] * 14 + [7])),
    "deepseek-moe-mla": ("deepseek-v3", "dgx-h100-16384", {}, dict(tp=2, pp=16, ep=64, micro_batch=1, sequence_parallel=True,
                                                                    zero=1, recompute="selective", gpus=2048)),
    "maverick-etp-zero2": ("llama4-maverick", "dgx-h100-16384", {}, dict(tp=8, pp=4, ep=16, etp=8, micro_batch=1,
                                                                         sequence_parallel=True, zero=2, gpus=1024)),
    "llama70-fp8": ("llama3.1-70b", "dgx-h100-1024", {"precision": "fp8", "fp8_param_gather": True},
                    dict(tp=4, pp=4, micro_batch=1, sequence_parallel=True, zero=3, recompute="selective")),
    "llama8-mxfp8": ("llama3.1-8b", "dgx-b200-1024", {"precision": "mxfp8"}, dict(tp=2, pp=1, micro_batch=2, zero=2)),
    "gpt13-fp16-zero0": ("gpt3-13b", "dgx-a100-1024", {"precision": "fp16"}, dict(tp=2, pp=1, micro_batch=1, zero=0, recompute="full")),
    "qwen3-flex-overlap-bf16grad": ("qwen3-30b-a3b", "dgx-h100-1024",
                                    {"moe_dispatcher": "flex", "moe_a2a_overlap": True, "grad_reduce_dtype": "bf16"},
                                    dict(tp=1, pp=1, ep=16, micro_batch=1, zero=1, gpus=32)),
    "gpt-oss-window-cp": ("gpt-oss-120b", "dgx-h100-1024", {}, dict(tp=2, pp=1, cp=2, ep=32, micro_batch=5,
                                                                     sequence_parallel=True, zero=1)),
    "gpt-oss-graph-fuser": ("gpt-oss-120b", "dgx-h100-1024", {"cuda_graph_impl": "full_iteration", "te_op_fuser": True},
                            dict(tp=2, pp=1, ep=32, micro_batch=1, sequence_parallel=True, zero=1)),
    "llama8-local-graphs": ("llama3.1-8b", "dgx-h100-1024", {"cuda_graph_impl": "local"}, dict(tp=2, pp=1, micro_batch=1)),
    "llama8-compile-fsdp": ("llama3.1-8b", "dgx-h100-1024", {"torch_compile": True}, dict(tp=1, pp=1, micro_batch=2, zero=3)),
    "llama8-fp8-current": ("llama3.1-8b", "dgx-h100-1024", {"precision": "fp8", "fp8_recipe": "tensorwise"},
                           dict(tp=2, pp=1, micro_batch=1, zero=3)),
}


# MoE cases whose ZeRO-1 layout torchtitan cannot run (ep does not divide dp_shard*cp*tp with DDP: SpecError, see
# test_torchtitan_refuses_what_it_cannot_run): their torchtitan export is taken at ZeRO-3, FSDP over dp.
TITAN_ZERO3 = ("deepseek-moe-mla", "qwen3-flex-overlap-bf16grad", "gpt-oss-window-cp", "gpt-oss-graph-fuser")


def runnable(kind: str, case: str) -> dict:
    """The case's layout as the framework runs it (planner/export/frameworks.py; the case's own layout is refused:
    test_a_layout_the_framework_refuses_is_no_export): DeepSpeed without cp and vpp (the split of the virtual
    stages dropped with them), ZeRO 0/1 with pp > 1 and no ZeRO-3 with MoE; torchtitan without ZeRO-1 (DDP, ZeRO-0;
    the TITAN_ZERO3 cases FSDP)."""
    model, _, _, given = CASES[case]
    g = dict(given)
    if kind == "deepspeed":
        if g.get("cp", 1) > 1 or g.get("vpp", 1) > 1:
            g.update(cp=1, vpp=1)
            g.pop("stage_layers", None)
        if g.get("pp", 1) > 1 and g.get("zero", 0) >= 2:
            g["zero"] = 1
        if load_model(model).moe is not None and g.get("zero") == 3:
            g["zero"] = 2
    if kind.startswith("torchtitan") and g.get("zero") == 1:
        g["zero"] = 3 if case in TITAN_ZERO3 else 0
    return g


# torchtitan has no FP16 (mixed_precision_param bfloat16 or float32): the fp16 case is refused, not exported
NO_TITAN = ("gpt13-fp16-zero0",)


@cache
def exported(case: str, kind: str):
    model, cluster, training, _ = CASES[case]
    m, c = _model(model, **training), load_cluster(cluster)
    return export_settings(kind, estimate_layout(m, c, **runnable(kind, case)), m, c), m


REFUSED = {  # (case, kind): the check the export names (planner/export/frameworks.py's messages)
    ("gpt3-cp-interleaved", "deepspeed"): "DeepSpeed has no ring or all-gather context parallelism",
    ("llama405-layout", "deepspeed"): "DeepSpeed's pipeline runs one stage per rank",
    ("llama405-first-last-zero3", "deepspeed"): "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3",
    ("maverick-etp-zero2", "deepspeed"): "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3",
    ("llama70-fp8", "deepspeed"): "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3",
    ("gpt-oss-window-cp", "deepspeed"): "DeepSpeed has no ring or all-gather context parallelism",
    ("gpt3-cp-interleaved", "torchtitan"): "torchtitan has no ZeRO-1",
    ("llama405-layout", "torchtitan@0.2"): "torchtitan has no ZeRO-1",
    ("gpt13-fp16-zero0", "torchtitan"): "torchtitan has no FP16 training",
    ("gpt13-fp16-zero0", "torchtitan@0.2"): "torchtitan has no FP16 training",
}


@pytest.mark.parametrize("case, kind", REFUSED)
def test_a_layout_the_framework_refuses_is_no_export(case, kind):
    # issue 38: --export deepspeed of cp 2 / vpp 6 wrote settings with a note; it is exit 2 naming the check
    model, cluster, training, given = CASES[case]
    m, c = _model(model, **training), load_cluster(cluster)
    with pytest.raises(SpecError, match=f"{re.escape(kind)} cannot run this layout: .*{re.escape(REFUSED[case, kind])}") as exc:
        export_settings(kind, estimate_layout(m, c, **given), m, c)
    assert exc.value.exit_code == 2 and exc.value.path == "--export"


def _megatron_words(text: str) -> list[list[str]]:
    body = [line for line in text.splitlines() if not line.startswith("#")]
    return [shlex.split(line.removesuffix(" \\")) for line in body]


@pytest.mark.parametrize("case", CASES)
def test_megatron_flags_and_values_are_megatrons(case):
    export, _ = exported(case, "megatron")
    known = megatron_flags() | LATER_MEGATRON
    for words in _megatron_words(export.text):
        flag, values = words[0], words[1:]
        assert flag in known, flag
        if known[flag] is not None:
            assert all(v in known[flag] for v in values), (flag, values, known[flag])


@pytest.mark.parametrize("case", CASES)
def test_nemo_overrides_are_nemo_attributes(case):
    export, _ = exported(case, "nemo")
    paths = nemo_paths()
    for line in export.text.splitlines():
        if line.startswith("#"):
            continue
        [line] = shlex.split(line)  # one override per line, one shell word
        if "+=" in line.split("=", 1)[0] + "=":  # `list+=[pkg.Class(k=v)]`: a section per appended class
            key, value = line.split("+=", 1)
            cls, args = re.fullmatch(r"\[([\w.]+)\((.*)\)\]", value).groups()
            assert {a.split("=")[0] for a in args.split(",")} <= paths[f"{key}+={cls}"], line
            continue
        key = line.split("=", 1)[0]
        prefix, name = key.rsplit(".", 1)
        assert name in paths.get(prefix, set()) | LATER_NEMO.get(prefix, set()), key


def _torchtitan_line(key: str, kind: str = "torchtitan@0.2") -> tuple[str, str]:
    """The vendored field line of an override key `--a.b.c` (booleans may be `--a.b.no_c`)."""
    classes = torchtitan_classes(kind)
    parts = key.removeprefix("--").split(".")
    cls = TITAN_ROOT[kind]
    for part in parts[:-1]:
        cls = re.match(r"\s*\w+: (\w+)", classes[cls][part]).group(1)  # `model: Model = field(...)`
    name = parts[-1]
    if name not in classes[cls] and name.startswith("no_"):
        name = name.removeprefix("no_")
        assert ": bool" in classes[cls][name], key
    return name, classes[cls][name]


@pytest.mark.parametrize("kind", TITAN_FILES)
@pytest.mark.parametrize("case", CASES)
def test_torchtitan_overrides_are_job_config_fields(case, kind):
    if kind in TYRO and case == "maverick-etp-zero2" or case in NO_TITAN:
        return  # etp 8: 0.3.0 and main have no expert tensor parallelism (test_torchtitan_runs_etp_tp_or_1_only); no FP16
    export, _ = exported(case, kind)
    text = (FRAMEWORKS / TITAN_FILES[kind]).read_text()
    for line in export.text.splitlines():
        if line.startswith("#"):
            continue
        if kind in TYRO and not line.startswith("--"):  # main's activation checkpointing, a tyro subcommand
            assert line.removeprefix("activation-checkpoint:") in titan_subcommands(), line
            continue
        key, _, value = line.partition("=")
        name, source = _torchtitan_line(key, kind)
        literal = re.search(r"Literal\[([^\]]*)\]", source)
        if literal and value:
            assert value in ast.literal_eval(f"[{literal.group(1)}]"), (key, value)
        if name == "pipeline_parallel_schedule":
            assert f'"{value}"' in source or f"e.g. {value})" in text
        if name == "converters":
            assert re.search(rf'^register_model_converter\(\w+, "{re.escape(value)}"\)$', text, re.M), value


@pytest.mark.parametrize("case", CASES)
def test_deepspeed_config_keys_are_deepspeeds(case):
    export, _ = exported(case, "deepspeed")
    constants, zero, stages = deepspeed_names()
    cfg = json.loads(export.text)  # valid JSON: the notes are apart
    assert set(cfg) <= constants
    assert set(cfg["zero_optimization"]) <= zero and cfg["zero_optimization"]["stage"] in stages
    for section in ("bf16", "fp16", "activation_checkpointing"):
        assert set(cfg.get(section, {})) <= constants


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ("megatron", "nemo", "torchtitan", "torchtitan@main", "torchtitan@0.2"))
def test_notes_head_the_text_as_comments(case, kind):
    if kind in TYRO and case == "maverick-etp-zero2" or kind.startswith("torchtitan") and case in NO_TITAN:
        return
    export, _ = exported(case, kind)
    lines = export.text.splitlines()
    if kind.startswith("torchtitan"):  # the first line names the torchtitan whose names it writes
        assert lines.pop(0) == {
            "torchtitan": "# torchtitan 0.3.0 (the release on PyPI) names; unreleased main's: --export torchtitan@main, "
                          "v0.2.2's: --export torchtitan@0.2",
            "torchtitan@main": "# torchtitan main b5bcd76 (2026-08-21) names; torchtitan v0.2.2's: --export torchtitan@0.2",
            "torchtitan@0.2": "# torchtitan v0.2.2 names; the release 0.3.0's: --export torchtitan"}[kind]
    assert lines[:len(export.notes)] == [f"# {n}" for n in export.notes]


def test_gpt3_best_layout_in_every_framework():
    # dp = 1024 / (tp 4 * pp 8 * cp 2) = 16; micro-batches per step 1536 / (3 * 16) = 32
    words = {w[0]: w[1:] for w in _megatron_words(exported("gpt3-cp-interleaved", "megatron")[0].text)}
    assert words["--tensor-model-parallel-size"] == ["4"] and words["--pipeline-model-parallel-size"] == ["8"]
    assert words["--context-parallel-size"] == ["2"] and words["--num-virtual-stages-per-pipeline-rank"] == ["6"]
    assert words["--micro-batch-size"] == ["3"] and words["--global-batch-size"] == ["1536"]
    assert "--use-distributed-optimizer" in words and "--sequence-parallel" in words and "--bf16" in words
    assert "--num-layers-per-virtual-pipeline-stage" not in words and "--recompute-granularity" not in words
    nemo = dict(line.split("=", 1) for line in exported("gpt3-cp-interleaved", "nemo")[0].text.splitlines())
    assert nemo["trainer.num_nodes"] == str(1024 // 8) and nemo["trainer.devices"] == "8"
    assert nemo["trainer.strategy.virtual_pipeline_model_parallel_size"] == "6"
    assert nemo["optim.config.use_distributed_optimizer"] == "True" and nemo["data.micro_batch_size"] == "3"
    titan = exported("gpt3-cp-interleaved", "torchtitan")[0]
    lines = dict(line.split("=", 1) for line in titan.text.splitlines() if line.startswith("--") and "=" in line)
    # 0.3.0: v0.2.2's batch fields in main's tree: local batch 3 * 32 = 96 in micro-batches of 3, 1536 a step
    assert lines["--training.local_batch_size"] == "96" and lines["--parallelism.pipeline_parallel_microbatch_size"] == "3"
    assert lines["--training.global_batch_size"] == "1536" and lines["--training.seq_len"] == "2048"
    assert "num_tokens" not in titan.text and titan.text.splitlines()[-1] == "activation-checkpoint:none"
    titan = exported("gpt3-cp-interleaved", "torchtitan@main")[0]
    lines = dict(line.split("=", 1) for line in titan.text.splitlines() if line.startswith("--") and "=" in line)
    # main: 3 sequences of 2048 tokens per microbatch, the 32 micro-batches in one pipeline pass, 1536 * 2048 a step
    assert lines["--training.num_tokens_per_microbatch_per_dp_rank"] == str(3 * 2048)
    assert lines["--parallelism.num_pp_microbatches"] == "32" and lines["--training.num_tokens_per_train_step"] == str(1536 * 2048)
    assert lines["--training.max_context_length"] == "2048" and "local_batch_size" not in titan.text
    titan = exported("gpt3-cp-interleaved", "torchtitan@0.2")[0]
    lines = dict(line.split("=", 1) for line in titan.text.splitlines() if not line.startswith("#"))
    # one pipeline pass holds the 32 micro-batches: local batch 3 * 32 = 96, accumulation 1536 / (96 * 16) = 1
    assert lines["--training.local_batch_size"] == "96" and lines["--parallelism.pipeline_parallel_microbatch_size"] == "3"
    assert lines["--parallelism.data_parallel_replicate_degree"] == "16" and lines["--parallelism.data_parallel_shard_degree"] == "1"
    assert lines["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    # 96 layers in 48 virtual stages of 2, embedding and output weighing nothing: ceil(96 / 2) = 48
    assert lines["--parallelism.pipeline_parallel_layers_per_stage"] == "2"
    # torchtitan has no ZeRO-1: the layout is taken at ZeRO-0 (DDP, every state replicated)
    assert runnable("torchtitan@0.2", "gpt3-cp-interleaved")["zero"] == 0
    # DeepSpeed runs neither cp nor vpp: tp 4 pp 8 cp 1, dp = 1024 / 32 = 32, 1536 / (3 * 32) = 16 micro-batches
    ds = json.loads(exported("gpt3-cp-interleaved", "deepspeed")[0].text)
    assert ds["gradient_accumulation_steps"] == 1536 // (3 * 32) == 16
    assert ds["train_batch_size"] == 3 * 16 * 32 and ds["zero_optimization"] == {"stage": 1} and ds["bf16"] == {"enabled": True}


def test_uneven_splits_per_framework():
    words = {w[0]: w[1:] for w in _megatron_words(exported("llama405-layout", "megatron")[0].text)}
    assert [s.count("t") for s in _unroll(words["--pipeline-model-parallel-layout"][0])] == [0] + [1] * 126 + [0]
    assert "--num-virtual-stages-per-pipeline-rank" not in words  # the layout string sets vpp (arguments.py)
    words = {w[0]: w[1:] for w in _megatron_words(exported("llama405-first-last-zero3", "megatron")[0].text)}
    assert words["--decoder-first-pipeline-num-layers"] == ["7"] and words["--decoder-last-pipeline-num-layers"] == ["7"]
    assert words["--recompute-granularity"] == ["full"] and words["--recompute-method"] == ["uniform"]
    assert words["--recompute-num-layers"] == ["1"] and words["--data-parallel-sharding-strategy"] == ["optim_grads_params"]
    nemo = exported("llama405-first-last-zero3", "nemo")[0].text
    assert "trainer.strategy.num_layers_in_first_pipeline_stage=7" in nemo.splitlines()
    titan = exported("llama405-layout", "torchtitan")[0].text.splitlines()
    # 126 layers + embedding 1 + output 1 = 128 over 128 stages: one each, the first and last give theirs up
    assert "--parallelism.pipeline_parallel_first_stage_less_layers=1" in titan
    assert "--parallelism.pipeline_parallel_layers_per_stage=1" in titan
    titan = exported("llama405-first-last-zero3", "torchtitan@0.2")[0].text.splitlines()
    assert "--parallelism.fsdp_reshard_after_forward=always" in titan and "--activation_checkpoint.mode=full" in titan
    titan = exported("llama405-first-last-zero3", "torchtitan")[0].text.splitlines()
    # main: activation checkpointing is a subcommand, last; CUDA graphs refuse pp > 1 (trainer.py _validate_cuda_graphs)
    assert titan[-1] == "activation-checkpoint:full" and "--training.disable_cuda_graphs" in titan
    assert "--parallelism.pipeline_parallel_first_stage_less_layers=1" in titan


def test_titan_counts_follow_torchtitans_docstring_example():
    # generate_llm_fqn_per_model_part(2, 3, input_weight=2, output_weight=2): 7 effective layers over 2
    # stages -> 4 and 3; the first gives 2 to the embedding, the last 2 to norm + output
    assert titan_counts(2, 3, 2, 2) == [2, 1]
    assert titan_counts(4, 14, 1, 1) == [3, 4, 4, 3]  # 16 / 4 = 4 each, minus the weights
    assert titan_counts(8, 3, 1, 1) is None  # 5 effective layers cannot fill 8 stages: torchtitan raises


@pytest.mark.parametrize("name", ["deepseek-v3", "llama4-maverick", "mixtral-8x7b"])
def test_moe_layer_pattern_marks_the_planners_moe_layers(name):
    m = load_model(name)
    pattern = moe_layer_pattern(m)
    moe = [int(m.moe_layers_before(i + 1) - m.moe_layers_before(i)) for i in range(m.layers)]
    assert (moe == [1] * m.layers) if pattern is None else eval(pattern) == moe  # Megatron evaluates the string


def test_moe_precision_and_zero_per_framework():
    words = {w[0]: w[1:] for w in _megatron_words(exported("maverick-etp-zero2", "megatron")[0].text)}
    assert words["--expert-model-parallel-size"] == ["16"] and words["--expert-tensor-parallel-size"] == ["8"]
    assert words["--data-parallel-sharding-strategy"] == ["optim_grads"] and "--use-megatron-fsdp" in words
    words = {w[0]: w[1:] for w in _megatron_words(exported("llama70-fp8", "megatron")[0].text)}
    assert words["--fp8-format"] == ["hybrid"] and words["--fp8-recipe"] == ["delayed"] and "--fp8-param-gather" in words
    words = {w[0]: w[1:] for w in _megatron_words(exported("llama8-mxfp8", "megatron")[0].text)}
    assert words["--fp8-recipe"] == ["mxfp8"]
    titan = exported("llama8-mxfp8", "torchtitan@0.2")[0].text.splitlines()
    assert "--model.converters=quantize.linear.mx" in titan and "--parallelism.fsdp_reshard_after_forward=never" in titan
    titan = exported("llama8-mxfp8", "torchtitan")[0]  # main: converters are the model config's, off the CLI
    assert "--parallelism.fsdp_reshard_after_forward=never" in titan.text.splitlines() and "converters" not in _flag_lines(titan.text)
    assert any(n.startswith("mxfp8 GEMMs: torchtitan main") and "MXFP8LinearConverter" in n for n in titan.notes)
    fp16 = exported("gpt13-fp16-zero0", "megatron")[0].text
    assert "--fp16" in fp16 and "--use-distributed-optimizer" not in fp16
    assert ("gpt13-fp16-zero0", "torchtitan") in REFUSED  # torchtitan has no FP16: refused, not a note
    ds = exported("gpt13-fp16-zero0", "deepspeed")[0]
    cfg = json.loads(ds.text)
    # gpt3-13b on 1024 GPUs with tp 2: dp 512, global batch 1024 (its config) / (1 * 512) = 2
    assert cfg["fp16"] == {"enabled": True} and cfg["zero_optimization"]["stage"] == 0
    assert cfg["gradient_accumulation_steps"] == exported("gpt13-fp16-zero0", "megatron")[1].training.global_batch // 512
    assert "activation_checkpointing" in cfg and any("tp=2" in n for n in ds.notes)


def test_unknown_export_is_refused():
    m, c = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    with pytest.raises(ValueError, match="megatron, nemo, torchtitan, deepspeed, torchtitan@0.2, megatron-bridge, torchtitan@main"):
        export_settings("colossalai", estimate_layout(m, c, tp=8, pp=8, micro_batch=1), m, c)
    assert EXPORTS == ("megatron", "nemo", "torchtitan", "deepspeed", "torchtitan@0.2", "megatron-bridge", "torchtitan@main")


def test_the_vendored_lists_catch_wrong_names():
    # names a careless exporter could write: NeMo's own docs once said `sequence_parallelism`
    assert "--num-layers-per-virtual-stage" not in megatron_flags() and megatron_flags()["--fp8-format"] == ["e4m3", "hybrid"]
    assert "sequence_parallelism" not in nemo_paths()["trainer.strategy"]
    assert "sequence_parallel" in nemo_paths()["trainer.strategy"]
    with pytest.raises(KeyError):
        _torchtitan_line("--training.batch_size")
    assert "batch_size" not in deepspeed_names()[0] and "train_batch_size" in deepspeed_names()[0]


# --- the CLI: `--export` on search and estimate ------------------------------------------------

from typer.testing import CliRunner  # noqa: E402

from planner.cli.main import app  # noqa: E402

ESTIMATE = ["estimate", "gpt3-175b", "dgx-a100-1024", "--gpus", "64", "--global-batch", "64", "--tp", "8", "--pp", "8",
            "--micro-batch", "1", "--recompute", "selective", "--sequence-parallel"]


def test_cli_estimate_exports_the_given_layout():
    r = CliRunner().invoke(app, ESTIMATE + ["--export", "megatron"])
    assert r.exit_code == 0, r.output
    flags = shlex.split(r.stdout.replace("\\\n", " "))
    # 64 GPUs / (tp 8 x pp 8) = dp 1: the whole global batch of 64 is 64 micro-batches of 1
    assert flags[flags.index("--tensor-model-parallel-size") + 1] == "8"
    assert flags[flags.index("--pipeline-model-parallel-size") + 1] == "8"
    assert flags[flags.index("--global-batch-size") + 1] == "64"
    assert "--sequence-parallel" in flags and "step" not in r.stdout  # settings in place of the table


def test_cli_search_exports_deepspeed_json_on_stdout_notes_on_stderr():
    # the default search's best (tp 8 pp 4 vpp 12) is no DeepSpeed layout: exit 2 naming the check
    refused = CliRunner().invoke(app, ["search", "--export", "deepspeed"])
    assert refused.exit_code == 2 and "DeepSpeed's pipeline runs one stage per rank" in refused.output
    assert refused.stdout == ""
    args = ["search", "gpt3-13b", "dgx-a100-1024", "--gpus", "64", "--tp", "2", "--framework", "deepspeed"]
    r = CliRunner().invoke(app, args + ["--export", "deepspeed"])
    assert r.exit_code == 0, r.output
    ds = json.loads(r.stdout)  # stdout is JSON alone
    best = json.loads(CliRunner().invoke(app, args + ["--json"]).stdout)["best"]["layout"]
    assert best["cp"] == 1 and best.get("vpp", 1) == 1
    # gradient accumulation = global batch 1536 / (micro-batch x dp) of the layout search --json calls best
    assert ds["gradient_accumulation_steps"] == 1024 // (best["micro_batch"] * best["dp"])
    assert ds["zero_optimization"]["stage"] == best["zero"]
    assert "note:" in r.stderr and "note:" not in r.stdout


@pytest.mark.parametrize("args,fragment", [
    (["search", "--export", "jax"], "--export"),
    (["search", "--export", "megatron", "--json"], "--export"),
    (["search", "gpt3-175b", "mixed-h100-a100", "--export", "megatron"], "pools"),
])
def test_cli_export_bad_requests_exit_2(args, fragment):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and fragment in r.output


def test_cli_export_of_an_infeasible_layout_says_why_on_stderr_and_exits_1():
    # tp 8 x pp 8 without recomputation or sequence parallelism does not fit (README's estimate example;
    # estimate turns sequence parallelism on with tp > 1 unless told not to)
    args = [a for a in ESTIMATE if a not in ("--recompute", "selective", "--sequence-parallel")]
    r = CliRunner().invoke(app, args + ["--recompute", "none", "--no-sequence-parallel", "--export", "torchtitan"])
    assert r.exit_code == 1
    assert "--parallelism.tensor_parallel_degree=8" in r.stdout and "infeasible:" in r.stderr


def test_moe_exports_run_the_dispatcher_the_cost_model_prices():
    # Megatron core_v0.15 defaults to --moe-token-dispatcher-type allgather and one GEMM per expert;
    # planner/costs/comm.py prices all-to-all dispatch and grouped expert GEMMs, so the line says so.
    words = {w[0]: w[1:] for w in _megatron_words(exported("deepseek-moe-mla", "megatron")[0].text)}
    assert words["--moe-token-dispatcher-type"] == ["alltoall"] and words["--moe-grouped-gemm"] == []
    nemo = exported("deepseek-moe-mla", "nemo")[0].text.splitlines()
    assert "model.config.moe_token_dispatcher_type=alltoall" in nemo and "model.config.moe_grouped_gemm=True" in nemo


def test_fp8_param_gather_at_zero_0_is_no_layout():
    # Megatron arguments.py: "--fp8-param-gather only supported with distributed optimizer, torch fsdp2,
    # megatron fsdp": the planner's FP8 weights (1 byte) need ZeRO >= 1, so zero 0 breaks a rule.
    m, c = _model("llama3.1-8b", precision="fp8", fp8_param_gather=True), load_cluster("dgx-h100-1024")
    at0 = estimate_layout(m, c, gpus=64, tp=2, pp=1, micro_batch=1, zero=0, sequence_parallel=True)
    assert "fp8_param_gather_needs_zero" in {v.constraint for v in at0.violations}
    at1 = estimate_layout(m, c, gpus=64, tp=2, pp=1, micro_batch=1, zero=1, sequence_parallel=True)
    assert "fp8_param_gather_needs_zero" not in {v.constraint for v in at1.violations}


def test_a_power_cap_is_said_not_dropped():
    r = CliRunner().invoke(app, ["search", "--objective", "energy", "--power-caps", "--export", "megatron"])
    best = json.loads(CliRunner().invoke(app, ["search", "--objective", "energy", "--power-caps", "--json"]).stdout)["best"]
    assert r.exit_code == 0 and f"nvidia-smi -pl {best['power_cap_w']:g}" in r.stdout.splitlines()[0]


@pytest.mark.parametrize("extra", [["--export", "nemo"], ["--plot", "f.png"]])
def test_gpus_range_has_no_single_layout_to_export_or_draw(extra):
    r = CliRunner().invoke(app, ["search", "gpt3-13b", "dgx-a100-1024", "--gpus-range", "64:256", *extra])
    assert r.exit_code == 2 and "--gpus-range" in r.output


def test_grad_reduce_dispatcher_and_a2a_overlap_per_framework():
    words = {w[0]: w[1:] for w in _megatron_words(exported("qwen3-flex-overlap-bf16grad", "megatron")[0].text)}
    assert "--grad-reduce-in-bf16" in words and words["--moe-token-dispatcher-type"] == ["flex"]
    # core_v0.15.0 (vendored) runs DeepEP with --moe-enable-deepep; --moe-flex-dispatcher-backend is later
    assert "--moe-enable-deepep" in words and "--moe-flex-dispatcher-backend" not in megatron_flags()
    assert "--overlap-moe-expert-parallel-comm" in words and "--delay-wgrad-compute" in words
    plain = {w[0] for w in _megatron_words(exported("deepseek-moe-mla", "megatron")[0].text)}
    assert {"--grad-reduce-in-bf16", "--moe-enable-deepep", "--overlap-moe-expert-parallel-comm"}.isdisjoint(plain)
    nemo = exported("qwen3-flex-overlap-bf16grad", "nemo")[0]
    lines = dict(line.split("=", 1) for line in nemo.text.splitlines() if not line.startswith("#"))
    assert lines["trainer.plugins.grad_reduce_in_fp32"] == "False" and lines["trainer.strategy.ddp.grad_reduce_in_fp32"] == "False"
    assert lines["model.config.moe_token_dispatcher_type"] == "flex" and lines["model.config.moe_enable_deepep"] == "True"
    assert lines["trainer.strategy.ddp.delay_wgrad_compute"] == "True"
    assert any("overlap_moe_expert_parallel_comm" in n for n in nemo.notes)
    default = dict(line.split("=", 1) for line in exported("deepseek-moe-mla", "nemo")[0].text.splitlines())
    assert default["trainer.plugins.grad_reduce_in_fp32"] == "True" and default["model.config.moe_token_dispatcher_type"] == "alltoall"
    titan = exported("qwen3-flex-overlap-bf16grad", "torchtitan@0.2")[0]
    assert "--parallelism.expert_parallel_comm_backend=deepep" in titan.text.splitlines()
    assert any("grad_reduce_dtype bf16" in n for n in titan.notes) and any("moe_a2a_overlap" in n for n in titan.notes)
    titan = exported("qwen3-flex-overlap-bf16grad", "torchtitan")[0]  # main: the dispatcher is the model config's
    assert "expert_parallel_comm_backend" not in torchtitan_classes("torchtitan")["ParallelismConfig"]
    assert "comm_backend" not in titan.text.replace("#", "\n#").split("\n--", 1)[1]
    assert any('comm_backend="deepep"' in n for n in titan.notes) and any("grad_reduce_dtype bf16" in n for n in titan.notes)
    ds = exported("qwen3-flex-overlap-bf16grad", "deepspeed")[0]
    assert json.loads(ds.text)["communication_data_type"] == "bf16"
    assert any("flex" in n for n in ds.notes) and any("moe_a2a_overlap" in n for n in ds.notes)


def test_a2a_overlap_where_megatron_refuses_it_is_a_note():
    m, c = _model("qwen3-30b-a3b", moe_a2a_overlap=True), load_cluster("dgx-h100-1024")
    export = export_settings("megatron", estimate_layout(m, c, tp=1, pp=2, ep=8, micro_batch=1, zero=1, gpus=32), m, c)
    assert any("needs virtual stages" in n for n in export.notes)


def test_sliding_window_exports_megatrons_window_flags():
    # Megatron-Core's window (left, right) spans keys i - left .. i + right: 128 keys is (127, 0); every
    # 2nd layer full (--window-attn-skip-freq 2); Transformer Engine refuses p2p CP with a window
    words = {w[0]: w[1:] for w in _megatron_words(exported("gpt-oss-window-cp", "megatron")[0].text)}
    assert words["--window-size"] == ["127,0"] and words["--window-attn-skip-freq"] == ["2"]
    # the value Megatron-Core's TransformerConfig documents and Transformer Engine compares with
    assert words["--cp-comm-type"] == ["all_gather"]
    assert "--window-size" not in {w[0] for w in _megatron_words(exported("gpt3-cp-interleaved", "megatron")[0].text)}


def _nemo_field_type(name: str) -> str:
    """The annotation of a vendored Megatron Core TransformerConfig field (nemo.txt's model.config lines)."""
    found = [line for line in _lines("nemo.txt") if re.match(rf"^{name}\s*:", line)]
    assert len(found) == 1, name
    return found[0].split(":", 1)[1].split("=")[0].strip()


def _nemo_run_parses() -> set[str]:
    """The annotation origins NeMo-Run's CLI parses an override's value into (vendored TypeParser table)."""
    return {line.split(":")[0] for line in _lines("nemo-run.txt") if re.match(r"^\w+: self\.parse_", line)}


def test_sliding_window_in_nemo_torchtitan_and_deepspeed():
    # gpt-oss-120b: a window of 128 keys, every 2nd layer (2, 4, ...) full attention; cp 2
    nemo = exported("gpt-oss-window-cp", "nemo")[0]
    lines = dict(line.split("=", 1) for line in nemo.text.splitlines() if not line.startswith("#"))
    assert lines["model.config.window_attn_skip_freq"] == "2"
    # Transformer Engine refuses p2p context parallelism with a window (as --cp-comm-type for megatron)
    assert lines["model.config.cp_comm_type"] == "all_gather"
    # window_size is Optional[Tuple[int, int]], which NeMo-Run's CLI has no parser for: a note, not an override
    assert _nemo_field_type("window_size") == "Optional[Tuple[int, int]]" and "tuple" not in _nemo_run_parses()
    assert {"int", "list", "Union", "Optional"} <= _nemo_run_parses()  # window_attn_skip_freq's type parses
    assert _nemo_field_type("window_attn_skip_freq") == "Optional[Union[int, List[int]]]"
    assert "model.config.window_size" not in lines
    window = "sliding-window attention of 128 keys (the query's own included) on all but every 2nd layer (layers 2, 4, ... full attention)"
    assert any(n.startswith(window) and "model.config.window_size = (127, 0)" in n for n in nemo.notes)
    titan = exported("gpt-oss-window-cp", "torchtitan@0.2")[0]
    assert any(n.startswith(window) and "model's own" in n for n in titan.notes)
    assert any(line.startswith(f"# {window}") for line in titan.text.splitlines())
    titan = exported("gpt-oss-window-cp", "torchtitan")[0]
    assert any(n.startswith(window) and "model config of the config function" in n for n in titan.notes)
    assert any(line.startswith(f"# {window}") for line in titan.text.splitlines())
    ds = exported("gpt-oss-window-cp", "deepspeed")[0]
    assert any(n.startswith(window) and "model's own code" in n for n in ds.notes)
    assert "window" not in ds.text  # the JSON stays the config's keys


def test_a_window_on_every_layer_writes_none_and_cp1_no_comm_type():
    # full_attention_every left out: every layer windowed, Megatron Core's window_attn_skip_freq None
    m, c = _model("gpt-oss-120b").model_copy(update={"full_attention_every": None}), load_cluster("dgx-h100-1024")
    lay = estimate_layout(m, c, tp=2, pp=1, ep=32, micro_batch=1, sequence_parallel=True, zero=1)
    nemo = export_settings("nemo", lay, m, c)
    lines = dict(line.split("=", 1) for line in nemo.text.splitlines() if not line.startswith("#"))
    assert lines["model.config.window_attn_skip_freq"] == "None" and "model.config.cp_comm_type" not in lines
    assert any(n.startswith("sliding-window attention of 128 keys (the query's own included) on every layer")
               for n in nemo.notes)


@pytest.mark.parametrize("kind", ("nemo", "torchtitan", "deepspeed"))
def test_no_window_lines_without_a_window(kind):
    for case in ("gpt3-cp-interleaved", "deepseek-moe-mla"):
        export, model = exported(case, kind)
        assert model.sliding_window is None
        assert not any("window" in n for n in export.notes)
        assert "window" not in export.text and "cp_comm_type" not in export.text


# --- clamped SwiGLU, linear biases, YaRN, CUDA graphs and TE's op fuser -----------------------------------

def _oss(**training):
    """gpt-oss-120b with its GPT-OSS fields said here (not read from the shipped config): swiglu_limit 7.0,
    biases on every linear layer, YaRN factor 32: 0.1 ln 32 + 1 = 1.347."""
    m = _model("gpt-oss-120b", **training)
    return m.model_copy(update={"swiglu_limit": 7.0, "linear_bias": True, "rope_mscale": 1.347})


def _export(kind: str, model, **layout):
    c = load_cluster("dgx-h100-1024")
    return export_settings(kind, estimate_layout(model, c, **(layout or dict(tp=2, pp=1, ep=32, micro_batch=1,
                                                                            sequence_parallel=True, zero=1))), model, c)


def _flag_lines(text: str) -> list[str]:
    return [line.removesuffix(" \\") for line in text.splitlines() if not line.startswith("#")]


def test_later_megatron_names_are_not_in_the_vendored_release():
    # what the notes say: these need a Megatron-Core newer than the vendored core_v0.15.0
    vendored = megatron_flags()
    assert "--use-transformer-engine-op-fuser" not in vendored and "full_iteration" not in vendored["--cuda-graph-impl"]
    assert "full_iteration" in vendored["--cuda-graph-scope"]  # core_v0.15.0's spelling of it
    # add_bias_linear defaults to True: Megatron has --disable-bias-linear and no --add-bias-linear
    assert "--disable-bias-linear" in vendored and "--add-bias-linear" not in vendored
    assert {"--activation-func-clamp-value", "--no-check-for-nan-in-loss-and-grad", "--glu-linear-offset",
            "--quick-geglu"} <= set(vendored)
    assert "use_transformer_engine_op_fuser" not in nemo_paths()["model.config"]
    assert {"activation_func_clamp_value", "add_bias_linear", "enable_cuda_graph", "cuda_graph_scope",
            "cuda_graph_impl"} <= nemo_paths()["model.config"]


def test_megatron_flags_of_gpt_oss_fields_graphs_and_op_fuser():
    export = _export("megatron", _oss(cuda_graph_impl="full_iteration", te_op_fuser=True))
    lines = _flag_lines(export.text)
    assert "--activation-func-clamp-value 7.0" in lines and "--swiglu" in lines
    assert "--disable-bias-linear" not in lines  # biases on: Megatron's default
    assert lines.index("--cuda-graph-impl full_iteration") + 1 == lines.index("--no-check-for-nan-in-loss-and-grad")
    assert "--use-transformer-engine-op-fuser" in lines
    # dropless MoE (no capacity factor) in a full-iteration graph: static shapes, a budget the spec does not hold
    assert any(n.startswith("cuda_graph_impl full_iteration with dropless MoE") and "--moe-expert-rank-capacity-factor"
               in n for n in export.notes)
    assert "--cuda-graph-impl full_iteration and --use-transformer-engine-op-fuser: Megatron-Core core_v0.18.0 or later; " \
           "before it, --cuda-graph-impl local --cuda-graph-scope full_iteration" in export.notes
    assert any(n.startswith("swiglu_limit 7: ") and "--quick-geglu --glu-linear-offset 1.0" in n for n in export.notes)
    assert any(n.startswith("rope_mscale 1.347 (YaRN)") and "--position-embedding-type yarn" in n for n in export.notes)
    assert "--position-embedding-type rope" in lines  # the only RoPE the vendored release has


def test_megatron_defaults_write_no_graph_fuser_or_clamp_flags():
    export = _export("megatron", _model("llama3.1-8b"), tp=2, pp=1, micro_batch=1)
    lines = _flag_lines(export.text)
    # biases unstated: as the parameter count has them, none in a SwiGLU model (Llama), so Megatron's
    # default add_bias_linear is turned off; a GeLU model (GPT-3) keeps Megatron's biases
    assert "--disable-bias-linear" in lines
    gpt3 = _flag_lines(_export("megatron", _model("gpt3-175b"), tp=8, pp=8, micro_batch=1).text)
    assert "--disable-bias-linear" not in gpt3 and "--no-bias-dropout-fusion" not in gpt3
    no_bias = _flag_lines(_export("megatron", _model("gpt3-175b").model_copy(update={"linear_bias": False}),
                                  tp=8, pp=8, micro_batch=1).text)
    assert "--disable-bias-linear" in no_bias  # stated false: Megatron's add_bias_linear turned off
    assert not any(line.startswith(("--cuda-graph-impl", "--use-transformer-engine-op-fuser", "--activation-func-clamp",
                                    "--no-check-for-nan")) for line in lines)
    assert not any(k in n for n in export.notes for k in ("graph", "fuser", "swiglu", "mscale"))
    local = _flag_lines(_export("megatron", _model("llama3.1-8b", cuda_graph_impl="local"), tp=2, pp=1, micro_batch=1).text)
    assert "--cuda-graph-impl local" in local and "--no-check-for-nan-in-loss-and-grad" not in local


def test_nemo_overrides_of_gpt_oss_fields_graphs_and_op_fuser():
    export = _export("nemo", _oss(cuda_graph_impl="full_iteration", te_op_fuser=True))
    lines = export.text.splitlines()
    for line in ("model.config.activation_func_clamp_value=7.0", "model.config.add_bias_linear=True",
                 "model.config.enable_cuda_graph=True", "model.config.cuda_graph_scope=full_iteration",
                 "model.config.use_transformer_engine_op_fuser=True"):
        assert line in lines, line
    assert not any(line.startswith("model.config.cuda_graph_impl=") for line in lines)
    # NeMo-Run parses Optional[float] and bool; activation_func (GPT-OSS's quick_gelu) is a Callable: a note
    assert _nemo_field_type("activation_func_clamp_value") == "Optional[float]"
    assert _nemo_field_type("activation_func") == "Callable" and "Callable" not in _nemo_run_parses()
    assert any("quick_gelu with glu_linear_offset 1.0" in n for n in export.notes)
    assert any("moe_expert_rank_capacity_factor" in n for n in export.notes)
    assert any(n.startswith("rope_mscale 1.347 (YaRN): NeMo's GPTConfig has no YaRN") for n in export.notes)
    local = _export("nemo", _model("llama3.1-8b", cuda_graph_impl="transformer_engine"), tp=2, pp=1, micro_batch=1)
    assert "model.config.cuda_graph_impl=transformer_engine" in local.text.splitlines()
    assert not any(k in local.text for k in ("add_bias_linear", "clamp", "enable_cuda_graph", "op_fuser"))


def test_torchtitan_and_deepspeed_say_they_have_no_such_settings():
    model = _oss(cuda_graph_impl="full_iteration", te_op_fuser=True)
    extras = ("RMSNorm (normalization), RoPE base 150000 (rope_theta), "  # configs/models/gpt-oss-120b.yaml
              "SwiGLU clamped at 7 (swiglu_limit), biases on every linear layer (linear_bias), "
              "YaRN RoPE, cos and sin x 1.347 (rope_mscale)")
    main = _export("torchtitan", model, tp=2, pp=1, ep=32, micro_batch=1, sequence_parallel=True, zero=3)
    assert f"{extras}: torchtitan has no CLI setting for them; the model config of the config function " \
           "(--module / --config) must set them" in main.notes
    # main graphs forward+backward (training.disable_cuda_graphs) but refuses it with the standard EP dispatcher
    assert "--training.disable_cuda_graphs" in main.text.splitlines() and any("_validate_cuda_graphs" in n for n in main.notes)
    titan = _export("torchtitan@0.2", model, tp=2, pp=1, ep=32, micro_batch=1, sequence_parallel=True, zero=3)
    assert f"{extras}: torchtitan has no job_config setting for them; the model's own code and flavor " \
           "(--model.name / --model.flavor) must set them" in titan.notes
    assert "cuda_graph_impl full_iteration (Megatron's CUDA graphs) has no torchtitan equivalent: job_config.py has " \
           "no CUDA-graph setting" in titan.notes
    assert any(n.startswith("te_op_fuser (Transformer Engine's op fuser") for n in titan.notes)
    assert not any("graph" in line or "fuser" in line for line in _flag_lines(titan.text))
    ds = _export("deepspeed", model)
    assert f"{extras}: not ds_config keys; the model's own code sets them" in ds.notes
    assert "cuda_graph_impl full_iteration is not a ds_config key: CUDA graphs of the model's step are the training " \
           "script's" in ds.notes
    assert "te_op_fuser is not a ds_config key: Transformer Engine layers in the model code" in ds.notes
    plain = _export("deepspeed", _model("llama3.1-8b"), tp=2, pp=1, micro_batch=1)
    assert not any("graph" in n or "fuser" in n or "swiglu" in n for n in plain.notes)


def test_megatron_capacity_factor_pads_as_the_planner_prices_it():
    # a capacity factor is priced as drop-and-pad (static shapes, no host sync per MoE layer):
    # the export asks Megatron for both, and a SwiGLU MoE model without stated biases disables them
    # (TEGroupedMLP refuses biases with the default bias-dropout fusion)
    model = _model("mixtral-8x7b")
    model = model.model_copy(update={"moe": model.moe.model_copy(update={"capacity_factor": 1.0})})
    lines = _flag_lines(_export("megatron", model, tp=1, pp=1, micro_batch=1, ep=8).text)
    assert "--moe-expert-capacity-factor 1.0" in lines and "--moe-pad-expert-input-to-capacity" in lines
    assert "--disable-bias-linear" in lines
    nemo = _export("nemo", model, tp=1, pp=1, micro_batch=1, ep=8).text
    assert "model.config.moe_expert_capacity_factor=1.0" in nemo and "model.config.moe_pad_expert_input_to_capacity=True" in nemo


def test_the_export_builds_the_model_the_spec_names():
    """Issue 30: pasted, the Megatron line must not fall back to LayerNorm and a RoPE base of 10,000.
    Llama 3.1 70B's config.json: rms_norm_eps (RMSNorm), rope_theta 500000, rope_scaling llama3 x8;
    Qwen3's attention normalises q and k (transformers Qwen3Attention q_norm/k_norm)."""
    llama = CliRunner().invoke(app, ["search", "llama3.1-70b", "dgx-h100-1024", "--gpus", "256", "--tp", "8",
                                     "--export", "megatron"]).stdout
    for flag in ("--normalization RMSNorm", "--rotary-base 500000", "--use-rope-scaling", "--rope-scaling-factor 8.0"):
        assert flag in llama, flag
    qwen = CliRunner().invoke(app, ["search", "qwen3-30b-a3b", "dgx-h100-1024", "--gpus", "16", "--export", "nemo"]).stdout
    for override in ("model.config.normalization=RMSNorm", "model.config.rotary_base=1000000",
                     "model.config.qk_layernorm=True"):
        assert override in qwen, override
    # ZeRO-1 (DDP in torchtitan: dp_shard 1) with ep 8 > cp * tp = 1 is a layout torchtitan does not run:
    # an error, exit 2, no settings
    refused = CliRunner().invoke(app, ["estimate", "qwen3-30b-a3b", "dgx-h100-1024", "--gpus", "16", "--tp", "1", "--pp", "1",
                                       "--ep", "8", "--micro-batch", "1", "--zero", "1", "--export", "torchtitan"])
    assert refused.exit_code == 2 and "torchtitan 0.3.0 builds the expert mesh from dp_shard*cp*tp: ep must divide it" \
        in refused.output and "--parallelism" not in refused.stdout
    m, c = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100-1024")
    titan = export_settings("torchtitan", estimate_layout(m, c, gpus=16, tp=1, pp=1, ep=8, micro_batch=1, zero=3), m, c).text
    assert "RMSNorm (normalization), RoPE base 1e+06 (rope_theta), a norm on queries and keys (qk_norm)" in titan
    gpt3 = CliRunner().invoke(app, ["search", "gpt3-175b", "dgx-a100-1024", "--export", "megatron"]).stdout
    assert "--normalization" not in gpt3 and "--rotary-base" not in gpt3  # LayerNorm and learned positions: the defaults


@pytest.mark.parametrize("kind", TITAN_FILES)
@pytest.mark.parametrize("case", TITAN_ZERO3)
def test_torchtitan_refuses_what_it_cannot_run(case, kind):
    # torchtitan v0.2.2 parallel_dims.py: efsdp = dp_shard * cp * tp // (etp * ep) must be whole; with ZeRO-1
    # (DDP, dp_shard 1) these cases have cp * tp < ep, e.g. deepseek: tp 2, cp 1, ep 64
    model, cluster, training, given = CASES[case]
    m, c = _model(model, **training), load_cluster(cluster)
    scored = estimate_layout(m, c, **given)
    lay = scored.layout
    assert (lay["cp"] * lay["tp"]) % (lay["ep"] * lay["etp"]) and lay["zero"] < 2
    with pytest.raises(SpecError, match=r"ep(\*etp)? (must divide it|to divide dp_shard\*cp\*tp)") as exc:
        export_settings(kind, scored, m, c)
    assert exc.value.exit_code == 2
    for kind in ("megatron", "nemo"):  # the others fold ep into dp
        export_settings(kind, scored, m, c)


def test_torchtitan_runs_etp_tp_or_1_only():
    # parallel_dims.py v0.2.2 line 59: assert etp == tp or etp == 1; maverick at tp 8 with etp 8 runs (ZeRO-2)
    m, c = _model("llama4-maverick"), load_cluster("dgx-h100-16384")
    ok = estimate_layout(m, c, tp=8, pp=4, ep=16, etp=8, micro_batch=1, sequence_parallel=True, zero=2, gpus=1024)
    assert "--parallelism.expert_tensor_parallel_degree=8" in export_settings("torchtitan@0.2", ok, m, c).text.splitlines()
    bad = estimate_layout(m, c, tp=8, pp=4, ep=16, etp=2, micro_batch=1, sequence_parallel=True, zero=2, gpus=1024)
    with pytest.raises(SpecError, match="torchtitan v0.2.2 runs expert tensor parallelism only as etp = tp or etp = 1"):
        export_settings("torchtitan@0.2", bad, m, c)
    # 0.3.0 and main (b5bcd76): ParallelismConfig has no expert_tensor_parallel_degree; etp 1 runs, etp 8 is refused
    one = estimate_layout(m, c, tp=8, pp=4, ep=16, etp=1, micro_batch=1, sequence_parallel=True, zero=2, gpus=1024)
    for kind, name in (("torchtitan", "torchtitan 0.3.0"), ("torchtitan@main", "torchtitan main")):
        assert "expert_tensor_parallel_degree" not in torchtitan_classes(kind)["ParallelismConfig"]
        with pytest.raises(SpecError, match=f"{name} has no expert tensor parallelism"):
            export_settings(kind, ok, m, c)
        assert "--parallelism.expert_parallel_degree=16" in export_settings(kind, one, m, c).text.splitlines()


def test_torch_compile_is_torchtitans_compile_enable_and_a_note_elsewhere():
    # job_config.py Compile.enable (v0.2.2) and configs.py CompileConfig.enable (0.3.0, main): "Whether to apply
    # torch.compile"; the Megatron-Core frameworks fuse their blocks with Transformer Engine instead
    for kind in ("torchtitan", "torchtitan@main", "torchtitan@0.2"):
        export, _ = exported("llama8-compile-fsdp", kind)
        assert "--compile.enable" in _flag_lines(export.text), kind
        eager = export_settings(kind, estimate_layout(_model("llama3.1-8b"), load_cluster("dgx-h100-1024"),
                                                      tp=1, pp=1, micro_batch=2, zero=3),
                                _model("llama3.1-8b"), load_cluster("dgx-h100-1024"))
        assert not any("compile" in line for line in _flag_lines(eager.text)), kind  # torchtitan's default: eager
    for kind, name in (("megatron", "Megatron-LM"), ("nemo", "NeMo (Megatron Core)"),
                       ("megatron-bridge", "Megatron-Bridge (Megatron Core)")):
        export, _ = exported("llama8-compile-fsdp", kind) if kind != "megatron-bridge" else (None, None)
        if export is None:
            m = _model("llama3.1-8b", torch_compile=True)
            c = load_cluster("dgx-h100-1024")
            export = export_settings(kind, estimate_layout(m, c, tp=1, pp=1, micro_batch=2, zero=1), m, c)
        assert any(n.startswith(f"torch_compile: {name} compiles no transformer block") for n in export.notes), kind
        assert "compile" not in " ".join(_flag_lines(export.text)).replace("torch_compile", ""), kind


def test_torchtitan_stack_selective_is_its_op_level_checkpointing():
    # Priced under the torchtitan stack, recompute selective is torchtitan's op-level policy (selective_ac: op):
    # main's `activation-checkpoint:selective` subcommand is SelectiveAC ("Per-op selective activation
    # checkpointing"), v0.2.2's job_config says selective_ac_option "'int' = ac every positive int layer or 'op'"
    m = _model("llama3-8b").model_copy(update={"training": _model("llama3-8b").training.model_copy(
        update={"stack": load_model("llama3-8b").training.stack.model_copy(update={"selective_ac": "op"})})})
    c = load_cluster("dgx-h100-1024")
    lay = estimate_layout(m, c, tp=1, pp=1, micro_batch=1, zero=3, recompute="selective")
    main = export_settings("torchtitan@main", lay, m, c)
    assert "activation-checkpoint:selective" in _flag_lines(main.text)
    old = _flag_lines(export_settings("torchtitan@0.2", lay, m, c).text)
    assert "--activation_checkpoint.mode=selective" in old and "--activation_checkpoint.selective_ac_option=op" in old
    # under Megatron's module policy it has no torchtitan equivalent: mode none and a note, as before
    plain = _model("llama3-8b")
    mega = export_settings("torchtitan@0.2", estimate_layout(plain, c, tp=1, pp=1, micro_batch=1, zero=3,
                                                              recompute="selective"), plain, c)
    assert "--activation_checkpoint.mode=none" in _flag_lines(mega.text)
    assert any("core-attention recompute" in n for n in mega.notes)


def test_torchtitan_selective_says_which_layers_the_plan_priced_otherwise():
    # a MoE model's layers are priced with the module list; torchtitan's op policy runs on them all: said
    m = _model("mixtral-8x7b").model_copy(update={"training": _model("mixtral-8x7b").training.model_copy(
        update={"stack": load_model("mixtral-8x7b").training.stack.model_copy(update={"selective_ac": "op"})})})
    c = load_cluster("dgx-h100-1024")
    export = export_settings("torchtitan@main", estimate_layout(m, c, gpus=64, tp=2, pp=1, ep=4, micro_batch=1, zero=3,
                                                                recompute="selective"), m, c)
    assert "activation-checkpoint:selective" in _flag_lines(export.text)
    assert any(n.startswith("recompute=selective: torchtitan's op-level policy runs on every layer; the plan priced "
                            "its moe layers") for n in export.notes)


def test_fp8_recipe_is_each_frameworks_own_name():
    # Megatron core_v0.15.0 --fp8-recipe choices tensorwise, delayed, mxfp8, blockwise (arguments.py); NeMo
    # MegatronMixedPrecision fp8_recipe; Megatron-Bridge's registered mixed-precision recipes (mixed_precision.py):
    # bf16_with_fp8_current_scaling_mixed, bf16_with_fp8_subchannel_scaling_mixed
    m, c = _model("llama3.1-8b", precision="fp8", fp8_recipe="tensorwise"), load_cluster("dgx-h100-1024")
    lay = estimate_layout(m, c, tp=2, pp=1, micro_batch=1, zero=1)
    assert "--fp8-recipe tensorwise" in export_settings("megatron", lay, m, c).text
    assert "trainer.plugins.fp8_recipe=tensorwise" in export_settings("nemo", lay, m, c).text
    assert "mixed_precision=bf16_with_fp8_current_scaling_mixed" in export_settings("megatron-bridge", lay, m, c).text
    block = _model("llama3.1-8b", precision="fp8", fp8_recipe="blockwise")
    assert "mixed_precision=bf16_with_fp8_subchannel_scaling_mixed" in export_settings("megatron-bridge", lay, block, c).text
    assert "--fp8-recipe delayed" in export_settings("megatron", lay, _model("llama3.1-8b", precision="fp8"), c).text
    # torchao's Float8 tensorwise is current scaling: a delayed plan says what it becomes
    titan = export_settings("torchtitan@0.2", estimate_layout(block, c, tp=2, pp=1, micro_batch=1, zero=3), block, c)
    assert any(n.startswith("fp8_recipe blockwise: torchao's Float8 has no blockwise scaling") for n in titan.notes)
