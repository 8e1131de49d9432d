"""Row weights on the serial reference, against two oracles that need no weights at all:
a row of weight 0 is a row that is not there, and a row of integer weight w is the same
row repeated w times.  Both hold bit for bit for the centers, labels and iterations; for
repetition, where the cluster sums are exact (small integer coordinates: sums and counts
of them are exact in float64).  The cost adds w d once where repetition adds d w times,
so it agrees to rounding."""

import numpy as np
import pytest
from conftest import uneven_dataset

from nkmpi.cli import main
from nkmpi.formats.dataset import write_dataset
from nkmpi.graph import build_network
from nkmpi.options import Options
from nkmpi.reference import lloyd, simulate

#: The metrics that depend on the centers alone.
CENTER_METRICS = ("iteration", "edge_disagreement", "max_move", "rho")
#: The cost: w d added once against d added w times, equal to rounding.
COST_METRICS = ("objective", "sse")


def agent_data(rng, sizes, p, integer=False):
    rows = rng.integers(-6, 7, (sum(sizes), p)).astype(float) if integer else rng.standard_normal((sum(sizes), p))
    return rows, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def assert_same_run(one, other, expand=None):
    np.testing.assert_array_equal(one.centers, other.centers)
    np.testing.assert_array_equal(one.initial_centers, other.initial_centers)
    assert (one.iterations, one.converged) == (other.iterations, other.converged)
    for name in CENTER_METRICS:
        np.testing.assert_array_equal(one.metrics[name], other.metrics[name], err_msg=name)
    for name in COST_METRICS:
        np.testing.assert_allclose(one.metrics[name], other.metrics[name], rtol=1e-14, err_msg=name)
    expected = one.assignments if expand is None else np.repeat(one.assignments, expand)
    np.testing.assert_array_equal(expected, other.assignments)


@pytest.mark.parametrize("init, algorithm", [("network", "nkmeans"), ("flood", "nkmeans"), ("local", "nkmeans"),
                                             ("network", "lloyd"), ("flood", "lloyd")])
def test_zero_weight_rows_are_absent(init, algorithm):
    """Any data, every seeding: rows of weight 0 change nothing but their own labels (which
    may still change, so the runs go a fixed number of iterations: no early stop)."""
    rng = np.random.default_rng(7)
    sizes = [60, 45, 80, 30, 55]
    points, offsets = agent_data(rng, sizes, 3)
    weights = rng.random(len(points)) * 3
    absent = rng.random(len(points)) < 0.3
    weights[absent] = 0.0
    kept_sizes = [int((~absent[offsets[a]:offsets[a + 1]]).sum()) for a in range(len(sizes))]
    kept_offsets = np.concatenate([[0], np.cumsum(kept_sizes)])
    network = build_network("ring", len(sizes))
    options = Options(n_clusters=3, rho=20.0, init=init, algorithm=algorithm, max_iter=30, monitor_every=0,
                      seed=4)
    full = simulate(points, offsets, network, options, weights=weights)
    kept = simulate(points[~absent], kept_offsets, network, options, weights=weights[~absent])
    np.testing.assert_array_equal(full.centers, kept.centers)
    np.testing.assert_array_equal(full.initial_centers, kept.initial_centers)
    for name in CENTER_METRICS + COST_METRICS:
        np.testing.assert_array_equal(full.metrics[name], kept.metrics[name], err_msg=name)
    np.testing.assert_array_equal(full.assignments[~absent], kept.assignments)


@pytest.mark.parametrize("algorithm", ["nkmeans", "lloyd"])
@pytest.mark.parametrize("inner", [1, 3])
def test_integer_weights_are_repeated_rows(algorithm, inner):
    """From given centers: weight w gives exactly the run on the row repeated w times."""
    rng = np.random.default_rng(11)
    sizes = [25, 40, 18, 33]
    points, offsets = agent_data(rng, sizes, 2, integer=True)
    weights = rng.integers(1, 5, len(points))
    repeated_sizes = [int(weights[offsets[a]:offsets[a + 1]].sum()) for a in range(len(sizes))]
    repeated_offsets = np.concatenate([[0], np.cumsum(repeated_sizes)])
    network = build_network("path", len(sizes))
    centers = np.array([[-4.0, -4.0], [0.0, 3.0], [5.0, -2.0]])
    settings = dict(inner=inner) if algorithm == "nkmeans" else {}
    options = Options(n_clusters=3, rho=8.0, alpha=0.5, init=centers, algorithm=algorithm, max_iter=40,
                      monitor_every=1, tol=0.0, **settings)
    weighted = simulate(points, offsets, network, options, weights=weights.astype(float))
    repeated = simulate(np.repeat(points, weights, axis=0), repeated_offsets, network, options)
    assert_same_run(weighted, repeated, expand=weights)


def test_weighted_lloyd_baseline_is_lloyd_on_repeated_rows():
    rng = np.random.default_rng(3)
    points, _ = agent_data(rng, [200], 3, integer=True)
    weights = rng.integers(1, 4, len(points))
    start = points[:4].copy() + 0.5
    got, iterations = lloyd(points, start, weights=weights.astype(float))
    expected, expected_iterations = lloyd(np.repeat(points, weights, axis=0), start)
    np.testing.assert_array_equal(got, expected)
    assert iterations == expected_iterations


def test_weights_pull_the_centers():
    """Not a no-op: weighting one blob's rows heavily moves the network's centers towards it."""
    rng = np.random.default_rng(5)
    points = np.concatenate([rng.normal(0.0, 1.0, (100, 1)), rng.normal(10.0, 1.0, (100, 1))])
    offsets = np.array([0, 100, 200])
    options = Options(n_clusters=1, rho=1e5, init=np.zeros((1, 1)), max_iter=3000, monitor_every=1)
    network = build_network("path", 2)
    plain = simulate(points, offsets, network, options)
    heavy = simulate(points, offsets, network, options, weights=np.r_[np.ones(100), np.full(100, 9.0)])
    assert plain.centers.mean() == pytest.approx(5.0, abs=0.5)
    assert heavy.centers.mean() == pytest.approx(9.0, abs=0.5)


@pytest.mark.parametrize("value, message", [(1e306, "the weights add up to inf"), (1e11, "weighted sums could overflow"),
                                            (0.0, "every row has weight 0")])
def test_simulate_refuses_weights_with_nothing_or_too_much_to_cluster(tmp_path, capsys, value, message):
    """The serial entry point refuses them as `nkmpi run` does (tests/test_validation.py)."""
    data = tmp_path / "data.h5"
    points, offsets = uneven_dataset(data)
    write_dataset(data, points, offsets, weights=np.full(len(points), value))
    assert main(["simulate", str(data), "-k", "3", "--out", str(tmp_path / "out.h5")]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("out.h5*"))
