"""One compute thread per rank unless asked: no BLAS or JIT oversubscription under MPI."""

import json
from pathlib import Path

import pytest

from conftest import run_script, uneven_dataset

pytestmark = pytest.mark.mpi

SCRIPT = Path(__file__).parent / "mpi_scripts" / "threads_probe.py"


@pytest.mark.parametrize("threads", [None, 2])
def test_thread_pools_during_a_run(tmp_path, threads):
    uneven_dataset(tmp_path / "d.h5")
    extra = [] if threads is None else ["--threads", threads]
    proc = run_script(2, SCRIPT, "run", tmp_path / "d.h5", "-k", 3, "--iters", 3, "--quiet",
                      "--out", tmp_path / "r.h5", *extra)
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(ranks) == 2
    for seen in ranks:
        assert seen["kernel_threads"] == (threads or 1)
        assert seen["pools"], "threadpoolctl found no thread pool (numpy's BLAS at least)"
        # BLAS never threads; the kernels' OpenMP pool has exactly --threads threads.
        assert all(n == 1 for api, n in seen["pools"] if api != "openmp"), seen["pools"]
        assert all(n == (threads or 1) for api, n in seen["pools"] if api == "openmp"), seen["pools"]
