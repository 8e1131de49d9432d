"""The result does not depend on the MPI library: the MPI 3 exchange (no persistent
neighbourhood collective) writes the same result file as MPI 4's, and an Open MPI stack the
same as an MPICH one, bit for bit (but the record of how the run went)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MPI_TIMEOUT, assert_same_file, mpi_env, run_launch, run_mpi, run_script, uneven_dataset

pytestmark = pytest.mark.mpi

SCRIPTS = Path(__file__).parent / "mpi_scripts"
#: The python of another environment (another MPI stack) with nkmpi installed; CI sets it.
OTHER_PYTHON = os.environ.get("NKMPI_OTHER_PYTHON")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("libraries") / "data.h5"
    uneven_dataset(path)
    return path


def run_args(dataset, out):
    """A short run that goes through every use of the exchange: the flood start's
    exchanges, start and finish around the local pass, and the blocking inner ones."""
    return ["run", dataset, "-k", 4, "--init", "flood", "--inner", 2, "--iters", 40, "--monitor-every", 3,
            "--tol", 0, "--quiet", "--out", out]


def test_mpi3_exchange_writes_the_same_result_file(dataset, tmp_path):
    """persistent=False, MPI 3's path, against the default exchange (MPI 4's persistent
    collective wherever the library has it) on 1, 2 and 3 ranks."""
    outs = []
    for n_ranks in (1, 2, 3):
        default, restarted = tmp_path / f"default{n_ranks}.h5", tmp_path / f"restarted{n_ranks}.h5"
        proc = run_mpi(n_ranks, run_args(dataset, default))
        assert proc.returncode == 0, proc.stderr
        proc = run_script(n_ranks, SCRIPTS / "restarted_exchange.py", *run_args(dataset, restarted))
        assert proc.returncode == 0, proc.stderr
        outs += [default, restarted]
    for out in outs[1:]:
        assert_same_file(out, outs[0])


def library(python):
    """The first line of the MPI library version an environment's mpi4py loads."""
    code = ("from mpi4py import rc; rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version().splitlines()[0])")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                          timeout=MPI_TIMEOUT).stdout.strip()


@pytest.mark.skipif(not OTHER_PYTHON, reason="no other MPI stack: NKMPI_OTHER_PYTHON names another "
                                             "environment's python (CI sets it)")
def test_another_mpi_library_writes_the_same_result_file(dataset, tmp_path):
    if not os.access(OTHER_PYTHON, os.X_OK):
        pytest.fail(f"NKMPI_OTHER_PYTHON={OTHER_PYTHON} is not an executable")
    this, other = library(sys.executable), library(OTHER_PYTHON)
    if this == other:
        pytest.skip(f"NKMPI_OTHER_PYTHON uses this environment's MPI library ({this})")
    env = mpi_env()
    env.pop("NKMPI_MPIEXEC", None)            # the other environment's launcher is its own
    for n_ranks in (1, 2, 3):
        ours, theirs = tmp_path / f"ours{n_ranks}.h5", tmp_path / f"theirs{n_ranks}.h5"
        proc = run_mpi(n_ranks, run_args(dataset, ours))
        assert proc.returncode == 0, proc.stderr
        command = [OTHER_PYTHON, "-m", "nkmpi.launch", "-n", str(n_ranks), "--", OTHER_PYTHON, "-m", "nkmpi",
                   *map(str, run_args(dataset, theirs))]
        proc = run_launch(command, env=env)
        assert proc.returncode == 0, (other, proc.stderr)
        assert_same_file(theirs, ours)
