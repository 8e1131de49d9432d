"""nkmpi.local_pass.LocalPass against the exact per-feature kernel, bit for bit.

Every test drives a sequence of passes with a LocalPass and with
kernels.assign_and_accumulate (the oracle) side by side, on separate labels
and accumulators, with centers that move the way a converging run moves them:
Lloyd steps with a shrinking jitter, repeats, big jumps, swaps and duplicated
centers.  Labels, sums, counts, the number of changed rows and the sse must be
identical to the last bit, and the pass counters must add up to the rows.
"""

import numbers

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nkmpi import kernels
from nkmpi.formats.dataset import coordinate_limit
from nkmpi.local_pass import LAZY_OPEN, LocalPass, _fold_row, _keep_exact_bounds
from nkmpi.row_sums import (BLOCK, LANES, add_weighted_row, prefetch_rows, prefetch_span, rank_bound_columns,
                             rank_columns, rank_row, transpose_rows)

DTYPES = [np.float64, np.float32]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test with 1 and with 2 compute threads (results must not depend on it)."""
    before = numba.get_num_threads()
    kernels.set_threads(request.param)
    yield request.param
    numba.set_num_threads(before)


def offsets_of(sizes):
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).astype(np.int64)


def oracle_distances(points, centers_of_agent, row):
    """One row's squared distances to its agent's centers, computed as the oracle does:
    in the data's precision, features in order."""
    x = points[row]
    out = []
    for c in centers_of_agent.astype(points.dtype):
        d = points.dtype.type(0)
        for j in range(len(x)):
            diff = x[j] - c[j]
            d = points.dtype.type(d + diff * diff)
        out.append(d)
    return out


class Pair:
    """A LocalPass and the oracle on the same block, each with its own labels and accumulators."""

    def __init__(self, points, offsets, n_clusters, labels=None, weights=kernels.UNWEIGHTED, moves_given=False):
        self.points, self.offsets, self.k, self.weights = points, offsets, n_clusters, weights
        n, p = points.shape
        self.n_agents = len(offsets) - 1
        self.local = LocalPass(points, offsets, n_clusters, weights, moves_given=moves_given)
        self.labels = np.full(n, -1, dtype=np.int32) if labels is None else labels.copy()
        self.out = kernels.accumulators(self.n_agents, n_clusters, p)
        self.ref_labels = self.labels.copy()
        self.ref_out = kernels.accumulators(self.n_agents, n_clusters, p)
        self.passes = 0
        self.scale = 1.0           # run's scale: the sums and counts are compared divided by it
        self.history = []          # (changed, skipped, screened, exact, agents kept) per pass

    def step(self, centers, check_sse=True):
        """One pass of each; everything compared bit for bit.  Returns copies of the
        oracle's (sums, counts, changed)."""
        where = f"pass {self.passes} (dtype {self.points.dtype}, p {self.points.shape[1]}, K {self.k}, " \
                f"{self.n_agents} agents, {len(self.points)} rows)"
        given_centers = centers.copy()
        sums, counts, changed = self.local.run(centers, self.labels, self.out, scale=self.scale)
        assert centers.tobytes() == given_centers.tobytes(), f"{where}: run modified the centers"
        ref_sums, ref_counts, ref_sse, ref_changed = kernels.assign_and_accumulate(
            self.points, self.offsets, given_centers, self.ref_labels, out=self.ref_out, weights=self.weights)
        raw_sums, raw_counts = ref_sums, ref_counts
        if self.scale != 1.0:      # one division each, as the center update would make
            ref_sums, ref_counts = ref_sums / self.scale, ref_counts / self.scale
            where += f" at scale {self.scale}"

        if self.labels.tobytes() != self.ref_labels.tobytes():
            row = int(np.flatnonzero(self.labels != self.ref_labels)[0])
            agent = int(np.searchsorted(self.offsets, row, side="right")) - 1
            dists = oracle_distances(self.points, given_centers[agent], row)
            pytest.fail(f"{where}: row {row} (agent {agent}) got label {self.labels[row]}, oracle "
                        f"{self.ref_labels[row]}; {int((self.labels != self.ref_labels).sum())} rows differ. "
                        f"Row {self.points[row][:8].tolist()!r}; oracle squared distances "
                        f"{[float(d).hex() for d in dists]}")
        assert sums.shape == ref_sums.shape and sums.dtype == np.float64, where
        assert counts.shape == ref_counts.shape and counts.dtype == np.float64, where
        if sums.tobytes() != ref_sums.tobytes():
            bad = np.argwhere(sums.view(np.int64) != ref_sums.view(np.int64))[0]
            pytest.fail(f"{where}: sums differ first at (agent, cluster, feature) {tuple(bad)}: "
                        f"{sums[tuple(bad)]!r} != oracle {ref_sums[tuple(bad)]!r}")
        if counts.tobytes() != ref_counts.tobytes():
            bad = np.argwhere(counts != ref_counts)[0]
            pytest.fail(f"{where}: counts differ first at (agent, cluster) {tuple(bad)}: "
                        f"{counts[tuple(bad)]} != oracle {ref_counts[tuple(bad)]}")
        assert isinstance(changed, numbers.Integral), f"{where}: changed is {type(changed)}"
        assert changed == ref_changed, f"{where}: changed {changed} != oracle {ref_changed}"

        assert_bounds_hold(self.local, self.points, self.offsets, given_centers, self.labels, where)
        counters = (self.local.rows_skipped, self.local.rows_screened, self.local.rows_exact)
        assert all(isinstance(c, numbers.Integral) and c >= 0 for c in counters), f"{where}: counters {counters}"
        assert sum(counters) == len(self.points), f"{where}: skipped+screened+exact {counters} != {len(self.points)}"
        if self.passes == 0:
            assert counters[0] == 0, f"{where}: the first pass skipped {counters[0]} rows without labels"

        if check_sse:
            out_sse = np.full(self.n_agents, np.nan)
            got = self.local.sse(given_centers, self.labels, out_sse)
            assert got is out_sse, f"{where}: sse did not return out_sse"
            if out_sse.tobytes() != ref_sse.tobytes():
                a = int(np.flatnonzero(out_sse.view(np.int64) != ref_sse.view(np.int64))[0])
                pytest.fail(f"{where}: sse of agent {a} {out_sse[a]!r} != oracle {ref_sse[a]!r}")
        self.passes += 1
        assert 0 <= self.local.agents_kept <= self.n_agents, f"{where}: {self.local.agents_kept} agents kept"
        self.history.append((int(ref_changed),) + tuple(int(c) for c in counters) + (self.local.agents_kept,))
        return raw_sums.copy(), raw_counts.copy(), int(ref_changed)


def assert_bounds_hold(local, points, offsets, centers, labels, where):
    """What makes every skip sound, after a pass: each row's stored bounds, moved by how far
    its agent's centers moved since they were written (`moved`, or the distance from
    `previous`), hold the row's true distances to the centers just passed, in float64 from
    the data's precision; and each agent's cluster bounds hold those of its rows."""
    rows = np.flatnonzero(local.ready[np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))])
    if not len(rows):
        return
    agent = np.searchsorted(offsets, rows, side="right") - 1
    exact = centers.astype(points.dtype).astype(np.float64)
    if local.moved.shape[0]:
        moves = local.moved
    else:
        moves = np.sqrt(((exact - local.previous.astype(np.float64)) ** 2).sum(axis=2))
    dist = np.sqrt(((points[rows].astype(np.float64)[:, None, :] - exact[agent]) ** 2).sum(axis=2))
    label = labels[rows]
    own = dist[np.arange(len(rows)), label]
    mask = np.zeros_like(dist, dtype=bool)
    mask[np.arange(len(rows)), label] = True
    other = np.where(mask, np.inf, dist).min(axis=1)
    other_move = np.where(mask, 0.0, moves[agent]).max(axis=1)
    upper, lower = local.upper[rows].astype(np.float64), local.lower[rows].astype(np.float64)
    slack = 1e-12
    bad = np.flatnonzero(upper + moves[agent, label] < own * (1 - slack))
    assert not len(bad), f"{where}: row {rows[bad[0]]}'s upper bound {upper[bad[0]]} + move falls below {own[bad[0]]}"
    bad = np.flatnonzero(lower - other_move > other * (1 + slack))
    assert not len(bad), f"{where}: row {rows[bad[0]]}'s lower bound {lower[bad[0]]} - move exceeds {other[bad[0]]}"
    assert (local.top[agent, label] >= local.upper[rows]).all(), f"{where}: an agent's cluster bound below a row's"
    with np.errstate(invalid="ignore"):             # bounds beyond float32 are inf
        apart = np.where(lower > upper, lower - upper, 0.0)
    assert (local.gap[agent, label] <= apart).all(), f"{where}: an agent's cluster gap above a row's"


