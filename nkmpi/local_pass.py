"""The assignment pass of a block, fast and exact.

Labels, cluster sums, counts and changed rows are bit for bit those of the
per-feature kernel (kernels.assign_and_accumulate, the reference path), which
computes every distance sum_j (x_j - c_j)^2 in the data's precision and takes
the first smallest.  These ideas skip most of that work without changing a bit:

* Certified screening (agents of at least SCREEN_ROWS rows, p >= SCREEN_FEATURES):
  ||x||^2 - 2 x.c + ||c||^2 by BLAS GEMM over tiles of rows.  Where the gap
  between the best and the second-best center exceeds the rounding error of
  both forms, the best is the per-feature form's strict argmin; the other rows
  (near ties, large magnitudes where the expanded form cancels) are assessed
  exactly.
* Bounds (Hamerly): each row keeps an upper bound on its true distance to its
  own center and a lower bound on its distance to every other, moved each pass
  by how far the centers moved.  A row whose bounds stay apart by more than the
  per-feature form's rounding cannot change label and is skipped.
* Settled agents: each agent also keeps, per cluster, its rows' largest upper
  bound and smallest gap between lower and upper bound.  Where that gap outlasts
  the moves, no row of the agent can change label and its rows are not read at
  all: their bounds keep the values of the pass that wrote them, and the centers'
  moves since then add up (a distance moved in steps is at least the distance
  from the start) until a pass applies them.  In a run's consensus tail a settled
  pass then reads 2K numbers an agent and its moves, not every row's bounds.
* Lazy passes: an agent whose last pass opened few rows keeps its bounds'
  base; its pass only reads the rows its bounds keep and writes back the
  rows it opens, restated as of that base, instead of rewriting every row.
* Settled clusters: a cluster no row of its agent left or joined keeps its sum
  and count, identical to recomputing them (the same rows in the same order);
  only the others are summed again (narrow rows by `_sum_affected`, without a
  branch per row).  An agent of several blocks of sums (kernels.sum_block_rows)
  keeps each block's, and sums again only the blocks whose rows changed label
  before adding up its blocks: a few changed labels cost a few blocks' rows,
  not the agent's.
* Scaled sums: given a scale (the center update's rho), a cluster's sum and
  count are divided by it once, when they are summed, and kept so: S / rho and
  n / rho are the numbers the update divides anyway, one division each, and a
  settled cluster's stand as they are for every update that reads them.

Error bounds, with u the unit roundoff and gamma_n = n u / (1 - n u): the
per-feature form gives d (1 + t), |t| <= gamma_{p+2} of the data's precision;
the GEMM form errs by at most 2 gamma_p ||x|| ||c|| (any summation order) plus
float64 rounding of the norms; both, plus ETA_ULPS smallest normals for
underflow.  The bounds are of true Euclidean distances, stored as float32
rounded outwards (8 bytes a row, 8 K an agent).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .kernels import TILE as ROW_TILE
from .kernels import (UNWEIGHTED, fold_block, in_parallel, row_weight, sum_block_rows, tile_distances, tile_rows,
                      written_zeros, zero_agent, zeroed_block)
from .row_sums import (BOUND_MAX, BOUND_PAD, BOUND_TINY, FOLD_SHRINK, LANES, add_weighted_row, prefetch_span,
                       rank_bound_columns, rank_row)

_JIT = dict(cache=True, nogil=True)

#: Screen with GEMM when an agent has this many rows and the data this many features;
#: below, the per-feature form costs about as much as the expanded one.
SCREEN_ROWS, SCREEN_FEATURES = 64, 16
#: Screen the rows a pass's bounds left open when at least this many of an agent's are
#: listed together (a GEMM call costs about as much as assessing so many per feature).
SCREEN_PENDING = 16
#: Rows a pass's bounds left open that are listed before they are assessed together.
PENDING_ROWS = 4 * ROW_TILE
#: Rows of one GEMM tile, fewer for many clusters (kernels.tile_rows; ROW_TILE: of one
#: transposed tile of the per-feature form, and of a block of bounded rows).
TILE = 1024
#: Agents whose center moves are computed together, ahead of their rows.
AGENT_CHUNK = 64
#: An agent's pass keeps its bounds' base (lazy) when its last pass opened fewer than one row
#: in LAZY_OPEN (a pass without bounds opens them all): a row assessed anew costs about as
#: much as LAZY_OPEN rows rewritten.
LAZY_OPEN = 64
#: The sse takes four rows at a time below this many features, row by row from it on (the same
#: sums either way; one rank's 6.4 million numbers, in 4 agents: p = 4, 8, 16 took 3.4, 2.5,
#: 2.1 ms four at a time against 8.8, 5.0, 3.8 row by row; p = 32, 64 took 2.9, 2.7 against 2.6, 2.2).
SSE_INTERLEAVED_BELOW = 32
#: Rows of at most this many bytes are summed again by `_sum_affected`, every row routed to a
#: sum (a spare one for the clusters kept): reading such a row costs less than the branch on
#: its label that a run of random labels mispredicts.  Wider rows are read only where their
#: cluster is summed again.  (2,000,000 rows of random labels in 8 clusters, p = 8, 4 of them
#: summed again: 7.3 ms routed, 12.9 ms by a branch; p = 32 and 16 clusters, 1 of them: 4.2
#: against 3.5 ms; target 8 of jobs/bench.py, p = 32: its passes 10-15% slower routed.)
ROUTED_ROW_BYTES = 64
#: Smallest normals allowed per distance for underflow (products that flush to zero).
ETA_ULPS = 8.0
#: The gap of an agent's cluster with no rows.
_GAP_NONE = np.float32(np.finfo(np.float32).max)


def _gamma(n, dtype):
    u = np.finfo(dtype).eps / 2
    return 2 * n * u / (1 - n * u)          # twice gamma_n: room for what the analysis rounds off


@njit(**_JIT)
def _store_upper(value):
    """A float32 at least `value` (inf when beyond float32)."""
    padded = value * (1.0 + BOUND_PAD)
    if padded > BOUND_MAX:
        return np.float32(np.inf)
    return np.float32(max(padded, BOUND_TINY))


@njit(**_JIT)
def _store_lower(value):
    """A float32 at most `value` (0 when tiny, the float32 maximum when beyond)."""
    padded = value * (1.0 - BOUND_PAD)
    if padded < BOUND_TINY:
        return np.float32(0.0)
    return np.float32(min(padded, BOUND_MAX))


@njit(**_JIT)
def _distance(points, row, center, k):
    """The per-feature form, exactly as the reference kernel computes it."""
    acc = center[k, 0] - center[k, 0]         # zero in the data's precision
    for j in range(center.shape[1]):
        diff = points[row, j] - center[k, j]
        acc += diff * diff
    return acc


@njit(**_JIT)
def _separated(nearest, others, exact_err, eta):
    """Whether a row whose true squared distance to one center is at most `nearest`, and to
    every other at least `others`, has that center as the per-feature form's strict argmin
    (the form errs by `exact_err` relative and `eta` absolute)."""
    return (1.0 + exact_err) * nearest + eta < (1.0 - exact_err) * others - eta


@njit(**_JIT)
def _ranked(k, d, best, d_best, d_second):
    """(best, smallest, second smallest) once candidate k at d is seen; ties keep the lower
    index.  Without branches: which candidate wins is unpredictable, and a mispredicted
    branch per candidate would cost more than the arithmetic."""
    d_second = min(d_second, max(d, d_best))
    best = k if d < d_best else best
    return best, min(d, d_best), d_second


@njit(**_JIT)
def _assess(points, row, center):
    """All K distances of a row in the per-feature form: (best, its distance, the second
    smallest distance; inf when K = 1)."""
    best, d_best, d_second = 0, np.inf, np.inf
    for k in range(center.shape[0]):
        d = np.float64(_distance(points, row, center, k))
        best, d_best, d_second = _ranked(k, d, best, d_best, d_second)
    return best, d_best, d_second


@njit(**_JIT)
def _keep_bounds(upper, lower, row, d_best, d_second, err, f64_err):
    """Store a row's bounds from its best and second-best squared distances in the GEMM
    form, each within `err` of the true one."""
    upper[row] = _store_upper(np.sqrt(d_best + err) * (1.0 + f64_err))
    lower[row] = _store_lower(np.sqrt(max(d_second - err, 0.0)) * (1.0 - f64_err))


@njit(**_JIT)
def _keep_exact_bounds(upper, lower, row, d_best, d_second, exact_err, f64_err, eta):
    """Store a row's bounds from its best and second-best squared distances in the
    per-feature form, each within `exact_err` relative and `eta` absolute of the true one."""
    _keep_bounds(upper, lower, row, (d_best + eta) / (1.0 - exact_err),
                 max(d_second - eta, 0.0) / (1.0 + exact_err), 0.0, f64_err)


@njit(inline='always', **_JIT)       # inlined: a call per row costs the cold pass of small agents 1.7x
def _add_row(points, weights, row, label, sums, counts, a):
    weight = row_weight(weights, row)
    counts[a, label] += weight
    for j in range(points.shape[1]):
        sums[a, label, j] += weight * np.float64(points[row, j])


@njit(inline='always', **_JIT)
def _sum_affected(points, weights, lo, hi, labels, sums, counts, a, affected, route, acc, acc_counts):
    """Sum agent a's `affected` clusters again, every row in order: each row is added
    (`_add_row`) to its cluster's sum in `acc`, or to the spare acc[0, K] where its cluster
    is not affected (ROUTED_ROW_BYTES: for narrow rows, cheaper than a branch on the label,
    mispredicted about once a row).  route (K,), acc (1, K + 1, p), acc_counts (1, K + 1):
    scratch."""
    n_clusters = sums.shape[1]
    for k in range(n_clusters):
        route[k] = k if affected[k] else n_clusters
        acc_counts[0, k] = 0.0
        for j in range(acc.shape[2]):
            acc[0, k, j] = 0.0
    for row in range(lo, hi):
        _add_row(points, weights, row, route[labels[row]], acc, acc_counts, 0)
    for k in range(n_clusters):
        if affected[k]:
            counts[a, k] = acc_counts[0, k]
            sums[a, k] = acc[0, k]


@njit(inline='always', **_JIT)
def _sum_again(points, weights, lo, hi, labels, sums, counts, a, affected, routed, route, acc, acc_counts):
    """Sum the `affected` clusters of rows lo..hi again into sums[a] and counts[a], every
    row in order: narrow rows routed (`_sum_affected`), wider ones read only where their
    cluster is affected."""
    if routed:
        _sum_affected(points, weights, lo, hi, labels, sums, counts, a, affected, route, acc, acc_counts)
        return
    for k in range(sums.shape[1]):
        if affected[k]:
            counts[a, k] = 0
            for j in range(sums.shape[2]):
                sums[a, k, j] = 0
    for row in range(lo, hi):
        if affected[labels[row]]:
            _add_row(points, weights, row, labels[row], sums, counts, a)


@njit(inline='always', **_JIT)
def _divide_clusters(sums, counts, a, clusters, scale):
    """Agent a's sums and counts of the `clusters` marked, just summed, divided by `scale`
    (LocalPass.run's): one division each, as the center update would make every time."""
    if scale == 1.0:
        return
    for k in range(sums.shape[1]):
        if clusters[k]:
            counts[a, k] = counts[a, k] / scale
            for j in range(sums.shape[2]):
                sums[a, k, j] = sums[a, k, j] / scale


@njit(inline='always', **_JIT)
def _add_blocks(sums, counts, a, block_sums, block_counts, first_block, n_blocks, clusters):
    """Agent a's sums and counts of the `clusters` marked: its blocks' (first_block on), added
    in order (kernels.sum_block_rows)."""
    for k in range(sums.shape[1]):
        if clusters[k]:
            counts[a, k] = 0
            for j in range(sums.shape[2]):
                sums[a, k, j] = 0
            for b in range(first_block, first_block + n_blocks):
                counts[a, k] += block_counts[b, k]
                for j in range(sums.shape[2]):
                    sums[a, k, j] += block_sums[b, k, j]


@njit(inline='always', **_JIT)       # inlined: a call counts references to its arrays, atomically, every agent
def _assess_rows(points, weights, lo, hi, block, center, labels, upper, lower, top, gap, sums, counts, a, block_sums,
                 block_counts, first_block, rows_t, dist, ranked_best, ranked_bounds, exact_err, f64_err, eta):
    """Every row of an agent per feature (no bounds yet, no screening), tile by tile as the
    reference kernel computes them, then ranked and bounded LANES rows at a time
    (row_sums.rank_bound_columns, into ranked_best and ranked_bounds); its bounds folded
    into top and gap from nothing (_open_summary, _fold_row), and its sums on the way, by
    blocks (kernels.zeroed_block).  Returns the changed labels."""
    changed = 0
    _open_summary(top, gap, a)
    for block_start in range(lo, hi, block):
        block_stop = min(block_start + block, hi)
        into, into_counts, at = zeroed_block(sums, counts, a, block_sums, block_counts, first_block,
                                            (block_start - lo) // block)
        for start in range(block_start, block_stop, rows_t.shape[1]):
            n = min(rows_t.shape[1], block_stop - start)
            tile_distances(points, start, n, center, rows_t, dist)
            for i in range(0, n, LANES):
                rank_bound_columns(dist, i, ranked_best, ranked_bounds, exact_err, f64_err, eta)
            for i in range(n):
                best, up = ranked_best[i], ranked_bounds[0, i]
                row = start + i
                upper[row], lower[row] = up, ranked_bounds[1, i]
                changed += labels[row] != best
                labels[row] = best
                weight = row_weight(weights, row)
                into_counts[at, best] += weight
                add_weighted_row(into, at, best, points, row, weight)
                _fold_gap(top, gap, a, best, up, ranked_bounds[2, i])
        fold_block(sums, counts, a, first_block, into, into_counts, at)
    return changed


@njit(**_JIT)
def _screening_centers(center, center_t, center_norm):
    """An agent's centers for GEMM screening: transposed into center_t, their squared norms
    into center_norm; returns the largest norm."""
    largest = 0.0
    for k in range(center.shape[0]):
        total = 0.0
        for j in range(center.shape[1]):
            center_t[j, k] = center[k, j]
            total += np.float64(center[k, j]) ** 2
        center_norm[k] = total
        largest = max(largest, np.sqrt(total))
    return largest


@njit(**_JIT)
def _screening_error(size, largest, screen_err, f64_err, eta):
    """How far the GEMM form of a squared distance may be from the true one, for a row of
    norm `size` and centers of norm at most `largest`."""
    return screen_err * size * largest + f64_err * (size + largest) ** 2 + eta


@njit(**_JIT)
def _screen_rows(points, weights, sizes, lo, hi, block, center, labels, upper, lower, sums, counts, a, block_sums,
                 block_counts, first_block, dots, center_t, center_norm, exact_err, screen_err, f64_err, eta):
    """Every row of an agent by GEMM tiles, certified or else assessed per feature; its sums
    on the way, by blocks (kernels.zeroed_block).  Returns (changed labels, screened rows, assessed rows)."""
    largest = _screening_centers(center, center_t, center_norm)
    changed = screened = assessed = 0
    for block_start in range(lo, hi, block):
        block_stop = min(block_start + block, hi)
        into, into_counts, at = zeroed_block(sums, counts, a, block_sums, block_counts, first_block,
                                            (block_start - lo) // block)
        for start in range(block_start, block_stop, dots.shape[0]):
            stop = min(start + dots.shape[0], block_stop)
            tile = dots[:stop - start]
            np.dot(points[start:stop], center_t, tile)
            for i in range(stop - start):
                row = start + i
                size = sizes[row]
                best, e_best, e_second = rank_row(tile, i, center_norm)      # ||c||^2 - 2 x.c
                d_best, d_second = size * size + e_best, size * size + e_second
                err = _screening_error(size, largest, screen_err, f64_err, eta)
                if _separated(d_best + err, d_second - err, exact_err, eta):
                    screened += 1
                    _keep_bounds(upper, lower, row, max(d_best, 0.0), d_second, err, f64_err)
                else:
                    assessed += 1
                    best, d_best, d_second = _assess(points, row, center)
                    _keep_exact_bounds(upper, lower, row, d_best, d_second, exact_err, f64_err, eta)
                changed += labels[row] != best
                labels[row] = best
                _add_row(points, weights, row, best, into, into_counts, at)
        fold_block(sums, counts, a, first_block, into, into_counts, at)
    return changed, screened, assessed


@njit(**_JIT)
def _screen_listed(points, sizes, rows, n_rows, center, labels, upper, lower, gathered, dots, center_t, center_norm,
                   exact_err, screen_err, f64_err, eta, affected, touched, lo, block):
    """rows[:n_rows] of one agent, scattered, by GEMM as _screen_rows does (gathered into a
    tile first); a row that changes label marks its old and new cluster in `affected`, and
    its block of sums (rows from `lo`, `block` a block) in `touched`.
    Returns (changed labels, screened rows, assessed rows).  (Each row is _screen_rows's, written
    out again: an inlined helper for both made the cold pass 40% slower.)"""
    largest = _screening_centers(center, center_t, center_norm)
    changed = screened = assessed = 0
    for start in range(0, n_rows, dots.shape[0]):
        n = min(dots.shape[0], n_rows - start)
        for i in range(n):
            gathered[i] = points[rows[start + i]]
        tile = dots[:n]
        np.dot(gathered[:n], center_t, tile)
        for i in range(n):
            row = rows[start + i]
            size = sizes[row]
            best, e_best, e_second = rank_row(tile, i, center_norm)
            d_best, d_second = size * size + e_best, size * size + e_second
            err = _screening_error(size, largest, screen_err, f64_err, eta)
            if _separated(d_best + err, d_second - err, exact_err, eta):
                screened += 1
                _keep_bounds(upper, lower, row, max(d_best, 0.0), d_second, err, f64_err)
            else:
                assessed += 1
                best, d_best, d_second = _assess(points, row, center)
                _keep_exact_bounds(upper, lower, row, d_best, d_second, exact_err, f64_err, eta)
            if labels[row] != best:
                changed += 1
                affected[labels[row]] = affected[best] = True
                touched[(row - lo) // block] = True
                labels[row] = best
    return changed, screened, assessed


@njit(inline='always', **_JIT)       # inlined, as _assess_rows
def _assess_pending(points, sizes, center, labels, upper, lower, pending, pending_low, n_pending, exact_err,
                    screen_err, f64_err, eta, affected, touched, lo, block, gathered, dots, center_t, center_norm):
    """The rows whose moved bounds overlap: tighten each upper bound to the exact distance to
    its own center; the rows that still overlap are assessed in full, by GEMM screening
    when there are SCREEN_PENDING of them or more (a big move of the centers unsettles many
    rows at once), else per feature.  A row that changes label marks its old and new
    cluster in `affected` and its block of sums in `touched` (as _screen_listed).
    center : (K, p) the agent's centers in the data's precision.
    Returns (changed labels, skipped rows, screened rows, rows assessed per feature)."""
    n_open = 0                              # the rows still open, listed over `pending`
    for p in range(n_pending):
        row, low = pending[p], pending_low[p]
        own = np.float64(_distance(points, row, center, labels[row]))
        up = np.sqrt((own + eta) / (1.0 - exact_err)) * (1.0 + f64_err)
        if low > 0 and _separated(up * up, low * low, exact_err, eta):
            upper[row], lower[row] = _store_upper(up), _store_lower(low)
        else:
            pending[n_open] = row
            n_open += 1
    skipped = n_pending - n_open
    if sizes.shape[0] and n_open >= SCREEN_PENDING:
        changed, screened, assessed = _screen_listed(points, sizes, pending, n_open, center, labels, upper, lower,
                                                     gathered, dots, center_t, center_norm, exact_err, screen_err,
                                                     f64_err, eta, affected, touched, lo, block)
        return changed, skipped, screened, assessed
    changed = 0
    for p in range(n_open):
        row = pending[p]
        best, d_best, d_second = _assess(points, row, center)
        _keep_exact_bounds(upper, lower, row, d_best, d_second, exact_err, f64_err, eta)
        if labels[row] != best:
            changed += 1
            affected[labels[row]] = affected[best] = True
            touched[(row - lo) // block] = True
            labels[row] = best
    return changed, skipped, 0, n_open


@njit(inline='always', **_JIT)
def _rank_moves(move, i, n_clusters):
    """move[i, K:K+3] = the largest and second-largest of move[i, :K] and the largest's index."""
    largest, second, largest_k = 0.0, 0.0, n_clusters
    for k in range(n_clusters):         # without branches, like _ranked
        second = max(second, min(move[i, k], largest))
        largest_k = k if move[i, k] > largest else largest_k
        largest = max(largest, move[i, k])
    move[i, n_clusters], move[i, n_clusters + 1], move[i, n_clusters + 2] = largest, second, largest_k


@njit(**_JIT)
def _moves(centers, previous, moved, ready, first, stop, move, f64_err, eta):
    """For the agents first..stop-1 that have bounds: how far each center moved since the
    agent's bounds were last written (true distance, rounded up), the largest and
    second-largest move and the largest's index.  From the caller's `moved` when it has
    rows (the sum of every update's move since then), else from the `previous` centers,
    those of that pass in the data's precision.  Done for a chunk of agents before their
    rows, so that no row waits on its agent's chain of square roots."""
    n_clusters, n_features = centers.shape[1], centers.shape[2]
    given = moved.shape[0] > 0
    for a in range(first, stop):
        if not ready[a]:
            continue
        i = a - first
        if given:
            for k in range(n_clusters):
                move[i, k] = moved[a, k]
        else:
            for k in range(n_clusters):
                gap = 0.0
                for j in range(n_features):
                    c = previous.dtype.type(centers[a, k, j])      # in the data's precision, as the reference
                    diff = np.float64(c) - np.float64(previous[a, k, j])
                    gap += diff * diff
                move[i, k] = gap
            for k in range(n_clusters):     # apart from the loops around it: the square roots vectorize
                move[i, k] = np.sqrt(move[i, k]) * (1.0 + f64_err) + eta
        _rank_moves(move, i, n_clusters)


@njit(inline='always', **_JIT)
def _settled(top, gap, a, move, i, n_clusters, exact_err, f64_err, eta):
    """Whether no row of agent a can change label.  Per cluster, `top` is at least its rows'
    upper bounds and `gap` at most their lower minus upper bounds, when written; moved
    since, a row's upper bound U is at most t = top + its center's move and its lower bound
    exceeds U by delta = gap - both moves.  The exact form's margin (1 - e)(U + delta)^2 -
    (1 + e) U^2 - 2 eta is concave in U, so it is positive for every U in [0, t] when it is
    at both ends: then every row's own bounds stay apart (_separated)."""
    largest, second, largest_k = move[i, n_clusters], move[i, n_clusters + 1], move[i, n_clusters + 2]
    apart = True
    for k in range(n_clusters):         # without branches: an agent's clusters are few
        own = move[i, k]
        t = (np.float64(top[a, k]) + own) * (1.0 + f64_err)
        delta = (np.float64(gap[a, k]) - (own + (second if k == largest_k else largest)) * (1.0 + f64_err)) \
            * (1.0 - f64_err)
        at_zero = (1.0 - exact_err) * delta * delta * (1.0 - f64_err)
        at_top = (1.0 - exact_err) * (2.0 * t * delta + delta * delta) * (1.0 - f64_err)
        apart &= (delta > 0) & (at_zero > 2.0 * eta) & (at_top > 2.0 * exact_err * t * t * (1.0 + f64_err) + 2.0 * eta)
    return apart


@njit(inline='always', **_JIT)
def _to_base(upper, lower, row, own_move, largest, f64_err):
    """A row's bounds, just written as of the current centers, restated as of its agent's
    base (a lazy pass, moves measured from `previous`): the upper bound grows by its own
    center's move since the base and the lower bound shrinks by the largest move.  A later
    pass moves them by the distance from the base again, and |c_now - c| <= |c_now - c_base|
    + |c_base - c| keeps both true.  Moves summed over the updates need none of this: their
    sum since the base is the sum up to now plus the moves after."""
    upper[row] = _store_upper((np.float64(upper[row]) + own_move) * (1.0 + f64_err))
    lower[row] = _store_lower((np.float64(lower[row]) - largest) * (1.0 - f64_err))


@njit(inline='always', **_JIT)
def _open_summary(top, gap, a):
    """An agent's bounds per cluster before any row is folded in (_fold_row): 0 and the float32
    maximum, which a cluster without rows keeps and which then never holds the agent back
    (finite: with no move, _settled's 2 t delta is 0, where inf would make it NaN)."""
    for k in range(top.shape[1]):
        top[a, k] = 0.0
        gap[a, k] = _GAP_NONE


@njit(inline='always', **_JIT)
def _fold_row(top, gap, a, label, up, low):
    """Fold a row's stored bounds into its agent's: the largest upper bound of a cluster's rows
    and the smallest lower minus upper bound, rounded down (-1 where a row's bounds touch;
    row_sums.rank_bound_columns computes that gap the same way)."""
    apart = (np.float64(low) - np.float64(up)) * FOLD_SHRINK
    _fold_gap(top, gap, a, label, up, _store_lower(apart) if apart > 0 else np.float32(-1.0))


@njit(inline='always', **_JIT)
def _fold_gap(top, gap, a, label, up, row_gap):
    """_fold_row of a row whose gap is already rounded (`row_gap`)."""
    top[a, label] = max(top[a, label], up)
    gap[a, label] = min(gap[a, label], row_gap)


@njit(**_JIT)
def _pass(points, weights, offsets, sizes, centers, labels, sums, counts, changed, upper, lower, top, gap, previous,
          moved, ready, opened, block_agents, block_first, block_sums, block_counts, counters, exact_err, screen_err,
          f64_err, eta, scale, resum, first, stop):
    """LocalPass.run over agents first..stop-1; resum: the sums it keeps are of another
    scale, so every agent's are summed again (its labels' bounds still hold)."""
    n_clusters, n_features = centers.shape[1], centers.shape[2]
    center = np.empty((n_clusters, n_features), dtype=points.dtype)
    center_t = np.empty((n_features, n_clusters), dtype=points.dtype)
    # A tile's products and the centers' norms, each with a vector of room past its end: rank_row
    # reads whole vectors.
    tile_size = tile_rows(n_clusters, TILE) * n_clusters
    dots = np.empty(tile_size + LANES, dtype=points.dtype)[:tile_size].reshape((tile_size // n_clusters, n_clusters))
    center_norm = np.empty(n_clusters + LANES)
    move = np.empty((AGENT_CHUNK, n_clusters + 3))      # moves, then largest, second, largest's index
    kept_now = np.empty(AGENT_CHUNK, dtype=np.bool_)    # whether the chunk's agents stay settled
    rows_t = np.zeros((n_features, tile_rows(n_clusters, ROW_TILE)), dtype=points.dtype)
    dist = np.empty((n_clusters, rows_t.shape[1]), dtype=points.dtype)   # whole vectors of rows (tile_rows)
    ranked_best = np.empty(rows_t.shape[1], dtype=np.int64)
    ranked_bounds = np.empty((3, rows_t.shape[1]), dtype=np.float32)     # upper, lower, their gap
    pending, pending_low = np.empty(PENDING_ROWS, dtype=np.int64), np.empty(PENDING_ROWS)
    listed = np.empty(PENDING_ROWS, dtype=np.int64)
    affected = np.empty(n_clusters, dtype=np.bool_)
    route = np.empty(n_clusters, dtype=np.int64)
    routed = n_features * points.itemsize <= ROUTED_ROW_BYTES
    acc, acc_counts = np.empty((1, n_clusters + 1, n_features)), np.empty((1, n_clusters + 1))
    gathered = np.empty((dots.shape[0], n_features), dtype=points.dtype)
    given = moved.shape[0] > 0
    # The agents of several blocks of sums (kernels.sum_block_rows), in order, and their blocks'
    # sums: a pass that changes labels sums again only the blocks `touched`.
    block = sum_block_rows(n_clusters)
    most_blocks = 1
    for m in range(len(block_agents)):
        most_blocks = max(most_blocks, block_first[m + 1] - block_first[m])
    touched = np.zeros(most_blocks, dtype=np.bool_)
    m = np.searchsorted(block_agents, first)
    for chunk in range(first, stop, AGENT_CHUNK):
        chunk_stop = min(chunk + AGENT_CHUNK, stop)
        _moves(centers, previous, moved, ready, chunk, chunk_stop, move, f64_err, eta)
        for a in range(chunk, chunk_stop):      # which agents stay settled; the others' rows asked for
            kept_now[a - chunk] = ready[a] and not resum and _settled(top, gap, a, move, a - chunk, n_clusters,
                                                                      exact_err, f64_err, eta)
            if ready[a] and not kept_now[a - chunk]:
                # A few agents among many: their rows are where no prefetcher looks.
                prefetch_span(labels, offsets[a], offsets[a + 1])
                prefetch_span(upper, offsets[a], offsets[a + 1])
                prefetch_span(lower, offsets[a], offsets[a + 1])
                prefetch_span(centers, a, a + 1)
        for a in range(chunk, chunk_stop):
            lo, hi = offsets[a], offsets[a + 1]
            blocked = m < len(block_agents) and block_agents[m] == a
            first_block, n_blocks = (block_first[m], block_first[m + 1] - block_first[m]) if blocked else (0, 1)
            m += blocked
            skipped = screened = assessed = 0
            rebased = kept = False          # every row's bounds written as of now; no row read
            if kept_now[a - chunk]:
                # Its rows are not read, and their bounds stay those of the pass that wrote
                # them: the moves since then add up in `moved` (or are measured from
                # `previous`) until a pass moves them onto the rows.
                skipped = hi - lo
                agent_changed = 0
                kept = True
                if opened[a]:               # it opened none
                    opened[a] = 0
            elif ready[a]:
                # Test each row's bounds, moved by the centers' moves, and skip the rows they
                # keep; set the others aside and assess them together once a block of rows
                # could overfill the list, and at the agent's end.  While few rows open, the
                # bounds keep their base (lazy): a kept row is only read, and a row assessed
                # anew is written back as of that base.  Else every kept row's bounds are
                # rewritten as of now (rebased), so that the moves start again from zero.
                # Written out here: a call with arrays costs an agent more than its rows
                # (reference counting).
                i = a - chunk
                largest, second, largest_k = move[i, n_clusters], move[i, n_clusters + 1], move[i, n_clusters + 2]
                for k in range(n_clusters):
                    for j in range(n_features):
                        center[k, j] = centers[a, k, j]          # in the data's precision, as the reference
                agent_changed = 0
                for k in range(n_clusters):     # (number by number, as kernels.zero_agent)
                    affected[k] = False
                for b in range(n_blocks):
                    touched[b] = False
                n_pending = n_opened = 0
                rebased = opened[a] * LAZY_OPEN >= hi - lo
                if rebased:
                    _open_summary(top, gap, a)      # each row folded in once its bounds are written
                for start in range(lo, hi, ROW_TILE):
                    rows_stop = min(start + ROW_TILE, hi)
                    if rebased:
                        for row in range(start, rows_stop):
                            b = labels[row]
                            up = (np.float64(upper[row]) + move[i, b]) * (1.0 + f64_err)
                            low = (np.float64(lower[row]) - (second if b == largest_k else largest)) * (1.0 - f64_err)
                            if low > 0 and _separated(up * up, low * low, exact_err, eta):
                                upper[row], lower[row] = _store_upper(up), _store_lower(low)
                                _fold_row(top, gap, a, b, upper[row], lower[row])
                            else:
                                pending[n_pending], pending_low[n_pending] = row, low
                                prefetch_span(points, row, row + 1)     # read once the list is assessed
                                n_pending += 1
                    else:
                        for row in range(start, rows_stop):
                            b = labels[row]
                            up = (np.float64(upper[row]) + move[i, b]) * (1.0 + f64_err)
                            low = (np.float64(lower[row]) - (second if b == largest_k else largest)) * (1.0 - f64_err)
                            if not (low > 0 and _separated(up * up, low * low, exact_err, eta)):
                                pending[n_pending], pending_low[n_pending] = row, low
                                prefetch_span(points, row, row + 1)     # read once the list is assessed
                                n_pending += 1
                    if n_pending and (rows_stop == hi or n_pending > len(pending) - ROW_TILE):
                        for q in range(n_pending):          # _assess_pending reorders `pending`
                            listed[q] = pending[q]
                        skipped -= n_pending
                        more_changed, more_skipped, more_screened, more_assessed = _assess_pending(
                            points, sizes, center, labels, upper, lower, pending, pending_low, n_pending,
                            exact_err, screen_err, f64_err, eta, affected, touched, lo, block, gathered, dots, center_t,
                            center_norm)
                        agent_changed += more_changed
                        skipped += more_skipped
                        screened += more_screened
                        assessed += more_assessed
                        for q in range(n_pending):
                            row = listed[q]
                            if not (rebased or given):      # summed moves hold from any pass on
                                _to_base(upper, lower, row, move[i, labels[row]], largest, f64_err)
                            _fold_row(top, gap, a, labels[row], upper[row], lower[row])
                        n_opened += n_pending
                        n_pending = 0
                opened[a] = n_opened
                skipped += hi - lo
                # Unless a label changed, the sums of the same rows in the same order stand; so
                # do those of the clusters no row left or joined, and of the blocks no row of
                # which changed (of another scale, every cluster is summed again).
                if resum:
                    for k in range(n_clusters):
                        affected[k] = True
                if agent_changed and blocked:
                    for b in range(n_blocks):
                        if touched[b]:
                            _sum_again(points, weights, lo + b * block, min(lo + (b + 1) * block, hi), labels,
                                       block_sums, block_counts, first_block + b, affected, routed, route, acc,
                                       acc_counts)
                    _add_blocks(sums, counts, a, block_sums, block_counts, first_block, n_blocks, affected)
                elif blocked and resum:         # its blocks' sums stand: they are never scaled
                    _add_blocks(sums, counts, a, block_sums, block_counts, first_block, n_blocks, affected)
                elif agent_changed or resum:
                    _sum_again(points, weights, lo, hi, labels, sums, counts, a, affected, routed, route, acc,
                               acc_counts)
                if agent_changed or resum:
                    _divide_clusters(sums, counts, a, affected, scale)
            else:
                for k in range(n_clusters):
                    for j in range(n_features):
                        center[k, j] = centers[a, k, j]          # in the data's precision, as the reference
                # An agent of one block adds its rows straight into its sums (the same bits).
                own_blocks = first_block if blocked else -1
                zero_agent(sums, counts, a)     # the blocks are added to them (an agent without rows has none)
                if sizes.shape[0] and hi - lo >= SCREEN_ROWS:
                    agent_changed, screened, assessed = _screen_rows(
                        points, weights, sizes, lo, hi, block, center, labels, upper, lower, sums, counts, a,
                        block_sums, block_counts, own_blocks, dots, center_t, center_norm, exact_err, screen_err,
                        f64_err, eta)
                    _open_summary(top, gap, a)
                    for row in range(lo, hi):
                        _fold_row(top, gap, a, labels[row], upper[row], lower[row])
                else:
                    agent_changed = _assess_rows(points, weights, lo, hi, block, center, labels, upper, lower, top,
                                                 gap, sums, counts, a, block_sums, block_counts, own_blocks, rows_t,
                                                 dist, ranked_best, ranked_bounds, exact_err, f64_err, eta)
                    assessed = hi - lo
                for k in range(n_clusters):
                    affected[k] = True
                _divide_clusters(sums, counts, a, affected, scale)
                ready[a] = True
                rebased = True
                opened[a] = hi - lo             # the next pass, early in a run, rebases: the centers still jump
            if rebased:                     # moves count from here
                if given:
                    for k in range(n_clusters):
                        moved[a, k] = 0.0
                else:
                    for k in range(n_clusters):
                        for j in range(n_features):
                            previous[a, k, j] = center[k, j]
            changed[a] = agent_changed
            counters[0] += skipped
            counters[1] += screened
            counters[2] += assessed
            counters[3] += kept


@njit(parallel=True, **_JIT)
def _pass_parallel(points, weights, offsets, sizes, centers, labels, sums, counts, changed, upper, lower, top, gap,
                   previous, moved, ready, opened, block_agents, block_first, block_sums, block_counts, counters,
                   exact_err, screen_err, f64_err, eta, scale, resum, n_ranges, n_agents):
    each = np.zeros((n_ranges, counters.shape[0]), dtype=counters.dtype)
    for r in prange(n_ranges):
        _pass(points, weights, offsets, sizes, centers, labels, sums, counts, changed, upper, lower, top, gap,
              previous, moved, ready, opened, block_agents, block_first, block_sums, block_counts, each[r], exact_err,
              screen_err, f64_err, eta, scale, resum, r * n_agents // n_ranges, (r + 1) * n_agents // n_ranges)
    for r in range(n_ranges):
        counters += each[r]


@njit(**_JIT)
def _sse(points, weights, offsets, centers, labels, sse, first, stop):
    """Each agent's sum of weight times `_distance` to the row's own center, the rows in
    order.  Four rows at a time: their chains of p dependent additions interleave, where
    row by row each waited on the last (1.8x as long for 16-row agents); each row's
    distance still adds its features in order from 0, so the sums are bit for bit the same.
    From SSE_INTERLEAVED_BELOW features on, a row's chain is long enough alone."""
    n_clusters, n_features = centers.shape[1], centers.shape[2]
    center = np.empty((n_clusters, n_features), dtype=points.dtype)
    for a in range(first, stop):
        for k in range(n_clusters):
            for j in range(n_features):
                center[k, j] = centers[a, k, j]
        total = 0.0
        row, stop_row = offsets[a], offsets[a + 1]
        while n_features < SSE_INTERLEAVED_BELOW and row + 4 <= stop_row:
            k0, k1, k2, k3 = labels[row], labels[row + 1], labels[row + 2], labels[row + 3]
            d0, d1 = center[k0, 0] - center[k0, 0], center[k1, 0] - center[k1, 0]     # as _distance starts
            d2, d3 = center[k2, 0] - center[k2, 0], center[k3, 0] - center[k3, 0]
            for j in range(n_features):
                g0, g1 = points[row, j] - center[k0, j], points[row + 1, j] - center[k1, j]
                g2, g3 = points[row + 2, j] - center[k2, j], points[row + 3, j] - center[k3, j]
                d0, d1, d2, d3 = d0 + g0 * g0, d1 + g1 * g1, d2 + g2 * g2, d3 + g3 * g3
            total += row_weight(weights, row) * np.float64(d0)
            total += row_weight(weights, row + 1) * np.float64(d1)
            total += row_weight(weights, row + 2) * np.float64(d2)
            total += row_weight(weights, row + 3) * np.float64(d3)
            row += 4
        for last in range(row, stop_row):
            total += row_weight(weights, last) * np.float64(_distance(points, last, center, labels[last]))
        sse[a] = total


@njit(parallel=True, **_JIT)
def _sse_parallel(points, weights, offsets, centers, labels, sse, n_ranges, n_agents):
    for r in prange(n_ranges):
        _sse(points, weights, offsets, centers, labels, sse, r * n_agents // n_ranges,
             (r + 1) * n_agents // n_ranges)


@njit(**_JIT)
def _row_sizes(points):
    sizes = np.empty(points.shape[0])
    for row in range(points.shape[0]):
        total = 0.0
        for j in range(points.shape[1]):
            total += np.float64(points[row, j]) ** 2
        sizes[row] = np.sqrt(total)
    return sizes


class LocalPass:
    """The assignment pass of one block, remembering what lets it skip work.

    points : (n, p) float32/float64, the block's rows grouped by agent (C order);
    offsets : (L+1,) block-local row offsets; n_clusters : K; weights : (n,) float64
    row weights, or kernels.UNWEIGHTED.

    Pass the same `labels` and `out` arrays to every `run` (the bounds describe
    those labels, and a settled cluster's sums are kept in `out`).  Memory: 8 bytes
    a row and 8 K + 4 an agent of bounds, 8 more a row for the row norms when screening,
    at most (p + 1) / 8 a row for the blocks' sums of agents of several blocks,
    and the centers of each agent's last bounds in the data's precision, or with
    `moves_given` K numbers an agent instead: `moved`, to which the caller adds how
    far each center moves between runs (kernels.center_update does, given
    `move_terms`), reset by a run that writes the agent's bounds.  That costs the
    caller nothing where it computes the new centers anyway, and spares the pass
    reading two copies of the centers.

    rows_skipped, rows_screened, rows_exact : of the last run, rows whose label the
    bounds kept, rows the GEMM screening assigned, rows assessed per feature;
    agents_kept : agents whose rows it did not read (their clusters' bounds kept them all).
    """

    def __init__(self, points: np.ndarray, offsets: np.ndarray, n_clusters: int, weights: np.ndarray = UNWEIGHTED,
                 moves_given: bool = False):
        self.points, self.weights = points, weights
        self.offsets = np.asarray(offsets, dtype=np.int64)
        n_rows, n_features = points.shape
        n_agents = len(self.offsets) - 1
        self.upper = written_zeros(n_rows, np.float32)
        self.lower = written_zeros(n_rows, np.float32)
        self.top = written_zeros((n_agents, n_clusters), np.float32)
        self.gap = written_zeros((n_agents, n_clusters), np.float32)
        kept = 0 if moves_given else n_agents
        self.previous = written_zeros((kept, n_clusters, n_features), points.dtype)
        self.moved = written_zeros((n_agents - kept, n_clusters))
        self.ready = np.zeros(n_agents, dtype=np.bool_)
        self.opened = np.zeros(n_agents, dtype=np.int32)
        # The agents of more than one block of sums (kernels.sum_block_rows), their first
        # block, and every such block's sums and counts.
        n_blocks = -(-np.diff(self.offsets) // sum_block_rows(n_clusters))
        self.block_agents = np.flatnonzero(n_blocks > 1)
        self.block_first = np.concatenate([[0], np.cumsum(n_blocks[self.block_agents])]).astype(np.int64)
        self.block_sums = written_zeros((self.block_first[-1], n_clusters, n_features))
        self.block_counts = written_zeros((self.block_first[-1], n_clusters))
        self.counters = np.zeros(4, dtype=np.int64)
        screening = n_features >= SCREEN_FEATURES and bool((np.diff(self.offsets) >= SCREEN_ROWS).any())
        self.sizes = _row_sizes(points) if screening else np.zeros(0)
        self.errors = (_gamma(n_features + 2, points.dtype), _gamma(n_features, points.dtype),
                       _gamma(n_features + 4, np.float64), ETA_ULPS * n_features * np.finfo(points.dtype).tiny)
        #: What a caller that computes the moves needs: whether they are measured between the
        #: centers rounded to float32 (the data's precision), the float64 error of a move's
        #: square root and sum, and the absolute term for underflow.
        self.move_terms = (points.dtype == np.float32, *self.errors[2:])
        self.rows_skipped = self.rows_screened = self.rows_exact = self.agents_kept = 0
        #: What the sums kept in `out` are divided by (run's scale).
        self.scale = 1.0

    def run(self, centers: np.ndarray, labels: np.ndarray, out: tuple,
            scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, int]:
        """Assign each row to its agent's nearest center (ties: the lowest index) and add
        up the cluster sums and counts.

        centers : (L, K, p) float64; labels : (n,) int32, the previous labels (-1: none),
        overwritten; out : kernels.accumulators(L, K, p).  Returns sums (L, K, p),
        counts (L, K) (the clusters' weights), each divided by `scale`, and the number of
        rows whose label changed.  scale : the center update's rho (kernels.center_update's
        `scaled`), or 1.0; where it differs from the last run's, every cluster is summed again.
        """
        sums, counts, _, changed = out
        resum, self.scale = float(scale) != self.scale, float(scale)
        self.counters[:] = 0
        in_parallel(_pass, _pass_parallel, len(centers), self.points, self.weights, self.offsets, self.sizes,
                    centers, labels, sums, counts, changed, self.upper, self.lower, self.top, self.gap,
                    self.previous, self.moved, self.ready, self.opened, self.block_agents, self.block_first,
                    self.block_sums, self.block_counts, self.counters, *self.errors, self.scale, resum)
        self.rows_skipped, self.rows_screened, self.rows_exact, self.agents_kept = (int(c) for c in self.counters)
        return sums, counts, int(changed.sum())

    def sse(self, centers: np.ndarray, labels: np.ndarray, out: np.ndarray) -> np.ndarray:
        """(L,) each agent's sum of its rows' weights times squared distances to their labels'
        centers, in the reference kernel's precision and order."""
        in_parallel(_sse, _sse_parallel, len(centers), self.points, self.weights, self.offsets, centers, labels,
                    out)
        return out
