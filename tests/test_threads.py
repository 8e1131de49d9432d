"""One compute thread per rank unless asked: no BLAS or JIT oversubscription under MPI."""

import json
import sys
from pathlib import Path

import pytest

from conftest import mpi_command, mpi_env, run_launch, uneven_dataset

pytestmark = pytest.mark.mpi

SCRIPT = Path(__file__).parent / "mpi_scripts" / "threads_probe.py"


@pytest.mark.parametrize("blas_threads", [None, "2"])
@pytest.mark.parametrize("threads", [None, 2])
def test_thread_pools_during_a_run(tmp_path, threads, blas_threads):
    """Whatever BLAS threads the environment asks for: nkmpi.launch's one, or more (a plain
    srun or mpiexec passes the user's OPENBLAS_NUM_THREADS on), also to the BLAS that the
    kernels' matrix products call, which is loaded with the kernels, after the run starts."""
    uneven_dataset(tmp_path / "d.h5")
    extra = [] if threads is None else ["--threads", threads]
    env = mpi_env() if blas_threads is None else dict(mpi_env(), OPENBLAS_NUM_THREADS=blas_threads)
    proc = run_launch(mpi_command(2, [sys.executable, SCRIPT, "run", tmp_path / "d.h5", "-k", 3, "--iters", 3,
                                      "--quiet", "--out", tmp_path / "r.h5", *extra]), env=env)
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(ranks) == 2
    for seen in ranks:
        assert seen["kernel_threads"] == (threads or 1)
        assert seen["pools"], "threadpoolctl found no thread pool (numpy's BLAS at least)"
        # BLAS never threads; the kernels' OpenMP pool has exactly --threads threads.
        assert all(n == 1 for api, n in seen["pools"] if api != "openmp"), seen["pools"]
        assert all(n == (threads or 1) for api, n in seen["pools"] if api == "openmp"), seen["pools"]
