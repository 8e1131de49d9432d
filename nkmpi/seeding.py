"""The network-wide seeding: k-means++ of pooled quality from small weighted summaries.

No MPI here.  The seeding (``--init network``) runs in three steps, each a
pure function of what one agent holds, so its outcome does not depend on
ranks or threads:

1. *Summarize.*  Each agent clusters its own rows into at most m = 10 K
   groups (weighted k-means++ and a few Lloyd steps) and merges every group of
   fewer than MIN_GROUP rows into its nearest group.  Its summary is the groups'
   weighted means with their weights (row counts when the data are unweighted).
   A row is a raw data point whatever its weight, so rows are counted, not
   weights: an agent with fewer than MIN_GROUP rows of positive weight
   contributes nothing, and no mean of fewer than MIN_GROUP rows ever leaves an
   agent.
2. *Merge up a spanning tree.*  Summaries travel one tree edge at a time
   towards the root (graph.spanning_tree).  Each agent joins its own summary
   and its children's (in ascending child id) and, when they hold more than
   B = 8 m rows, reduces them to m weighted means by weighted k-means++ and
   weighted Lloyd.  A message holds at most B rows of p + 1 numbers.
3. *Seed at the root.*  The root runs n_init greedy weighted k-means++
   seedings (scikit-learn's variant, 2 + log K candidates per center), each
   refined by weighted Lloyd on the merged summary, keeps the one of lowest
   summary cost, and the K centers travel back down the tree.

Random draws are counter-based (faults.uniform keyed by seed, agent, purpose
and draw number), so the serial reference and any placement draw the same.
Distances add features in order in float64; ties go to the lowest index.

Summary rows are (p + 1,) float64: the mean, then the weight (> 0).
"""

import numpy as np
from numba import njit

from .errors import InputError
from .faults import uniform

#: The fewest rows whose mean may leave an agent (invariant 7).
MIN_GROUP = 5
#: Weighted means per summary: m = SUMMARY_PER_CLUSTER * K.
SUMMARY_PER_CLUSTER = 10
#: A merged summary is reduced to m rows once it holds more than BUDGET_FACTOR * m.
BUDGET_FACTOR = 8
#: Lloyd steps when summarizing an agent's rows or reducing a merged summary.
REDUCE_STEPS = 5
#: Lloyd steps at most when refining each of the root's seedings.
ROOT_STEPS = 100
#: From this many centers on, a row's distances to them are measured all at once (vectorized).
VECTOR_CENTERS = 8

_SEEDING = 0x5345_4544
_LOCAL, _MERGE, _ROOT = 0, 1, 2


def summary_size(n_clusters):
    """m: how many weighted means summarize an agent or a subtree."""
    return SUMMARY_PER_CLUSTER * n_clusters


def message_rows(n_clusters):
    """B: the most rows a summary sent to a parent can hold."""
    return BUDGET_FACTOR * summary_size(n_clusters)


