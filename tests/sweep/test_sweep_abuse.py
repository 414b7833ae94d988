"""`plan sweep` abused the way the adversarial tester of issue #15 did it: real signals to a real
`plan sweep` process, real truncated files, real concurrent processes. Promised: no finished row
is lost or corrupted, no row is stored for an interrupted point, a rerun resumes to the rows of an
uninterrupted run, one writer per output, and workers die with their parent."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner import sweep as sw
from planner.cli.main import app
from planner.sweep.lock import lock_path, output_lock

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
FAMILY = ROOT / "configs" / "sweeps" / "gpt3-family.yaml"
# 3 sizes x 8 GPU counts = 24 points, about 2 s serial: long enough to signal a sweep mid-way.
PARAMS, GPUS = "1.3e9,2.7e9,13e9", "8:1024"
SWEEP = ["sweep", str(FAMILY), "--params", PARAMS, "--gpus", GPUS, "--objective", "time"]


def have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def points():
    spec = sw.load_sweep(FAMILY, {"scale_model": {"params": sw.parse_params(PARAMS)}, "gpus": sw.parse_gpus(GPUS),
                                  "objective": "time"})
    return sw.expand(spec, FAMILY.parent)


@pytest.fixture(scope="module")
def reference(points) -> list[dict]:
    """The rows of an uninterrupted run, in the points' order."""
    return sw.run_sweep(points).rows


