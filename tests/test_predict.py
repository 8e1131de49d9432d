"""The consensus model and `nkmpi predict`, under mpiexec, against independent oracles:
the exactly rounded average of the result's own centers, the serial reference's nearest
centers, the run's assignments, and rank-count invariance.  Weighted data run like the
serial reference on any rank count, seeding included."""

import math
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import assert_same_file, run_mpi, run_script, uneven_dataset
from nkmpi.formats.dataset import write_dataset
from nkmpi.formats.labels import read_labels
from nkmpi.formats.result import read_result
from nkmpi.graph import build_network
from nkmpi.options import Options
from nkmpi.reference import centralized_cost, nearest, simulate

pytestmark = pytest.mark.mpi

RUN = ["-k", 4, "--graph", "ring", "--iters", 30, "--tol", 0, "--monitor-every", 1, "--quiet"]


def weighted_dataset(path):
    points, offsets = uneven_dataset(path)
    weights = np.random.default_rng(3).choice([0.0, 0.5, 1.0, 2.0, 7.0], size=len(points))
    with h5py.File(path, "r") as f:
        labels = f["labels"][()]
    path.unlink()
    write_dataset(path, points, offsets, labels, weights=weights)
    return points, offsets, weights


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A weighted dataset and its run on 1, 2 and 3 ranks."""
    folder = tmp_path_factory.mktemp("predict")
    data = folder / "data.h5"
    points, offsets, weights = weighted_dataset(data)
    results = {}
    for n_ranks in (1, 2, 3):
        out = folder / f"run{n_ranks}.h5"
        proc = run_mpi(n_ranks, ["run", data, *RUN, "--out", out])
        assert proc.returncode == 0, proc.stderr
        results[n_ranks] = out
    return data, points, offsets, weights, results


def test_weighted_runs_are_the_reference_on_any_rank_count(runs):
    data, points, offsets, weights, results = runs
    options = Options(n_clusters=4, graph="ring", max_iter=30, tol=0.0, monitor_every=1)
    expected = simulate(points, offsets, build_network("ring", len(offsets) - 1), options, weights=weights)
    got = read_result(results[1])
    np.testing.assert_array_equal(got["initial_centers"], expected.initial_centers)     # weighted seeding
    np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got["assignments"], expected.assignments)
    np.testing.assert_allclose(got["metrics"]["sse"], expected.metrics["sse"], rtol=1e-12)
    assert got["attrs"]["weighted"]
    for n_ranks in (2, 3):
        assert_same_file(results[n_ranks], results[1])


def test_the_consensus_is_the_exact_average_and_its_cost(runs):
    data, points, offsets, weights, results = runs
    result = read_result(results[1])
    centers = result["centers"]
    expected = np.array([[math.fsum(centers[:, k, j]) for j in range(centers.shape[2])]
                         for k in range(centers.shape[1])]) / len(centers)
    assert result["consensus_centers"].tobytes() == expected.tobytes()
    assert result["attrs"]["consensus_cost"] == pytest.approx(
        centralized_cost(points, expected, weights), rel=1e-12)


@pytest.mark.parametrize("n_ranks", [1, 3])
def test_predict_own_gives_the_assignments_and_consensus_the_nearest(runs, tmp_path, n_ranks):
    data, points, offsets, weights, results = runs
    result = read_result(results[1])
    for model, expected in (("own", result["assignments"]),
                            ("consensus", nearest(points, result["consensus_centers"])[0]),
                            ("4", nearest(points, result["centers"][4])[0])):
        out = tmp_path / f"{model}.labels.h5"
        proc = run_mpi(n_ranks, ["predict", results[1], data, "--model", model, "--out", out, "--quiet"])
        assert proc.returncode == 0, proc.stderr
        labels = read_labels(out)
        np.testing.assert_array_equal(labels["labels"], expected)
        assert labels["attrs"]["model"] == model


def test_init_from_a_result_starts_at_its_consensus(runs, tmp_path):
    data, points, offsets, weights, results = runs
    out = tmp_path / "again.h5"
    proc = run_mpi(2, ["run", data, *RUN, "--iters", 2, "--init", f"file:{results[1]}", "--out", out])
    assert proc.returncode == 0, proc.stderr
    consensus = read_result(results[1])["consensus_centers"]
    start = read_result(out)["initial_centers"]
    assert all(np.array_equal(agent, consensus) for agent in start)


def test_predict_refuses_other_features_dtype_and_models(runs, tmp_path):
    data, points, offsets, weights, results = runs
    wide, single = tmp_path / "wide.h5", tmp_path / "single.h5"
    write_dataset(wide, np.zeros((10, 4)), np.array([0, 10]))
    write_dataset(single, points.astype(np.float32), offsets)
    fewer = tmp_path / "fewer.h5"
    write_dataset(fewer, points, np.array([0, len(points)]))
    unordered = tmp_path / "unordered.h5"             # offsets that decrease: refused by any model
    write_dataset(unordered, points, offsets)
    with h5py.File(unordered, "r+") as f:
        f["agent_offsets"][len(offsets) - 2] = f["agent_offsets"][1] - 1
    damaged = tmp_path / "damaged.h5"                 # NaN consensus, the last agent's centers infinite
    damaged.write_bytes(Path(results[1]).read_bytes())
    with h5py.File(damaged, "r+") as f:
        f["consensus_centers"][0, 0] = np.nan
        f["centers"][len(offsets) - 2, 1, 0] = np.inf
    last = str(len(offsets) - 2)
    for args, words in ((["predict", damaged, data], "consensus centers hold NaN or Inf"),
                        (["predict", damaged, data, "--model", "own"], "own centers hold NaN or Inf"),
                        (["predict", damaged, data, "--model", last], f"{last} centers hold NaN or Inf"),
                        (["predict", results[1], wide], "4 features"),
                        (["predict", results[1], single], "float32"),
                        (["predict", results[1], fewer, "--model", "own"], "agents"),
                        (["predict", results[1], unordered], "'agent_offsets' decreases at agent"),
                        (["predict", results[1], unordered, "--model", "3"], "'agent_offsets' decreases at agent"),
                        (["predict", results[1], data, "--model", "12"], "agent id"),
                        (["predict", results[1], data, "--out", data], "refusing to overwrite"),
                        (["predict", data, data], "result")):
        proc = run_mpi(2, args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("nkmpi: error:") and words in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_the_estimator_takes_weights_and_predicts_with_the_consensus(runs, tmp_path):
    data, points, offsets, weights, results = runs
    proc = run_script(2, "tests/mpi_scripts/weighted_fit.py", data, results[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