def local_capacity(n_rows, n_clusters):
    """The most groups an agent with n_rows rows can send (0 below MIN_GROUP rows)."""
    return np.minimum(summary_size(n_clusters), np.asarray(n_rows) // MIN_GROUP)


@njit(cache=True, nogil=True)
def _sqdist(x, c):
    total = 0.0
    for j in range(x.shape[0]):
        diff = x[j] - c[j]
        total += diff * diff
    return total


@njit(cache=True, nogil=True)
def _draw(closest, weights, total, u):
    """Index drawn with probability weight * closest / total (never one at distance 0)."""
    target = u * total
    running = 0.0
    last = -1
    for i in range(closest.shape[0]):
        mass = weights[i] * closest[i]
        if mass > 0:
            last = i
            running += mass
            if running > target:
                return i
    return last


@njit(cache=True, nogil=True)
def _distances_to(xt, point, out):
    """out[i] = the squared distance from row i of x (column i of xt = x.T) to `point`,
    features added in order as _sqdist adds them: one row's sum is the same number,
    and the loop over rows vectorizes."""
    n = xt.shape[1]
    for i in range(n):
        out[i] = 0.0
    for j in range(xt.shape[0]):
        value = point[j]
        for i in range(n):
            diff = xt[j, i] - value
            out[i] += diff * diff


@njit(cache=True, nogil=True)
def kmeans_plusplus(x, weights, n_centers, trials, seed, agent, purpose):
    """Weighted k-means++ on rows x (n, p): up to n_centers row indices.

    The first center is drawn by weight, each next one by weight times the
    squared distance to the nearest chosen center; with trials > 1 the best
    of `trials` candidates (lowest total cost) is kept, as in scikit-learn's
    greedy variant.  Fewer indices come back when x has fewer distinct rows.
    """
    n = x.shape[0]
    chosen = np.empty(n_centers, dtype=np.int64)
    if n == 0 or n_centers == 0:
        return chosen[:0]
    xt = np.ascontiguousarray(x.T)
    draw = 0
    total_weight = weights.sum()
    first = _draw(np.ones(n), weights, total_weight, uniform(seed, agent, purpose, draw, _SEEDING))
    draw += 1
    chosen[0] = first
    closest = np.empty(n)
    _distances_to(xt, x[first], closest)
    to_pick = np.empty(n)
    candidate_closest = np.empty(n)
    best_closest = np.empty(n)
    potential = 0.0
    for i in range(n):
        potential += weights[i] * closest[i]
    found = 1
    while found < n_centers:
        if potential <= 0:
            break
        best, best_potential = -1, np.inf
        for _ in range(trials):
            pick = _draw(closest, weights, potential, uniform(seed, agent, purpose, draw, _SEEDING))
            draw += 1
            _distances_to(xt, x[pick], to_pick)
            candidate_potential = 0.0
            for i in range(n):
                d = min(closest[i], to_pick[i])
                candidate_closest[i] = d
                candidate_potential += weights[i] * d
            if candidate_potential < best_potential:
                best, best_potential = pick, candidate_potential
                best_closest[:] = candidate_closest
        chosen[found] = best
        found += 1
        closest[:] = best_closest
        # The sum of weight x closest, added in the same order as it was for the winner.
        potential = best_potential
    return chosen[:found]


@njit(cache=True, nogil=True)
def weighted_lloyd(x, weights, centers, max_steps):
    """Weighted Lloyd from `centers` (modified in place) for at most max_steps steps,
    stopping once no label changes.  Returns (labels, group weights, cost).

    A row's distances to many centers are measured all at once from the centers'
    transpose (the loop over centers vectorizes), to a few one by one; either way
    each is _sqdist's number (c - x squares to the same as x - c)."""
    n, k = x.shape[0], centers.shape[0]
    p = x.shape[1]
    labels = np.full(n, -1, dtype=np.int64)
    mass = np.zeros(k)
    sums = np.zeros(centers.shape)
    at_once = k >= VECTOR_CENTERS
    distances = np.empty(k if at_once else 0)
    centers_t = np.empty((p, k if at_once else 0))
    for _ in range(max_steps):
        changed = 0
        mass[:] = 0
        sums[:] = 0
        if at_once:
            for j in range(p):
                for c in range(k):
                    centers_t[j, c] = centers[c, j]
        for i in range(n):
            if at_once:             # _distances_to(centers_t, x[i], distances), written out (faster)
                for c in range(k):
                    distances[c] = 0.0
                for j in range(p):
                    value = x[i, j]
                    for c in range(k):
                        diff = centers_t[j, c] - value
                        distances[c] += diff * diff
                best, best_d = 0, distances[0]
                for c in range(1, k):
                    if distances[c] < best_d:
                        best, best_d = c, distances[c]
            else:
                best, best_d = 0, _sqdist(x[i], centers[0])
                for c in range(1, k):
                    d = _sqdist(x[i], centers[c])
                    if d < best_d:
                        best, best_d = c, d
            if labels[i] != best:
                changed += 1
                labels[i] = best
            mass[best] += weights[i]
            for j in range(p):     # element by element: no array made per row
                sums[best, j] += weights[i] * x[i, j]
        if changed == 0:
            break
        for c in range(k):
            if mass[c] > 0:
                for j in range(p):
                    centers[c, j] = sums[c, j] / mass[c]
    cost = 0.0
    for i in range(n):
        cost += weights[i] * _sqdist(x[i], centers[labels[i]])
    return labels, mass, cost


@njit(cache=True, nogil=True)
def _as_summary(centers, mass):
    """Summary rows (mean, weight) of the groups that received weight."""
    k, p = centers.shape
    kept = 0
    for c in range(k):
        if mass[c] > 0:
            kept += 1
    out = np.empty((kept, p + 1))
    row = 0
    for c in range(k):
        if mass[c] > 0:
            out[row, :p] = centers[c]
            out[row, p] = mass[c]
            row += 1
    return out


@njit(cache=True, nogil=True)
def _merge_small_groups(centers, mass, counts, min_group):
    """Fold each group of fewer than min_group rows (smallest first, lowest index on a
    tie) into its nearest other group, until none is left (the total must reach
    min_group)."""
    k = centers.shape[0]
    while True:
        small, small_count = -1, min_group
        for c in range(k):
            if 0 < counts[c] < small_count:
                small, small_count = c, counts[c]
        if small < 0:
            return
        target, target_d = -1, np.inf
        for c in range(k):
            if c != small and counts[c] > 0:
                d = _sqdist(centers[small], centers[c])
                if d < target_d:
                    target, target_d = c, d
        total = mass[small] + mass[target]
        for j in range(centers.shape[1]):
            centers[target, j] = (mass[target] * centers[target, j] + mass[small] * centers[small, j]) / total
        mass[target] = total
        counts[target] += counts[small]
        mass[small] = 0
        counts[small] = 0


@njit(cache=True, nogil=True)
def summarize_rows(rows, row_weights, n_groups, min_group, seed, agent):
    """One agent's summary: its rows of positive weight as at most n_groups weighted
    means, each of at least min_group rows (empty when the agent has fewer than
    min_group such rows)."""
    n, p = rows.shape
    kept = 0
    for i in range(n):
        kept += row_weights[i] > 0
    n_groups = min(n_groups, kept // min_group)
    if n_groups == 0:
        return np.empty((0, p + 1))
    if kept == n:                   # every row weighs (unweighted data): no copy
        return _summary_of(rows, row_weights, n_groups, min_group, seed, agent)
    x = np.empty((kept, p))
    weights = np.empty(kept)
    row = 0
    for i in range(n):
        if row_weights[i] > 0:
            for j in range(p):
                x[row, j] = rows[i, j]
            weights[row] = row_weights[i]
            row += 1
    return _summary_of(x, weights, n_groups, min_group, seed, agent)


@njit(cache=True, nogil=True)
def _summary_of(x, weights, n_groups, min_group, seed, agent):
    """summarize_rows of rows x that all weigh more than 0 (n_groups >= 1)."""
    chosen = kmeans_plusplus(x, weights, n_groups, 1, seed, agent, _LOCAL)
    centers = np.empty((len(chosen), x.shape[1]))
    for c in range(len(chosen)):
        centers[c] = x[chosen[c]]
    labels, mass, _ = weighted_lloyd(x, weights, centers, REDUCE_STEPS)
    counts = np.zeros(len(chosen), dtype=np.int64)
    for i in range(x.shape[0]):
        counts[labels[i]] += 1
    _merge_small_groups(centers, mass, counts, min_group)
    return _as_summary(centers, mass)


@njit(cache=True, nogil=True)
def reduce_summary(rows, n_groups, budget, seed, agent):
    """A merged summary kept as it is while it holds at most `budget` rows, else
    reduced to n_groups weighted means by weighted k-means++ and Lloyd."""
    if rows.shape[0] <= budget:
        return rows.copy()
    p = rows.shape[1] - 1
    x = np.ascontiguousarray(rows[:, :p])
    weights = np.ascontiguousarray(rows[:, p])
    chosen = kmeans_plusplus(x, weights, n_groups, 1, seed, agent, _MERGE)
    centers = np.empty((len(chosen), p))
    for c in range(len(chosen)):
        centers[c] = x[chosen[c]]
    _, mass, _ = weighted_lloyd(x, weights, centers, REDUCE_STEPS)
    return _as_summary(centers, mass)


def seed_from_summary(summary, n_clusters, n_init, seed, agent):
    """The root's K centers: the best of n_init greedy weighted k-means++ seedings of
    the merged summary, each refined by weighted Lloyd (the lowest summary cost
    wins; the first on a tie).  InputError when the summary holds fewer than K
    distinct means."""
    p = summary.shape[1] - 1
    x = np.ascontiguousarray(summary[:, :p])
    weights = np.ascontiguousarray(summary[:, p])
    trials = 2 + int(np.log(n_clusters))
    best, best_cost = None, np.inf
    for restart in range(n_init):
        chosen = kmeans_plusplus(x, weights, n_clusters, trials, seed, agent, _ROOT + restart)
        if len(chosen) < n_clusters:
            raise InputError(
                f"the network-wide seeding found only {len(chosen)} distinct group means of at "
                f"least {MIN_GROUP} points, fewer than K = {n_clusters} (agents never send smaller "
                "groups): lower -k, or use --init flood or file:PATH")
        centers = x[chosen].copy()
        _, _, cost = weighted_lloyd(x, weights, centers, ROOT_STEPS)
        if cost < best_cost:
            best, best_cost = centers, cost
    return best


@njit(cache=True, nogil=True)
def summarize_block(points, weights, offsets, agent_ids, n_groups, min_group, seed, out_ptr, out):
    """summarize_rows for every agent of a block into rows out[out_ptr[a]:...];
    returns each agent's row count.  weights: (n,) or empty (every row weighs 1)."""
    n_agents = offsets.shape[0] - 1
    counts = np.zeros(n_agents, dtype=np.int64)
    ones = np.ones(0 if weights.shape[0] or n_agents == 0 else np.max(offsets[1:] - offsets[:-1]))
    for a in range(n_agents):
        lo, hi = offsets[a], offsets[a + 1]
        agent_weights = weights[lo:hi] if weights.shape[0] else ones[:hi - lo]
        summary = summarize_rows(points[lo:hi], agent_weights, n_groups, min_group, seed, agent_ids[a])
        counts[a] = summary.shape[0]
        out[out_ptr[a]:out_ptr[a] + counts[a]] = summary
    return counts


def merged_capacity(joined_rows, n_groups, budget):
    """The most rows reduce_summary can return for summaries joined to `joined_rows` rows."""
    joined_rows = np.asarray(joined_rows)
    return np.where(joined_rows <= budget, joined_rows, n_groups)


@njit(cache=True, nogil=True)
def merge_level(own, own_start, own_stop, pool, part_ptr, part_start, part_stop, agent_ids,
                n_groups, budget, seed, out_ptr, out):
    """For each agent i of a tree level: join its own summary (rows own_start[i]:own_stop[i]
    of `own`) and its children's (rows part_start[j]:part_stop[j] of `pool` for j in
    part_ptr[i]:part_ptr[i+1], in ascending child id), reduce, and write the result
    into out[out_ptr[i]:...].  Returns the row count of each result.

    A join of at most `budget` rows is reduce_summary's result as it stands, so it is
    written straight into `out`; only a join to be reduced goes through one scratch
    array.  Most agents of a deep tree join without reducing, and each of them copied
    its growing summary three times before."""
    n_agents = part_ptr.shape[0] - 1
    counts = np.zeros(n_agents, dtype=np.int64)
    totals = own_stop - own_start
    for i in range(n_agents):
        for j in range(part_ptr[i], part_ptr[i + 1]):
            totals[i] += part_stop[j] - part_start[j]
    scratch = np.empty((totals.max() if n_agents else 0, own.shape[1]))
    for i in range(n_agents):
        total = totals[i]
        joined = out[out_ptr[i]:out_ptr[i] + total] if total <= budget else scratch[:total]
        row = own_stop[i] - own_start[i]
        joined[:row] = own[own_start[i]:own_stop[i]]
        for j in range(part_ptr[i], part_ptr[i + 1]):
            size = part_stop[j] - part_start[j]
            joined[row:row + size] = pool[part_start[j]:part_stop[j]]
            row += size
        if total <= budget:
            counts[i] = total
        else:
            reduced = reduce_summary(joined, n_groups, budget, seed, agent_ids[i])
            counts[i] = reduced.shape[0]
            out[out_ptr[i]:out_ptr[i] + counts[i]] = reduced
    return counts
