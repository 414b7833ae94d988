"""What the fidelity tests share: the replayed cases are read once per session (reading them, with
vTrain's 1,549 runs, parses ~140 YAML files and takes seconds). The tests only read them: `Case` is a
frozen dataclass, and no test writes to its arrays."""
from __future__ import annotations

import pytest

from planner.fidelity.calibration import load_cases
from planner.fidelity.vtrain import vtrain_groups


@pytest.fixture(scope="session")
def calibration_cases():
    """load_cases(vtrain=True): every case of the shared files, then vTrain's runs by model shape."""
    return load_cases(vtrain=True)


@pytest.fixture(scope="session")
def vtrain_run_groups():
    """vtrain_groups(): (id, model, cluster, layouts, measured times) per file and model shape."""
    return vtrain_groups()
