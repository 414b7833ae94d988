"""planner/export/frameworks.py: each restriction on a hand-made one-row layout, and every source line vendored
(tests/data/frameworks/restrictions.txt, extracted by tests/data/frameworks/extract.py's last block)."""
import re
from pathlib import Path

import numpy as np
import pytest

from planner.export import EXPORTS
from planner.export.frameworks import (FRAMEWORK_EXPORT, FRAMEWORK_STACK, RESTRICTIONS, framework_mask,
                                       framework_names, restrictions)
from planner.layout.space import single_layout

DATA = Path(__file__).parents[1] / "data" / "frameworks"
ROOT = Path(__file__).parents[2]


def row(**v):
    base = dict(dp=8, tp=1, pp=1, cp=1, micro_batch=1, num_microbatches=8)
    return single_layout(**(base | v))


def check(framework, ok, reason="", **v):
    got_ok, got_reason = framework_mask(framework, row(**v))
    assert (bool(got_ok[0]), str(got_reason[0])) == (ok, reason), (framework, v)


def test_names_stacks_exports():
    assert framework_names() == ("megatron", "megatron-bridge", "nemo", "torchtitan", "torchtitan@0.2", "deepspeed")
    assert set(FRAMEWORK_STACK) == set(FRAMEWORK_EXPORT) == set(framework_names())
    assert set(FRAMEWORK_EXPORT.values()) <= set(EXPORTS)
    for stack in FRAMEWORK_STACK.values():
        assert (ROOT / "configs" / "stacks" / f"{stack}.yaml").exists(), stack
    with pytest.raises(ValueError, match="unknown framework"):
        framework_mask("jax", row())


MEG_VPP = "Megatron-LM's interleaved schedule (vpp > 1) needs pp > 1"
MEG_SP = "Megatron-LM turns sequence parallelism off when tp is 1"
CORE_INTERLEAVE = "Megatron Core's interleaved schedule (vpp > 1) needs the micro-batches per step to be a multiple of pp"


def test_megatron_vpp_needs_pp():
    # arguments.py core_v0.15.0: assert args.pipeline_model_parallel_size > 1 (overlap_p2p_comm on by default)
    check("megatron", False, MEG_VPP, vpp=2, pp=1, num_microbatches=8)
    check("megatron", True, pp=2, vpp=2, num_microbatches=8)


def test_megatron_sequence_parallel_needs_tp():
    check("megatron", False, MEG_SP, tp=1, sequence_parallel=True)
    check("megatron", True, tp=2, sequence_parallel=True)
    check("megatron", True, tp=1, sequence_parallel=False)


@pytest.mark.parametrize("framework", ["megatron", "megatron-bridge", "nemo"])
def test_core_interleaving_needs_a_multiple_of_pp(framework):
    # microbatch group = pp (model_parallel_config.py); schedules.py: m >= pp and m % pp not in (0, pp)
    check(framework, False, CORE_INTERLEAVE, pp=4, vpp=2, num_microbatches=6)  # remainder 2 < pp
    check(framework, False, CORE_INTERLEAVE, pp=4, vpp=2, num_microbatches=2)  # fewer than pp
    check(framework, True, pp=4, vpp=2, num_microbatches=8)
    check(framework, True, pp=4, vpp=1, num_microbatches=6)  # no interleaving: no group
    check("deepspeed", True, pp=4, vpp=1, num_microbatches=6)


def test_megatron_breaks_two_at_once():
    ok, reason = framework_mask("megatron", row(pp=1, vpp=2, tp=1, sequence_parallel=True))
    assert not ok[0] and reason[0] == MEG_VPP + "; " + MEG_SP


def test_torchtitan_02_etp_is_tp_or_1():
    msg = "torchtitan v0.2.2 runs expert tensor parallelism only as etp = tp or etp = 1"
    check("torchtitan@0.2", False, msg, dp=8, tp=4, ep=2, etp=2, zero=3)
    check("torchtitan@0.2", True, dp=8, tp=4, ep=2, etp=4, zero=3)
    check("torchtitan@0.2", True, dp=8, tp=4, ep=2, etp=1, zero=3)