# ----------------------------------------------------------------- data and centers

def blobs(rng, sizes, p, dtype, n_blobs=4, sep=6.0, spread=1.0, offset=0.0, scale=1.0):
    """Gaussian blobs per agent (each agent its own blob means), times `scale`, plus `offset`."""
    parts = []
    for size in sizes:
        means = rng.standard_normal((n_blobs, p)) * sep
        parts.append(means[rng.integers(n_blobs, size=size)] + spread * rng.standard_normal((size, p)))
    rows = np.concatenate(parts) if parts else np.zeros((0, p))
    return np.ascontiguousarray((rows * scale + offset).astype(dtype)), offsets_of(sizes)


def spread_of(points):
    """Per-feature spread of the data (for jitter and jumps), never zero."""
    if len(points) == 0:
        return np.ones(points.shape[1])
    x = points.astype(np.float64)
    s = x.std(axis=0)
    fallback = max(float(np.abs(x).max()) * 1e-3, np.finfo(np.float64).tiny * 1e10)
    return np.where(s > 0, s, fallback)


def initial_centers(points, offsets, k, rng):
    """K random rows of each agent (with replacement: an agent with fewer rows than K
    gets duplicate centers); an empty agent takes rows of the whole block."""
    n_agents, p = len(offsets) - 1, points.shape[1]
    centers = np.zeros((n_agents, k, p))
    for a in range(n_agents):
        rows = points[offsets[a]:offsets[a + 1]]
        if len(rows) == 0:
            rows = points
        if len(rows):
            centers[a] = rows[rng.integers(len(rows), size=k)]
    return centers


def next_centers(centers, sums, counts, kind, rng, scale):
    """The next centers of a run, from the oracle's statistics of the last pass."""
    new = centers.copy()
    n_agents, k, _ = centers.shape
    if kind[0] == "lloyd":          # towards the cluster means, with a jitter of relative size eps
        eps = kind[1]
        means = np.where(counts[..., None] > 0, sums / np.maximum(counts, 1)[..., None], centers)
        new = means + eps * scale * rng.standard_normal(centers.shape)
    elif kind[0] == "toward":       # a fraction of the way to the cluster means (a damped update)
        means = np.where(counts[..., None] > 0, sums / np.maximum(counts, 1)[..., None], centers)
        new = centers + kind[1] * (means - centers)
    elif kind[0] == "jitter":       # a small move of every center, no Lloyd step
        new = centers + kind[1] * scale * rng.standard_normal(centers.shape)
    elif kind[0] == "jump":         # one center of about half the agents moves far
        for a in np.flatnonzero(rng.random(n_agents) < 0.5):
            new[a, rng.integers(k)] += kind[1] * scale * rng.standard_normal(centers.shape[2])
    elif kind[0] == "swap":         # two centers of every agent trade places
        if k >= 2:
            for a in range(n_agents):
                i, j = rng.choice(k, size=2, replace=False)
                new[a, [i, j]] = new[a, [j, i]]
    elif kind[0] == "dup":          # one center of every agent lands exactly on another
        if k >= 2:
            for a in range(n_agents):
                i, j = rng.choice(k, size=2, replace=False)
                new[a, j] = new[a, i]
    elif kind[0] == "grid":         # half-integer centers: exact ties with integer data
        new = rng.integers(-4, 5, size=centers.shape) / 2.0
    elif kind[0] != "repeat":
        raise ValueError(kind)
    return new


def standard_schedule(n_passes=20):
    """Lloyd steps with a jitter shrinking from 1e-1 to 1e-7 of the spread, with a big
    jump, a swap, duplicated centers and repeated centers along the way."""
    kinds = [("lloyd", float(e)) for e in np.geomspace(1e-1, 1e-7, n_passes - 1)]
    for at, kind in [(3, ("jump", 3.0)), (6, ("swap",)), (8, ("repeat",)), (10, ("dup",)),
                     (13, ("jump", 0.5)), (15, ("repeat",)), (16, ("jitter", 1e-9))]:
        if at < len(kinds):
            kinds[at] = kind
    return kinds


def creeping_schedule(n_passes=20):
    """Damped steps towards the cluster means, the step shrinking from 1e-1 to 1e-7, with
    a jump, a swap and a repeat along the way."""
    kinds = [("toward", float(e)) for e in np.geomspace(1e-1, 1e-7, n_passes - 1)]
    for at, kind in [(4, ("jump", 3.0)), (9, ("swap",)), (12, ("repeat",))]:
        if at < len(kinds):
            kinds[at] = kind
    return kinds


def updated_towards(centers, target, local, steps):
    """Centers moved towards `target` by `steps` kernels.center_update calls (alpha 1, no
    neighbours, S = target and n = 1 at rho 1, so each goes to `target` but for rounding,
    through a midpoint when steps > 1), each adding its moves to local.moved as a run's
    updates do."""
    no_neighbours = np.zeros(len(centers) + 1, dtype=np.int64)
    counts = np.ones(centers.shape[:2])
    for step in range(steps):
        goal = target if step == steps - 1 else centers + rng_free_midpoint(step, steps) * (target - centers)
        centers = kernels.center_update(centers, centers, no_neighbours, np.zeros(0, dtype=np.int64), goal,
                                        counts, 1.0, 1.0, moved=local.moved, move_terms=local.move_terms)
    return centers


def rng_free_midpoint(step, steps):
    """Where the intermediate updates of updated_towards stop: beyond the target and back
    for the second (a move the net move does not show), else part of the way."""
    return 1.5 if step == 1 else (step + 1) / steps


def drive_given_moves(points, offsets, k, rng, kinds, steps):
    """drive, with the moves between passes measured by the updates that make the centers
    (LocalPass(moves_given=True)), `steps` updates a pass."""
    pair = Pair(points, offsets, k, moves_given=True)
    assert pair.local.previous.size == 0, "a pass given the moves keeps no copy of the centers"
    scale = spread_of(points)
    centers = initial_centers(points, offsets, k, rng)
    sums = counts = None
    for t in range(len(kinds) + 1):
        if t:
            centers = updated_towards(centers, next_centers(centers, sums, counts, kinds[t - 1], rng, scale),
                                      pair.local, steps)
        sums, counts, _ = pair.step(centers.copy())
    return pair


