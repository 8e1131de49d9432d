"""The algorithm's own oracles on the serial reference: monotone objective,
fixed-point equations at convergence, the rho limit and scikit-learn's Lloyd."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans

from nkmpi.errors import InputError
from nkmpi.graph import build_network
from nkmpi.options import Options
from nkmpi.reference import simulate


@st.composite
def problems(draw, accelerated=False):
    """Small random NK-means problems; `accelerated` also draws --inner, a rho schedule and tol."""
    n_agents = draw(st.integers(1, 6))
    n_clusters = draw(st.integers(1, 4))
    n_features = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(0, 12), min_size=n_agents, max_size=n_agents))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    points = np.round(rng.standard_normal((sum(sizes), n_features)) * 3, draw(st.integers(0, 3)))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    spec = draw(st.sampled_from(["ring", "path", "complete", "star"]))
    rho = draw(st.floats(0.05, 1e4))
    settings = dict(max_iter=25, tol=0.0)
    if accelerated:
        schedule = draw(st.one_of(st.none(), st.tuples(st.floats(0.01, 1.0), st.floats(1.5, 20.0),
                                                       st.sampled_from([0.0, 0.05, 0.3]))))
        settings = dict(max_iter=40, tol=draw(st.sampled_from([0.0, 1e-3, 1e-1])),
                        inner=draw(st.integers(1, 6)),
                        rho_schedule=None if schedule is None else (schedule[0] * rho, *schedule[1:]))
    options = Options(n_clusters=n_clusters, rho=rho, alpha=draw(st.floats(0.01, 1.0)),
                      init=draw(st.sampled_from(["flood", "local"])), seed=seed % 1000, monitor_every=1,
                      **settings)
    return points, offsets, build_network(spec, n_agents), options


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_objective_never_increases(problem):
    points, offsets, network, options = problem
    try:
        result = simulate(points, offsets, network, options)
    except InputError:
        assume(False)                  # no agent with K distinct points: nothing to seed
    objective = result.metrics["objective"]
    scale = max(1.0, float(np.abs(objective).max()))
    assert (np.diff(objective) <= 1e-12 * scale).all(), objective


def test_objective_is_q_rho_of_the_centers_and_partition():
    """objective[t] = Q^rho(x(t-1), C(t)) computed independently from a 1-iteration run."""
    rng = np.random.default_rng(2)
    points = rng.standard_normal((40, 2))
    offsets = np.array([0, 10, 10, 25, 40])
    network = build_network("ring", 4)
    options = Options(n_clusters=3, rho=3.0, max_iter=1, monitor_every=1, init="local", seed=1)
    result = simulate(points, offsets, network, options)
    x0 = result.initial_centers
    sse = sum(cdist(points[offsets[m]:offsets[m + 1]], x0[m], "sqeuclidean").min(axis=1).sum()
              for m in range(4) if offsets[m + 1] > offsets[m])
    gaps = sum(((x0[a] - x0[b]) ** 2).sum() for a, b in nx.cycle_graph(4).edges())
    assert result.metrics["objective"][0] == pytest.approx(sse + 3.0 * gaps, rel=1e-12)


def blob_agents(seed=0, n_agents=8, n_clusters=3, n_points=400, non_iid=False):
    rng = np.random.default_rng(seed)
    means = rng.uniform(-8, 8, (n_clusters, 2))
    labels = rng.integers(n_clusters, size=n_points)
    points = means[labels] + rng.standard_normal((n_points, 2))
    agent = (labels * n_agents // n_clusters + rng.integers(2, size=n_points)) % n_agents if non_iid \
        else rng.integers(n_agents, size=n_points)
    order = np.argsort(agent, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(agent, minlength=n_agents))])
    return points[order], offsets


def fixed_point_residual(points, offsets, network, centers, rho):
    """max |x - mu| and the Voronoi labels, computed independently of nkmpi's kernels."""
    graph = network.to_networkx()
    worst, labels = 0.0, []
    for m in range(network.n_agents):
        rows = points[offsets[m]:offsets[m + 1]]
        lab = cdist(rows, centers[m], "sqeuclidean").argmin(axis=1) if len(rows) else np.zeros(0, int)
        labels.append(lab)
        for k in range(centers.shape[1]):
            mine = rows[lab == k]
            nbrs = list(graph.neighbors(m))
            mu = (mine.sum(axis=0) / rho + centers[nbrs, k].sum(axis=0)) / (len(mine) / rho + len(nbrs))
            worst = max(worst, float(np.abs(centers[m, k] - mu).max()))
    return worst, np.concatenate(labels)


@pytest.mark.parametrize("spec,alpha", [("ring", 0.5), ("torus", 1.0), ("star", 0.3)])
def test_convergence_is_a_generalized_lloyd_minimum(spec, alpha):
    points, offsets = blob_agents(seed=4, n_agents=8, non_iid=True)
    network = build_network(spec, 8)
    options = Options(n_clusters=3, rho=5.0, alpha=alpha, max_iter=20000, tol=1e-11, monitor_every=5)
    result = simulate(points, offsets, network, options)
    assert result.converged and result.iterations < options.max_iter
    residual, voronoi = fixed_point_residual(points, offsets, network, result.centers, options.rho)
    assert residual < 1e-9                                     # x = mu
    np.testing.assert_array_equal(result.assignments, voronoi)  # partitions Voronoi
    assert result.metrics["changed"][-1] == 0


def test_larger_rho_tightens_agreement_and_reaches_lloyd():
    """Theorems 6-8: as rho grows the fixed points approach the pooled Lloyd minimum."""
    points, offsets = blob_agents(seed=0)
    network = build_network("complete", 8)
    init = points[[0, 100, 200]]
    lloyd = KMeans(3, init=init, n_init=1, algorithm="lloyd", tol=0, max_iter=1000).fit(points)
    disagreement, gap = [], []
    for rho in (1, 10, 100, 1000):
        options = Options(n_clusters=3, rho=rho, alpha=1.0, max_iter=30000, tol=1e-10,
                          init=init, monitor_every=10)
        result = simulate(points, offsets, network, options)
        assert result.converged
        disagreement.append(result.metrics["edge_disagreement"][-1])
        gap.append(np.abs(result.centers - lloyd.cluster_centers_).max())
    assert all(a > 10 * b for a, b in zip(disagreement, disagreement[1:])), disagreement
    assert all(a > 3 * b for a, b in zip(gap, gap[1:])), gap
    assert gap[-1] < 5e-3 * np.ptp(points)                    # every agent matches Lloyd


def test_no_agent_can_seed_is_an_input_error():
    points = np.zeros((6, 2))
    with pytest.raises(InputError, match="distinct points"):
        simulate(points, [0, 3, 6], build_network("ring", 2), Options(n_clusters=2, init="flood"))
