"""A sweep bounded before it expands, early with its first words and honest when every point fails
(issue 31, items 1, 3, 5-8), reproduced as found: a 266 KB sweep file of 160 million points under a
memory limit, `--params 1e9:1e9:1000`, `--workers 256` on fewer cores, ETTR 0 under the C locale, a
CSV with a BOM. The processes run side by side to keep the file fast; a full disk and a killed
worker: tests/sweep/test_sweep_world.py."""
from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.errors import SpecError
from planner.sweep import SweepSpec, expand, with_overrides
from planner.sweep.points import MAX_POINTS, check_size

ROOT = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-c", "from planner.cli.main import app; app()"]
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
GIB = 1 << 30


def _limits(memory: int | None = None):
    def apply() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def _start(args: list[str], cwd: Path, env: dict | None = None, **limits) -> subprocess.Popen:
    return subprocess.Popen(PLAN + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", **(env or {})}, preexec_fn=_limits(**limits))


def _huge_sweep(path: Path) -> None:
    """1,000 parameter counts x 40,000 GPU counts x 4 objectives: 266 KB, 160 million points."""
    params = ", ".join(f"{1e9 * 1.001 ** i:.6g}" for i in range(1000))
    gpus = ", ".join(str(g) for g in range(1, 40_001))
    path.write_text(f"kind: sweep\nscale_model: {{base: gpt3-1.3b, params: [{params}]}}\ngpus: [{gpus}]\n"
                    "objective: [time, energy, cost, carbon]\n")
    assert 200_000 < path.stat().st_size < 300_000


def _reliability_cluster(path: Path) -> None:
    """In-bound reliability figures under which no job progresses (ETTR 0)."""
    text = (ROOT / "configs" / "clusters" / "dgx-a100-1024.yaml").read_text()
    path.write_text(text + "reliability:\n  gpu_mtbf_h: 1\n  restart_s: 1000000\n  storage_write_gbps: 0.01\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("sweeps")
    _huge_sweep(work / "huge.yaml")
    gpus = ", ".join(str(g) for g in range(1, 2001))  # 8 million points in 10 KB (parsing 266 KB takes 5 s)
    (work / "large.yaml").write_text(f"scale_model: {{base: gpt3-1.3b, params: '1e9:1e12:1000'}}\ngpus: [{gpus}]\n"
                                     "objective: [time, energy, cost, carbon]\n")
    _reliability_cluster(work / "rel.yaml")
    model = (ROOT / "configs" / "models" / "gpt3-1.3b.yaml").read_text()
    (work / "m.yaml").write_text(model.replace("training:\n", "training:\n  tokens: 3.0e11\n"))
    procs = {
        "check large": _start(["check", "large.yaml"], work, memory=GIB),
        "sweep huge": _start(["sweep", "huge.yaml", "--out", "huge.csv"], work, memory=2 * GIB),
        "ettr 0": _start(["sweep", "--models", "m.yaml", "--cluster", "rel.yaml", "--gpus", "8", "--workers", "256",
                          "--out", "rel.jsonl"], work, env=C_LOCALE),  # an ASCII terminal too
    }
    started = time.monotonic()
    many = _start(["sweep", "--scale-model", "gpt3-1.3b", "--params", "1e9:1e11:1000", "--gpus", "8:65536",
                   "--objective", "time,energy,cost,carbon", "--out", "many.csv"], work)
    first = many.stderr.readline()  # 56,000 points: a line before the 1,000 models are made
    procs["many"] = (time.monotonic() - started, first)
    many.terminate()
    many.communicate(timeout=60)
    done = {name: p if isinstance(p, tuple) else (p.communicate(timeout=240), p.returncode)
            for name, p in procs.items()}
    return work, done


def _result(runs, name: str) -> tuple[int, str, str]:
    (out, err), rc = runs[1][name]
    assert "Traceback" not in err and "internal error" not in err, err
    return rc, out, err


def test_a_huge_sweep_is_refused_before_it_is_expanded(runs):
    for name, points in (("check large", "8,000,000"), ("sweep huge", "160,000,000")):
        rc, out, err = _result(runs, name)
        text = out + err
        assert rc == 2, (name, rc, text)  # within the memory limit: once 5.2 GB (check) and 4.0 GB (sweep)
        assert f"{points} points" in text and "scale_model.params" in text and "gpus" in text, text
        assert f"at most {MAX_POINTS:,} points" in text


def test_a_large_sweep_says_something_at_once(runs):
    seconds, first = runs[1]["many"]
    assert first.startswith("plan sweep: 56,000 points"), first  # once: nothing for 60 s
    assert seconds < 10


def test_every_point_failing_is_said_and_exit_1(runs):
    """ETTR 0 under the C locale: once Infinity in the rows, exit 0 without a word, or a crash on encoding."""
    rc, out, err = _result(runs, "ettr 0")
    assert rc == 1, err  # once: exit 0 without a word
    assert "every one of the 1 points failed" in err
    assert "capped to the" in err and f"{len(os.sched_getaffinity(0))} core" in err  # --workers 256
    rows = (runs[0] / "rel.jsonl").read_text()
    assert "Infinity" not in rows and "NaN" not in rows  # once: time_to_train_days Infinity
    [row] = [json.loads(line) for line in rows.splitlines()]
    assert row["status"] == "error" and "gpu_mtbf_h" in row["reason"] and "ETTR 0" in row["reason"]
    assert not re.search(r"\b(inf|nan)\b", out, re.I), out
    (out + err).encode("ascii")  # the C locale: the table and its reasons in ASCII, no UnicodeEncodeError


def test_identical_points_run_once():
    spec = with_overrides(SweepSpec(), {"scale_model": {"base": "gpt3-1.3b", "params": "1e9:1e9:1000"}, "gpus": [8, 8]})
    assert len(expand(spec)) == 1  # once: 1,000 rows with one point_id
    close = with_overrides(SweepSpec(), {"scale_model": {"base": "gpt3-1.3b", "params": [1e9 + i for i in range(5)]},
                                         "gpus": [8]})
    assert len(expand(close)) == 1  # counts that scale to one shape are one point


def test_the_size_is_checked_from_the_spec_alone():
    spec = with_overrides(SweepSpec(), {"scale_model": {"base": "no-such-model", "params": "1e9:1e12:1000"},
                                        "gpus": list(range(1, 201))})
    with pytest.raises(SpecError, match="200,000 points"):
        check_size(spec)  # nothing loaded: the base model does not exist
    too_many = with_overrides(SweepSpec(), {"scale_model": {"base": "gpt3-1.3b", "params": [1e9 + i for i in range(1001)]}})
    with pytest.raises(SpecError, match="1,001 parameter counts"):
        check_size(too_many)


def test_the_fast_key_is_the_key_of_the_inputs():
    spec = with_overrides(SweepSpec(), {"models": ["gpt3-1.3b", "mixtral-8x7b"], "gpus": [8, 4096],
                                        "objective": ["time", "cost"],
                                        "constraints": {"memory_headroom": 0.1, "critical_batch_tokens": 1e7}})
    for p in expand(spec):  # rows written before keep resuming
        text = json.dumps(p.inputs(), sort_keys=True, separators=(",", ":"))
        assert p.key == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_a_csv_output_with_a_bom_resumes(tmp_path):
    """A spreadsheet's save adds a UTF-8 BOM: once "written with other columns"."""
    from planner.sweep import COLUMN_NAMES, read_rows, write_rows
    from planner.sweep.rows import _input_columns

    [point] = expand(with_overrides(SweepSpec(), {"models": ["gpt3-1.3b"], "gpus": [8]}))
    row = {**dict.fromkeys(COLUMN_NAMES), **_input_columns(point), "status": "infeasible", "reason": "none fits"}
    path = tmp_path / "rows.csv"
    write_rows(path, [row])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [r["point_id"] for r in read_rows(path)] == [point.key]
