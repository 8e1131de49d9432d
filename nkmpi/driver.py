"""The NK-means iteration loop of one rank, for the block of agents it hosts.

Each iteration: start sending the block's centers x(t) to the neighbour
ranks, run the local pass (reassign rows, accumulate cluster sums and counts)
while they travel, wait for the neighbours' centers, and update.  At
monitoring points the rank adds its share of the metrics and learns whether
to stop.  The only collectives outside monitoring points are at set-up.
"""

import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from . import kernels
from .errors import InputError
from .exchange import NeighbourExchange
from .init import adopt_from_neighbours, agent_seed, has_distinct
from .monitor import Monitor


@dataclass
class BlockResult:
    """One rank's share of a run's outcome.

    centers, initial_centers : (L, K, p) for the rank's agents.
    labels : (n,) int32, each local row's nearest center among its own agent's final centers.
    metrics : dict of 1-D arrays on rank 0 (empty elsewhere).
    bytes_sent : bytes this rank sends to its neighbours per iteration.
    seconds : this rank's time in each phase of the loop, summed over iterations:
        'local' (assignment pass), 'exchange' (waiting for neighbours' centers,
        the part of the exchange the local pass did not hide), 'update',
        'monitor' (metrics and the stop decision); and 'initialization' (the
        exchange plan and initial centers) and 'loop' (all iterations, wall).
    """

    centers: np.ndarray
    initial_centers: np.ndarray
    labels: np.ndarray
    metrics: dict
    iterations: int
    converged: bool
    bytes_sent: int
    seconds: dict


def initial_centers(comm, exchange, points, offsets, agents, options):
    """Seed (flood: only the lowest qualifying agent; local: every qualifying one),
    then flood rounds over neighbour exchanges until every agent has centers.
    Writes into exchange.centers."""
    centers = exchange.centers
    if not isinstance(options.init, str):
        centers[:] = options.init
        return
    centers[:] = np.nan
    seeders = []
    for i, agent in enumerate(agents):
        if has_distinct(points[offsets[i]:offsets[i + 1]], options.n_clusters):
            seeders.append(i)
            if options.init == "flood":
                break
    if options.init == "flood":
        mine = int(agents[seeders[0]]) if seeders else np.iinfo(np.int64).max
        source = comm.allreduce(mine, op=MPI.MIN)
        seeders = [i for i in seeders if agents[i] == source]
    if comm.allreduce(len(seeders), op=MPI.SUM) == 0:
        raise InputError(f"no agent holds {options.n_clusters} distinct points, so none can seed "
                         "k-means++: lower -k or pass --init file:PATH", collective=True)
    for i in seeders:
        centers[i] = agent_seed(points[offsets[i]:offsets[i + 1]], int(agents[i]),
                                options.n_clusters, options.seed)
    lacking = len(agents) - len(seeders)
    while comm.allreduce(lacking, op=MPI.SUM) > 0:
        ext = exchange.exchange()
        lacking = adopt_from_neighbours(centers, ext, exchange.nbr_ptr, exchange.nbr_idx)


def run(comm, points, offsets, agents, network, owner, options, stream=sys.stdout):
    """Run NK-means on this rank's block; collective over `comm`.

    points : (n, p) the block's rows, grouped by agent.
    offsets : (L+1,) block-local row offsets of the agents.
    agents : (L,) ascending global ids of the block's agents.
    network : graph.Network over all agents; owner : (M,) rank of each agent.
    """
    clock = time.perf_counter
    entered = clock()
    offsets = np.asarray(offsets, dtype=np.int64)
    agents = np.asarray(agents, dtype=np.int64)
    shape = (options.n_clusters, points.shape[1])
    exchange = NeighbourExchange(comm, network, owner, agents, shape)
    initial_centers(comm, exchange, points, offsets, agents, options)
    start_centers = exchange.centers.copy()
    labels = np.full(points.shape[0], -1, dtype=np.int32)
    statistics = kernels.accumulators(len(agents), *shape)
    monitor = Monitor(options, comm=comm, stream=stream)
    seconds = dict.fromkeys(("local", "exchange", "update", "monitor"), 0.0)
    loop_started = clock()
    seconds["initialization"] = loop_started - entered
    for iteration in range(1, options.max_iter + 1):
        t0 = clock()
        exchange.start()
        centers = exchange.centers
        sums, counts, sse, changed = kernels.assign_and_accumulate(points, offsets, centers, labels,
                                                                   out=statistics)
        t1 = clock()
        ext = exchange.finish()
        t2 = clock()
        updated = kernels.center_update(centers, ext, exchange.nbr_ptr, exchange.nbr_idx, sums, counts,
                                        options.rho, options.alpha, out=exchange.spare)
        t3 = clock()
        stop = False
        if options.is_monitor_point(iteration):
            stop = monitor.record(iteration, sse.sum(),
                                  kernels.edge_disagreement(ext, exchange.edge_a, exchange.edge_b),
                                  changed, kernels.largest_move(centers, updated))
        t4 = clock()
        for phase, spent in zip(seconds, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            seconds[phase] += spent
        exchange.swap()
        if stop:
            break
    seconds["loop"] = clock() - loop_started
    centers = exchange.centers
    kernels.nearest_labels(points, offsets, centers, labels)
    exchange.free()
    return BlockResult(centers, start_centers, labels, monitor.metrics(), iteration,
                       monitor.converged, exchange.bytes_sent, seconds)
