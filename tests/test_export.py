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
