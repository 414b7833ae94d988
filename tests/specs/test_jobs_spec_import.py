"""`plan schema jobs` needs only the jobs spec (planner/specs/jobs.py): it must not import OR-Tools
(about 0.9 s and 95 MB more, through planner/allocate.py), and its schema must still describe the
jobs file as the spec class does."""
from __future__ import annotations

import json
import subprocess
import sys

# A fresh interpreter: the test process may have imported OR-Tools already.
_RUN = """
import json, sys
from typer.testing import CliRunner
from planner.cli.main import app
r = CliRunner().invoke(app, ["schema", "jobs"])
print(json.dumps({"exit": r.exit_code, "out": r.stdout,
                  "ortools": sorted(m for m in sys.modules if m.split(".")[0] == "ortools"),
                  "allocate": "planner.allocate" in sys.modules}))
"""


def _schema_jobs(tmp_path) -> dict:
    r = subprocess.run([sys.executable, "-c", _RUN], check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _required(cls) -> set[str]:
    return {name for name, field in cls.model_fields.items() if field.is_required()}


def test_schema_jobs_imports_no_ortools_and_describes_the_spec(tmp_path):
    run = _schema_jobs(tmp_path)
    assert run["exit"] == 0, run["out"]
    assert run["ortools"] == [] and not run["allocate"]

    from planner.allocate import JobSpec, JobsSpec  # the old import path still works

    import planner.specs.jobs as jobs

    assert (JobsSpec, JobSpec) == (jobs.JobsSpec, jobs.JobSpec)
    schema = json.loads(run["out"])
    assert schema["$id"].endswith("/jobs.json") and schema["title"] == "JobsSpec"
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(JobsSpec.model_fields)  # `kind` among them
    assert schema["properties"]["kind"]["const"] == "jobs"
    assert set(schema.get("required", [])) == _required(JobsSpec)
    job = schema["$defs"]["JobSpec"]
    assert set(job["properties"]) == set(JobSpec.model_fields)
    assert set(job["required"]) == _required(JobSpec)
    assert schema["properties"]["jobs"]["items"] == {"$ref": "#/$defs/JobSpec"}
