"""The consensus model's cost (nkmpi.consensus.agents_cost) against the exact kernel."""

import zlib

import numpy as np
import pytest

from nkmpi import consensus, kernels


def exact_kernel_cost(model, points, offsets, weights):
    """The oracle: the reference per-feature kernel (kernels.assign_and_accumulate) on every
    agent at once, each holding a copy of the model."""
    n_agents = len(offsets) - 1
    centers = np.broadcast_to(model, (n_agents,) + model.shape).copy()
    labels = np.full(len(points), -1, dtype=np.int32)
    _, _, sse, _ = kernels.assign_and_accumulate(points, offsets, centers, labels, weights=weights)
    return kernels.exact_partials(sse)


def agents(rng, sizes, n_features, dtype, offset=0.0, grid=False):
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if grid:        # small integers: rows equidistant from several centers everywhere
        points = rng.integers(-2, 3, size=(offsets[-1], n_features)).astype(dtype)
    else:
        points = (rng.standard_normal((offsets[-1], n_features)) + offset).astype(dtype)
    return points, offsets


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("case", ["many small agents", "screened agents", "ties", "offset 1e8", "duplicate centers"])
def test_agents_cost_is_the_exact_kernels_bit_for_bit(monkeypatch, dtype, weighted, case):
    """Costed a few agents at a time (AGENTS_AT_ONCE shrunk so that the blocks and their last,
    shorter one are exercised) by the loop's pass, the exact partials are the exact kernel's."""
    monkeypatch.setattr(consensus, "AGENTS_AT_ONCE", 7)
    rng = np.random.default_rng([zlib.crc32(case.encode()), weighted])
    n_clusters, n_features = 4, 3
    if case == "many small agents":
        points, offsets = agents(rng, rng.integers(0, 6, size=40), n_features, dtype)
    elif case == "screened agents":          # 64+ rows of 16+ features: the GEMM screening path
        n_features = 16
        points, offsets = agents(rng, rng.integers(60, 140, size=9), n_features, dtype)
    elif case == "ties":
        points, offsets = agents(rng, rng.integers(1, 30, size=20), n_features, dtype, grid=True)
    elif case == "offset 1e8":
        points, offsets = agents(rng, rng.integers(1, 90, size=15), n_features, dtype, offset=1e8)
    else:
        points, offsets = agents(rng, rng.integers(1, 30, size=20), n_features, dtype)
    model = points[rng.choice(len(points), n_clusters, replace=False)].astype(np.float64)
    if case == "ties":
        model = rng.integers(-2, 3, size=(n_clusters, n_features)).astype(np.float64)
    if case == "duplicate centers":
        model[2] = model[0]
    weights = rng.uniform(0.1, 3.0, size=len(points)) if weighted else kernels.UNWEIGHTED
    got = consensus.agents_cost(model, points, offsets, weights)
    expected = exact_kernel_cost(model, points, offsets, weights)
    assert got.tobytes() == expected.tobytes()
