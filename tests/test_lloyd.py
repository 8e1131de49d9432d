"""--algorithm lloyd: exact distributed Lloyd, equal to scikit-learn's Lloyd from
the same start on any rank count, written in the same result format."""

import signal
import subprocess
import sys

import numpy as np
import pytest
from sklearn.cluster import KMeans

from conftest import mpi_command, mpi_env, run_mpi
from nkmpi.formats.dataset import write_dataset
from nkmpi.formats.result import read_result
from nkmpi.graph import build_network
from nkmpi.options import Options
from nkmpi.reference import simulate

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Overlapping blobs over 10 agents of uneven size (one empty), so Lloyd takes a while."""
    rng = np.random.default_rng(7)
    means = rng.uniform(-4, 4, (5, 3))
    points = means[rng.integers(5, size=3000)] + rng.standard_normal((3000, 3))
    sizes = rng.multinomial(3000, rng.dirichlet(np.ones(10)))
    sizes[3] += sizes[4]
    sizes[4] = 0
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    path = tmp_path_factory.mktemp("lloyd") / "blobs.h5"
    write_dataset(path, points, offsets)
    return path, points, offsets


def sklearn_lloyd(points, start):
    return KMeans(len(start), init=start, n_init=1, algorithm="lloyd", tol=0.0, max_iter=1000).fit(points)


@pytest.mark.parametrize("n_ranks", [1, 2, 3])
def test_lloyd_equals_scikit_learn(dataset, tmp_path, n_ranks):
    path, points, _ = dataset
    out = tmp_path / "lloyd.h5"
    proc = run_mpi(n_ranks, ["run", path, "-k", 5, "--algorithm", "lloyd", "--iters", 1000,
                             "--init", "flood", "--out", out, "--seed", 3])
    assert proc.returncode == 0, proc.stderr
    assert "exact Lloyd" in proc.stdout and "converged" in proc.stdout
    got = read_result(out)
    start = got["initial_centers"][0]
    assert (got["initial_centers"] == start).all()            # one start for every agent
    expected = sklearn_lloyd(points, start)
    assert got["attrs"]["converged"] and got["attrs"]["iterations"] > 5
    # Both count the iteration that finds the labels unchanged.
    assert got["attrs"]["iterations"] == expected.n_iter_
    for m in range(len(got["centers"])):
        np.testing.assert_allclose(got["centers"][m], expected.cluster_centers_, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got["assignments"], expected.labels_)
    metrics = got["metrics"]
    assert metrics["sse"][-1] == pytest.approx(expected.inertia_, rel=1e-10)
    assert (metrics["edge_disagreement"] == 0).all()
    assert (np.diff(metrics["objective"]) <= 1e-9 * metrics["objective"][0]).all()
    assert got["attrs"]["algorithm"] == "lloyd"
    # The fused allreduce: K x p sums, K counts, the changed labels and the stop flag.
    assert (got["attrs"]["rank_bytes_sent_per_iteration"] == 8 * (5 * 3 + 5 + 2)).all()


def test_simulate_lloyd_equals_the_mpi_run(dataset, tmp_path):
    path, points, offsets = dataset
    options = Options(n_clusters=5, algorithm="lloyd", max_iter=1000, seed=3, monitor_every=1)
    serial = simulate(points, offsets, build_network("ring", 10), options)
    out = tmp_path / "mpi.h5"
    proc = run_mpi(2, ["run", path, "-k", 5, "--algorithm", "lloyd", "--iters", 1000, "--out", out,
                       "--seed", 3, "--monitor-every", 1, "--quiet"])
    assert proc.returncode == 0, proc.stderr
    got = read_result(out)
    np.testing.assert_allclose(got["centers"], serial.centers, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got["assignments"], serial.assignments)
    assert got["attrs"]["iterations"] == serial.iterations
    np.testing.assert_allclose(got["metrics"]["sse"], serial.metrics["sse"], rtol=1e-12)


def test_lloyd_checkpoint_resume(dataset, tmp_path):
    path = dataset[0]
    args = ["run", path, "-k", 5, "--algorithm", "lloyd", "--iters", 1000, "--seed", 3, "--quiet"]
    proc = run_mpi(2, args + ["--out", tmp_path / "a.h5", "--checkpoint", tmp_path / "ck.h5",
                              "--checkpoint-every", 4])
    assert proc.returncode == 0, proc.stderr
    proc = run_mpi(3, args + ["--out", tmp_path / "b.h5", "--resume", tmp_path / "ck.h5"])
    assert proc.returncode == 0, proc.stderr
    full, resumed = read_result(tmp_path / "a.h5"), read_result(tmp_path / "b.h5")
    assert resumed["attrs"]["resumed_at_iteration"] > 0
    np.testing.assert_allclose(resumed["centers"], full["centers"], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(resumed["assignments"], full["assignments"])
    assert resumed["attrs"]["iterations"] == full["attrs"]["iterations"]


def test_lloyd_signal_checkpoints_and_resumes(dataset, tmp_path):
    """The stop request travels in the fused allreduce: every rank stops at the same iteration.
    The signal comes once the first checkpoint is written, with the other 19/20 of the run to
    arrive in, however fast the machine."""
    path = dataset[0]
    iterations = 20_000
    args = ["run", path, "-k", 5, "--algorithm", "lloyd", "--iters", iterations, "--monitor-every", 0,
            "--seed", 3, "--checkpoint-every", 1000]
    command = mpi_command(3, [sys.executable, "-m", "nkmpi", *args, "--out", tmp_path / "cut.h5"])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=mpi_env())
    assert "exact Lloyd" in proc.stdout.readline()
    assert "checkpoint after iteration 1000" in proc.stdout.readline()    # iterating
    proc.send_signal(signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr
    checkpoint = tmp_path / "cut.checkpoint.h5"
    assert checkpoint.exists() and not (tmp_path / "cut.h5").exists()
    resumed = run_mpi(2, args + ["--out", tmp_path / "resumed.h5", "--resume", checkpoint, "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    got = read_result(tmp_path / "resumed.h5")
    assert 0 < got["attrs"]["resumed_at_iteration"] < iterations and got["attrs"]["iterations"] == iterations
    expected = sklearn_lloyd(dataset[1], got["initial_centers"][0])
    np.testing.assert_allclose(got["centers"][0], expected.cluster_centers_, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got["assignments"], expected.labels_)