def drive(points, offsets, k, rng, kinds=None, buffers="fresh", centers=None, scale=None,
          weights=kernels.UNWEIGHTED, sum_scales=None):
    """Run a LocalPass and the oracle through the first centers and then `kinds` of moves.
    buffers: 'fresh' (a new centers array every pass), 'inplace' (one array overwritten)
    or 'swap' (two arrays used in turn, as the NK-means driver does); sum_scales: each
    pass's LocalPass.run scale (1.0 each by default)."""
    pair = Pair(points, offsets, k, weights=weights)
    kinds = standard_schedule() if kinds is None else kinds
    scale = spread_of(points) if scale is None else scale
    centers = initial_centers(points, offsets, k, rng) if centers is None else centers
    bufs = [np.empty_like(centers), np.empty_like(centers)]
    sums = counts = None
    for t in range(len(kinds) + 1):
        if t:
            centers = next_centers(centers, sums, counts, kinds[t - 1], rng, scale)
        if buffers == "fresh":
            given_centers = centers.copy()
        else:
            given_centers = bufs[t % 2 if buffers == "swap" else 0]
            given_centers[...] = centers
        if sum_scales is not None:
            pair.scale = sum_scales[t]
        sums, counts, _ = pair.step(given_centers, check_sse=(t % 3 != 1))
    return pair


# ----------------------------------------------------------------- data sets

@pytest.mark.parametrize("buffers", ["fresh", "inplace", "swap"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_blobs_uneven_agents(dtype, buffers, threads):
    """Blobs over agents of different sizes, empty ones and ones with fewer rows than K,
    however the caller hands over the centers (new arrays, one overwritten, two in turn)."""
    rng = np.random.default_rng(1)
    sizes = [0, 3, 250, 1, 0, 40, 1200, 7, 16, 600]
    points, offsets = blobs(rng, sizes, 5, dtype)
    drive(points, offsets, 16, rng, buffers=buffers)
    drive(points, offsets, 4, rng, buffers=buffers)
    drive(points, offsets, 6, rng, kinds=creeping_schedule(), buffers=buffers)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [3, 32])
def test_weighted_rows(dtype, p, threads):
    """Row weights (zeros, tiny, huge, integers) through both paths, screened and per feature."""
    rng = np.random.default_rng(p)
    points, offsets = blobs(rng, [0, 3, 250, 1, 40, 1200, 7, 600], p, dtype)
    weights = rng.choice([0.0, 1.0, 3.0, 0.25, 1e-300, 1e30], size=len(points)) * rng.random(len(points))
    drive(points, offsets, 8, rng, weights=weights)
    drive(points, offsets, 5, rng, kinds=creeping_schedule(), weights=np.round(weights * 7))


def test_unit_weights_are_unweighted():
    """All weights 1: the very bits of an unweighted pass."""
    rng = np.random.default_rng(5)
    points, offsets = blobs(rng, [30, 500, 9], 4, np.float64)
    centers = initial_centers(points, offsets, 6, rng)
    plain, weighted = (kernels.accumulators(3, 6, 4) for _ in range(2))
    labels = np.full(len(points), -1, dtype=np.int32)
    LocalPass(points, offsets, 6).run(centers, labels.copy(), plain)
    LocalPass(points, offsets, 6, np.ones(len(points))).run(centers, labels.copy(), weighted)
    for got, expected in zip(weighted, plain):
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 2, 8, 32, 64])
@pytest.mark.parametrize("k", [1, 2, 16])
def test_shapes(dtype, p, k):
    """p = 1, 2, 8, 32, 64 with K = 1, 2, 16."""
    rng = np.random.default_rng(1000 * p + k)
    points, offsets = blobs(rng, [0, 5, 300, 60, 2, 900], p, dtype, n_blobs=5)
    drive(points, offsets, k, rng, kinds=standard_schedule(14))


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_big_agent(dtype, threads):
    """One agent of 20,000 rows, p = 32, K = 16."""
    rng = np.random.default_rng(7)
    points, offsets = blobs(rng, [20000], 32, dtype, n_blobs=12, sep=2.0)
    drive(points, offsets, 16, rng, kinds=standard_schedule(16))
    drive(points, offsets, 16, rng, kinds=creeping_schedule(12))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [5, 20])
def test_blocks_of_sums_that_tiles_do_not_divide(dtype, p, threads):
    """K = 20: blocks of sums of 1,280 rows (kernels.sum_block_rows), against tiles of 1,024 rows
    (screened, p = 20) or 256 (per feature, p = 5); agents of one block, of one block and a row,
    and of several, through a settling run whose labels change in a few blocks at a time."""
    rng = np.random.default_rng(20 + p)
    block = kernels.sum_block_rows(20)
    points, offsets = blobs(rng, [3 * block + 300, block + 1, block, 40], p, dtype, n_blobs=10, sep=2.0)
    drive(points, offsets, 20, rng, kinds=standard_schedule(10))
    drive(points, offsets, 20, rng, kinds=creeping_schedule(10))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [5, 20])
def test_sums_divided_by_the_scale_once(dtype, p, threads):
    """run(scale=rho) leaves S / rho and n / rho, one division of the oracle's numbers each,
    through a settling run: agents of one block (narrow rows routed, p = 5, or not) and of
    several, summed in full, in part or kept; a new scale, from a pass where every agent
    stays settled, sums every cluster again, back to 1.0 included."""
    rng = np.random.default_rng(30 + p)
    block = kernels.sum_block_rows(20)
    points, offsets = blobs(rng, [3 * block + 300, block + 1, 300, 40, 0], p, dtype, n_blobs=10, sep=2.0)
    kinds = standard_schedule(20)
    assert kinds[8] == kinds[15] == ("repeat",)         # passes 9 and 16: the same centers again
    pair = drive(points, offsets, 20, rng, kinds=kinds, sum_scales=[3.0] * 9 + [0.7] * 7 + [1.0, 1.0, 5.0, 5.0])
    assert any(kept for *_, kept in pair.history[1:9]), "no agent stayed settled: the test would not show a re-sum"


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_tiny_agents(dtype, threads):
    """Two thousand agents of 0 to 6 rows each."""
    rng = np.random.default_rng(8)
    sizes = rng.integers(0, 7, size=2000)
    points, offsets = blobs(rng, sizes, 3, dtype, n_blobs=2)
    drive(points, offsets, 3, rng)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [1e8, 1e15])
@pytest.mark.parametrize("p", [2, 32])
def test_large_offset(dtype, offset, p):
    """Features offset by 1e8 and 1e15: ||x||^2 - 2 x.c + ||c||^2 cancels catastrophically,
    and with a coarse grid of values many distances tie exactly."""
    rng = np.random.default_rng(int(np.log10(offset)) * 100 + p)
    ulp = float(np.spacing(dtype(offset)))
    for unit in [1.0, 64 * ulp]:                    # spread of a few ulps, then of many
        points, offsets = blobs(rng, [0, 400, 3, 1500], p, dtype, offset=offset, scale=max(unit, ulp / 4))
        drive(points, offsets, 8, rng, kinds=standard_schedule(16))


@pytest.mark.parametrize("dtype,magnitude", [(np.float64, 1e-150), (np.float64, 1e-156), (np.float64, 1e-160),
                                             (np.float32, 1e-18), (np.float32, 1e-21), (np.float32, 1e-22),
                                             (np.float64, 1e140), (np.float32, 1e17)])
