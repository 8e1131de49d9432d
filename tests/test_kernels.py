"""The compiled block kernels against the plain per-agent reference formulas."""

import math

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkmpi import kernels
from nkmpi.faults import FaultModel, link_up, takes_part
from nkmpi.reference import nearest

from conftest import agent_edge_sum


def reference_block(points, offsets, centers):
    """Per agent, plainly: labels, sums, counts, sse."""
    n_agents, k, p = centers.shape
    labels, sums, counts, sse = [], np.zeros((n_agents, k, p)), np.zeros((n_agents, k), int), np.zeros(n_agents)
    for m in range(n_agents):
        rows = points[offsets[m]:offsets[m + 1]]
        lab, chosen = nearest(rows, centers[m])
        labels.append(lab)
        np.add.at(sums[m], lab, rows)
        counts[m] = np.bincount(lab, minlength=k)
        sse[m] = chosen.astype(np.float64).sum()
    return np.concatenate(labels), sums, counts, sse


def check_block(points, offsets, centers):
    labels = np.full(len(points), -1, dtype=np.int32)
    sums, counts, sse, changed = kernels.assign_and_accumulate(points, offsets, centers, labels)
    ref_labels, ref_sums, ref_counts, ref_sse = reference_block(points, offsets, centers)
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_array_equal(sums, ref_sums)        # same reduction order: bitwise
    np.testing.assert_array_equal(counts, ref_counts)
    np.testing.assert_allclose(sse, ref_sse, rtol=1e-12)
    assert changed == len(points)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k,p", [(1, 1), (3, 1), (1, 4), (5, 3), (8, 17), (16, 32)])
def test_assign_and_accumulate_matches_reference(dtype, k, p):
    rng = np.random.default_rng(k * 100 + p)
    sizes = np.array([0, 7, 300, 1, 0, 45])          # agents without points
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    points = rng.standard_normal((offsets[-1], p)).astype(dtype)
    check_block(points, offsets, rng.standard_normal((len(sizes), k, p)))


def blocked_sums(rows, labels, weights, k, block):
    """An agent's cluster sums and counts by the definition, one number at a time: rows in
    order within each block of `block` rows, from zero, then the blocks in order."""
    sums, counts = np.zeros((k, rows.shape[1])), np.zeros(k)
    for start in range(0, len(rows), block):
        block_sums, block_counts = np.zeros_like(sums), np.zeros_like(counts)
        for row in range(start, min(start + block, len(rows))):
            weight = 1.0 if weights is None else weights[row]
            block_counts[labels[row]] += weight
            for j in range(rows.shape[1]):
                block_sums[labels[row], j] += weight * float(rows[row, j])
        sums += block_sums
        counts += block_counts
    return sums, counts


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("k", [2, 20])
def test_cluster_sums_add_blocks_of_rows(dtype, weighted, k):
    """An agent's cluster sums add its rows in blocks of sum_block_rows(K) (1,024 rows for K =
    2, 1,280 for K = 20), each from zero, then the blocks in order: the kernel and the serial
    reference both, for agents of one block, of a block and a row, and of several."""
    from nkmpi.reference import cluster_sums
    block = kernels.sum_block_rows(k)
    assert block == max(1024, 64 * k)
    rng = np.random.default_rng(k + weighted)
    sizes = np.array([5, block, block + 1, 3 * block + 17, 0])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    points = (rng.standard_normal((offsets[-1], 3)) * 10.0 ** rng.integers(-8, 9, (offsets[-1], 1))).astype(dtype)
    weights = rng.random(len(points)) * 3 if weighted else None
    centers = rng.standard_normal((len(sizes), k, 3))
    labels = np.full(len(points), -1, dtype=np.int32)
    sums, counts, _, _ = kernels.assign_and_accumulate(points, offsets, centers, labels,
                                                       weights=kernels.UNWEIGHTED if weights is None else weights)
    straight_differs = False
    for m in range(len(sizes)):
        part = slice(offsets[m], offsets[m + 1])
        agent_weights = None if weights is None else weights[part]
        expected = blocked_sums(points[part], labels[part], agent_weights, k, block)
        straight = blocked_sums(points[part], labels[part], agent_weights, k, max(sizes[m], 1))
        for got in ((sums[m], counts[m]), cluster_sums(points[part], labels[part], agent_weights, k)):
            assert got[0].tobytes() == expected[0].tobytes(), f"agent {m}: sums"
            assert got[1].tobytes() == expected[1].tobytes(), f"agent {m}: counts"
        if sizes[m] <= block:
            assert straight[0].tobytes() == expected[0].tobytes()
        straight_differs |= straight[0].tobytes() != expected[0].tobytes()
    assert straight_differs, "the data should tell blocked sums from straight ones"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [1, 3, 8, 11, 20])
