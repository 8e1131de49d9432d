"""jobs/experiments.py --quick: every experiment runs end to end under mpiexec and its
numbers show what the paper and the design predict."""

import csv
from pathlib import Path

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi

SCRIPT = Path(__file__).resolve().parent.parent / "jobs" / "experiments.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("experiments")
    run_job(SCRIPT, "--quick", "--out-dir", folder)
    return folder


def rows(folder, name):
    with open(folder / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_larger_rho_approaches_lloyd(report):
    low, high = rows(report, "rho")
    for key in ("disagreement", "lloyd_step"):
        assert float(high[key]) < 0.1 * float(low[key]), key
    assert float(high["cost_ratio_max"]) - 1 < 0.01 * (float(low["cost_ratio_max"]) - 1)


def test_topology_and_alpha(report):
    ring, complete = rows(report, "topology")
    assert float(complete["lambda_2"]) > float(ring["lambda_2"])
    assert float(complete["disagreement"]) < float(ring["disagreement"])
    # The predicted time constant orders the measured iteration counts.
    assert float(complete["time_constant"]) > float(ring["time_constant"])
    assert int(complete["iterations"]) > int(ring["iterations"])
    # Inner updates do the slow part of the work between passes (same minimum here).
    assert int(complete["inner_passes"]) * 5 < int(complete["plain_passes"])
    assert float(complete["inner_objective_ratio"]) == pytest.approx(1, abs=1e-3)
    half, full = rows(report, "alpha")
    assert int(full["iterations"]) < int(half["iterations"])
    assert float(full["objective"]) == pytest.approx(float(half["objective"]), rel=1e-6)  # same fixed point


def test_acceleration_and_report(report):
    plain, fast = rows(report, "data")
    assert plain["variant"] == "plain" and fast["variant"] == "schedule 1:10 + inner 20"
    assert fast["converged"] == "True" and plain["converged"] == "True"
    assert int(fast["passes_to_plain"]) * 3 < int(plain["passes"])
    text = (report / "REPORT.md").read_text()
    for heading in ("## 1. rho sweep", "## 2. Topology", "## 3. Step size", "## 4. Data", "## 5. Faster"):
        assert heading in text
    for png in ("rho", "topology", "alpha", "acceleration"):
        assert (report / f"{png}.png").stat().st_size > 10_000
