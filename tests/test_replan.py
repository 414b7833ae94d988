"""planner/replan.py: re-planning after K of N GPUs fail (issue 40 item 5). Every expected number is
derived here by hand from the module docstring's formulas and the shipped specs' figures."""
from __future__ import annotations

import pytest

from planner.constraints import Limits
from planner.errors import InfeasibleError, SpecError
from planner.estimate import estimate_defaults, estimate_layout
from planner.replan import change_cost, default_spares, replan, tokens_over_horizon
from planner.specs.loading import load_cluster, load_model
from planner.search import with_global_batch

H = 3600.0


@pytest.fixture(scope="module")
def a100():
    return load_cluster("dgx-a100-1024")  # 128 nodes of 8; network 25 GB/s; storage 1000 GB/s; restart 600 s


@pytest.fixture(scope="module")
def gpt13():
    return load_model("gpt3-1.3b")  # 24 layers, hidden 2048, 16 heads, vocab 51200, seq 2048, batch 512


# --- shrink or wait: tokens over the horizon -------------------------------------------------------

@pytest.mark.parametrize("case", [
    # r 1000, r' 750, E 2 h, H 24 h, C1 = 600 + 100, C2 = 600 + 120, R 600:
    # shrink: 750 (7200 - 700) + 1000 (86400 - (7200 + 720)) = 4,875,000 + 78,480,000 = 83,355,000
    # wait:   1000 (86400 - (7200 + 600))                    = 78,600,000
    dict(e=2 * H, h=24 * H, c1=700, c2=720, shrink=83_355_000, wait=78_600_000),
    # spares before the shrunk job even starts (E 0.1 h = 360 s < C1 = 700): no tokens at r';
    # back at max(360, 700) = 700, + 720: shrink 1000 (86400 - 1420) = 84,980,000; wait 1000 (86400 - 960)
    dict(e=0.1 * H, h=24 * H, c1=700, c2=720, shrink=84_980_000, wait=85_440_000),
    # horizon 1 h ends before the spares (E 2 h): shrink 750 (3600 - 700) = 2,175,000; wait idles through it
    dict(e=2 * H, h=1 * H, c1=700, c2=720, shrink=2_175_000, wait=0),
    # spares at once (E 0): shrink 1000 (86400 - 700 - 720) = 84,980,000; wait 1000 (86400 - 600) = 85,800,000
    dict(e=0.0, h=24 * H, c1=700, c2=720, shrink=84_980_000, wait=85_800_000),
])
def test_tokens_over_the_horizon_by_hand(case):
    shrink, wait = tokens_over_horizon(running_tps=1000, new_tps=750, spares_s=case["e"], horizon_s=case["h"],
                                       shrink_cost_s=case["c1"], back_cost_s=case["c2"], resume_s=600)
    assert shrink == pytest.approx(case["shrink"])
    assert wait == pytest.approx(case["wait"])


# --- the change's cost -------------------------------------------------------------------------------

def test_change_cost_reads_each_gpus_share_at_the_storage_bandwidth(gpt13, a100):
    # GPT-3 1.3B, untied embeddings: 12 L h^2 + 13 L h + (2 V + s) h + 2 h
    # = 1,207,959,552 + 638,976 + 109,051,904 + 104,857,600 + 4,096 = 1,422,512,128 parameters
    params = 12 * 24 * 2048**2 + 13 * 24 * 2048 + (2 * 51200 + 2048) * 2048 + 2 * 2048
    assert params == 1_422_512_128 == gpt13.total_params()
    cost = change_cost(gpt13, a100, dict(dp=8, tp=1, pp=1, cp=1, micro_batch=1))
    # BF16: 2-byte weights + 4-byte master + 8 bytes of moments = 14 bytes a parameter
    assert cost.checkpoint_bytes == params * 14 == 19_915_169_792
    # dp 8, tp 1, pp 1: each GPU writes/reads 1/8 of it (the final layer norm, 2h, is not in a rank's split)
    assert cost.read_bytes_per_gpu == pytest.approx(params * 14 / 8, rel=1e-5)
    # min(1000 GB/s / 8 GPUs = 125, network 25) = 25 GB/s; 2.49 GB / 25 GB/s = 0.0996 s
    assert cost.read_gbps_per_gpu == pytest.approx(25.0)
    assert cost.reshard_s == pytest.approx(params * 14 / 8 / 25e9, rel=1e-5)
    assert cost.restart_s == 600.0 and cost.total_s == pytest.approx(600.0 + cost.reshard_s)


def test_spares_default_to_now_with_unused_nodes_else_the_replacement_wait(a100):
    # 64 GPUs = 8 of 128 nodes: 120 unused nodes cover 1 lost node
    assert default_spares(a100, 64, 8)[0] == 0.0
    # the whole cluster, no spare_nodes: node_replace_s 1800 s = 0.5 h
    eta, source = default_spares(a100, 1024, 8)
    assert eta == 0.5 and "node_replace_s" in source


# --- the whole re-plan ---------------------------------------------------------------------------------

