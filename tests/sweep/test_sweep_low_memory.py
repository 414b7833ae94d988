"""A sweep under a memory limit (issue 31, item 4): `ulimit -v 460000; plan sweep --models gpt3-1.3b
--gpus 8,16,32,64 --workers 2` printed a thread's traceback ("RuntimeError: can't start new thread",
from the process pool's queue feeder) and hung until killed: the pool's futures never finish once
that thread is gone. The limit at which it happens moves with the libraries and the machine, so the
thread is made to fail to start as it did there; the command must say so in one line and exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FAILING_THREAD = """
import multiprocessing.queues
def start(self):  # what thread.start() raises when no memory is left for the thread's stack
    raise RuntimeError("can't start new thread")
multiprocessing.queues.Queue._start_thread = start
from planner.cli.main import app
app()
"""


def test_a_pool_thread_that_cannot_start_is_one_line_and_exit_2(tmp_path: Path):
    r = subprocess.run([sys.executable, "-c", FAILING_THREAD, "sweep", "--models", "gpt3-1.3b", "--gpus", "8,16,32,64",
                        "--workers", "2", "--out", "rows.csv"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)  # once: hung until killed
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("plan sweep: 4 points on 2 workers"), r.stderr
    assert lines[-1].startswith("error: ") and "can't start new thread" in lines[-1], r.stderr
    assert len(lines) == 2, r.stderr
