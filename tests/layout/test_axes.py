"""The axis registry (planner/layout/axes.py): every generated piece follows it, and a new axis declared
there (here the context-parallel degree) reaches the layout arrays, the enumeration, the process
groups, the tie-break, the plan-file schema, the sweep columns, the CLI options and the printing
without touching any other module."""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.layout.axes import AXES, RULES, axis, SpaceContext, layout_assignments, layout_cell, layout_summary
from planner.check import PlanLayout, plan_layout_model
from planner.cli.main import app
from planner.cli.common import axis_params
from planner.errors import SpecError
from planner.layout.space import Layouts, SpaceLimits, derive_dp, enumerate_layouts, layouts_class, process_group, tiebreak_rank
from planner.sweep import COLUMN_NAMES, ConstraintsSpec
from planner.sweep.rows import layout_column_specs

CP_RULE = next(r for r in RULES if r.name == "cp_divides_sequence")
TOY = AXES  # cp sits after pp, as Megatron lists its parallel sizes


def small_space(axes=AXES, rules=RULES, gpus=8, seq_len=4096, limits=None):
    return enumerate_layouts(gpus=gpus, layers=4, heads=8, kv_heads=8, global_batch=8, seq_len=seq_len,
                             axes=axes, rules=rules, limits=limits)


# --- what the shipped registry generates ----------------------------------------------------------

def test_layouts_has_one_column_per_axis():
    assert tuple(Layouts.__dataclass_fields__) == tuple(a.name for a in AXES)


def test_every_axis_reaches_cli_plan_file_sweep_file_and_csv():
    help_text = CliRunner().invoke(app, ["search", "--help"], env={"COLUMNS": "200"}).output
    estimate_help = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "200"}).output
    for a in AXES:
        if a.flag:
            assert a.flag in help_text and a.name in ConstraintsSpec.model_fields, a.name
        if a.given:
            assert a.name in PlanLayout.model_fields and a.flag in estimate_help, a.name
        assert (a.name in COLUMN_NAMES) == a.csv, a.name


def test_layouts_fill_defaults_but_not_what_has_none():
    lay = Layouts(dp=np.array([2]), tp=np.array([4]), pp=np.array([8]), micro_batch=np.array([1]),
                  num_microbatches=np.array([16]))
    assert (lay.vpp[0], lay.recompute[0], lay.sequence_parallel[0], lay.zero[0], lay.power_cap[0]) == (1, 0, 0, 0, 0)
    assert lay.gpus[0] == 2 * 4 * 8
    with pytest.raises(TypeError, match="needs the dp column"):
        Layouts(tp=np.array([8]), pp=np.array([8]), micro_batch=np.array([1]), num_microbatches=np.array([1]))


def test_tie_break_follows_the_declared_order():
    # three rows that tie on everything but tp, pp and zero: tp first, then pp, then zero
    lay = Layouts(dp=np.array([4, 4, 2]), tp=np.array([1, 1, 2]), pp=np.array([2, 2, 2]),
                  micro_batch=np.array([1, 1, 1]), zero=np.array([3, 1, 0]), num_microbatches=np.array([1, 1, 1]))
    assert tiebreak_rank(lay).tolist() == [1, 0, 2]


def test_process_groups_follow_megatron_rank_order():
    # tp 2, dp 4, pp 8: tp members are adjacent ranks, dp members tp = 2 apart, pp members tp*dp = 8 apart
    lay = Layouts(dp=np.array([4]), tp=np.array([2]), pp=np.array([8]), micro_batch=np.array([1]),
                  num_microbatches=np.array([8]))
    assert [tuple(int(x[0]) for x in process_group(lay, g)) for g in ("tp", "dp", "pp")] == [(2, 1), (4, 2), (8, 8)]


def test_printing_reads_the_registry():
    row = dict(dp=32, tp=4, pp=8, micro_batch=1, vpp=6, recompute="none", sequence_parallel=True, zero=1,
               num_microbatches=48)
    assert layout_cell(row) == "dp32 tp4 pp8 mb1 vpp6"
    assert layout_cell({**row, "vpp": 1}) == "dp32 tp4 pp8 mb1"  # vpp at its default is left out
    # micro-batches per step by their name (a bare `m=48` was never explained)
    assert layout_summary(row) == "dp32 tp4 pp8 mb1 vpp6 recompute=none sp=True zero=1 num_microbatches=48"
    assert layout_assignments(row) == "dp=32 tp=4 pp=8 micro_batch=1 vpp=6 recompute=none sequence_parallel=true zero=1"