@pytest.mark.parametrize("p", [3, 64])
def test_extreme_magnitudes(dtype, magnitude, p):
    """Tiny coordinates (squared distances subnormal or underflowing to zero, so ties
    abound) and large ones near the coordinate limit."""
    assert magnitude < coordinate_limit(dtype, p)
    rng = np.random.default_rng(abs(int(np.log10(magnitude))) + p)
    points, offsets = blobs(rng, [0, 300, 5, 900], p, np.float64)
    points = np.ascontiguousarray((points / np.abs(points).max() * magnitude).astype(dtype))
    assert np.abs(points).max() <= coordinate_limit(dtype, p)
    scale = spread_of(points)
    kinds = standard_schedule(16)
    kinds[3] = ("jump", 1.0)                          # stay within the coordinate limit
    drive(points, offsets, 6, rng, kinds=kinds, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_grid_ties(dtype, threads):
    """Small integer data with half-integer centers: exact ties everywhere, which go to
    the lower cluster index."""
    rng = np.random.default_rng(3)
    sizes = [0, 50, 7, 400, 1, 120]
    points = rng.integers(-3, 4, size=(sum(sizes), 3)).astype(dtype)
    kinds = [("grid",), ("repeat",), ("grid",), ("lloyd", 0.0), ("lloyd", 0.0), ("repeat",), ("grid",),
             ("swap",), ("dup",), ("repeat",), ("grid",), ("jitter", 1e-12), ("grid",), ("repeat",)]
    drive(points, offsets_of(sizes), 5, rng, kinds=kinds,
          centers=rng.integers(-4, 5, size=(len(sizes), 5, 3)) / 2.0)


# ----------------------------------------------------------------- ties, built by hand

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("buffers", ["fresh", "inplace"])
def test_bisector_ties_go_to_lower_index(dtype, buffers):
    """Rows on the perpendicular bisector of two centers: labelled 1 while c1 is nearer,
    they must move to 0 the pass the centers become symmetric about them (and back),
    also after passes that leave the bounds tight."""
    # 2-D rows (t, 2 - t) lie on the bisector of (0, 0) and (2, 2); a third center far away.
    t = np.arange(-6, 9, dtype=np.float64)
    on = np.stack([t, 2 - t], axis=1)
    off = on + np.array([0.25, 0.25])                      # nearer (2, 2)
    points = np.ascontiguousarray(np.concatenate([on, off, on[::-1]]).astype(dtype))
    offsets = offsets_of([len(on), len(off) + len(on)])
    pair = Pair(points, offsets, 3)
    far = [40.0, -40.0]
    c = np.zeros((2, 3, 2))
    buf = np.empty_like(c)

    def centers(c0, c1, c2=far):
        c[:, 0], c[:, 1], c[:, 2] = c0, c1, c2
        if buffers == "fresh":
            return c.copy()
        buf[...] = c
        return buf

    seq = [([0.0, 0.0], [1.75, 1.75]),        # c1 nearer the bisector rows: label 1
           ([0.0, 0.0], [1.75, 1.75]),        # repeat: bounds tight
           ([0.0, 0.0], [2.0, 2.0]),          # exact tie: label 0
           ([0.0, 0.0], [2.0, 2.0]),
           ([-0.25, -0.25], [2.0, 2.0]),      # c0 farther: label 1
           ([-0.25, -0.25], [2.0, 2.0]),
           ([0.0, 0.0], [2.0, 2.0]),          # tie again: back to 0
           ([2.0, 2.0], [0.0, 0.0]),          # swapped: still a tie, label 0
           ([2.0, 2.0], [0.0, 0.0]),
           ([2.0, 2.0], [0.25, 0.25])]        # c1 farther: label 0 for rows on the bisector
    for c0, c1 in seq:
        pair.step(centers(c0, c1))
    # ties between clusters 1 and 2 while labelled 2
    for c1, c2 in [([40.0, 40.0], [1.75, 1.75]), ([40.0, 40.0], [1.75, 1.75]), ([2.0, 2.0], [1.75, 1.75]),
                   ([2.0, 2.0], [1.75, 1.75]), ([2.0, 2.0], [2.0, 2.0]), ([2.0, 2.0], [2.0, 2.0])]:
        pair.step(centers([-40.0, 40.0], c1, c2))
    assert pair.ref_labels[:len(on)].tolist() == [1] * len(on)      # the scenario really ends on a tie
    assert sum(h[0] for h in pair.history[1:]) > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_centers_symmetric_about_rows(dtype, threads):
    """Per agent, pairs of centers placed symmetrically about a row (c = x -+ d with
    exactly representable d) across many agents and dimensions; ties to the lower index,
    with rows labelled by the upper one the pass before."""
    rng = np.random.default_rng(11)
    n_agents, p, k = 40, 4, 4
    sizes = rng.integers(0, 30, size=n_agents)
    offsets = offsets_of(sizes)
    points = (rng.integers(-20, 21, size=(offsets[-1], p)) / 4).astype(dtype)
    pair = Pair(np.ascontiguousarray(points), offsets, k)
    centers = np.zeros((n_agents, k, p))
    for a in range(n_agents):
        rows = points[offsets[a]:offsets[a + 1]].astype(np.float64)
        x = rows[0] if len(rows) else np.zeros(p)
        d = rng.integers(-4, 5, size=p) / 8
        centers[a] = [x + 50, x + d * 0.5, x + d, x - d]   # 1 nearest at first
    pair.step(centers.copy())
    pair.step(centers.copy())
    centers[:, 1] += 100                                   # now 2 and 3 tie on each agent's first row: 2 wins
    pair.step(centers.copy())
    pair.step(centers.copy())
    centers[:, [2, 3]] = centers[:, [3, 2]]
    pair.step(centers.copy())
    centers[:, 0] = centers[:, 3]                          # duplicates of 3 at index 0: 0 wins
    pair.step(centers.copy())
    pair.step(centers.copy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_duplicate_centers(dtype, threads):
    """Two identical centers in one agent: the lower index wins, also when a center
    lands on one whose rows are labelled with the higher index."""
    rng = np.random.default_rng(12)
    sizes = [300, 0, 2, 800, 50]
    points, offsets = blobs(rng, sizes, 6, dtype)
    k = 6
    centers = initial_centers(points, offsets, k, rng)
    pair = Pair(points, offsets, k)
    sums, counts, _ = pair.step(centers.copy())
    scale = spread_of(points)
    for t in range(12):
        centers = next_centers(centers, sums, counts, ("lloyd", 1e-3 / (t + 1)), rng, scale)
        if t == 3:
            centers[:, 1] = centers[:, 4]              # 1 takes 4's place: 4's rows go to 1
        if t == 6:
            centers[:, 5] = centers[:, 2]              # 5 lands on 2: 2 keeps its rows
        if t == 8:
            centers[:, :] = centers[:, :1]             # all equal: everything to 0
        if t == 9:
            centers = initial_centers(points, offsets, k, rng)
            centers[:, 3] = centers[:, 0]
        sums, counts, _ = pair.step(centers.copy())


def _midpoints(c32):
    """The float64 value halfway between float32 c and the next float32 above it."""
    up = np.nextafter(c32, np.float32(np.inf))
    return (c32.astype(np.float64) + up.astype(np.float64)) / 2


@pytest.mark.parametrize("buffers", ["fresh", "inplace"])
def test_float32_centers_near_rounding_midpoints(buffers):
    """float32 data meets float32 copies of the centers: a float64 move of 1e-13 can
    move the float32 center by a whole ulp (across a rounding midpoint), and centers
    that differ in float64 but not in float32 tie.  Rows sit on the bisector."""
    rng = np.random.default_rng(13)
    n, p = 3000, 3
    points = rng.standard_normal((n, p)).astype(np.float32)
    points[:, 0] = 0                                           # on the bisector of (-m, ..) and (m, ..)
    points[: n // 3, 0] = np.float32(1e-7) * rng.integers(-3, 4, size=n // 3)   # just beside it
    points = np.ascontiguousarray(points)
    offsets = offsets_of([n // 2, n - n // 2])
    pair = Pair(points, offsets, 3)
    m = np.float32(1.5)
    below, above = _midpoints(np.nextafter(m, np.float32(0))), _midpoints(m)
    tiny = 1e-13
    base = np.zeros((2, 3, p))
    base[:, 0, 0] = -float(m)
    base[:, 2] = 30.0
    bufs = [np.empty_like(base)]

    def with_c1(x0, rest=0.0):
        c = base.copy()
        c[:, 1, 0] = x0
        c[:, 1, 1:] = rest
        if buffers == "fresh":
            return c
        bufs[0][...] = c
        return bufs[0]

    # float32 of c1[0]: m (tie), nextafter(m, 0) (c1 nearer), nextafter(m, inf) (c0 nearer)
    seq = [below + tiny, below + tiny, below - tiny, below - tiny, below + tiny, below + tiny, below - tiny,
           above - tiny, above - tiny, above + tiny, above + tiny, above - tiny, float(m), float(m) + 1e-12,
           below - tiny, below - tiny]
    for x0 in seq:
        pair.step(with_c1(x0))
    # float32-identical, float64-different centers: c1 nearer in float64, a tie in float32
    for eps in [1e-9, 1e-10, -1e-10, 1e-9]:
        c = base.copy()
        c[:, 1] = base[:, 0] + eps
        pair.step(c)
    assert sum(h[0] for h in pair.history[1:]) > n, "the scenario should flip many labels"


@pytest.mark.parametrize("dtype", DTYPES)
def test_near_ties_in_the_last_bits(dtype, threads):
    """Centers that differ from each other in the last few bits (of the data's precision),
    moved by single ulps from pass to pass: the oracle's rounded distances decide,
    ties included."""
    rng = np.random.default_rng(14)
    sizes = [500, 0, 30, 1000]
    p, k = 4, 4
    points, offsets = blobs(rng, sizes, p, dtype, n_blobs=1, sep=0.0, spread=1.0)
    pair = Pair(points, offsets, k)
    base = rng.standard_normal((len(sizes), 1, p)).astype(dtype)
    steps = rng.integers(-2, 3, size=(len(sizes), k, p))
    for t in range(18):
        c = np.broadcast_to(base, (len(sizes), k, p)).copy()
        for _ in range(3):                         # each center a few ulps from the others
            c = np.where(steps > 0, np.nextafter(c, dtype(np.inf)), c)
            c = np.where(steps < 0, np.nextafter(c, dtype(-np.inf)), c)
        pair.step(c.astype(np.float64))
        if t % 3 != 2:                             # move a few coordinates by one ulp
            flip = rng.random(steps.shape) < 0.2
            steps = np.where(flip, rng.integers(-2, 3, size=steps.shape), steps)
    assert sum(h[0] for h in pair.history[1:]) > 0


# ----------------------------------------------------------------- bounds, counters, settled agents

@pytest.mark.parametrize("dtype", DTYPES)
def test_settling_run_engages_the_bounds(dtype, threads):
    """The first pass skips nothing; once the centers hardly move, most rows are
    skipped on the bounds, and every label still equals the oracle's."""
    rng = np.random.default_rng(15)
    sizes = [2000, 0, 5, 3000]
    p, k = 8, 6
    points, offsets = blobs(rng, sizes, p, dtype, n_blobs=k, sep=10.0)
    kinds = [("lloyd", 0.0)] * 6 + [("lloyd", float(e)) for e in np.geomspace(1e-5, 1e-7, 8)]
    pair = drive(points, offsets, k, rng, kinds=kinds)
    skipped = [h[1] for h in pair.history]
    assert skipped[0] == 0
    n = len(points)
    assert all(s > 0.5 * n for s in skipped[-6:]), f"rows skipped per pass {skipped} of {n}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moves_given", [False, True])
def test_settled_agents_are_kept_without_reading_their_rows(dtype, moves_given, threads):
    """Many small agents (16 rows each, as in a sensor network) settling: once the centers
    hardly move, most agents are kept whole on their clusters' bounds while the moves add
    up, every label still the oracle's and every row's bounds, moved, still holding its
    true distances (Pair.step); a big move then opens them again."""
    rng = np.random.default_rng(22)
    points, offsets = blobs(rng, [16] * 300, 6, dtype, n_blobs=4, sep=12.0)
    kinds = [("lloyd", 0.0)] * 4 + [("lloyd", float(e)) for e in np.geomspace(1e-4, 1e-7, 8)] + [("jump", 3.0)]
    if moves_given:
        history = drive_given_moves(points, offsets, 4, rng, kinds, 2).history
    else:
        history = drive(points, offsets, 4, rng, kinds=kinds).history
    kept = [h[4] for h in history]
    assert kept[0] == 0
    assert all(n > 250 for n in kept[-5:-1]), f"agents kept whole per pass {kept} of 300"
    assert kept[-1] < kept[-2], f"a jump of the centers kept as many agents: {kept}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("moves_given", [False, True])
def test_agent_with_an_empty_cluster_is_kept_when_nothing_moved(dtype, moves_given, threads):
    """A cluster without rows never holds its agent back, also when no center has moved
    since its bounds were written (no update between two passes: every move is zero)."""
    rng = np.random.default_rng(24)
    points, offsets = blobs(rng, [40] * 5, 3, dtype, n_blobs=1)
    centers = np.stack([np.stack([points[offsets[a]:offsets[a + 1]].mean(axis=0).astype(np.float64),
                                  np.full(3, 1e3)]) for a in range(5)])
    pair = Pair(points, offsets, 2, moves_given=moves_given)
    pair.step(centers)
    pair.step(centers)
    assert pair.history[1][4] == 5, f"agents kept whole on the second pass: {pair.history[1][4]} of 5"


@pytest.mark.parametrize("dtype", DTYPES)
def test_lazy_pass_writes_rows_as_of_its_base(dtype, threads):
    """A pass that opens few rows keeps its agent's base: the rows it assesses anew are
    written as of the centers its moves are measured from, so that they still hold when the
    centers come back there (moves measured from `previous`: a distance, not a sum)."""
    rng = np.random.default_rng(23)
    near_tie = rng.uniform(0.01, 0.05, 10) * rng.choice([-1.0, 1.0], 10)
    points = np.concatenate([rng.standard_normal((1500, 2)) * 0.5 + [-5.0, 0.0],
                             rng.standard_normal((1500, 2)) * 0.5 + [5.0, 0.0],
                             np.column_stack([near_tie, np.zeros(10)])]).astype(dtype)
    offsets = offsets_of([len(points)])
    base = np.array([[[-5.0, 0.0], [5.0, 0.0], [0.0, 50.0]]])
    toward = base.copy()
    toward[0, :2, 0] += 0.2                 # nearer and farther from the rows at the tie: they open, few
    pair = Pair(points, offsets, 3)
    for centers in (base, base, toward, base):
        pair.step(centers)
    opened = [h[2] + h[3] for h in pair.history]
    assert 0 < opened[2] * LAZY_OPEN < len(points), f"rows assessed per pass {opened}"
    assert (pair.local.previous == base.astype(dtype)).all(), "the lazy pass moved its agent's base"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("p", [3, 32])
def test_moves_measured_by_the_updates(dtype, steps, p, threads):
    """A pass told the moves by the center updates (as a run with ghosts does) gives the
    oracle's labels, sums and counts on every schedule of moves, across updates that
    overshoot and come back; and its bounds still skip most rows once the centers settle."""
    rng = np.random.default_rng(21 + steps + p)
    sizes = [0, 3, 250, 1, 40, 1200, 7, 600]
    points, offsets = blobs(rng, sizes, p, dtype)
    drive_given_moves(points, offsets, 6, rng, standard_schedule(), steps)
    drive_given_moves(points, offsets, 4, rng, creeping_schedule(), steps)
    kinds = [("lloyd", 0.0)] * 6 + [("lloyd", float(e)) for e in np.geomspace(1e-5, 1e-7, 8)]
    skipped = [h[1] for h in drive_given_moves(points, offsets, 5, rng, kinds, steps).history]
    assert all(s > 0.5 * len(points) for s in skipped[-6:]), f"rows skipped per pass {skipped} of {len(points)}"


def ranked_one_by_one(values):
    """The ranking's definition: (the lowest index of the smallest, the smallest, the second
    smallest counting a tie with the smallest; inf for one value)."""
    ranked = sorted(values)
    return values.index(ranked[0]), ranked[0], ranked[1] if len(values) > 1 else np.inf


@numba.njit
def _rank_rows(tile, center_norm, best, smallest, second):
    for i in range(tile.shape[0]):
        best[i], smallest[i], second[i] = rank_row(tile, i, center_norm)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 7, 8, 9, 16, 17, 33])
def test_rank_row_ranks_as_one_by_one(dtype, k):
    """The screening's ranking of a row's K candidates, eight lanes at a time and then
    merged, against the definition written in Python: e_k = norm_k - 2 tile_k in float64,
    the lowest index of the smallest, the smallest, and the second smallest counting a tie
    with the smallest (inf for K = 1).  Small integers make ties common; the buffers hold
    one vector past the tile and the norms, which the ranking reads and must ignore."""
    rng = np.random.default_rng(k)
    n = 400
    tile_buffer = np.full(n * k + LANES, -1e30, dtype=dtype)      # past the end: would win if read
    tile = tile_buffer[:n * k].reshape(n, k)
    tile[:n // 2] = rng.integers(-2, 3, size=(n // 2, k))
    tile[n // 2:] = rng.standard_normal((n - n // 2, k))
    center_norm = np.full(k + LANES, -1e30)
    center_norm[:k] = rng.integers(0, 3, size=k)
    best, smallest, second = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n)
    _rank_rows(tile, center_norm, best, smallest, second)
    for i in range(n):
        e = [center_norm[c] - 2.0 * float(tile[i, c]) for c in range(k)]
        assert (best[i], smallest[i], second[i]) == ranked_one_by_one(e), f"row {i}: {e}"


@numba.njit
def _rank_all_columns(dist, best, smallest, second):
    ranked_best, ranked = np.empty(dist.shape[1], dtype=np.int64), np.empty((2, dist.shape[1]))
    for first in range(0, best.shape[0], LANES):
        rank_columns(dist, first, ranked_best, ranked)
    for i in range(best.shape[0]):
        best[i], smallest[i], second[i] = ranked_best[i], ranked[0, i], ranked[1, i]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 7, 8, 9, 16])
@pytest.mark.parametrize("n", [16, 21])
def test_rank_columns_ranks_as_one_by_one(dtype, k, n):
    """The exact pass's ranking of each row's K distances (a tile's columns), eight rows a
    vector, against the definition written in Python: the lowest index of the smallest, the
    smallest, and the second smallest counting a tie with the smallest (inf for K = 1).
    Small integers make ties common; n = 21 leaves a vector part past the rows, whose
    columns hold numbers that would win if they were taken for a row's."""
    rng = np.random.default_rng(10 * k + n)
    columns = (n + LANES - 1) // LANES * LANES
    dist = np.full((k, columns), -1.0, dtype=dtype)
    dist[:, :n // 2] = rng.integers(0, 3, size=(k, n // 2))
    dist[:, n // 2:n] = rng.exponential(size=(k, n - n // 2))
    best, smallest, second = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n)
    _rank_all_columns(dist, best, smallest, second)
    for i in range(n):
        d = [float(dist[c, i]) for c in range(k)]
        assert (best[i], smallest[i], second[i]) == ranked_one_by_one(d), f"row {i}: {d}"


@numba.njit
def _bounds_both_ways(dist, terms, best, bounds, ranked_best, ranked, one_by_one):
    """rank_bound_columns's bounds, and the same rows' bounds from rank_columns's ranking by
    _keep_exact_bounds and _fold_row one row at a time (one_by_one: upper, lower, gap)."""
    for first in range(0, best.shape[0], LANES):
        rank_bound_columns(dist, first, best, bounds, terms[0], terms[1], terms[2])
        rank_columns(dist, first, ranked_best, ranked)
    top, gap = np.zeros((1, 1), dtype=np.float32), np.zeros((1, 1), dtype=np.float32)
    for i in range(best.shape[0]):
        _keep_exact_bounds(one_by_one[0], one_by_one[1], i, ranked[0, i], ranked[1, i], terms[0], terms[1], terms[2])
        gap[0, 0] = np.finfo(np.float32).max
        _fold_row(top, gap, 0, 0, one_by_one[0, i], one_by_one[1, i])
        one_by_one[2, i] = gap[0, 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 8, 9])
def test_rank_bound_columns_bounds_as_one_by_one(dtype, k):
    """The cold pass's bounds, eight rows a vector, against _keep_exact_bounds and _fold_row
    row by row: the same float32 numbers, at zero, at the smallest normals, across float32's
    range and beyond it (where a bound is inf or clamped), at ties, and with K = 1 (no
    second center: the second distance is inf, the lower bound float32's largest kept)."""
    rng = np.random.default_rng(k)
    n = 64
    dist = (np.abs(rng.standard_normal((k, n))) * 10.0 ** rng.integers(-30, 30, (k, n))).astype(dtype)
    dist[:, :8] = 0
    dist[0, 8:16] = np.finfo(dtype).tiny
    dist[:, 16:24] = dist[0, 16:24]                                 # ties
    dist[:, 24:32] = np.finfo(dtype).max / 4                         # float64: past float32's square
    terms = np.array([1e-15, 2.0 ** -52, 8 * np.finfo(np.float64).tiny])
    best, ranked_best = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    bounds, one_by_one = np.empty((3, n), dtype=np.float32), np.empty((3, n), dtype=np.float32)
    _bounds_both_ways(dist, terms, best, bounds, ranked_best, np.empty((2, n)), one_by_one)
    np.testing.assert_array_equal(best, ranked_best)
    np.testing.assert_array_equal(bounds, one_by_one)
    # The edge cases ran: beyond float32 the upper bound is inf; zero distances give a zero
    # lower bound and touching bounds (a gap of -1), except that K = 1 has no second center.
    assert np.isinf(bounds[0, 24:32]).all() == (dtype == np.float64)
    if k > 1:
        assert (bounds[1, :8] == 0).all() and (bounds[2, :8] == -1).all()
    else:
        assert (bounds[1] == np.float32(3.0e38)).all() and (bounds[2, :24] > 0).all()


@numba.njit
def _add_rows(sums, points, labels, weights):
    for row in range(points.shape[0]):
        add_weighted_row(sums, 1, labels[row], points, row, weights[row])


@numba.njit
def _add_rows_one_by_one(sums, points, labels, weights):
    for row in range(points.shape[0]):
        for j in range(points.shape[1]):
            sums[1, labels[row], j] += weights[row] * np.float64(points[row, j])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 7, 8, 9, 17, 32])
