"""The fixed runs of tests/regression_runs.py give byte-identical arrays to the ones recorded."""

import numpy as np
import pytest

from conftest import run_mpi
from regression_runs import FIXTURE, run_all

pytestmark = pytest.mark.mpi


def test_results_are_byte_identical_to_the_recorded_ones(tmp_path):
    recorded = np.load(FIXTURE)
    found = run_all(run_mpi, tmp_path, recorded["points"], recorded["offsets"])
    expected = {key: recorded[key] for key in recorded.files if ":" in key}
    assert sorted(found) == sorted(expected)
    differ = [key for key in expected
              if found[key].dtype != expected[key].dtype or found[key].tobytes() != expected[key].tobytes()]
    assert not differ, f"arrays changed: {differ}"
