"""NKMeans in a user's mpi4py program, any placement of agents on ranks."""

from pathlib import Path

import pytest

from conftest import run_script

pytestmark = pytest.mark.mpi

SCRIPT = Path(__file__).parent / "mpi_scripts" / "estimator_fit.py"


@pytest.mark.parametrize("n_ranks", [1, 3, 4])
def test_estimator_matches_reference(n_ranks):
    proc = run_script(n_ranks, SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert "estimator matches the reference" in proc.stdout