@pytest.mark.parametrize("p", [1, 5, 8, 17])
@pytest.mark.parametrize("order", ["C", "F"])
def test_tile_distances_are_the_per_feature_sums(dtype, k, p, order):
    """Every row's distance to every center, bit for bit the sum of its squared gaps added
    feature by feature from 0 in the data's precision (numpy's elementwise operations are
    single IEEE operations), for tiles of one row to a whole tile, and centers in passes of
    up to eight (k = 11 and 20 end on a partial pass); rows in C order (whole 8 x 8 blocks
    transposed in registers, p = 8 and 17) or in Fortran order (one number at a time)."""
    rng = np.random.default_rng(k * 100 + p)
    tile = kernels.tile_rows(k, kernels.TILE)
    points = (rng.standard_normal((tile + 40, p)) * 10.0 ** rng.integers(-3, 6, size=p)).astype(dtype, order=order)
    center = (rng.standard_normal((k, p)) * 10.0 ** rng.integers(-3, 6, size=p)).astype(dtype)
    rows_t, dist = np.zeros((p, tile), dtype=dtype), np.empty((k, tile), dtype=dtype)
    for start, n in [(0, 1), (3, 7), (5, 16), (1, 33), (40, tile)]:
        kernels.tile_distances(points, start, n, center, rows_t, dist)
        expected = np.zeros((k, n), dtype=dtype)
        for j in range(p):
            gaps = points[start:start + n, j][None, :] - center[:, j][:, None]
            expected += gaps * gaps
        np.testing.assert_array_equal(dist[:, :n].view(np.uint8), expected.view(np.uint8))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1),
       st.sampled_from([np.float32, np.float64]))