def test_replan_keeps_the_batch_and_prices_the_decision(gpt13, a100):
    running = dict(tp=2, pp=2, micro_batch=2)
    r = replan(gpt13, a100, gpus=64, lost_gpus=16, running=running, spares_eta_h=2.0, remaining_tokens=1e11)
    ref = estimate_layout(gpt13, a100, gpus=64, **estimate_defaults(running, 64, a100))
    assert r.running.tokens_per_s == ref.tokens_per_s and r.running.layout["dp"] == 16  # 64 / (2 x 2)
    assert r.gpus_left == r.new_gpus == 48 and r.new_global_batch == r.global_batch == 512 and r.change_note is None
    assert r.new.layout["dp"] * r.new.layout["tp"] * r.new.layout["pp"] * r.new.layout["cp"] == 48
    d, rt, nt = r.decision, r.running.tokens_per_s, r.new.tokens_per_s
    assert d.horizon_h == pytest.approx(1e11 / rt / H)  # the tokens left at the running rate
    # wait: r (H - E - R) = 1e11 - r (7200 + 600)
    assert d.wait_tokens == pytest.approx(1e11 - rt * (7200 + 600))
    # shrink: r' (E - C1) + r (H - E - C2), with H r = 1e11
    c1, c2 = r.change.total_s, d.back.total_s
    assert d.shrink_tokens == pytest.approx(nt * (7200 - c1) + 1e11 - rt * (7200 + c2))
    assert r.tokens_per_s_lost == pytest.approx(rt - nt)
    assert d.winner == ("shrink" if d.shrink_tokens > d.wait_tokens else "wait")
    assert r.margin_h == pytest.approx(abs(d.shrink_tokens - d.wait_tokens) / rt / H)


def test_a_count_no_batch_divides_shrinks_the_batch_to_the_largest_that_runs():
    # 1,024 - 8 = 1,016 = 8 x 127 GPUs: 127 fits no tp (96 heads), pp (96 layers) or cp, so dp holds it;
    # dp divides the batch: the largest multiple of 127 <= 1536 is 12 x 127 = 1524
    m, c = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    r = replan(m, c, gpus=1024, lost_gpus=8, running=dict(tp=8, pp=4, micro_batch=4, vpp=12),
               limits=Limits(memory_headroom=0.05))
    assert r.new_gpus == 1016 and r.new_global_batch == 1524 and r.new.layout["dp"] % 127 == 0
    assert "global batch 1524 (not 1536)" in r.change_note


def test_no_batch_on_the_gpus_left_runs_the_batch_on_fewer(gpt13, a100):
    # batch 16 on 64 - 6 = 58 = 2 x 29 GPUs: 29 divides no batch <= 16, 16 heads, and is > 24 layers;
    # 57 = 3 x 19: pp 19 leaves a 3 no axis takes; 56 = 8 x 7: pp 7 and dp/tp of 8 run batch 16
    m = with_global_batch(gpt13, 16)
    r = replan(m, a100, gpus=64, lost_gpus=6, running=dict(tp=4, pp=1, micro_batch=1))
    assert r.new_gpus == 56 and r.new_global_batch == 16
    assert r.change_note.startswith("56 of the 58 GPUs left, global batch 16 kept")


def test_nothing_on_the_gpus_left_is_infeasible():
    m, c = load_model("gpt3-175b"), load_cluster("dgx-a100-1024")
    with pytest.raises(InfeasibleError, match="no layout runs on the 8 GPUs left"):
        replan(m, c, gpus=1024, lost_gpus=1016, running=dict(tp=8, pp=4, micro_batch=4))


def test_fewer_gpus_looks_at_a_bounded_number_of_counts(monkeypatch):
    # 8,000,000 GPUs (1,000,000 nodes of 8), one lost: 7,999,999 = 7 x 199 x 5,743 runs no layout of batch
    # 62,500 = 2^2 x 5^6, and no count below is given one here (space_for is replaced: no count has a valid layout).
    # Before: every count down to 3,999,999 was enumerated, 4 million enumerations of ~8 ms (hours).
    # Now at most 1,024 below: from 7,999,998 down to 7,999,999 - 1,024 = 7,998,975.
    import planner.replan as engine

    calls = []

    def no_layout(model, gpus):
        calls.append(gpus)
        assert len(calls) < 5_000, "unbounded"
        return []

    monkeypatch.setattr(engine, "space_for", no_layout)
    model = with_global_batch(load_model("llama3.1-405b"), 62_500)
    cluster = load_cluster("big-h100-131072").model_copy(update={"nodes": 1_000_000})
    with pytest.raises(InfeasibleError, match="from 7,999,998 down to 7,998,975 runs batch 62500"):
        replan(model, cluster, gpus=8_000_000, lost_gpus=1, running=dict(tp=8, pp=16, micro_batch=1))
    assert min(calls) == 7_998_975


@pytest.mark.parametrize("kwargs,flag", [
    (dict(gpus=64, lost_gpus=64), "--lost-gpus"),
    (dict(gpus=64, lost_gpus=0), "--lost-gpus"),
    (dict(gpus=2048, lost_gpus=8), "--gpus"),
    (dict(gpus=64, lost_gpus=8, spares_eta_h=-1.0), "--spares-in-h"),
    (dict(gpus=64, lost_gpus=8, remaining_tokens=0.0), "--tokens"),
    (dict(gpus=64, lost_gpus=8, remaining_tokens=10**400), "--tokens"),  # an int no float holds: OverflowError before
    (dict(gpus=64, lost_gpus=8, spares_eta_h=10**400), "--spares-in-h"),
    (dict(gpus=64, lost_gpus=8, spares_eta_h=float("nan")), "--spares-in-h"),
    (dict(gpus=64, lost_gpus=8, running=dict(dp=8, tp=2, pp=2, micro_batch=1)), "--dp/--tp/--pp"),  # 32, not 64
    (dict(gpus=60, lost_gpus=8, running=dict(tp=8, pp=1, micro_batch=1)), "--tp/--pp"),  # 8 does not divide 60
    (dict(gpus=48, lost_gpus=8, running=dict(tp=3, pp=1, micro_batch=1)), "--tp"),  # 3 does not divide 16 heads
])
def test_bad_input_names_the_flag(gpt13, a100, kwargs, flag):
    kwargs = {"running": dict(tp=2, pp=2, micro_batch=1), **kwargs}
    with pytest.raises(SpecError) as exc:
        replan(gpt13, a100, **kwargs)
    assert exc.value.path == flag