def test_torchtitan_02_expert_mesh():
    msg = ("torchtitan v0.2.2 builds the expert mesh from dp_shard*cp*tp: ep*etp must divide it "
           "(dp_shard = dp with ZeRO-2/3, FSDP; 1 with ZeRO-0/1, DDP)")
    check("torchtitan@0.2", False, msg, dp=8, tp=2, ep=4, zero=0)  # DDP: dp_shard 1, 1*1*2 = 2
    check("torchtitan@0.2", True, dp=8, tp=2, ep=4, zero=3)  # FSDP: 8*1*2 = 16
    check("torchtitan@0.2", True, dp=8, tp=2, cp=2, ep=4, zero=0)  # 1*2*2 = 4


def test_torchtitan_main_no_etp_and_ep_divides():
    etp = "torchtitan main has no expert tensor parallelism (ParallelismConfig has expert_parallel_degree only)"
    ep = "torchtitan main needs ep to divide dp_shard*cp*tp (dp_shard = dp with ZeRO-2/3, FSDP; 1 with ZeRO-0/1, DDP)"
    check("torchtitan", False, etp, dp=8, tp=2, ep=2, etp=2, zero=3)
    check("torchtitan", False, ep, dp=8, tp=2, ep=4, zero=0)
    check("torchtitan", True, dp=8, tp=2, ep=4, zero=2)
    # v0.2.2 ran etp = tp: the same layout is fine there
    check("torchtitan@0.2", True, dp=8, tp=2, ep=2, etp=2, zero=3)


def test_deepspeed_pipeline_refuses_zero_2_3():
    msg = "DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 with pipeline parallelism"
    for zero in (2, 3):
        check("deepspeed", False, msg, pp=2, zero=zero)
        check("deepspeed", True, pp=1, zero=zero)
    check("deepspeed", True, pp=2, zero=1)
    check("megatron", True, pp=2, zero=3)  # Megatron FSDP: a mapping, no refusal


def test_vectorised_over_rows():
    ok, reason = framework_mask("deepspeed", single_layout.__globals__["Layouts"](**{
        k: np.concatenate([getattr(row(pp=2, zero=3), k), getattr(row(pp=1, zero=3), k)]) for k in row().__dataclass_fields__}))
    assert ok.tolist() == [False, True] and reason[1] == "" and reason.dtype.kind == "U"


def _vendored() -> dict[tuple[str, str, str], list[str]]:
    out, key = {}, None
    for line in (DATA / "restrictions.txt").read_text().splitlines():
        m = re.match(r"^## (\S+) (\S+) (\S+):([\d,]+)$", line)
        if m:
            key = m.group(1, 2, 3)
        elif key and not line.startswith("# "):
            out.setdefault(key, []).append(line)
    return out


def test_every_restriction_source_is_quoted():
    vendored = _vendored()
    for r in RESTRICTIONS:
        assert r.sources and r.message and r.frameworks
        assert set(r.frameworks) <= set(framework_names())
        for s in r.sources:
            assert s.quote in vendored[(s.repo, s.rev, s.path)], (r.message, s)
    # the vendored file has nothing that no restriction quotes
    quoted = {(s.repo, s.rev, s.path, s.quote) for r in RESTRICTIONS for s in r.sources}
    assert {(*k, q) for k, qs in vendored.items() for q in qs} == quoted
    assert all(restrictions(f) for f in framework_names())


def test_torchtitan_main_parallelism_config_has_no_etp():
    # the no-etp restriction rests on an absence: ParallelismConfig at main b5bcd76 (torchtitan-main.txt)
    lines = (DATA / "torchtitan-main.txt").read_text().splitlines()
    k = lines.index("class ParallelismConfig:")
    end = next(i for i in range(k + 1, len(lines)) if lines[i].startswith("class "))
    fields = [l.strip() for l in lines[k + 1:end]]
    assert "expert_parallel_degree: int = 1" in fields
    assert not any(f.startswith("expert_tensor_parallel") for f in fields)


# --- issue 38: what the framework refuses at start-up (or runs as another layout) is never proposed or exported

