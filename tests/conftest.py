"""Shared helpers: small datasets and MPI launches under a timeout."""

import subprocess
import sys

import numpy as np
import pytest

from nkmpi import launch
from nkmpi.formats.dataset import write_dataset
from nkmpi.launch import mpi_env

#: Seconds any one MPI launch may take before the test fails (a hang is a failure).
MPI_TIMEOUT = 120


def mpiexec():
    """nkmpi.launch.mpiexec_path, or the test fails saying how to install one."""
    try:
        return launch.mpiexec_path()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


def run_mpi(n_ranks, args, timeout=MPI_TIMEOUT, module="nkmpi"):
    """`mpiexec -n R python -m MODULE ARGS` (more ranks than cores is fine); fails on a hang."""
    return run_python(n_ranks, ["-m", module, *args], timeout)


def run_script(n_ranks, script, *args, timeout=MPI_TIMEOUT):
    """Run a Python file under mpiexec."""
    return run_python(n_ranks, [script, *args], timeout)


def run_python(n_ranks, python_args, timeout):
    """`mpiexec -n R python PYTHON_ARGS`, its output captured; fails on a hang."""
    command = [mpiexec(), "-n", str(n_ranks), sys.executable, *map(str, python_args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"MPI run did not finish within {timeout} s (hang?): {' '.join(command)}\n"
                    f"{exc.stdout}\n{exc.stderr}")


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