def test_random_blocks_with_ties(n_agents, k, p, seed, dtype):
    """Small integer grids make exact ties and empty clusters common."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 20, size=n_agents)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    points = rng.integers(-2, 3, size=(offsets[-1], p)).astype(dtype)
    centers = rng.integers(-2, 3, size=(n_agents, k, p)).astype(np.float64) / 2
    check_block(points, offsets, centers)


def test_ties_go_to_lowest_cluster_and_changed_counts():
    points = np.array([[0.0], [1.0], [2.0]])
    centers = np.array([[[1.0], [1.0], [3.0]]])       # clusters 0 and 1 coincide
    labels = np.array([1, 1, 2], dtype=np.int32)
    sums, counts, sse, changed = kernels.assign_and_accumulate(points, np.array([0, 3]), centers, labels)
    np.testing.assert_array_equal(labels, [0, 0, 0])   # 2.0 is 1 from both 1.0 and 3.0: lowest k
    assert changed == 3
    np.testing.assert_array_equal(counts, [[3, 0, 0]])  # clusters 1 and 2 empty
    assert sse[0] == 1 + 0 + 1


def update_problem(seed=1):
    """Three agents (agent 1 isolated, agent 0 with an empty cluster) and three ghosts."""
    rng = np.random.default_rng(seed)
    n_local, k, p = 3, 4, 2
    ext = rng.standard_normal((6, k, p))              # rows 0..2 the block, 3..5 ghosts
    nbr_ptr = np.array([0, 3, 3, 4])
    nbr_idx = np.array([1, 3, 5, 0])
    sums = rng.standard_normal((n_local, k, p))
    counts = rng.integers(0, 3, size=(n_local, k))
    counts[0, 1] = 0
    return ext[:n_local].copy(), ext, nbr_ptr, nbr_idx, sums, counts


def expected_update(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, alpha, counted=lambda a, e: True):
    """The equations agent by agent; only the neighbour entries e with counted(a, e) count."""
    new = np.empty_like(centers)
    for a in range(len(centers)):
        nbrs = [nbr_idx[e] for e in range(nbr_ptr[a], nbr_ptr[a + 1]) if counted(a, e)]
        total = np.zeros(centers.shape[1:])
        for row in nbrs:
            total += ext[row]
        weight = counts[a] / rho + len(nbrs)
        for c in range(centers.shape[1]):
            if weight[c] == 0:
                new[a, c] = centers[a, c]
            else:
                mu = (sums[a, c] / rho + total[c]) / weight[c]
                new[a, c] = centers[a, c] - alpha * (centers[a, c] - mu)
    return new


def test_center_update_against_the_equations():
    problem = update_problem()
    new = kernels.center_update(*problem, 4.0, 0.7)
    np.testing.assert_array_equal(new, expected_update(*problem, 4.0, 0.7))


@pytest.mark.parametrize("degree", [0, 1, 2, 3, 4, 5, 7, 8, 9, 29])
@pytest.mark.parametrize("width", [(2, 5), (1, 3), (8, 8), (9, 9), (17, 31)])
@pytest.mark.parametrize("index_dtype, aligned", [(np.int32, True), (np.int64, True), (np.int64, False)])
def test_center_update_adds_neighbours_in_order(degree, width, index_dtype, aligned):
    """Any degree and K x p (whole vectors of eight columns summed in registers, up to 64
    columns a pass, the rest four neighbours at a time): the same bits as adding the
    neighbours one by one in ascending order, on values whose sums depend on the order;
    into `out` in place or streamed past the caches, aligned (where rows of whole vectors
    are streamed) or not; from sums and counts divided by rho already (scaled) or not."""
    rng = np.random.default_rng(degree)
    (k, p), n_local = width, 3 + kernels.PREFETCH_AGENTS      # an agent on which another prefetches
    n_ext = n_local + max(12, degree + 1)
    ext = rng.standard_normal((n_ext, k, p)) * 10.0 ** rng.integers(-8, 8, size=(n_ext, k, p))
    nbr_idx = np.concatenate([np.sort(rng.choice(np.arange(n_ext), degree, replace=False))
                              for _ in range(n_local)]).astype(index_dtype)
    nbr_ptr = np.arange(n_local + 1) * degree
    sums = rng.standard_normal((n_local, k, p))
    counts = rng.integers(0, 3, size=(n_local, k))
    problem = ext[:n_local].copy(), ext, nbr_ptr, nbr_idx, sums, counts
    out = kernels.written_zeros((n_local, k, p))
    if aligned:
        assert out.ctypes.data % kernels.ALIGNMENT == 0
    else:                           # one number past an aligned start
        out = kernels.written_zeros(n_local * k * p + 1)[1:].reshape(n_local, k, p)
    prefetch = kernels.far_rows(nbr_ptr, nbr_idx, n_ext)
    for streamed in (False, True):
        out[:] = np.nan
        kernels.center_update(*problem, 3.0, 0.6, out=out, streamed=streamed)
        np.testing.assert_array_equal(out, expected_update(*problem, 3.0, 0.6))
        out[:] = np.nan             # and where the far rows are prefetched
        kernels.center_update(*problem, 3.0, 0.6, out=out, streamed=streamed, prefetch=prefetch)
        np.testing.assert_array_equal(out, expected_update(*problem, 3.0, 0.6))
        out[:] = np.nan             # and from S / rho and n / rho, as LocalPass.run(scale=rho) leaves them
        kernels.center_update(*problem[:4], sums / 3.0, counts / 3.0, 3.0, 0.6, out=out, streamed=streamed,
                              prefetch=prefetch, scaled=True)
        np.testing.assert_array_equal(out, expected_update(*problem, 3.0, 0.6))


def test_center_update_with_faults_against_the_draws():
    """Links that are down do not count in Omega; an agent that sits out keeps its centers."""
    centers, ext, nbr_ptr, nbr_idx, sums, counts = problem = update_problem()
    agent_ids, ext_ids = np.array([10, 11, 12]), np.array([10, 11, 12, 4, 99, 30])
    nbr_ids = ext_ids[nbr_idx]
    faults = FaultModel(seed=3, link_failure_prob=0.5, dropout_prob=0.3)
    seen = set()
    for update in range(1, 30):
        new = kernels.center_update(*problem, 4.0, 0.7, faults=faults, update=update, agent_ids=agent_ids,
                                    ext_ids=ext_ids)
        up = [link_up(faults.params, agent_ids[a], nbr_ids[e], update)
              for a in range(3) for e in range(nbr_ptr[a], nbr_ptr[a + 1])]
        expected = expected_update(*problem, 4.0, 0.7, counted=lambda a, e: up[e])
        for a in range(3):
            if not takes_part(faults.params, agent_ids[a], update):
                expected[a] = centers[a]
                seen.add("sits out")
        seen.update("down" if not u else "up" for u in up)
        np.testing.assert_array_equal(new, expected)
    assert seen == {"sits out", "down", "up"}
    # No fault drawn: the plain update; and a fault model needs the ids its draws are keyed on.
    quiet = kernels.center_update(*problem, 4.0, 0.7, faults=FaultModel(seed=3), update=5, agent_ids=agent_ids,
                                  ext_ids=ext_ids)
    np.testing.assert_array_equal(quiet, kernels.center_update(*problem, 4.0, 0.7))
    with pytest.raises(ValueError, match="global ids"):
        kernels.center_update(*problem, 4.0, 0.7, faults=faults, update=5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n_updates", [1, 2, 7])
@pytest.mark.parametrize("faulty", [False, True])
@pytest.mark.parametrize("k, p, streamed", [(3, 4, False), (2, 4, False), (2, 4, True)])
def test_local_center_updates_are_the_updates_one_by_one(n_updates, faulty, threads, k, p, streamed,
                                                         monkeypatch):
    """A block without ghosts (every neighbour its own): n updates in one call equal the
    equations applied n times, each from the last, with each update's own fault draws;
    the result lies in the array returned, whatever n's parity; empty clusters, agents of
    degree 0 and any thread count included; rows of whole vectors (K x p = 8) written in
    place or streamed past the caches."""
    rng = np.random.default_rng(n_updates)
    n_agents = 9
    degree = rng.integers(0, 5, size=n_agents)
    degree[2] = 0
    nbr_idx = np.concatenate([np.sort(rng.choice(np.delete(np.arange(n_agents), a), d, replace=False))
                              for a, d in enumerate(degree)]).astype(np.int64)
    nbr_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    sums = rng.standard_normal((n_agents, k, p)) * 10.0 ** rng.integers(-5, 5, size=(n_agents, k, p))
    counts = rng.integers(0, 4, size=(n_agents, k)).astype(np.float64)
    counts[2, 1] = 0                        # no points and no neighbours: the center stays
    start = rng.standard_normal((n_agents, k, p))
    agent_ids = np.arange(n_agents) + 100          # no ghosts: ext's rows are the block's agents
    nbr_ids = agent_ids[nbr_idx]
    faults = FaultModel(seed=4, link_failure_prob=0.4, dropout_prob=0.2) if faulty else FaultModel(seed=4)
    expected = start.copy()
    for update in range(11, 11 + n_updates):
        if faulty:
            up = [link_up(faults.params, agent_ids[a], nbr_ids[e], update)
                  for a in range(n_agents) for e in range(nbr_ptr[a], nbr_ptr[a + 1])]
            new = expected_update(expected, expected, nbr_ptr, nbr_idx, sums, counts, 7.0, 0.9,
                                  counted=lambda a, e: up[e])
            sitting = [not takes_part(faults.params, agent_ids[a], update) for a in range(n_agents)]
            new[sitting] = expected[sitting]
        else:
            new = expected_update(expected, expected, nbr_ptr, nbr_idx, sums, counts, 7.0, 0.9)
        expected = new
    current, spare = kernels.written_zeros(start.shape), kernels.written_zeros(start.shape)
    current[:], spare[:] = start, np.nan
    monkeypatch.setattr(kernels, "NUMBERS_A_THREAD", 0)      # a block this small shared all the same
    kernels.set_threads(threads)
    try:
        got = kernels.local_center_updates(current, spare, nbr_ptr, nbr_idx, sums, counts, 7.0, 0.9, n_updates,
                                           faults=faults, first_update=11, agent_ids=agent_ids, ext_ids=agent_ids,
                                           streamed=streamed)
        assert got is (spare if n_updates % 2 else current)
        np.testing.assert_array_equal(got, expected)
        current[:], spare[:] = start, np.nan            # the same, the far rows prefetched
        got = kernels.local_center_updates(current, spare, nbr_ptr, nbr_idx, sums, counts, 7.0, 0.9, n_updates,
                                           faults=faults, first_update=11, agent_ids=agent_ids, ext_ids=agent_ids,
                                           streamed=streamed, prefetch=kernels.far_rows(nbr_ptr, nbr_idx, n_agents))
        np.testing.assert_array_equal(got, expected)
        current[:], spare[:] = start, np.nan            # from S / rho and n / rho
        got = kernels.local_center_updates(current, spare, nbr_ptr, nbr_idx, sums / 7.0, counts / 7.0, 7.0, 0.9,
                                           n_updates, faults=faults, first_update=11, agent_ids=agent_ids,
                                           ext_ids=agent_ids, streamed=streamed, scaled=True)
        np.testing.assert_array_equal(got, expected)
    finally:
        kernels.set_threads(1)


def test_disagreement_and_move():
    """A block of agents 10, 20 and 30 with ghosts 40 and 5 (rows 3 and 4 of ext): the edges
    whose lower end is in the block, each once; 5-10 is the rank of agent 5's to count."""
    rng = np.random.default_rng(3)
    ext = rng.standard_normal((5, 3, 2))
    agents = np.array([10, 20, 30])
    nbr_ptr, nbr_idx, ext_ids = np.array([0, 3, 5, 7]), np.array([4, 1, 3, 0, 2, 1, 3]), \
        np.array([10, 20, 30, 40, 5])
    a, b = np.array([0, 0, 1, 2]), np.array([1, 3, 2, 3])
    edges = ((ext[a] - ext[b]) ** 2).sum(axis=(1, 2))
    assert math.fsum(kernels.edge_disagreement(ext, agents, nbr_ptr, nbr_idx, ext_ids)) == \
        pytest.approx(math.fsum(edges), rel=1e-15)
    new = ext + rng.standard_normal(ext.shape)
    assert kernels.largest_move(ext, new) == pytest.approx(np.sqrt(((new - ext) ** 2).sum(-1)).max(), rel=1e-14)


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("n_clusters", [1, 3, 8, 9, 17])
@pytest.mark.parametrize("n_features", [1, 3, 7, 8, 9, 16, 17])
def test_center_update_bounds_each_centers_move(single, n_clusters, n_features):
    """The moves a center update adds for the local pass's bounds (row_sums.add_moves from a
    vector's width on, else four partial sums a center) against the exact distance, in
    fractions, between each center before and after, both rounded to float32 for float32
    data: never below it, and above it only by the rounding allowed for (a few parts in
    1e16 of the sum, as LocalPass's move_terms say).  Moves of 1, 1e-3 and 1e-8 a coordinate, other
    agents' moves untouched."""
    from fractions import Fraction
    rng = np.random.default_rng(100 * n_clusters + n_features + single)
    n_agents = 4
    centers = rng.normal(size=(n_agents, n_clusters, n_features)) * 10
    sums = rng.normal(size=centers.shape) * rng.choice([1e-8, 1e-3, 1.0], size=centers.shape) + centers
    counts = np.ones((n_agents, n_clusters))
    nbr_ptr, nbr_idx = np.zeros(n_agents + 1, dtype=np.int64), np.zeros(0, dtype=np.int32)
    f64_err, eta = (n_features + 4) * 2.0 ** -53 * 1.01, 1e-300
    moved = rng.uniform(0.0, 1.0, size=(n_agents, n_clusters))
    before = moved.copy()
    out = kernels.center_update(centers, centers, nbr_ptr, nbr_idx, sums, counts, 1.0, 1.0, moved=moved,
                                move_terms=(single, f64_err, eta))
    cast = (lambda v: v.astype(np.float32).astype(np.float64)) if single else (lambda v: v)
    for a in range(n_agents):
        for k in range(n_clusters):
            true = sum((Fraction(float(u)) - Fraction(float(v))) ** 2
                       for u, v in zip(cast(out[a, k]), cast(centers[a, k])))
            added = Fraction(moved[a, k]) - Fraction(before[a, k])
            assert added >= 0 and added ** 2 >= true, (a, k)
            assert moved[a, k] <= (before[a, k] + math.sqrt(true)) * (1 + 1e-14) + 1e-280, (a, k)


