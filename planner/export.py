"""Launch settings of a layout. So far: Megatron-LM's flags for an uneven pipeline split.

Megatron-LM (megatron/training/arguments.py, core_v0.13+; transformer_block.py
get_num_layers_to_build): --decoder-first/last-pipeline-num-layers give the layers of the first
and the last pipeline rank over all its virtual stages, the middle ranks share the rest evenly and
each rank's chunks are equal (first and last divisible by vpp). Any other split is spelled with
--pipeline-model-parallel-layout (pipeline_parallel_layer_layout.py): virtual stages separated by
"|" in the order vpp rank x pp + pp rank (the schedule order of `stage_layers`), "t" a decoder
layer, "E" the embedding, "L" the loss, "t*n" n layers.
"""
from __future__ import annotations


def is_even(stage_layers) -> bool:
    return len(set(stage_layers)) == 1


def megatron_first_last(stage_layers, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first, last) when --decoder-first/last-pipeline-num-layers produce this split, else None."""
    n = list(stage_layers)
    L = sum(n)
    rank = [sum(n[j * pp + r] for j in range(vpp)) for r in range(pp)]
    first, last = rank[0], rank[-1]
    middle = pp - 2
    if pp < 3 or first % vpp or last % vpp or (L - first - last) % middle:
        return None
    per_rank = (L - first - last) // middle
    if per_rank % vpp:
        return None
    built = [first // vpp if r == 0 else last // vpp if r == pp - 1 else per_rank // vpp
             for j in range(vpp) for r in range(pp)]
    return (first, last) if built == n else None


def megatron_layout(stage_layers) -> str:
    """--pipeline-model-parallel-layout of a split, runs of equal middle stages as "(X|)*n":
    [0, 1 x 126, 0] -> 'E|(t|)*126L', [7, 8 x 14, 7] -> 'Et*7|(t*8|)*14t*7L'."""
    def text(k: int) -> str:
        return "t" if k == 1 else f"t*{k}" if k else ""

    n = list(stage_layers)
    out = ["E" + text(n[0]) + "|"]
    k = 1
    while k < len(n) - 1:
        j = k
        while j < len(n) - 1 and n[j] == n[k]:
            j += 1
        out.append(f"({text(n[k])}|)*{j - k}" if j - k > 1 else text(n[k]) + "|")
        k = j
    out.append(text(n[-1]) + "L")
    return "".join(out)


def megatron_pipeline_args(stage_layers, pp: int, vpp: int) -> list[str]:
    """The Megatron-LM flags that state an uneven split (none for an even one)."""
    if pp < 2 or is_even(stage_layers):
        return []
    fl = megatron_first_last(stage_layers, pp, vpp)
    if fl is not None:
        return ["--decoder-first-pipeline-num-layers", str(fl[0]), "--decoder-last-pipeline-num-layers", str(fl[1])]
    return ["--pipeline-model-parallel-layout", megatron_layout(stage_layers)]


def runs(stage_layers) -> str:
    """`7 8x14 7`: layers per virtual stage, runs of equal counts written once with their length."""
    out, k = [], 0
    n = list(stage_layers)
    while k < len(n):
        j = k
        while j < len(n) and n[j] == n[k]:
            j += 1
        out.append(str(n[k]) if j - k == 1 else f"{n[k]}x{j - k}")
        k = j
    return " ".join(out)