@pytest.fixture
def spawned():
    """Processes a test starts (and the pool workers it saw): whatever is left is killed after it,
    workers first (orphaned ones would hold the pipes open)."""
    procs: list[subprocess.Popen] = []
    workers: set[int] = set()
    yield procs, workers
    for proc in procs:
        workers.update(children(proc.pid) if proc.poll() is None else ())
    for pid in workers:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def start(spawned, *args) -> subprocess.Popen:
    proc = subprocess.Popen(PLAN + SWEEP + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    spawned[0].append(proc)
    return proc


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr
    return proc.returncode, stderr


def wait_for(condition, proc: subprocess.Popen, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"plan sweep exited ({proc.returncode}) before {what}: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout_s} s")
        time.sleep(0.01)


def rows_in(out: Path) -> int:
    try:
        return len(sw.read_rows(out))
    except Exception:  # parquet being renamed into place, say
        return 0


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def assert_gone(pids: set[int], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], "workers outlived the sweep"


def assert_rows_intact(out: Path, reference: list[dict]) -> list[dict]:
    """Every row in `out` is the row of an uninterrupted run, and nothing else is in the file."""
    rows = sw.read_rows(out)
    by_key = {r["point_id"]: r for r in reference}
    assert all(r == by_key[r["point_id"]] for r in rows)  # an interrupted point stored as infeasible fails here
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(out).num_rows == len(rows)  # no all-null row, nothing unreadable
    else:
        lines = out.read_text().splitlines()
        assert len(lines) == (out.suffix == ".csv") + len(rows)  # a header, then nothing torn or dropped
    return rows


# --- defects 1 and 5: Ctrl-C and SIGTERM, serial and with workers ---------------------------------

SIGNAL_CASES = [
    ("rows.csv", signal.SIGINT, 1),  # as found: Ctrl-C after the first CP-SAT solve killed the process
    pytest.param("rows.parquet", signal.SIGINT, 1, marks=pytest.mark.skipif(not have_pyarrow(), reason="no pyarrow")),
    ("rows.jsonl", signal.SIGTERM, 1),
    ("rows.csv", signal.SIGTERM, 2),
]


@pytest.mark.parametrize("name,signum,workers", SIGNAL_CASES)
def test_a_signal_mid_sweep_keeps_every_finished_row_and_a_rerun_resumes(tmp_path, spawned, reference, name, signum,
                                                                          workers):
    out = tmp_path / name
    proc = start(spawned, "--out", out, "--workers", workers)
    wait_for(lambda: rows_in(out) >= 1, proc, "row in --out")
    pool = children(proc.pid)
    spawned[1].update(pool)
    assert len(pool) == (2 if workers == 2 else 0)
    proc.send_signal(signum)
    code, stderr = finish(proc)
    assert code == 128 + signum  # 130 for SIGINT, 143 for SIGTERM
    what = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert f"{what}: " in stderr and f"rows kept in {out}, rerun to resume" in stderr, stderr
    kept = assert_rows_intact(out, reference)
    assert 1 <= len(kept) < len(reference)
    assert_gone(pool)
    assert not lock_path(out).exists()
    res = CliRunner().invoke(app, SWEEP + ["--out", str(out), "--workers", str(workers)])  # the rerun
    assert res.exit_code == 0, res.output
    assert f"{len(reference) - len(kept)} computed, {len(kept)} already in the output" in res.output
    assert sw.read_rows(out) == reference


def test_ctrl_c_during_a_cp_sat_solve_interrupts_it_and_ctrl_c_still_works_after():
    # As found: CP-SAT caught SIGINT, ended the solve as UNKNOWN (then stored as `infeasible`) and left
    # SIGINT at SIG_DFL, so the next Ctrl-C killed the process. A real, long solve; real signals.
    code = """if True:
        import os, random, signal, threading, time
        from ortools.sat.python import cp_model
        from planner.cpsat.solve import solve_model
        rng, m = random.Random(1), cp_model.CpModel()
        xs = [m.new_bool_var(f"x{i}") for i in range(200)]
        w = [rng.randint(10**5, 10**6) for _ in xs]
        m.add(sum(a * x for a, x in zip(w, xs)) == sum(w) // 2 + 1)
        m.maximize(sum(rng.randint(1, 1000) * x for x in xs))
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            print("returned", solve_model(m, 0.5)[2])
        except KeyboardInterrupt:
            print("interrupted")
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("interrupted again")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout.split("\n")) == (0, ["interrupted", "interrupted again", ""]), r.stderr


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent(tmp_path, spawned, signum):
    out = tmp_path / "rows.csv"
    proc = start(spawned, "--out", out, "--workers", 2)
    wait_for(lambda: len(children(proc.pid)) == 2, proc, "two workers")
    pool = children(proc.pid)
    spawned[1].update(pool)
    proc.send_signal(signum)
    proc.wait(timeout=30)
    assert proc.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 143)
    assert_gone(pool)
    proc.communicate(timeout=10)  # as found, orphaned workers held the caller's pipes open: this hung


# --- defect 2: rows cut short ----------------------------------------------------------------------

def cut_points(text: str) -> range:
    """Every length of the file that cuts its last row short."""
    start = text.rstrip("\n").rfind("\n") + 1
    return range(start + 1, len(text))


@pytest.mark.parametrize("name", ["rows.csv", "rows.jsonl"])
def test_a_row_cut_short_at_any_byte_is_recomputed(tmp_path, points, reference, name):
    out = tmp_path / name
    sw.run_sweep(points[:4], out=out)
    whole = out.read_bytes()
    for size in cut_points(whole.decode()):
        out.write_bytes(whole[:size])
        assert sw.read_rows(out) == reference[:3], size
    # As found: the rows cut after `ok,` (ok with missing numbers) made every later run exit 3, and a
    # row cut inside its last number was kept with a wrong value.
    text = whole.decode()
    last = text.rstrip("\n").rfind("\n") + 1
    status = ",ok," if name.endswith(".csv") else "\"status\": \"ok\", "
    for size in (text.index(status, last) + len(status), len(text.rstrip("\r\n")) - 2):
        out.write_bytes(whole[:size])
        res = CliRunner().invoke(app, SWEEP[:2] + ["--params", "1.3e9", "--gpus", "8:64", "--objective", "time",
                                                   "--out", str(out), "--workers", "1"])
        assert res.exit_code == 0, res.output
        assert "1 computed, 3 already in the output" in res.output
        assert sw.read_rows(out) == reference[:4] and out.read_bytes() == whole


@pytest.mark.skipif(not have_pyarrow(), reason="no pyarrow")
def test_an_unreadable_parquet_is_bad_input_until_force(tmp_path, points, reference):
    out = tmp_path / "rows.parquet"
    sw.run_sweep(points[:2], out=out)
    out.write_bytes(out.read_bytes()[:200])
    args = SWEEP[:2] + ["--params", "1.3e9", "--gpus", "8:16", "--objective", "time", "--out", str(out), "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "cannot read it as parquet" in res.output and "--force" in res.output, res.output
    res = CliRunner().invoke(app, args + ["--force"])
    assert res.exit_code == 0 and sw.read_rows(out) == reference[:2], res.output


@pytest.mark.skipif(not have_pyarrow(), reason="no pyarrow")
def test_an_empty_parquet_output_has_no_rows(tmp_path, points):
    out = tmp_path / "rows.parquet"
    sw.write_rows(out, [])
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 0 and sw.read_rows(out) == []  # was: one all-null row


# --- defect 3: two sweeps on one output --------------------------------------------------------------

def test_two_sweeps_on_one_output_one_is_refused_naming_the_other(tmp_path, spawned, reference):
    out = tmp_path / "rows.csv"
    first, second = start(spawned, "--out", out, "--workers", 1), start(spawned, "--out", out, "--workers", 1)
    results = {proc.pid: finish(proc) for proc in (first, second)}
    [(winner, (code, _))] = [(pid, r) for pid, r in results.items() if r[0] == 0]
    [(loser, (refused, stderr))] = [(pid, r) for pid, r in results.items() if pid != winner]
    assert refused == 2 and f"another plan sweep (pid {winner}) is writing this file" in stderr, stderr
    assert sw.read_rows(out) == reference  # as found, half the rows were gone
    assert not lock_path(out).exists()


def test_a_held_lock_names_its_holder(tmp_path, spawned):
    out = tmp_path / "rows.jsonl"
    with output_lock(out):
        code, stderr = finish(start(spawned, "--out", out))
    assert code == 2 and f"--out: another plan sweep (pid {os.getpid()}) is writing this file" in stderr, stderr
    assert not out.exists()


def test_a_stale_lock_file_of_a_killed_sweep_does_not_block(tmp_path, points):
    out = tmp_path / "rows.csv"
    lock_path(out).write_text("999999\n")  # left by a sweep killed with SIGKILL: no lock held
    assert sw.run_sweep(points[:1], out=out).computed == 1
    assert not lock_path(out).exists()


@pytest.mark.parametrize("where", ["/proc/rows.csv", "NAME"])
def test_an_output_whose_lock_cannot_be_written_is_bad_input(where, tmp_path):
    # /proc takes no new files; a 250-character name is legal, '.NAME.lock' beside it is not (255 bytes):
    # both were OSError, exit 3
    from typer.testing import CliRunner

    from planner.cli.main import app

    out = str(tmp_path / ("r" * 246 + ".csv")) if where == "NAME" else where
    r = CliRunner().invoke(app, ["sweep", str(ROOT / "configs/sweeps/gpt3-family.yaml"), "--params", "1.3e9",
                                 "--gpus", "8", "--quiet", "--out", out])
    assert r.exit_code == 2 and "--out" in r.output and "lock" in r.output
