"""Shared helpers: small datasets and MPI launches under a timeout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_tools.dataset import write_dataset

#: Seconds any one MPI launch may take before the test fails (a hang is a failure).
MPI_TIMEOUT = 120


def mpiexec():
    """The mpiexec next to this Python (the MPICH wheel), else NKMPI_MPIEXEC or PATH."""
    found = os.environ.get("NKMPI_MPIEXEC") or str(Path(sys.executable).with_name("mpiexec"))
    if not os.path.exists(found):
        found = shutil.which("mpiexec")
    if not found:
        pytest.fail("no mpiexec: run `make install` (it installs the MPICH wheel)")
    return found


def mpi_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_mpi(n_ranks, args, timeout=MPI_TIMEOUT, module="nkmpi"):
    """`mpiexec -n R python -m MODULE ARGS` (more ranks than cores is fine); fails on a hang."""
    command = [mpiexec(), "-n", str(n_ranks), sys.executable, "-m", module] + [str(a) for a in args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"MPI run did not finish within {timeout} s (hang?): {' '.join(command)}\n"
                    f"{exc.stdout}\n{exc.stderr}")


def run_script(n_ranks, script, *args, timeout=MPI_TIMEOUT):
    """Run a Python file under mpiexec."""
    command = [mpiexec(), "-n", str(n_ranks), sys.executable, str(script)] + [str(a) for a in args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"MPI script did not finish within {timeout} s (hang?): {exc.stderr}")


def run_job(script, *args, timeout=280):
    """`python jobs/SCRIPT ARGS` (it launches mpiexec itself); fails on a hang or an error."""
    try:
        proc = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{script} {' '.join(map(str, args))} did not finish in time: {exc.stderr}")
    assert proc.returncode == 0, proc.stderr
    return proc


def blobs(rng, n_clusters=3, n_features=2, per_cluster=20, spread=0.5, separation=6.0):
    centers = rng.uniform(-separation, separation, size=(n_clusters, n_features))
    labels = np.repeat(np.arange(n_clusters), per_cluster)
    points = centers[labels] + spread * rng.standard_normal((len(labels), n_features))
    return points, labels


def uneven_dataset(path, n_agents=12, n_features=3, n_clusters=4, seed=0, dtype=np.float64):
    """Non-IID blobs: agents hold different numbers of points, agent 5 holds none.

    Returns (points, offsets) as written.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 40, size=n_agents)
    sizes[5] = 0
    centers = rng.uniform(-8, 8, size=(n_clusters, n_features))
    rows, labels = [], []
    for m, size in enumerate(sizes):
        own = rng.choice(n_clusters, size=2, replace=False)     # each agent sees two clusters
        lab = own[rng.integers(2, size=size)]
        rows.append(centers[lab] + rng.standard_normal((size, n_features)))
        labels.append(lab)
    points = np.concatenate(rows).astype(dtype)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    write_dataset(path, points, offsets, np.concatenate(labels))
    return points, offsets
