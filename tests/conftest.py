"""Shared helpers: small datasets, MPI launches under a timeout, result files compared.

Tests that start MPI programs carry the `mpi` marker: `make test-mpi` runs only them, on
the environment's MPI stack (CI runs them on each stack it installs).
"""

import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from nkmpi import launch
from nkmpi.formats.dataset import write_dataset
from nkmpi.formats.hdf5 import IO_ATTRIBUTE
from nkmpi.launch import mpi_env


def pytest_sessionstart(session):
    """Kernels cached from other sources than these are dropped before any test loads
    them (precompile.drop_stale_kernels): numba would not see an edited helper module."""
    from nkmpi.precompile import drop_stale_kernels
    drop_stale_kernels()


#: Seconds any one MPI launch may take before the test fails (a hang is a failure).
MPI_TIMEOUT = 120
#: What a result records about how it was run (time, ranks, memory, how the ranks wrote it),
#: the only parts of the file allowed to differ between rank counts and MPI libraries.
EXECUTION_RECORD = {"n_ranks", "seconds", "seconds_kernels", "seconds_setup", "seconds_loop", "metrics/seconds",
                    IO_ATTRIBUTE}


def mpiexec():
    """nkmpi.launch.mpiexec_path, or the test fails saying how to install one."""
    try:
        return launch.mpiexec_path()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


def mpi_command(n_ranks, args):
    """nkmpi.launch.launch_command: `mpiexec [the flags its MPI needs] -n R ARGS`."""
    try:
        return launch.launch_command(n_ranks, args)
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


def stop_signal():
    """The signal a test sends mpiexec to stop a run: SIGTERM, which Hydra passes on to every
    rank, or under Open MPI SIGUSR1, since its mpiexec answers SIGTERM by ending the job."""
    return signal.SIGUSR1 if launch.implementation(mpiexec()) == "openmpi" else signal.SIGTERM


def run_mpi(n_ranks, args, timeout=MPI_TIMEOUT, module="nkmpi"):
    """`mpiexec -n R python -m MODULE ARGS` (more ranks than cores is fine); fails on a hang."""
    return run_python(n_ranks, ["-m", module, *args], timeout)


def run_script(n_ranks, script, *args, timeout=MPI_TIMEOUT):
    """Run a Python file under mpiexec."""
    return run_python(n_ranks, [script, *args], timeout)


def run_python(n_ranks, python_args, timeout):
    """`mpiexec -n R python PYTHON_ARGS`, its output captured; fails on a hang."""
    return run_launch(mpi_command(n_ranks, [sys.executable, *python_args]), timeout)


def run_launch(command, timeout=MPI_TIMEOUT, env=None):
    """Run a launch command (mpiexec's, or another environment's nkmpi.launch), its output
    captured; fails on a hang."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env or mpi_env())
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


def file_contents(path, ignore=()):
    """Every attribute and dataset of an HDF5 file, by path, but the execution record and
    the root attributes `ignore`."""
    contents = {}

    def visit(name, node):
        if name not in EXECUTION_RECORD and isinstance(node, h5py.Dataset):
            contents[name] = node[()]
        for key, value in node.attrs.items():
            if key not in EXECUTION_RECORD and not key.startswith("rank_") and not (name == "" and key in ignore):
                contents[f"{name}@{key}"] = value

    with h5py.File(path, "r") as f:
        visit("", f)
        f.visititems(visit)
    return contents


def assert_same_file(path, expected, ignore=()):
    """Two HDF5 files hold the same attributes and datasets, bit for bit, but the execution
    record and the root attributes `ignore`."""
    found, wanted = file_contents(path, ignore), file_contents(expected, ignore)
    assert set(found) == set(wanted), (path, set(found) ^ set(wanted))
    for name, value in wanted.items():
        assert np.array_equal(found[name], value), (path, name, value, found[name])


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


def agent_edge_sum(ext, a, higher):
    """Plainly, the disagreement an agent counts: over its edges to the `higher` rows (ascending
    ids), each coordinate's squared gaps added edge by edge; the coordinates in eight lanes (w
    mod 8), joined ((0+1)+(2+3))+((4+5)+(6+7))."""
    x = ext[a].ravel()
    gaps = [0.0] * len(x)
    for b in higher:
        for w, (u, v) in enumerate(zip(x, ext[b].ravel())):
            gaps[w] += (u - v) * (u - v)
    lanes = [0.0] * 8
    for w, gap in enumerate(gaps):
        lanes[w % 8] += gap
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
