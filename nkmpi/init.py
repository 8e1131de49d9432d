"""Initial centers: k-means++ seeding of one agent, and spreading centers to agents.

No MPI here.  Both initializations start from per-agent seeds:

* flood: only the lowest-numbered agent with at least K distinct points seeds;
* local: every agent with at least K distinct points seeds (agents then
  label their clusters independently: cluster k of one agent need not be
  cluster k of another until the consensus term pulls them together);

and agents without a seed then adopt, round by round, the centers of their
lowest-numbered neighbour that had centers at the start of the round.  With
flood every agent ends with the same centers after at most diameter rounds.
Missing centers are NaN, so the rounds need nothing but the usual exchange.
"""

import numpy as np
from numba import njit

from .errors import InputError


def has_distinct(points, n_clusters):
    """True when `points` holds at least `n_clusters` distinct rows (k-means++ needs them)."""
    return len(distinct_rows(points, n_clusters)) >= n_clusters


def distinct_rows(points, limit, chunk=4096):
    """Up to `limit` distinct rows of `points`, reading no further than needed."""
    found = points[:0]
    for start in range(0, len(points), chunk):
        found = np.unique(np.concatenate([found, points[start:start + chunk]]), axis=0)
        if len(found) >= limit:
            return found[:limit]
    return found


def check_enough_distinct(samples, n_clusters):
    """InputError unless the union of per-rank `distinct_rows` samples has K rows."""
    found = np.unique(np.concatenate(samples), axis=0).shape[0]
    if found < n_clusters:
        raise InputError(f"the data hold only {found} distinct points, fewer than K = {n_clusters}")


def kmeans_plusplus(points, n_clusters, rng):
    """k-means++ seeding (Arthur & Vassilvitskii) on one agent's rows.

    Needs at least `n_clusters` distinct rows: a chosen row has distance 0 and
    is never drawn again, so the centers come out distinct.
    """
    points = np.asarray(points, dtype=np.float64)
    centers = np.empty((n_clusters, points.shape[1]), dtype=np.float64)
    centers[0] = points[rng.integers(points.shape[0])]
    closest = ((points - centers[0]) ** 2).sum(axis=1)
    for k in range(1, n_clusters):
        draw = rng.random() * closest.sum()
        pick = int(np.searchsorted(np.cumsum(closest), draw, side="right"))
        if pick >= points.shape[0] or closest[pick] == 0:   # rounding at the edge
            far = np.flatnonzero(closest)
            pick = int(far[-1]) if far.size else _unchosen_row(points, centers[:k])
        centers[k] = points[pick]
        closest = np.minimum(closest, ((points - centers[k]) ** 2).sum(axis=1))
    return centers


def _unchosen_row(points, chosen):
    """The first row equal to none of the `chosen` centers: k-means++'s pick when every
    squared distance underflows to 0 (coordinates near 1e-160 and below)."""
    for i, row in enumerate(points):
        if not (row == chosen).all(axis=1).any():
            return i
    raise ValueError("no row differs from the chosen centers")


def agent_seed(points, agent, n_clusters, seed):
    """k-means++ centers of `agent` from its own rows; the stream depends on (seed, agent) only."""
    return kmeans_plusplus(points, n_clusters, np.random.default_rng([seed, agent]))


@njit(cache=True, nogil=True)
def adopt_from_neighbours(centers, centers_ext, nbr_ptr, nbr_idx):
    """One flood round on a block, in place: each agent without centers takes those
    of its lowest-numbered neighbour that had them at the start of the round
    (neighbours listed ascending).  `centers` may be the first rows of
    `centers_ext`.  Returns how many agents still lack centers.
    """
    adopters, sources = [], []
    for a in range(centers.shape[0]):
        if np.isnan(centers[a, 0, 0]):
            for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
                row = nbr_idx[e]
                if not np.isnan(centers_ext[row, 0, 0]):
                    adopters.append(a)
                    sources.append(row)
                    break
    for i in range(len(adopters)):          # after the scan: a round sees only the old state
        centers[adopters[i]] = centers_ext[sources[i]]
    lacking = 0
    for a in range(centers.shape[0]):
        if np.isnan(centers[a, 0, 0]):
            lacking += 1
    return lacking
