"""The NK-means iteration loop of one rank, for the block of agents it hosts.

Each iteration: start sending the block's centers x(t) to the neighbour
ranks, run the local pass (reassign rows, accumulate cluster sums and counts)
while they travel, wait for the neighbours' centers, and update.  At
monitoring points the rank adds its share of the metrics and learns whether
to stop.  Global collectives happen only at set-up, at monitoring points and
when a checkpoint is written; a stop after a signal is agreed through the
neighbour messages themselves.
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
from .monitor import LOOP_PHASES, Monitor


@dataclass
class BlockResult:
    """One rank's share of a run's outcome.

    centers, initial_centers : (L, K, p) for the rank's agents.
    labels : (n,) int32, each local row's nearest center among its own agent's final
        centers; for an interrupted run, the labels of the last assignment pass.
    metrics : dict of 1-D arrays on rank 0 (empty elsewhere).
    bytes_sent : bytes this rank sends to its neighbours per iteration.
    seconds : this rank's time in each phase of the loop, summed over iterations:
        'local' (assignment pass), 'exchange' (waiting for neighbours' centers,
        the part of the exchange the local pass did not hide), 'update',
        'monitor' (metrics and the stop decision); and 'initialization' (the
        exchange plan and initial centers), 'checkpoint' (writing them) and 'loop'
        (all iterations, wall).
    interrupted : stopped on request (a signal) before the end: write a checkpoint.
    """

    centers: np.ndarray
    initial_centers: np.ndarray
    labels: np.ndarray
    metrics: dict
    iterations: int
    converged: bool
    bytes_sent: int
    seconds: dict
    interrupted: bool = False


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


def run(comm, points, offsets, agents, network, owner, options, stream=sys.stdout, resume=None,
        checkpoint=None, checkpoint_every=0, stop_requested=None):
    """Run NK-means on this rank's block; collective over `comm`.

    points : (n, p) the block's rows, grouped by agent.
    offsets : (L+1,) block-local row offsets of the agents.
    agents : (L,) ascending global ids of the block's agents.
    network : graph.Network over all agents; owner : (M,) rank of each agent.
    resume : this rank's share of a checkpoint (io.read_checkpoint) to continue from.
    checkpoint : called as checkpoint(BlockResult) on every rank after each
        `checkpoint_every`-th iteration (not the last), to write it.
    stop_requested : polled every iteration (a signal arrived): the ranks then
        agree through the exchange's control rows on an iteration, at most the
        rank graph's diameter ahead, after which they all stop, interrupted.
    """
    clock = time.perf_counter
    entered = clock()
    offsets = np.asarray(offsets, dtype=np.int64)
    agents = np.asarray(agents, dtype=np.int64)
    shape = (options.n_clusters, points.shape[1])
    exchange = NeighbourExchange(comm, network, owner, agents, shape)
    if resume is None:
        initial_centers(comm, exchange, points, offsets, agents, options)
        start_centers = exchange.centers.copy()
        labels = np.full(points.shape[0], -1, dtype=np.int32)
        done = 0
    else:
        exchange.centers[:] = resume["centers"]
        start_centers = resume["initial_centers"]
        labels = np.ascontiguousarray(resume["labels"], dtype=np.int32)
        done = int(resume["attrs"]["iteration"])
    statistics = kernels.accumulators(len(agents), *shape)
    monitor = Monitor(options, comm=comm, stream=stream, earlier=resume and resume["metrics"])
    seconds = dict.fromkeys(LOOP_PHASES + ("checkpoint",), 0.0)
    loop_started = clock()
    seconds["initialization"] = loop_started - entered

    def snapshot(iteration, interrupted=False):
        return BlockResult(exchange.centers, start_centers, labels, monitor.metrics(), iteration,
                           monitor.converged, exchange.bytes_sent, seconds, interrupted)

    iteration, interrupted = done, False
    for iteration in range(done + 1, options.max_iter + 1):
        t0 = clock()
        if stop_requested is not None and exchange.control == np.inf and stop_requested():
            exchange.control = iteration + exchange.rank_diameter
        exchange.start()
        centers = exchange.centers
        sums, counts, sse, changed = kernels.assign_and_accumulate(points, offsets, centers, labels,
                                                                   out=statistics)
        t1 = clock()
        ext = exchange.finish()
        t2 = clock()
        updated = kernels.center_update(centers, ext, exchange.nbr_ptr, exchange.nbr_idx, sums, counts,
                                        options.rho, options.alpha, out=exchange.spare,
                                        agent_ids=agents, nbr_ids=exchange.nbr_ids, iteration=iteration,
                                        seed=options.seed, link_failure_prob=options.link_failure_prob,
                                        dropout_prob=options.dropout_prob)
        t3 = clock()
        stop = False
        if options.is_monitor_point(iteration):
            stop = monitor.record(iteration, sse.sum(),
                                  kernels.edge_disagreement(ext, exchange.edge_a, exchange.edge_b),
                                  changed, kernels.largest_move(centers, updated))
        t4 = clock()
        for phase, spent in zip(LOOP_PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            seconds[phase] += spent
        exchange.swap()
        if stop:
            break
        if iteration >= exchange.control and iteration < options.max_iter:
            interrupted = True
            break
        if checkpoint is not None and checkpoint_every and iteration % checkpoint_every == 0 \
                and iteration < options.max_iter:
            checkpoint(snapshot(iteration))
            seconds["checkpoint"] += clock() - t4
    seconds["loop"] = clock() - loop_started
    if not interrupted:
        kernels.nearest_labels(points, offsets, exchange.centers, labels)
    exchange.free()
    return snapshot(iteration, interrupted)
