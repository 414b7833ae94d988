"""`plan allocate` (planner/allocate.py, planner/cpsat/job_allocation.py): the CP-SAT model equals brute
force on small synthetic instances, hand-worked examples, which job cannot be served, the jobs
file's errors, and the JSON contract."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.allocate import JobSpec, candidate_counts, granule_gpus, job_instance
from planner.cpsat.job_allocation import (SCALE, AllocationInstance, Candidate, JobInstance, integer_objective,
                                    objective_value, solve, validate)
from planner.cli.main import app
from planner.specs.loading import load_cluster, load_model

SCORED_KEYS = {"layout", "feasible", "violations", "step_time_s", "time_breakdown_s", "memory_gib", "tokens_per_s",
               "model_tflops_per_gpu", "mfu", "energy_j_per_step", "avg_power_kw"}


def cand(gpus, tflops_per_gpu=100.0, power_kw=10.0, days=None) -> Candidate:
    return Candidate(gpus, gpus * tflops_per_gpu, power_kw, days)


# --- candidates ----------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, granule, cluster, expected", [
    # 64..512 in 8-GPU nodes: 8 x (8, 12, 16, 24, 32, 48, 64)
    (64, 512, 8, 1024, [64, 96, 128, 192, 256, 384, 512]),
    # 100..300: first whole node 13 x 8 = 104, last 37 x 8 = 296; between them 8 x (16, 24, 32)
    (100, 300, 8, 1024, [104, 128, 192, 256, 296]),
    # NVL72: whole 72-GPU domains, 72 x (1, 2, 3, 4); max_gpus 1,000 is capped at the cluster's 288
    (1, 1000, 72, 288, [72, 144, 216, 288]),
    (2048, 4096, 8, 1024, []),  # more than the cluster
    (9, 15, 8, 1024, []),  # no whole node in range
])
def test_candidate_counts(lo, hi, granule, cluster, expected):
    assert candidate_counts(lo, hi, granule, cluster) == expected


def test_granule_is_a_node_or_an_nvlink_domain():
    assert granule_gpus(load_cluster("dgx-h100-1024")) == 8  # 8 GPUs per node, NVLink within the node
    assert granule_gpus(load_cluster("dgx-gb200-nvl72-1152")) == 72  # 4-GPU trays in 72-GPU NVLink racks


def test_jobs_of_one_model_share_its_searches_and_keep_their_own_budgets(monkeypatch):
    # Two jobs of llama3.1-8b on 64-128 GPUs, 1e12 and 3e12 tokens: one search per count, and each job's time
    # to train is its tokens over the same goodput, so the second's is 3x the first's at every count; the
    # first's is what plan search prints for its budget at that count
    import planner.allocate as alloc
    from planner.search import search
    from planner.specs.jobs import with_tokens

    cluster, model = load_cluster("dgx-h100-1024"), load_model("llama3.1-8b")
    calls = []
    monkeypatch.setattr(alloc, "search", lambda *a, **k: calls.append(k["gpus"]) or search(*a, **k))
    cache = {}
    one = job_instance(JobSpec(name="one", model="llama3.1-8b", min_gpus=64, max_gpus=128, tokens=1e12),
                       with_tokens(model, 1e12), cluster, cache)
    three = job_instance(JobSpec(name="three", model="llama3.1-8b", min_gpus=64, max_gpus=128, tokens=3e12),
                         with_tokens(model, 3e12), cluster, cache)
    assert sorted(calls) == [64, 96, 128]  # candidate_counts(64, 128, 8, 1024): 8 x (8, 12, 16), searched once each
    for a, b in zip(one.candidates, three.candidates):
        assert a.gpus == b.gpus and b.train_days == pytest.approx(3 * a.train_days, rel=1e-12)
        alone = search(with_tokens(model, 1e12), cluster, gpus=a.gpus, top_k=1, limits=alloc.SEARCH_LIMITS,
                       split_top=alloc.ALLOCATE_SPLIT_TOP).best
        assert a.train_days == pytest.approx(alone.training.train_days, rel=1e-12)


# --- hand-worked examples ------------------------------------------------------------------------

def two_jobs(cluster_gpus=24, budget=None, objective="throughput"):
    a = JobInstance("a", (cand(8, 100, 10, 40.0), cand(16, 90, 20, 22.0)), weight=1.0)
    b = JobInstance("b", (cand(8, 200, 10, 30.0), cand(16, 150, 25, 16.0)), weight=2.0)
    return AllocationInstance((a, b), cluster_gpus, 8, objective, budget)


def test_throughput_by_hand():
    # weighted work: a8 = 8*100 = 800, a16 = 16*90 = 1440, b8 = 2*8*200 = 3200, b16 = 2*16*150 = 4800.
    # 24 GPUs: (a8, b8) 4000, (a16, b8) 4640, (a8, b16) 5600; (a16, b16) needs 32 GPUs.
    inst = two_jobs()
    r = solve(inst)
    assert r.status == "OPTIMAL" and r.choice == (0, 1)
    assert validate(inst, r.choice) == pytest.approx(5600.0)
    # integers: parts per 100,000 of the largest (4800): a8 16,667 (16,666.7 rounded), b16 100,000;
    # tie weight 24/8 + 1 = 4 granules; tie-break 1 + 2 granules: -(16,667 + 100,000) * 4 + 3
    assert r.objective == -466_665 == r.bound


def test_throughput_under_a_power_budget_by_hand():
    # powers: a8 10, a16 20, b8 10, b16 25 kW. Budget 30: (a8, b16) draws 35, out; (a16, b8) 30 -> 4640.
    inst = two_jobs(budget=30.0)
    r = solve(inst)
    assert r.choice == (1, 0) and validate(inst, r.choice) == pytest.approx(4640.0)


def test_makespan_by_hand_and_fewer_gpus_on_ties():
    # 24 GPUs: (a8, b8) max(40, 30) = 40, (a16, b8) max(22, 30) = 30, (a8, b16) max(40, 16) = 40.
    inst = two_jobs(objective="makespan")
    r = solve(inst)
    assert r.choice == (1, 0) and validate(inst, r.choice) == pytest.approx(30.0)
    # A third job c (8 GPUs: 10 days, 16 GPUs: 5 days) on 48 GPUs: a16 + b16 = 22 days either way,
    # so c gets 8 GPUs (40 in total, not 48).
    c = JobInstance("c", (cand(8, days=10.0), cand(16, days=5.0)))
    inst = AllocationInstance(inst.jobs + (c,), 48, 8, "makespan")
    r = solve(inst)
    assert r.choice == (1, 1, 0) and validate(inst, r.choice) == pytest.approx(22.0)


def test_deadlines_forbid_candidates():
    # b's deadline of 20 days leaves only b16 (16 days); on 24 GPUs a then gets 8 (a16 + b16 = 32).
    a, b = two_jobs().jobs
    b = JobInstance("b", b.candidates, weight=2.0, deadline_days=20.0)
    r = solve(AllocationInstance((a, b), 24, 8))
    assert r.choice == (0, 1)


# --- why a job cannot be served --------------------------------------------------------------------

def test_job_larger_than_the_cluster_is_named():
    cluster = load_cluster("dgx-h100-1024")
    big = job_instance(JobSpec(name="big", model="llama3.1-70b", min_gpus=2048, max_gpus=4096),
                       load_model("llama3.1-70b"), cluster)  # no count fits, so no search runs
    assert big.candidates == ()
    small = JobInstance("small", (cand(8), cand(16)))
    r = solve(AllocationInstance((small, big), 1024, 8))
    assert r.status == "INFEASIBLE" and r.unserved.jobs == ("big",)
    assert "min_gpus 2,048 is more than the 1,024 GPUs of dgx-h100-1024" in r.unserved.reason


def test_deadline_nobody_can_meet_is_named():
    a, b = two_jobs().jobs
    late = JobInstance("b", b.candidates, deadline_days=10.0)  # b16 takes 16 days, b8 30
    r = solve(AllocationInstance((a, late), 1024, 8))
    assert r.unserved.jobs == ("b",)
    assert "fastest candidate (16 GPUs) takes 16.0 days" in r.unserved.reason and "deadline of 10 days" in r.unserved.reason


def test_jobs_that_do_not_fit_together_are_named_not_the_others():
    # a and b each need 16 of 24 GPUs (16 + 16 = 32 > 24); c fits beside either.
    a = JobInstance("a", (cand(16),))
    b = JobInstance("b", (cand(16),))
    c = JobInstance("c", (cand(8),))
    r = solve(AllocationInstance((a, c, b), 24, 8))
    assert r.unserved.jobs == ("a", "b")
    assert "add up to 32 GPUs, more than the cluster's 24" in r.unserved.reason


def test_power_budget_conflict_is_named():
    # 60 + 50 kW > a 100 kW budget; the GPUs (16 of 64) would fit.
    a = JobInstance("a", (cand(8, power_kw=60.0),))
    b = JobInstance("b", (cand(8, power_kw=50.0),))
    r = solve(AllocationInstance((a, b), 64, 8, power_budget_kw=100.0))
    assert r.unserved.jobs == ("a", "b") and "draw 110.0 kW, over the power budget of 100 kW" in r.unserved.reason


def test_many_jobs_over_the_cluster_get_a_minimal_set_not_an_internal_error():
    # 64 jobs whose smallest counts cycle 8, 16, 64 GPUs: 21 x 88 + 8 = 1,856 GPUs, over the cluster's 1,024.
    # Whichever jobs are named, their smallest counts must exceed 1,024 GPUs and fit once any one is dropped.
    # Before: the diagnosis's solve without objective could not prove the knapsack infeasible (UNKNOWN after
    # 5 s) and an assert ended `plan allocate` with exit 3.
    def job(i):
        lo = [1, 2, 8][i % 3]  # nodes
        ladder = sorted({m for k in range(8) for m in (1 << k, 3 << k) if lo <= m <= 128})
        return JobInstance(f"j{i}", tuple(cand(8 * m) for m in ladder))
    jobs = tuple(job(i) for i in range(64))
    r = solve(AllocationInstance(jobs, 1024, 8))
    smallest = {j.name: min(c.gpus for c in j.candidates) for j in jobs}
    need = sum(smallest[name] for name in r.unserved.jobs)
    assert r.status == "INFEASIBLE" and need > 1024
    assert all(need - smallest[name] <= 1024 for name in r.unserved.jobs)  # minimal
    assert f"add up to {need:,} GPUs, more than the cluster's 1,024" in r.unserved.reason


# --- CP-SAT against brute force ------------------------------------------------------------------

def random_instance(seed: int, objective: str, budget: bool, deadlines: bool) -> AllocationInstance:
    rng = np.random.default_rng(seed)
    jobs = []
    for j in range(int(rng.integers(2, 4))):
        counts = sorted(rng.choice([1, 2, 3, 4, 6], size=int(rng.integers(2, 5)), replace=False))
        cands = tuple(Candidate(8 * int(m), 8 * int(m) * float(rng.uniform(300, 600)),
                                round(8 * int(m) * float(rng.uniform(1.2, 1.5)), 1),  # 0.1 kW: whole watts
                                float(rng.uniform(20, 80)) / int(m)) for m in counts)
        deadline = float(rng.uniform(8, 40)) if deadlines and rng.random() < 0.7 else None
        jobs.append(JobInstance(f"job{j}", cands, float(rng.choice([1.0, 2.0])), deadline))
    cluster = 8 * int(rng.integers(6, 15))
    power = round(float(rng.uniform(0.5, 1.0)) * cluster * 1.35, 1) if budget else None
    return AllocationInstance(tuple(jobs), cluster, 8, objective, power)


def feasible_in_floats(inst: AllocationInstance, choice) -> bool:
    picked = [job.candidates[k] for job, k in zip(inst.jobs, choice)]
    return (sum(c.gpus for c in picked) <= inst.cluster_gpus
            and (inst.power_budget_kw is None or sum(c.power_kw for c in picked) <= inst.power_budget_kw)
            and all(job.deadline_days is None or c.train_days <= job.deadline_days for job, c in zip(inst.jobs, picked)))


def brute_force(inst: AllocationInstance):
    """Every combination of candidates: the least integer objective and the best float value."""
    combos = [c for c in itertools.product(*(range(len(j.candidates)) for j in inst.jobs)) if feasible_in_floats(inst, c)]
    if not combos:
        return None
    values = [objective_value(inst, c) for c in combos]
    best_value = min(values) if inst.objective == "makespan" else max(values)
    return min(integer_objective(inst, c) for c in combos), best_value


def servable(inst: AllocationInstance, names) -> bool:
    sub = AllocationInstance(tuple(j for j in inst.jobs if j.name in names), inst.cluster_gpus, inst.granule_gpus,
                             inst.objective, inst.power_budget_kw)
    return brute_force(sub) is not None


@pytest.mark.parametrize("seed, objective, budget, deadlines", [
    (s, o, b, d) for s in range(4) for o in ("throughput", "makespan") for b in (False, True) for d in (False, True)])
def test_cp_sat_equals_brute_force(seed, objective, budget, deadlines):
    inst = random_instance(seed, objective, budget, deadlines)
    expected = brute_force(inst)
    r = solve(inst)
    if expected is None:
        assert r.status == "INFEASIBLE"
        core = r.unserved.jobs  # cannot all be served, and each of them is needed for that
        assert not servable(inst, core)
        assert all(servable(inst, set(core) - {name}) for name in core)
        return
    assert r.status == "OPTIMAL"
    assert r.objective == expected[0] == integer_objective(inst, r.choice)
    assert validate(inst, r.choice) == pytest.approx(expected[1], rel=2 / SCALE)


def test_brute_force_cases_cover_both_outcomes():
    """The random instances include feasible ones and ones where no allocation exists."""
    outcomes = [brute_force(random_instance(s, o, b, d)) is None for s in range(4) for o in ("throughput", "makespan")
                for b in (False, True) for d in (False, True)]
    assert 4 <= sum(outcomes) <= len(outcomes) - 8


# --- the command line ----------------------------------------------------------------------------

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and result.exit_code != 3, result.output
    return result


@pytest.mark.parametrize("job_line, line, message", [
    ("{name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 64, tokenz: 1.0e12}", 3,
     "jobs.0.tokenz: unknown key 'tokenz'; did you mean 'tokens'?"),
    ("{name: a, model: llama3.1-8b, min_gpus: -8, max_gpus: 64}", 3,
     "jobs.0.min_gpus: Input should be greater than 0, got -8 (expected a value > 0)"),
    ("{name: a, model: llama3.1-8b, min_gpus: 128, max_gpus: 64}", 3,
     "jobs.0.min_gpus: min_gpus (128) must be at most max_gpus (64)"),
    ("{name: a, model: llama3.1-8bb, min_gpus: 8, max_gpus: 64}", 3,
     "jobs.0.model: no model file or shipped model named 'llama3.1-8bb'; did you mean 'llama3.1-8b'?"),
    ("{name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 64, deadline_days: 9}", 3,
     "jobs.0.tokens: job 'a' has a deadline but no token budget"),
])
def test_bad_jobs_file_exits_2_with_file_line_and_field(tmp_path, job_line, line, message):
    path = tmp_path / "jobs.yaml"
    path.write_text(f"# two lines before the job\njobs:\n  - {job_line}\n")
    r = invoke("allocate", path, "dgx-h100-1024")
    assert r.exit_code == 2
    assert f"{path}:{line}: {message}" in " ".join(r.output.split())


def test_makespan_needs_every_job_tokens(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 64, tokens: 1.0e9}\n"
                    "  - {name: b, model: llama3.1-8b, min_gpus: 8, max_gpus: 64}\n")
    r = invoke("allocate", path, "dgx-h100-1024", "--objective", "makespan")
    assert r.exit_code == 2 and f"{path}:3: jobs.1.tokens: job 'b' has no token budget" in " ".join(r.output.split())


def test_infeasible_exits_1_and_names_the_job(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: huge, model: llama3.1-70b, min_gpus: 2048, max_gpus: 4096}\n")
    r = invoke("allocate", path, "dgx-h100-1024", "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["unserved"]["jobs"] == ["huge"] and data["jobs"] == [] and data["solver"]["status"] == "INFEASIBLE"


def test_infeasible_reason_shows_a_job_name_on_one_line_without_terminal_escapes(tmp_path):
    # A name with ESC (an ANSI colour and an OSC title) and a newline; its deadline of 0.001 days no
    # candidate meets. Before: the reason printed the name raw, its escapes reaching the terminal.
    path = tmp_path / "jobs.yaml"
    path.write_text('jobs:\n  - {name: "\\e[31mred\\e]0;t\\a\\nx", model: llama3.1-8b, min_gpus: 8, max_gpus: 8, '
                    'tokens: 1.0e9, deadline_days: 0.001}\n')
    r = invoke("allocate", path, "dgx-h100-1024")
    assert r.exit_code == 1
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "job '\\x1b[31mred\\x1b]0;t\\x07\\nx' cannot be served" in r.output


@pytest.mark.parametrize("objective", ["throughput", "makespan"])
def test_a_job_whose_tokens_are_never_trained_has_no_candidate(tmp_path, objective):
    # A failure every hour per GPU (gpu_mtbf_h 1: every 1/8 h on 8 GPUs), restarts of 10^6 s: ETTR 0, goodput 0,
    # an infinite time to train. Before: makespan scaled inf / inf = NaN to an integer (exit 3), the
    # throughput table said "inf days" and its --json was exit 3 ("Out of range float values").
    from pathlib import Path

    cluster = tmp_path / "flaky.yaml"
    shipped = Path(__file__).resolve().parents[1] / "configs" / "clusters" / "dgx-h100-1024.yaml"
    cluster.write_text(shipped.read_text().replace("name: dgx-h100-1024", "name: flaky")
                       + "reliability:\n  gpu_mtbf_h: 1\n  restart_s: 1000000\n  storage_write_gbps: 0.1\n")
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 16, tokens: 1.0e12}\n")
    r = invoke("allocate", path, cluster, "--objective", objective, "--json")
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["unserved"]["jobs"] == ["a"]
    assert "its tokens are never trained at 8, 16 GPUs: goodput 0 (ETTR 0" in data["unserved"]["reason"]


def test_json_contract_and_table_of_a_small_allocation(tmp_path):
    # Two llama3.1-8b jobs on 24 of dgx-h100-1024's GPUs: 8 or 16 GPUs each (whole 8-GPU nodes).
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 16, tokens: 1.0e9}\n"
                    "  - {name: b, model: llama3.1-8b, weight: 2, min_gpus: 8, max_gpus: 16}\n"
                    "power_budget_kw: 1000\n")
    r = invoke("allocate", path, "dgx-h100-1024", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {"jobs", "gpus_used", "solver"} <= set(data)
    assert set(data["solver"]) == {"status", "objective", "bound", "wall_s"} and data["solver"]["status"] == "OPTIMAL"
    assert [j["name"] for j in data["jobs"]] == ["a", "b"]
    for job in data["jobs"]:
        assert SCORED_KEYS | {"name", "model", "gpus"} <= set(job) and job["model"] == "llama3.1-8b"
        lay = job["layout"]
        assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == job["gpus"] and job["gpus"] % 8 == 0
    assert data["gpus_used"] == sum(j["gpus"] for j in data["jobs"]) <= 1024
    # a trains 1e9 tokens: days = 1e9 / goodput / 86,400
    a = data["jobs"][0]
    assert a["train_days"] == pytest.approx(1e9 / a["goodput_tokens_per_s"] / 86_400)
    assert "train_days" not in data["jobs"][1]
    # the objective in its unit beside the solver's scaled integer: weight x GPUs x model TFLOP/s per GPU summed,
    # a x 1 + b x 2
    jobs = data["jobs"]
    assert data["objective_weighted_model_tflops"] == pytest.approx(
        1 * jobs[0]["gpus"] * jobs[0]["model_tflops_per_gpu"] + 2 * jobs[1]["gpus"] * jobs[1]["model_tflops_per_gpu"])
    text = invoke("allocate", path, "dgx-h100-1024").output
    assert "TFLOP/s/GPU" in text and "total:" in text and "solver OPTIMAL" in text


def _objective_figure(text: str, what: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith("objective:"))
    assert what in line, line
    return float(re.search(rf"{what} ([\d,.]+)", line).group(1).replace(",", ""))


def test_the_objective_is_printed_in_its_unit(tmp_path):
    # Before: "objective -15,811,410", CP-SAT's scaled integer (parts per 100,000 of the largest candidate's figure,
    # negated, times a tie weight, plus GPU granules), with no unit. Now the objective itself: for throughput the
    # sum over jobs of weight x GPUs x model TFLOP/s per GPU, here a x 1 + b x 2, in PFLOP/s (/ 1000)
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  - {name: a, model: llama3.1-8b, min_gpus: 8, max_gpus: 16, tokens: 1.0e9}\n"
                    "  - {name: b, model: llama3.1-8b, weight: 2, min_gpus: 8, max_gpus: 16, tokens: 2.0e9}\n"
                    "power_budget_kw: 1000\n")
    for objective in ("throughput", "makespan"):
        data = json.loads(invoke("allocate", path, "dgx-h100-1024", "--objective", objective, "--json").stdout)
        text = invoke("allocate", path, "dgx-h100-1024", "--objective", objective).output
        a, b = data["jobs"]
        if objective == "throughput":
            work_pflops = (1 * a["gpus"] * a["model_tflops_per_gpu"] + 2 * b["gpus"] * b["model_tflops_per_gpu"]) / 1e3
            assert _objective_figure(text, "weighted model work") == pytest.approx(work_pflops, abs=0.05)
            assert "PFLOP/s" in text and "maximised" in text
        else:  # the longest of the two jobs' times to train [days]
            days = max(a["train_days"], b["train_days"])
            assert _objective_figure(text, "makespan") == pytest.approx(days, abs=0.05)
            assert "days" in text and "minimised" in text
        assert "scaled integer objective" in text  # CP-SAT's figure kept, named for what it is