TITAN_ZERO1 = ("torchtitan has no ZeRO-1: its data parallelism is DDP (data_parallel_replicate_degree, every state "
               "replicated: ZeRO-0) or FSDP (data_parallel_shard_degree: ZeRO-2/3)")
TITAN_FP16 = "torchtitan has no FP16 training: its mixed_precision_param is bfloat16 or float32"
DS_CP = ("DeepSpeed has no ring or all-gather context parallelism (cp > 1): its sequence parallelism is "
         "Ulysses' all-to-alls (DistributedAttention), which these layouts are not priced with")
DS_VPP = "DeepSpeed's pipeline runs one stage per rank (TrainSchedule, no interleaved schedule): vpp must be 1"
DS_MOE = "DeepSpeed refuses its native MoE layers with ZeRO-3"


@pytest.mark.parametrize("framework", ["torchtitan", "torchtitan@0.2"])
def test_torchtitan_has_no_zero_1(framework):
    check(framework, False, TITAN_ZERO1, zero=1)
    for zero in (0, 2, 3):
        check(framework, True, zero=zero)


def test_deepspeed_runs_neither_cp_nor_vpp():
    check("deepspeed", False, DS_CP, cp=2, dp=4)
    check("deepspeed", False, DS_VPP, pp=2, vpp=2, dp=4)
    check("deepspeed", True, pp=2, dp=4)


def _model(name, **training):
    from planner.specs.loading import load_model

    m = load_model(name)
    return m.model_copy(update={"training": m.training.model_copy(update=training)}) if training else m


def test_restrictions_of_the_model_apply_when_it_is_given():
    fp16 = _model("llama3-8b", precision="fp16")
    for framework in ("torchtitan", "torchtitan@0.2"):
        assert framework_mask(framework, row(), fp16)[1].tolist() == [TITAN_FP16]
        assert framework_mask(framework, row(), _model("llama3-8b"))[0].tolist() == [True]
        assert framework_mask(framework, row())[0].tolist() == [True]  # no model: layout checks only
    mixtral = _model("mixtral-8x7b")
    assert framework_mask("deepspeed", row(zero=3, ep=8), mixtral)[1].tolist() == [DS_MOE]
    assert framework_mask("deepspeed", row(zero=2, ep=8), mixtral)[0].tolist() == [True]
    assert framework_mask("deepspeed", row(zero=3), _model("llama3-8b"))[0].tolist() == [True]


@pytest.mark.parametrize("framework, bad", [
    ("torchtitan", lambda l: l.zero == 1),
    ("deepspeed", lambda l: (l.cp > 1) | (l.vpp > 1) | ((l.pp > 1) & (l.zero >= 2))),
])
def test_a_framework_search_never_proposes_what_the_framework_refuses(framework, bad):
    # found: --framework torchtitan recommended ZeRO-1, --framework deepspeed cp 2 and vpp 6 (Llama 3 70B, 64 H100s)
    from planner.search import framework_layouts, space_for
    from planner.specs.loading import load_model

    layouts = framework_layouts(framework, space_for(load_model("llama3-70b"), 64))
    assert len(layouts) and not bad(layouts).any()


def test_refuse_unrunnable_is_exit_2_naming_the_check():
    # what an export calls before writing settings (wired into planner/export/__init__.py export_settings: not yet)
    from planner.errors import SpecError
    from planner.export.frameworks import refuse_unrunnable

    with pytest.raises(SpecError, match="deepspeed cannot run this layout: DeepSpeed has no ring") as exc:
        refuse_unrunnable("deepspeed", row(cp=2, dp=4), _model("llama3-8b"))
    assert exc.value.exit_code == 2 and exc.value.path == "--export"
    with pytest.raises(SpecError, match="DeepSpeed refuses its native MoE layers with ZeRO-3"):
        refuse_unrunnable("deepspeed", row(zero=3, ep=8), _model("mixtral-8x7b"))
    refuse_unrunnable("deepspeed", row(pp=2, dp=4, zero=1), _model("llama3-8b"))  # runs: no error
