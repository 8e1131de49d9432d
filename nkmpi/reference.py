"""Serial reference: all agents of NK-means in one process, written plainly.

This is the oracle the MPI program is tested against and a small-scale
simulator for users (`nkmpi simulate`, or `simulate()` from Python).  It
follows the equations (docs/design.md, "The algorithm") agent by agent with no blocking, no
vectorization across agents and no MPI, using the same reduction orders the
kernels promise (rows in dataset order, in blocks of `kernels.sum_block_rows(K)`
rows of an agent: `cluster_sums`; neighbours in ascending id), so the MPI run
must match it to rounding, and in practice bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

import numpy as np

from .errors import InputError
from .faults import FaultModel, link_up, takes_part
from .graph import Network, spanning_tree
from .init import AGENT_SEEDINGS, NETWORK_SEEDING, has_distinct, weighed_rows
from .kernels import sum_block_rows
from .monitor import Monitor
from .options import Options
from .seeding import (MIN_GROUP, message_rows, reduce_summary, seed_from_summary, summarize_rows,
                      summary_size)


@dataclass
class SimulationResult:
    """What a run produces, for all agents.

    centers : (M, K, p) final centers.  assignments : (N,) labels against each
    row's own agent's final centers.  metrics : dict of 1-D arrays (monitor.METRICS).
    initial_centers : (M, K, p) centers at iteration 0.
    """

    centers: np.ndarray
    assignments: np.ndarray
    metrics: dict
    iterations: int
    converged: bool
    initial_centers: np.ndarray


def agent_rows(points: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [points[offsets[m]:offsets[m + 1]] for m in range(len(offsets) - 1)]


def initial_centers(rows: list[np.ndarray], network: Network, options: Options,
                    weights: list[np.ndarray] | None = None) -> np.ndarray:
    """The given centers, the network-wide seeding, or a per-agent method's seeds then
    synchronous flood rounds, as described in nkmpi.init.  weights: each agent's row
    weights (None: unweighted)."""
    n_agents, k, p = len(rows), options.n_clusters, rows[0].shape[1]
    weights = [None] * n_agents if weights is None else weights
    centers = np.full((n_agents, k, p), np.nan)
    if not isinstance(options.init, str):
        centers[:] = options.init
        return centers
    if options.init == NETWORK_SEEDING:
        centers[:] = network_seeding(rows, network, options, weights)
        return centers
    method = AGENT_SEEDINGS[options.init]
    for m in range(n_agents):
        if has_distinct(weighed_rows(rows[m], weights[m]), k):
            centers[m] = method.seed_agent(rows[m], weights[m], m, k, options.seed)
            if method.only_first:
                break
    if np.isnan(centers).all():
        raise InputError(f"no agent holds {k} distinct points, so none can seed k-means++: "
                         "lower -k or pass --init file:PATH")
    while np.isnan(centers).any():
        previous = centers.copy()
        for m in range(n_agents):
            if np.isnan(previous[m]).any():
                for neighbour in network.neighbours(m):          # ascending: lowest id wins
                    if not np.isnan(previous[neighbour]).any():
                        centers[m] = previous[neighbour]
                        break
    return centers


def network_seeding(rows: list[np.ndarray], network: Network, options: Options,
                    weights: list[np.ndarray | None] | None = None) -> np.ndarray:
    """--init network (nkmpi.seeding), agent by agent: every agent's summary joined with
    its children's, deepest tree level first, then the root's seeding."""
    summary, root = root_summary(rows, network, options, weights)
    return seed_from_summary(summary, options.n_clusters, options.n_init, options.seed, root)


def root_summary(rows: list[np.ndarray], network: Network, options: Options,
                 weights: list[np.ndarray | None] | None = None) -> tuple[np.ndarray, int]:
    """The network seeding's summary merged up the spanning tree (rows of p means and a
    weight), and the root that seeds from it."""
    weights = [None] * len(rows) if weights is None else weights
    k, seed = options.n_clusters, options.seed
    m, budget = summary_size(k), message_rows(k)
    tree = spanning_tree(network)
    merged = [None] * network.n_agents
    for a in np.argsort(-tree.depth, kind="stable"):
        own = summarize_rows(rows[a], row_weights(rows[a], weights[a]), m, MIN_GROUP, seed, a)
        joined = np.concatenate([own] + [merged[c] for c in tree.children(a)])
        merged[a] = reduce_summary(joined, m, budget, seed, a)
    return merged[tree.root], tree.root


def row_weights(rows: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """An agent's row weights as float64, ones when unweighted."""
    return np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=np.float64)