def test_add_weighted_row_adds_as_one_by_one(dtype, p):
    """Rows added to their clusters' sums in vectors and a scalar tail: the same sums as
    the scalar loop, for p below, at and above whole vectors, and only in sums[1]."""
    rng = np.random.default_rng(p)
    points = (rng.standard_normal((200, p)) * 10.0 ** rng.integers(-3, 9, (200, 1))).astype(dtype)
    labels, weights = rng.integers(0, 3, 200), rng.random(200)
    vectors, one_by_one = np.zeros((2, 3, p)), np.zeros((2, 3, p))
    _add_rows(vectors, points, labels, weights)
    _add_rows_one_by_one(one_by_one, points, labels, weights)
    np.testing.assert_array_equal(vectors, one_by_one)
    assert not vectors[0].any()


@numba.njit
def _transposed(points, start, n, rows_t):
    return transpose_rows(points, start, n, rows_t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 8, 9, 16, 17])
@pytest.mark.parametrize("n", [7, 8, 17, 64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_transpose_rows_writes_whole_blocks(dtype, p, n, order):
    """transpose_rows writes rows_t[j, i] = points[start + i, j] for the whole blocks of
    BLOCK rows and features of rows in C order, and nothing else (tile_distances copies the
    rest); of rows in Fortran order nothing at all.  It returns what it wrote."""
    rng = np.random.default_rng(n * p)
    points = rng.standard_normal((100, p)).astype(dtype, order=order)
    rows_t = np.full((p, 80), np.nan, dtype=dtype)
    rows, features = _transposed(points, 5, n, rows_t)
    by_blocks = points.flags.c_contiguous          # (one column in Fortran order is in C order too)
    assert (rows, features) == ((n // BLOCK * BLOCK, p // BLOCK * BLOCK) if by_blocks else (0, 0))
    expected = np.full_like(rows_t, np.nan)
    expected[:features, :rows] = points[5:5 + rows, :features].T
    np.testing.assert_array_equal(rows_t, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0.0, 1e8])
def test_rows_left_open_in_bulk_are_screened(dtype, offset, threads):
    """Big moves after the first pass leave many rows' bounds open at once: those are
    screened by GEMM on the bounded passes (the counters show it where the data allow
    screening), and every label, sum and count still equals the oracle's, also where the
    expanded form cancels (offset 1e8) and a row must fall back to the per-feature form."""
    rng = np.random.default_rng(21)
    points, offsets = blobs(rng, [3000, 40, 2000], 32, dtype, n_blobs=8, offset=offset)
    kinds = [("lloyd", 0.0), ("jump", 3.0), ("lloyd", 0.0), ("swap",), ("lloyd", 1e-3), ("dup",), ("lloyd", 0.0)]
    pair = drive(points, offsets, 8, rng, kinds=kinds)
    if offset == 0.0:
        assert sum(h[2] for h in pair.history[1:]) > 0, f"(changed, skipped, screened, exact) {pair.history}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_counters_add_up(dtype):
    """rows_skipped + rows_screened + rows_exact == n on every pass, through moves of every
    kind (checked in Pair.step), and each counter describes the last run only."""
    rng = np.random.default_rng(16)
    points, offsets = blobs(rng, [100, 0, 700, 3], 4, dtype)
    pair = drive(points, offsets, 5, rng, kinds=standard_schedule(20))
    assert all(sum(h[1:4]) == len(points) for h in pair.history)
    assert pair.history[0][1] == 0


def test_empty_block():
    """A block whose agents hold no rows at all."""
    for dtype in DTYPES:
        points = np.zeros((0, 3), dtype=dtype)
        offsets = offsets_of([0, 0, 0])
        rng = np.random.default_rng(0)
        pair = Pair(points, offsets, 2)
        for _ in range(3):
            pair.step(rng.standard_normal((3, 2, 3)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pass_with_no_change_and_with_one_change(dtype):
    """A pass after which no label changed (centers repeated, then moved a little) keeps
    sums/counts equal to the oracle's; then one row of one agent changes label: that
    agent's sums must be those summed afresh in row order, not updated by the one row."""
    rng = np.random.default_rng(17)
    p = 3
    # agent 0: cluster A around 0 with one outlier in the middle, cluster B around 20;
    # agents 1-2: blobs that stay settled throughout.
    for _ in range(50):                                        # data where a one-row update is inexact
        a_rows = rng.uniform(-1, 1, size=(41, p)) * 10.0 ** rng.uniform(-17, 0, size=(41, 1))   # rounds in sums
        outlier = 20
        a_rows[outlier] = 3.0 + rng.uniform(0, 0.5, size=p)
        b_rows = 20 + rng.uniform(-1, 1, size=(37, p))
        agent0 = np.concatenate([a_rows[:30], b_rows[:20], a_rows[30:], b_rows[20:]]).astype(dtype)
        is_a = np.r_[np.ones(30, bool), np.zeros(20, bool), np.ones(11, bool), np.zeros(17, bool)]
        x = agent0.astype(np.float64)
        row = int(np.flatnonzero(is_a)[outlier])
        before, after_a = np.zeros(p), np.zeros(p)
        for r in np.flatnonzero(is_a):                       # the oracle's order
            before += x[r]
            if r != row:
                after_a += x[r]
        if (before - x[row]).tobytes() != after_a.tobytes():
            break
    else:
        pytest.skip("no data found where a one-row update of the sums is inexact")
    other, other_offsets = blobs(rng, [60, 90], p, dtype, n_blobs=2, sep=10)
    points = np.ascontiguousarray(np.concatenate([agent0, other]))
    offsets = np.concatenate([[0], len(agent0) + other_offsets]).astype(np.int64)
    pair = Pair(points, offsets, 2)
    centers = np.empty((3, 2, p))
    centers[0] = [x[is_a].mean(axis=0), x[~is_a].mean(axis=0)]
    centers[1:] = initial_centers(points, offsets, 2, rng)[1:]
    sums, counts, _ = pair.step(centers.copy())
    for _ in range(4):                                         # Lloyd to its fixed point
        centers = next_centers(centers, sums, counts, ("lloyd", 0.0), rng, 1.0)
        sums, counts, _ = pair.step(centers.copy())
    _, _, changed = pair.step(centers.copy())                 # repeated centers
    assert changed == 0
    _, _, changed = pair.step(centers + 1e-6 * rng.standard_normal(centers.shape))   # a small move
    assert changed == 0
    moved = centers.copy()
    moved[0, 1] = x[row]                                       # B's center onto the outlier of A
    _, counts_after, changed = pair.step(moved)
    assert changed == 1 and pair.ref_labels[row] == 1
    assert counts_after[0].tolist() == [counts[0, 0] - 1, counts[0, 1] + 1]
    _, _, changed = pair.step(moved.copy())                    # settled again
    assert changed == 0
    _, _, changed = pair.step(centers.copy())                  # and back
    assert changed == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [3, 20])
def test_first_pass_from_earlier_labels_and_stale_accumulators(dtype, p):
    """A LocalPass started on labels from an earlier run (one agent's all still right,
    another's partly wrong) and on accumulators holding other numbers: the first pass
    must sum every agent afresh and count changes against the labels it was given."""
    rng = np.random.default_rng(20 + p)
    points, offsets = blobs(rng, [100, 0, 7, 300, 80], p, dtype)
    centers = initial_centers(points, offsets, 4, rng)
    labels = kernels.nearest_labels(points, offsets, centers)
    wrong = np.flatnonzero(rng.random(len(points)) < 0.3)
    wrong = wrong[wrong >= offsets[1]]                          # agent 0 keeps right labels
    labels[wrong] = (labels[wrong] + 1) % 4
    for fill in [0.0, 12345.5, np.nan]:
        pair = Pair(points, offsets, 4, labels=labels)
        for array in pair.out:
            array[...] = 7 if array.dtype.kind == "i" else fill
        _, _, changed = pair.step(centers.copy())
        assert changed == len(wrong)
        sums, counts, _ = pair.step(centers.copy())
        pair.step(next_centers(centers, sums, counts, ("lloyd", 1e-3), rng, spread_of(points)))


def _wide_case(case, rng, p, dtype):
    """Data and first centers with many rows per agent and many features, for `case`."""
    sizes = [64, 3, 300, 0, 129]
    k = 6
    if case == "grid":
        points = rng.integers(-2, 3, size=(sum(sizes), p)).astype(dtype)
        centers = rng.integers(-3, 4, size=(len(sizes), k, p)) / 2.0
        return points, offsets_of(sizes), centers
    if case == "ulps":                      # centers a few ulps apart, rows near them
        base = (1 + 0.1 * rng.standard_normal(p)).astype(dtype)
        points = (base + 1e-3 * rng.standard_normal((sum(sizes), p))).astype(dtype)
        centers = np.broadcast_to(base, (len(sizes), k, p)).copy()
        for _ in range(3):
            steps = rng.integers(-1, 2, size=centers.shape)
            centers = np.where(steps > 0, np.nextafter(centers, dtype(np.inf)),
                               np.where(steps < 0, np.nextafter(centers, dtype(-np.inf)), centers))
        return points, offsets_of(sizes), centers.astype(np.float64)
    if case == "bisector":                  # rows with x_0 = 0 between (-m, z) and (m, z)
        points = rng.standard_normal((sum(sizes), p)).astype(dtype)
        points[:, 0] = 0
        points[::3, 0] = np.spacing(dtype(1)) * rng.integers(-2, 3, size=len(points[::3]))
        centers = 3 * rng.standard_normal((len(sizes), k, p))
        z = rng.standard_normal((len(sizes), p)).astype(dtype).astype(np.float64)
        centers[:, 0], centers[:, 1] = z, z
        centers[:, 0, 0], centers[:, 1, 0] = -0.75, 0.75
        return points, offsets_of(sizes), centers
    offset, magnitude = {"random": (0.0, None), "offset4": (1e4, None), "offset8": (1e8, None),
                         "dup": (0.0, None), "tiny": (0.0, 1e-150 if dtype == np.float64 else 1e-18),
                         "large": (0.0, 1e140 if dtype == np.float64 else 1e17)}[case]
    points, offsets = blobs(rng, sizes, p, np.float64, n_blobs=k, sep=2.0)
    if magnitude is not None:
        points = points / np.abs(points).max() * magnitude
    points = np.ascontiguousarray((points + offset).astype(dtype))
    centers = initial_centers(points, offsets, k, rng)
    centers += 1e-3 * spread_of(points) * rng.standard_normal(centers.shape)
    if case == "dup":
        centers[:, 3], centers[:, 5] = centers[:, 1], centers[:, 0]
    return points, offsets, centers


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [16, 33, 64])
def test_first_pass_wide_rows(dtype, p):
    """First passes on agents with many rows and features (where a pass may screen rows
    with the expanded form ||x||^2 - 2 x.c + ||c||^2): exact and near ties, duplicate
    centers, offsets, tiny and large magnitudes; then a repeat and a small move."""
    rng = np.random.default_rng(30 + p)
    for case in ["random", "grid", "ulps", "bisector", "dup", "offset4", "offset8", "tiny", "large"]:
        points, offsets, centers = _wide_case(case, rng, p, dtype)
        assert np.abs(points).max() <= coordinate_limit(dtype, p)
        pair = Pair(points, offsets, centers.shape[1])
        sums, counts, _ = pair.step(centers.copy())
        pair.step(centers.copy())
        pair.step(next_centers(centers, sums, counts, ("jitter", 1e-7), rng, spread_of(points)))


def test_sse_into_the_accumulators():
    """sse written into the out tuple's own sse array, between runs, as a driver would."""
    rng = np.random.default_rng(18)
    points, offsets = blobs(rng, [100, 0, 400], 4, np.float32)
    local = LocalPass(points, offsets, 3)
    labels = np.full(len(points), -1, dtype=np.int32)
    out = kernels.accumulators(3, 3, 4)
    ref_labels = np.full(len(points), -1, dtype=np.int32)
    ref_out = kernels.accumulators(3, 3, 4)
    centers = initial_centers(points, offsets, 3, rng)
    for t in range(10):
        sums, counts, changed = local.run(centers, labels, out)
        ref = kernels.assign_and_accumulate(points, offsets, centers, ref_labels, out=ref_out)
        assert labels.tobytes() == ref_labels.tobytes() and sums.tobytes() == ref[0].tobytes()
        assert counts.tobytes() == ref[1].tobytes() and changed == ref[3]
        assert local.sse(centers, labels, out[2]) is out[2]
        assert out[2].tobytes() == ref[2].tobytes()
        centers = next_centers(centers, ref[0], ref[1], ("lloyd", 10.0 ** -(t % 7)), rng, spread_of(points))


def test_two_passes_do_not_share_state():
    """Two LocalPass objects (different dtypes and shapes) run interleaved."""
    rng = np.random.default_rng(19)
    p32, o32 = blobs(rng, [300, 0, 20], 5, np.float32)
    p64, o64 = blobs(rng, [10, 500], 5, np.float64)
    a, b = Pair(p32, o32, 4), Pair(p64, o64, 4)
    ca, cb = initial_centers(p32, o32, 4, rng), initial_centers(p64, o64, 4, rng)
    for t in range(12):
        sa, na, _ = a.step(ca)
        sb, nb, _ = b.step(cb)
        ca = next_centers(ca, sa, na, ("lloyd", 1e-6), rng, spread_of(p32))
        cb = next_centers(cb, sb, nb, ("lloyd", 1e-2 if t % 4 == 0 else 1e-7), rng, spread_of(p64))


# ----------------------------------------------------------------- random blocks

MOVES = st.one_of(
    st.tuples(st.just("lloyd"), st.sampled_from([0.0, 1e-7, 1e-3, 1e-1])),
    st.tuples(st.just("toward"), st.sampled_from([1e-7, 1e-3, 0.5])),
    st.tuples(st.just("jitter"), st.sampled_from([1e-12, 1e-6])),
    st.tuples(st.just("jump"), st.sampled_from([0.5, 3.0])),
    st.just(("repeat",)), st.just(("swap",)), st.just(("dup",)), st.just(("grid",)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), p=st.one_of(st.integers(1, 6), st.sampled_from([16, 17, 33])),
       k=st.integers(1, 6), sizes=st.lists(st.one_of(st.integers(0, 40), st.integers(60, 130)), min_size=1, max_size=5),
       grid=st.booleans(),
       kinds=st.lists(MOVES, min_size=1, max_size=8), buffers=st.sampled_from(["fresh", "inplace", "swap"]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**32 - 1))
def test_random_blocks(dtype, p, k, sizes, grid, kinds, buffers, threads, seed):
    """Random shapes, dtypes, offsets, K and center sequences (wide agents included); integer
    data makes ties common."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    if grid:
        points = rng.integers(-2, 3, size=(n, p)).astype(dtype)
        centers = rng.integers(-4, 5, size=(len(sizes), k, p)) / 2.0
    else:
        points = (rng.standard_normal((n, p)) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
        centers = None
    before = numba.get_num_threads()
    kernels.set_threads(threads)
    try:
        drive(np.ascontiguousarray(points), offsets_of(sizes), k, rng, kinds=kinds, buffers=buffers,
              centers=centers)
    finally:
        numba.set_num_threads(before)


@numba.njit
def _prefetched_then_summed(array, first, stop, rows, index):
    prefetch_span(array, first, stop)
    prefetch_rows(rows, index, 0, len(index))
    return array.sum() + rows.sum()


@pytest.mark.parametrize("array", [np.arange(40, dtype=np.int32), np.ones((6, 3, 5), dtype=np.float32),
                                   np.ones((7, 9))[:, ::2], np.ones((9, 7), order="F"), np.arange(30.0)[::-1]])
def test_prefetches_change_nothing(array):
    """prefetch_span and prefetch_rows compile for any array (any dtype, any number of axes,
    strided, reversed or in Fortran order) and leave every number as it was, whatever they
    span, an empty or backward span included: a prefetch only asks the caches for lines, it
    reads nothing a program sees and never faults.  (Each call ends: the test's timeout
    catches a span whose byte count, negative, were read as a huge unsigned one.)"""
    rows = np.arange(32.0).reshape(4, 8)
    before = array.copy(), rows.copy()
    for first, stop in ((0, 0), (0, 1), (1, len(array)), (len(array) - 1, len(array) + 3), (3, 1)):
        assert _prefetched_then_summed(array, first, stop, rows, np.array([3, 0, 3], dtype=np.int32)) == \
            array.sum() + rows.sum()
    np.testing.assert_array_equal(array, before[0])
    np.testing.assert_array_equal(rows, before[1])
