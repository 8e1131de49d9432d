"""Initial centers: the `--init` methods, k-means++ seeding of one agent, and spreading
centers to agents.

No MPI here.  `INIT_METHODS` names the methods, in help order.  The network-wide
seeding (NETWORK_SEEDING, nkmpi.seeding) merges summaries over a spanning tree;
every other method is an `AgentSeeding` of `AGENT_SEEDINGS`, started from
per-agent seeds:

* flood: only the lowest-numbered agent with at least K distinct points seeds;
* local: every agent with at least K distinct points seeds (agents then
  label their clusters independently: cluster k of one agent need not be
  cluster k of another until the consensus term pulls them together);

and agents without a seed then adopt, round by round, the centers of their
lowest-numbered neighbour that had centers at the start of the round.  With
flood every agent ends with the same centers after at most diameter rounds
(which is why the driver broadcasts them instead: the same numbers).  Missing
centers are NaN, so the rounds need nothing but the usual exchange.

The driver and the serial reference read a per-agent method only through its
`AgentSeeding`, so a new one is one more entry of AGENT_SEEDINGS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import InputError


def has_distinct(points: np.ndarray, n_clusters: int) -> bool:
    """True when `points` holds at least `n_clusters` distinct rows (k-means++ needs them)."""
    return len(distinct_rows(points, n_clusters)) >= n_clusters


def distinct_rows(points: np.ndarray, limit: int, chunk: int = 4096) -> np.ndarray:
    """Up to `limit` distinct rows of `points`, reading no further than needed."""
    found = points[:0]
    for start in range(0, len(points), chunk):
        found = np.unique(np.concatenate([found, points[start:start + chunk]]), axis=0)
        if len(found) >= limit:
            return found[:limit]
    return found


def slice_weights(weights: np.ndarray, first: int, stop: int) -> np.ndarray | None:
    """The weights of rows first..stop-1 as the seedings take them: None when the data are
    unweighted (`weights` empty, as kernels.UNWEIGHTED)."""
    return weights[first:stop] if len(weights) else None


def weighed_rows(points: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """The rows of positive weight (all rows when unweighted): the ones k-means++ may pick."""
    return points if weights is None else points[np.asarray(weights) > 0]


def check_enough_distinct(samples: list[np.ndarray], n_clusters: int) -> None:
    """InputError unless the union of per-rank `distinct_rows` samples has K rows."""
    found = np.unique(np.concatenate(samples), axis=0).shape[0]
    if found < n_clusters:
        raise InputError(f"the data hold only {found} distinct points, fewer than K = {n_clusters}")


def kmeans_plusplus(points: np.ndarray, n_clusters: int, rng: np.random.Generator,
                    weights: np.ndarray | None = None) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii) on one agent's rows, each row drawn
    with probability proportional to its weight (when given) times its squared distance
    to the nearest chosen center; the first by weight alone.

    Needs at least `n_clusters` distinct rows of positive weight: a chosen row has
    distance 0 and is never drawn again, so the centers come out distinct.
    """
    points = np.asarray(points, dtype=np.float64)
    if weights is not None:               # rows of weight 0 can never be drawn
        weights = np.asarray(weights, dtype=np.float64)
        points, weights = points[weights > 0], weights[weights > 0]
    centers = np.empty((n_clusters, points.shape[1]), dtype=np.float64)
    if weights is None:
        centers[0] = points[rng.integers(points.shape[0])]
    else:
        cumulative = np.cumsum(weights)
        first = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
        centers[0] = points[min(first, len(points) - 1)]
    closest = ((points - centers[0]) ** 2).sum(axis=1)
    for k in range(1, n_clusters):
        mass = closest if weights is None else weights * closest
        draw = rng.random() * mass.sum()
        pick = int(np.searchsorted(np.cumsum(mass), draw, side="right"))
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


def agent_seed(points: np.ndarray, weights: np.ndarray | None, agent: int, n_clusters: int,
               seed: int) -> np.ndarray:
    """k-means++ centers of `agent` from its own (weighted) rows; the stream depends on
    (seed, agent) only."""
    return kmeans_plusplus(points, n_clusters, np.random.default_rng([seed, agent]), weights)


@dataclass(frozen=True)
class AgentSeeding:
    """An --init method in which agents seed from their own rows.

    Agents with at least K distinct rows of positive weight can seed, each by
    `seed_agent(rows, weights, agent, n_clusters, seed)` (weights None when the data
    are unweighted; a function of that agent's rows alone, so that any placement
    seeds alike).  With `only_first` only the lowest-numbered of them seeds, and
    every agent starts from its centers; else each of them does.  Agents without a
    seed adopt a neighbour's centers (`adopt_from_neighbours`).
    """

    description: str
    only_first: bool
    seed_agent: Callable[[np.ndarray, np.ndarray | None, int, int, int], np.ndarray]


#: The --init method that merges summaries over the whole network (nkmpi.seeding).
NETWORK_SEEDING = "network"
#: The per-agent --init methods, by name.
AGENT_SEEDINGS = {
    "flood": AgentSeeding("one agent's k-means++ spread over the graph", only_first=True,
                          seed_agent=agent_seed),
    "local": AgentSeeding("every agent seeds itself", only_first=False, seed_agent=agent_seed),
}
#: Every --init method name -> its one-line description, in help order.
INIT_METHODS = {NETWORK_SEEDING: "k-means++ on summaries merged over the whole network",
                **{name: method.description for name, method in AGENT_SEEDINGS.items()}}


@njit(cache=True, nogil=True)
def adopt_from_neighbours(centers: np.ndarray, centers_ext: np.ndarray, nbr_ptr: np.ndarray,
                          nbr_idx: np.ndarray, changed: np.ndarray, boundary: np.ndarray,
                          queued: np.ndarray) -> np.ndarray:
    """One flood round on a block, in place: each agent without centers takes those
    of its lowest-numbered neighbour that had them at the start of the round
    (neighbours listed ascending).  `centers` may be the first rows of
    `centers_ext`.  Returns the agents that took centers, the next round's `changed`.

    Only agents that can take centers are looked at, so that a round costs what
    changed, not the block: a neighbour of `changed` (the agents that got centers
    in the last round; at the first round, every seeded one), or an agent of
    `boundary` (those with a neighbour on another rank, whose centers arrive by
    the exchange).  An agent with a neighbour that had centers one round earlier
    took them then.  `queued` : (L,) bool scratch, all False, left all False.
    """
    n_local = centers.shape[0]
    candidates = np.empty(n_local, dtype=np.int64)
    n_candidates = 0
    for i in range(changed.shape[0]):
        a = changed[i]
        for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
            row = nbr_idx[e]
            if row < n_local and not queued[row] and np.isnan(centers[row, 0, 0]):
                queued[row] = True
                candidates[n_candidates] = row
                n_candidates += 1
    for i in range(boundary.shape[0]):
        a = boundary[i]
        if not queued[a] and np.isnan(centers[a, 0, 0]):
            queued[a] = True
            candidates[n_candidates] = a
            n_candidates += 1
    adopters = np.empty(n_candidates, dtype=np.int64)
    sources = np.empty(n_candidates, dtype=np.int64)
    n_adopters = 0
    for i in range(n_candidates):
        a = candidates[i]
        queued[a] = False
        for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
            row = nbr_idx[e]
            if not np.isnan(centers_ext[row, 0, 0]):
                adopters[n_adopters] = a
                sources[n_adopters] = row
                n_adopters += 1
                break
    for i in range(n_adopters):             # after the scan: a round sees only the old state
        centers[adopters[i]] = centers_ext[sources[i]]
    return adopters[:n_adopters]