#: No (rows, K) array of distances holds more numbers than this: rows go in chunks.
CHUNK_ELEMENTS = 2**22


def nearest(rows: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest center index (ties go to the lowest k) and its squared distance.

    In the data's precision, adding features in order; rows in chunks, so that the
    distances to K centers never take more than CHUNK_ELEMENTS numbers at a time.
    """
    centers = centers.astype(rows.dtype)
    labels = np.empty(len(rows), dtype=np.int64)
    chosen = np.empty(len(rows), dtype=rows.dtype)
    step = max(1, CHUNK_ELEMENTS // max(len(centers), 1))
    for start in range(0, len(rows), step):
        part = rows[start:start + step]
        dist = np.zeros((len(part), len(centers)), dtype=rows.dtype)
        for j in range(rows.shape[1]):
            diff = part[:, j, None] - centers[None, :, j]
            dist += diff * diff
        labels[start:start + step] = dist.argmin(axis=1)
        chosen[start:start + step] = dist[np.arange(len(part)), labels[start:start + step]]
    return labels, chosen


def simulate(points: np.ndarray, offsets: np.ndarray, network: Network, options: Options,
             stream: TextIO | None = None, weights: np.ndarray | None = None) -> SimulationResult:
    """Run NK-means (or, with options.algorithm 'lloyd', centralized Lloyd) on all
    agents serially; returns a SimulationResult.

    points (N, p) grouped by agent, offsets (M+1,), network a graph.Network,
    options an options.Options, weights (N,) row weights or None.  Progress lines
    go to `stream` when given.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = agent_rows(points, offsets)
    agent_weights = None if weights is None else agent_rows(np.asarray(weights, dtype=np.float64), offsets)
    options = options.resolve(len(points), len(rows))
    options.check_data(points.shape[1], points.dtype)
    centers = initial_centers(rows, network, options, agent_weights)
    monitor = Monitor(options, comm=None, stream=stream)
    if options.algorithm == "lloyd":
        final, iteration, converged = _lloyd_run(points, centers[0], options, monitor, weights)
        centers_out = np.broadcast_to(final, centers.shape).copy()
    else:
        centers_out, iteration, converged = _nkmeans_run(rows, centers, network, options, monitor,
                                                         agent_weights or [None] * len(rows))
    assignments = np.concatenate([nearest(rows[m], centers_out[m])[0] for m in range(len(rows))])
    return SimulationResult(centers_out, assignments.astype(np.int64), monitor.metrics(),
                            iteration, converged, centers)


def cluster_sums(rows: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                 n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """An agent's (K, p) cluster sums and (K,) counts (weights), added as the kernels add
    them: rows in order within blocks of `sum_block_rows(K)` rows, each block from zero,
    then the blocks' sums in order."""
    sums = np.zeros((n_clusters, rows.shape[1]))
    counts = np.zeros(n_clusters)
    block = sum_block_rows(n_clusters)
    for start in range(0, len(rows), block):
        part = slice(start, start + block)
        block_sums = np.zeros_like(sums)
        block_counts = np.zeros_like(counts)
        terms = rows[part] if weights is None else weights[part, None] * rows[part]
        np.add.at(block_sums, labels[part], terms)
        np.add.at(block_counts, labels[part], 1.0 if weights is None else weights[part])
        sums += block_sums
        counts += block_counts
    return sums, counts


def _nkmeans_run(rows, centers, network, options, monitor, weights):
    """The NK-means iterations: a pass over each agent's rows, then `inner` center
    updates on that partition; rho follows options.rho_stages()."""
    n_agents, k = network.n_agents, options.n_clusters
    labels = [np.full(len(r), -1, dtype=np.int64) for r in rows]
    n_points = sum(len(r) for r in rows)
    stages, stage = options.rho_stages(), 0
    faults = FaultModel.from_options(options)
    a, b = network.edges.T
    iteration, converged = 0, False
    for iteration in range(1, options.max_iter + 1):
        rho = stages[stage]
        sse, changed = 0.0, 0
        sums = np.zeros(centers.shape)
        counts = np.zeros((n_agents, k))
        for m in range(n_agents):
            new_labels, chosen = nearest(rows[m], centers[m])
            changed += int((new_labels != labels[m]).sum())
            labels[m] = new_labels
            sse += weighted_cost(chosen, weights[m])
            sums[m], counts[m] = cluster_sums(rows[m], new_labels, weights[m], k)
        before = centers
        for step in range(options.inner):
            centers = center_update(centers, sums, counts, network, options.alpha, rho, faults,
                                    update=(iteration - 1) * options.inner + step + 1)
        if options.is_monitor_point(iteration):
            disagreement = float(((before[a] - before[b]) ** 2).sum())
            move = float(np.sqrt(((centers - before) ** 2).sum(axis=-1)).max())
            if monitor.record(iteration, sse, disagreement, changed, move, rho,
                              options.stage_rest(stage, n_points)):
                if stage + 1 == len(stages):
                    converged = True
                    break
                stage += 1
    return centers, iteration, converged


def center_update(centers: np.ndarray, sums: np.ndarray, counts: np.ndarray, network: Network, alpha: float,
                  rho: float, faults: FaultModel, update: int) -> np.ndarray:
    """Eqs. 26-27 for every agent, under the faults.FaultModel `faults`; `update` numbers
    the update for the fault draws."""
    faults = faults.params
    updated = np.empty_like(centers)
    for m in range(network.n_agents):
        if not takes_part(faults, m, update):
            updated[m] = centers[m]
            continue
        up = [neighbour for neighbour in network.neighbours(m) if link_up(faults, m, neighbour, update)]
        neighbour_total = np.zeros(centers.shape[1:])
        for neighbour in up:
            neighbour_total += centers[neighbour]
        weight = counts[m] / rho + len(up)
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = (sums[m] / rho + neighbour_total) / weight[:, None]
        mu[weight == 0] = centers[m][weight == 0]
        updated[m] = centers[m] - alpha * (centers[m] - mu)
    return updated


def _lloyd_run(points, centers, options, monitor, weights):
    """Centralized Lloyd on the pooled rows, recorded like an NK-means run (no
    disagreement).  Stops as soon as no label changes (unless monitor_every is 0)."""
    labels = np.full(len(points), -1, dtype=np.int64)
    iteration, converged = 0, False
    for iteration in range(1, options.max_iter + 1):
        updated, new_labels, sse = lloyd_step(points, centers, weights)
        changed = int((new_labels != labels).sum())
        labels = new_labels
        at_rest = options.monitor_every > 0 and changed == 0
        if options.is_monitor_point(iteration) or at_rest:
            move = float(np.sqrt(((updated - centers) ** 2).sum(axis=1)).max())
            monitor.record(iteration, sse, 0.0, changed, move, options.rho)
        centers = updated
        if at_rest:
            converged = True
            break
    return centers, iteration, converged


def weighted_cost(chosen: np.ndarray, weights: np.ndarray | None) -> float:
    """Sum of the rows' squared distances to their centers (`chosen`, from `nearest`), each
    times its weight when weighted; added in row order, as the kernels add them."""
    terms = chosen.astype(np.float64) if weights is None else weights * chosen
    return float(np.cumsum(terms)[-1]) if len(terms) else 0.0


def centralized_cost(points: np.ndarray, centers: np.ndarray, weights: np.ndarray | None = None) -> float:
    """J(c) = sum over all rows of the (weighted) squared distance to the nearest of `centers` (K, p)."""
    return weighted_cost(nearest(points, centers)[1], weights)


def lloyd_step(points: np.ndarray, centers: np.ndarray,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """One centralized Lloyd step: labels and cost against `centers`, then the (weighted)
    cluster means (an empty cluster keeps its center).  Returns (means, labels, sse)."""
    labels, chosen = nearest(points, centers)
    sse = weighted_cost(chosen, weights)
    sums = np.zeros_like(centers)
    if weights is None:
        counts = np.bincount(labels, minlength=len(centers))
        np.add.at(sums, labels, points)
    else:
        counts = np.bincount(labels, weights=weights, minlength=len(centers))
        np.add.at(sums, labels, weights[:, None] * points)
    means = centers.copy()
    means[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    return means, labels, sse


def lloyd(points: np.ndarray, centers: np.ndarray, max_iter: int = 300, tol: float = 0.0,
          weights: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Centralized (weighted) Lloyd's algorithm from `centers`: the pooled-data baseline.

    An empty cluster keeps its center.  Stops when no label changes and no
    center moves more than `tol`.  Returns (centers, iterations).
    """
    centers = np.array(centers, dtype=np.float64)
    labels = None
    for iteration in range(1, max_iter + 1):
        updated, new_labels, _ = lloyd_step(points, centers, weights)
        move = float(np.sqrt(((updated - centers) ** 2).sum(axis=1)).max())
        stable = labels is not None and np.array_equal(labels, new_labels)
        centers, labels = updated, new_labels
        if stable and move <= tol:
            break
    return centers, iteration