def random_block_graph(rng, n_local, n_ext, degree):
    """A block of n_local agents whose ids are scattered among ext's: (agent ids, ext ids,
    nbr_ptr, nbr_idx), each agent's neighbours other rows of ext in ascending id."""
    ext_ids = rng.permutation(3 * n_ext)[:n_ext]
    rows = []
    for a in range(n_local):
        others = rng.choice(np.delete(np.arange(n_ext), a), size=min(degree, n_ext - 1), replace=False)
        rows.append(others[np.argsort(ext_ids[others])])
    nbr_ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return ext_ids[:n_local], ext_ids, nbr_ptr, np.concatenate(rows).astype(np.int32)


@pytest.mark.parametrize("width", [(1, 1), (3, 4), (2, 8), (8, 8), (5, 7), (9, 9), (17, 31)])
@pytest.mark.parametrize("degree", [0, 1, 4, 9, 29])
def test_disagreement_sums_each_agents_edges_so(width, degree):
    """Each agent sums its edges to higher ids as `agent_edge_sum` says, whatever K x p (lanes
    of eight and a part of one), on values whose sums depend on the order; the partials add
    the agents' sums exactly."""
    rng = np.random.default_rng(degree * 100 + width[0] * 10 + width[1])
    n_local, n_ext = 6, max(14, degree + 2)
    ext = rng.standard_normal((n_ext,) + width) * 10.0 ** rng.integers(-6, 6, size=(n_ext,) + width)
    agents, ext_ids, nbr_ptr, nbr_idx = random_block_graph(rng, n_local, n_ext, degree)
    expected = [agent_edge_sum(ext, a, [b for b in nbr_idx[nbr_ptr[a]:nbr_ptr[a + 1]] if ext_ids[b] > agents[a]])
                for a in range(n_local)]
    got = kernels.edge_disagreement(ext, agents, nbr_ptr, nbr_idx, ext_ids)
    assert math.fsum(got) == math.fsum(expected)