@pytest.mark.parametrize("name, value, message", [
    ("tp", 0, "must be positive, got 0"), ("tp", 200_000, "must be at most 100,000, got 200000"),
    ("recompute", "some", "unknown mode 'some'"), ("zero", 4, "ZeRO stage 4 does not exist"),
])
def test_axis_domains(name, value, message):
    a = next(a for a in AXES if a.name == name)
    assert a.problem(value) == message


def test_degrees_must_multiply_to_the_gpus():
    assert derive_dp(64, {"tp": 8, "pp": 2, "dp": None}, gpus_said="--gpus is 64") == 4
    with pytest.raises(SpecError, match=r"dp\*tp\*pp = 2\*8\*8 = 128, but --gpus is 64"):
        derive_dp(64, {"tp": 8, "pp": 8, "dp": 2}, gpus_said="--gpus is 64")
    with pytest.raises(SpecError, match=r"tp\*pp = 56 does not divide the 1024 GPUs"):
        derive_dp(1024, {"tp": 8, "pp": 7, "dp": None}, gpus_said="--gpus is 1024")


# --- adding an axis: the registry alone -------------------------------------------------------------

def test_a_new_axis_reaches_the_layout_arrays_and_the_enumeration():
    lay = small_space(TOY, RULES)
    assert "cp" in lay.__dataclass_fields__ and lay.row(0)["cp"] == 1
    assert np.all(lay.dp * lay.tp * lay.pp * lay.cp == 8)
    # With ZeRO fixed (it shards over dp*cp, so cp also opens ZeRO stages), cp only takes GPUs: the
    # rows with cp = c are the cp = 1 rows of the space on 8 / c GPUs (cp 1, 2, 4, 8 divide 4096 / 2)
    no_zero = SpaceLimits(zero=0)
    lay = small_space(limits=no_zero)
    for c in (1, 2, 4, 8):
        assert int((lay.cp == c).sum()) == int((small_space(gpus=8 // c, limits=no_zero).cp == 1).sum()), c


def test_a_new_axis_rule_prunes_the_enumeration():
    # seq_len 12 (and no floor on tokens per cp rank): 2*cp must divide 12, so cp 1 and 2 only
    # (cp 4 would need 8 | 12)
    lay = small_space(TOY, RULES, seq_len=12, limits=SpaceLimits(min_cp_tokens=1))
    assert set(lay.cp.tolist()) == {1, 2}
    # by default a cp rank keeps at least 512 tokens: 4096 / 512 = 8, 2048 / 512 = 4
    assert set(small_space(seq_len=4096).cp.tolist()) == {1, 2, 4, 8}
    assert set(small_space(seq_len=2048).cp.tolist()) == {1, 2, 4}
    # a fixed cp is taken even below that floor (seq 2048, cp 8: 256 tokens per rank)
    assert set(small_space(seq_len=2048, limits=SpaceLimits(cp=8)).cp.tolist()) == {8}


def test_a_new_axis_takes_its_place_in_the_rank_order_and_the_tie_break():
    cls = layouts_class(TOY)
    lay = cls(dp=np.array([2, 2]), tp=np.array([2, 2]), pp=np.array([2, 2]), cp=np.array([2, 1]),
              micro_batch=np.array([1, 2]), num_microbatches=np.array([4, 2]))
    # rank order tp, cp, dp, pp: cp members tp = 2 apart, dp members tp*cp apart, pp tp*cp*dp apart
    assert process_group(lay, "cp", TOY)[1].tolist() == [2, 2]
    assert process_group(lay, "dp", TOY)[1].tolist() == [4, 2]
    assert process_group(lay, "pp", TOY)[1].tolist() == [8, 4]
    # cp is the third tie-break key (after tp and pp): the cp 1 row wins over a smaller micro-batch
    assert tiebreak_rank(lay, TOY).tolist() == [1, 0]


def test_a_new_axis_reaches_files_columns_options_and_printing():
    plan = plan_layout_model(TOY)
    assert plan.model_fields["cp"].default == 1
    assert ("cp", int, axis("cp").doc) in layout_column_specs(TOY) and axis("cp").doc.startswith("context-parallel degree")
    assert "cp" in [p.name for p in axis_params("fix", TOY)] and "cp" in [p.name for p in axis_params("give", TOY)]
    row = dict(dp=2, tp=2, pp=1, cp=2, micro_batch=1, vpp=1, recompute="none", sequence_parallel=False, zero=0,
               num_microbatches=4)
    assert layout_cell(row, TOY) == "dp2 tp2 pp1 cp2 mb1" and layout_cell({**row, "cp": 1}, TOY) == "dp2 tp2 pp1 mb1"
    assert derive_dp(8, {"tp": 2, "pp": 1, "cp": 2, "dp": None}, gpus_said="--gpus is 8", axes=TOY) == 2


def test_the_space_context_carries_what_rules_read():
    ctx = SpaceContext(gpus=8, layers=4, heads=8, kv_heads=8, global_batch=8, seq_len=4096)
    assert CP_RULE.ok({"cp": 4}, ctx) and not CP_RULE.ok({"cp": 4}, SpaceContext(8, 4, 8, 8, 8, seq_len=12, min_cp_tokens=1))


def test_an_uneven_interleaving_that_trained_is_expressible_but_not_searched():
    """DeepSeek-V3's 61 layers ran on pp 8 x vpp 4 (issue 29): 32 virtual stages take them as
    29 x 2 + 3 x 1, three short of the 64 an even split needs, which Megatron states with
    --pipeline-model-parallel-layout. A given layout passes the rules; a search does not try it."""
    from planner.estimate import estimate_layout
    from planner.specs.loading import load_cluster, load_model

    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-gb200-nvl72-1152")
    r = estimate_layout(model, cluster, gpus=256, tp=1, pp=8, vpp=4, ep=32, micro_batch=1)
    assert "interleaving" not in [v.constraint for v in r.violations]
    assert list(r.layout["stage_layers"]) == [2] * 29 + [1] * 3  # 29 * 2 + 3 * 1 = 61
    out = CliRunner().invoke(app, ["estimate", "deepseek-v3", "dgx-gb200-nvl72-1152", "--gpus", "256", "--tp", "1",
                                   "--pp", "8", "--vpp", "4", "--ep", "32", "--micro-batch", "1", "--export", "megatron"])
    # E with 2 layers, 28 more stages of 2, two stages of 1, the last stage's 1 layer, then DeepSeek-V3's
    # one MTP layer (m: Megatron requires it after every decoder layer, in the last stage) and the loss
    assert "Et*2|(t*2|)*28(t|)*2tmL" in out.stdout
    job = dict(gpus=256, layers=61, heads=128, kv_heads=128, global_batch=15360, seq_len=4096, experts=256)
    searched = enumerate_layouts(**job, limits=SpaceLimits(tp=1, pp=8, ep=32, micro_batch=1))
    assert 4 not in set(searched.vpp.tolist())  # 8 * 4 stages leave 3 layers missing: not in the search
    given = enumerate_layouts(**job, limits=SpaceLimits(tp=1, pp=8, ep=32, micro_batch=1, vpp=4))
    assert set(given.vpp.tolist()) == {4}  # ... but tried when asked for


def test_a_row_names_its_schedule_only_when_vpp_does_not_say_it():
    from planner.layout.axes import layout_cell

    base = {"dp": 16, "tp": 4, "pp": 4, "cp": 1, "micro_batch": 1, "vpp": 1, "ep": 1, "etp": 1}
    assert layout_cell({**base, "schedule": "1f1b"}) == "dp16 tp4 pp4 mb1"
    assert layout_cell({**base, "vpp": 2, "schedule": "interleaved"}) == "dp16 tp4 pp4 mb1 vpp2"
    assert layout_cell({**base, "schedule": "zb-h1"}) == "dp16 tp4 pp4 mb1 sched=zb-h1"
    assert layout_cell({**base, "vpp": 2, "schedule": "zb-v"}) == "dp16 tp4 pp4 mb1 vpp2 sched=zb-v"


@pytest.mark.parametrize("tp, cp, ok", [
    # Nemotron-H: 256 Mamba heads, 8 groups. MambaContextParallel: heads % (tp cp) == 0, and groups / tp and cp
    # dividing one another
    (8, 64, False),  # 256 % 512
    (8, 4, True),    # 256 % 32 = 0; groups 8 / 8 = 1 divides 4
    (2, 8, True),    # 256 % 16 = 0; 8 / 2 = 4 divides 8
    (2, 2, True),    # 4 % 2 = 0
    (1, 3, False),   # 256 % 3
    (4, 1, True),    # no cp: the rule does not apply
])
def test_mamba_context_parallel_rule(tp, cp, ok):
    from planner.layout.axes import RULES, SpaceContext

    rule = next(r for r in RULES if r.name == "mamba_cp_divides_heads")
    ctx = SpaceContext(gpus=64, layers=8, heads=64, kv_heads=8, global_batch=64,
                       mixer_heads=(("mamba.heads", 256), ("mamba.groups", 8)))
    assert bool(rule.ok({"tp": np.array([tp]), "cp": np.array([cp])}, ctx)[0]) is ok
    dense = SpaceContext(gpus=64, layers=8, heads=64, kv_heads=8, global_batch=64)
    assert bool(rule.ok({"tp": np.array([tp]), "cp": np.array([cp])}, dense)[0])