@pytest.mark.parametrize("faulty", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("width", [(3, 5), (8, 8), (17, 31)])
def test_update_measures_the_disagreement_of_its_input(faulty, threads, width, monkeypatch):
    """The update's edge sums are those of the centers it starts from (x(t)), each agent's as
    `agent_edge_sum` gives it, faults or not (the metric counts every edge; without faults
    they are summed in the neighbours' loop: whole vectors, several passes of them, and the
    columns past them); the new centers are the update's without them; and their exact sum
    is `edge_disagreement`'s."""
    rng = np.random.default_rng(11 + width[1])
    (k, p), n_local, n_ext = width, 40, 60
    ext = rng.standard_normal((n_ext, k, p)) * 10.0 ** rng.integers(-6, 6, size=(n_ext, k, p))
    agents, ext_ids, nbr_ptr, nbr_idx = random_block_graph(rng, n_local, n_ext, 7)
    sums, counts = rng.standard_normal((n_local, k, p)), rng.integers(0, 3, size=(n_local, k))
    faults = FaultModel(seed=2, link_failure_prob=0.3, dropout_prob=0.3) if faulty else FaultModel(seed=2)
    problem = ext[:n_local], ext, nbr_ptr, nbr_idx, sums, counts, 4.0, 0.7
    edge_sums = np.full(n_local, np.nan)
    monkeypatch.setattr(kernels, "NUMBERS_A_THREAD", 0)
    kernels.set_threads(threads)
    try:
        new = kernels.center_update(*problem, faults=faults, update=3, agent_ids=agents, ext_ids=ext_ids,
                                    edge_sums=edge_sums,
                                    edge_first=kernels.first_up_edges(agents, nbr_ptr, nbr_idx, ext_ids))
    finally:
        kernels.set_threads(1)
    expected = [agent_edge_sum(ext, a, [b for b in nbr_idx[nbr_ptr[a]:nbr_ptr[a + 1]] if ext_ids[b] > agents[a]])
                for a in range(n_local)]
    np.testing.assert_array_equal(edge_sums, expected)
    np.testing.assert_array_equal(new, kernels.center_update(*problem, faults=faults, update=3, agent_ids=agents,
                                                             ext_ids=ext_ids))
    assert math.fsum(kernels.exact_partials(edge_sums)) == \
        math.fsum(kernels.edge_disagreement(ext, agents, nbr_ptr, nbr_idx, ext_ids))
    with pytest.raises(ValueError, match="edge sums"):
        kernels.center_update(*problem, edge_sums=edge_sums)


def test_first_up_edges_start_each_agents_edges_to_higher_ids():
    """Each agent's first neighbour entry of a higher global id, against a search of its
    entries in Python: the row's end where it has none, its start where every neighbour is
    higher."""
    rng = np.random.default_rng(12)
    agents, ext_ids, nbr_ptr, nbr_idx = random_block_graph(rng, 40, 60, 7)
    first = kernels.first_up_edges(agents, nbr_ptr, nbr_idx, ext_ids)
    expected = [next((e for e in range(nbr_ptr[a], nbr_ptr[a + 1]) if ext_ids[nbr_idx[e]] > agents[a]),
                     nbr_ptr[a + 1]) for a in range(len(agents))]
    np.testing.assert_array_equal(first, expected)
    assert (first == nbr_ptr[1:]).any() and (first == nbr_ptr[:-1]).any() and (first < nbr_ptr[1:]).any()


@pytest.mark.parametrize("far_entries", [0, 3, 10**6])
def test_far_rows_are_those_not_read_lately(far_entries, monkeypatch):
    """An agent's far rows are its neighbour rows read last more than FAR_ENTRIES entries
    before (in the update's order: agents ascending, each one's entries in order), or
    never: against a replay in Python.  With 0 every entry but a repeat of the one just
    before; with a million only each row's first read."""
    rng = np.random.default_rng(5)
    agents, ext_ids, nbr_ptr, nbr_idx = random_block_graph(rng, 40, 60, 7)
    monkeypatch.setattr(kernels, "FAR_ENTRIES", far_entries)
    prefetch = kernels.far_rows(nbr_ptr, nbr_idx, len(ext_ids))
    last_read, expected_ptr, expected = {}, [0], []
    for a in range(len(agents)):
        for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
            row = nbr_idx[e]
            if e - last_read.get(row, -far_entries - 1) > far_entries:
                expected.append(row)
            last_read[row] = e
        expected_ptr.append(len(expected))
    np.testing.assert_array_equal(prefetch.far_ptr, expected_ptr)
    np.testing.assert_array_equal(prefetch.rows, expected)
    assert prefetch.rows.dtype == nbr_idx.dtype
    assert 0 < len(expected) <= len(nbr_idx) and (far_entries or len(expected) == len(nbr_idx))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread is all numba has here")
def test_threads_share_only_what_pays_for_their_join():
    """A kernel call whose threads would each get fewer than NUMBERS_A_THREAD numbers runs
    on one thread (the parallel kernel is never called); a larger one, or one that does
    not say its size, is shared."""
    calls = []

    def kernel(first, stop):
        calls.append(("one", first, stop))

    def parallel_kernel(n_ranges, n_agents):
        calls.append(("shared", n_ranges, n_agents))

    kernels.set_threads(2)
    try:
        kernels.in_parallel(kernel, parallel_kernel, 300, numbers=2 * kernels.NUMBERS_A_THREAD - 1)
        kernels.in_parallel(kernel, parallel_kernel, 300, numbers=2 * kernels.NUMBERS_A_THREAD)
        kernels.in_parallel(kernel, parallel_kernel, 300)
    finally:
        kernels.set_threads(1)
    assert calls == [("one", 0, 300), ("shared", 128, 300), ("shared", 128, 300)]


def test_results_do_not_depend_on_threads():
    rng = np.random.default_rng(5)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 50, size=40))])
    points = rng.standard_normal((offsets[-1], 3))
    centers = rng.standard_normal((40, 4, 3))
    runs = []
    for threads in (1, 2):
        kernels.set_threads(threads)
        labels = np.full(len(points), -1, dtype=np.int32)
        runs.append((kernels.assign_and_accumulate(points, offsets, centers, labels), labels))
    kernels.set_threads(1)
    (first, l1), (second, l2) = runs
    np.testing.assert_array_equal(l1, l2)
    for x, y in zip(first[:3], second[:3]):
        np.testing.assert_array_equal(x, y)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.floats(min_value=-1e150, max_value=1e150, allow_subnormal=True), max_size=300),
       st.lists(st.integers(0, 300), max_size=6))
def test_exact_partials_sum_any_split_exactly(values, cuts):
    """The partials of any split of the values add (math.fsum) to the correctly rounded
    sum of all of them: the property that makes metrics the same on any rank count."""
    bounds = [0] + sorted(min(c, len(values)) for c in cuts) + [len(values)]
    blocks = [kernels.exact_partials(values[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    assert all(len(b) <= kernels.EXACT_PARTIALS for b in blocks)
    assert math.fsum(np.concatenate(blocks)) == math.fsum(values)


def tried_ways(out_bytes, costs, clock):
    """(the choice, the ways tried) of choose_stores for an output of out_bytes, each update
    taking costs(streamed) seconds on the fake `clock` kernels.time.perf_counter reads."""
    ways = []

    def update(streamed):
        ways.append(streamed)
        clock[0] += costs(streamed)

    return kernels.choose_stores(out_bytes, update), ways


def test_choose_stores_tries_both_ways_and_keeps_the_faster(monkeypatch):
    """Outputs smaller than STREAM_BYTES are written in place, untried; larger ones alternate,
    streamed first, until each way has STORE_TRIALS updates (or one each, when one way is
    CLEARLY_SLOWER), then keep the faster way, whichever it is, by its fastest update."""
    clock = [0.0]
    monkeypatch.setattr(kernels.time, "perf_counter", lambda: clock[0])
    trials = kernels.STORE_TRIALS
    assert tried_ways(kernels.STREAM_BYTES - 1, lambda streamed: 1.0 if streamed else 2.0, clock) == (False, [])
    for faster in (False, True):
        assert tried_ways(kernels.STREAM_BYTES, lambda streamed: 1.0 if streamed == faster else 1.2, clock) == \
            (faster, [True, False] * trials)
        # A way clearly slower after one update each is not tried again.
        assert tried_ways(kernels.STREAM_BYTES, lambda streamed: 1.0 if streamed == faster else 2.0, clock) == \
            (faster, [True, False])
    # The fastest update of each way decides, not the first: streamed's first is slow.
    costs = iter([1.5, 1.2, 1.0, 1.2])
    assert tried_ways(kernels.STREAM_BYTES, lambda streamed: next(costs), clock) == (True, [True, False] * trials)
