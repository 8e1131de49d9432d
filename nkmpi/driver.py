"""The NK-means iteration loop of one rank, for the block of agents it hosts.

Each iteration: start sending the block's centers x(t) to the neighbour
ranks, run the local pass (reassign rows, accumulate cluster sums and counts)
while they travel, wait for the neighbours' centers, and update.  At
monitoring points the rank adds its share of the metrics and learns whether
to stop.  Global collectives happen only at set-up, at monitoring points and
when a checkpoint is written; a stop after a signal is agreed through the
neighbour messages themselves.

Lloyd's baseline (options.algorithm 'lloyd') runs on the same rows and writes
the same result, but replaces the neighbour exchange by one global reduction
of the cluster totals per iteration: the exact centralized algorithm.
"""

import sys
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from . import kernels, seeding
from .errors import InputError, agree
from .exchange import ClusterTotals, NeighbourExchange, TreeChannel
from .graph import concat_ranges, spanning_tree
from .init import adopt_from_neighbours, agent_seed, has_distinct
from .monitor import LOOP_PHASES, Monitor


#: Lloyd's baseline reads a block's rows in chunks of this many, whatever its agents.
LLOYD_CHUNK_ROWS = 65536


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
    rho_stage : index into options.rho_stages() of the rho in use.
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
    rho_stage: int = 0


def seeding_agents(comm, points, offsets, agents, options):
    """Block indices of the agents that seed k-means++, and with flood init the global id
    of the run's one seeding agent (the lowest qualifying one, found by one allreduce;
    None with local init)."""
    seeders, source = [], None
    for i in range(len(agents)):
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
    return seeders, source


def network_seeding(comm, points, offsets, agents, network, owner, options):
    """--init network (nkmpi.seeding) for this rank's agents; collective over `comm`.

    Every agent summarizes its rows; then, tree level by tree level from the
    deepest, each agent joins its summary with its children's (received from
    the child's rank when it lives elsewhere) and sends the result to its
    parent; the root seeds, and the centers travel back down.  Returns the
    (K, p) centers, the same on every rank and for any placement.
    """
    rank, k, seed = comm.Get_rank(), options.n_clusters, options.seed
    agents = np.asarray(agents, dtype=np.int64)
    tree = spanning_tree(network)
    n_groups, budget = seeding.summary_size(k), seeding.message_rows(k)
    width = points.shape[1] + 1
    own_ptr = np.concatenate([[0], np.cumsum(seeding.local_capacity(np.diff(offsets), k))])
    own = np.empty((own_ptr[-1], width))
    own_count = seeding.summarize_block(points, offsets, agents, n_groups, seeding.MIN_GROUP, seed,
                                        own_ptr, own)
    channel = TreeChannel(comm, tree, owner, agents)
    depth = tree.depth[agents]
    # The previous (one deeper) level's merged summaries: agent ids, row ranges, rows.
    done_ids, done_ptr, done_count, done = (np.zeros(0, np.int64),) * 3 + (np.zeros((0, width)),)
    for level in range(tree.height, -1, -1):
        block = np.flatnonzero(depth == level)
        if not len(block):
            continue
        ids = agents[block]
        n_kids = tree.child_ptr[ids + 1] - tree.child_ptr[ids]
        kids = tree.child_index[concat_ranges(tree.child_ptr[ids], tree.child_ptr[ids + 1])]
        remote = owner[kids] != rank
        order = np.argsort(kids[remote], kind="stable")            # the order they were sent in
        received = channel.receive_up(owner[kids[remote]][order], budget, width)
        sizes = np.zeros(len(kids), dtype=np.int64)
        starts = np.zeros(len(kids), dtype=np.int64)
        local_at = np.searchsorted(done_ids, kids[~remote])
        sizes[~remote], starts[~remote] = done_count[local_at], done_ptr[local_at]
        remote_at = np.flatnonzero(remote)[order]
        sizes[remote_at] = [len(rows) for rows in received]
        starts[remote_at] = len(done) + np.cumsum([0] + [len(rows) for rows in received])[:-1]
        pool = np.concatenate([done] + received) if received else done
        part_ptr = np.concatenate([[0], np.cumsum(n_kids)])
        size_sum = np.concatenate([[0], np.cumsum(sizes)])
        joined = own_count[block] + size_sum[part_ptr[1:]] - size_sum[part_ptr[:-1]]
        out_ptr = np.concatenate([[0], np.cumsum(seeding.merged_capacity(joined, n_groups, budget))])
        out = np.empty((out_ptr[-1], width))
        counts = seeding.merge_level(own, own_ptr[block], own_ptr[block] + own_count[block], pool,
                                     part_ptr, starts, starts + sizes, ids, n_groups, budget, seed,
                                     out_ptr, out)
        for i in np.flatnonzero(tree.parent[ids] >= 0):
            parent_rank = owner[tree.parent[ids[i]]]
            if parent_rank != rank:
                channel.send_up(out[out_ptr[i]:out_ptr[i] + counts[i]], parent_rank)
        done_ids, done_ptr, done_count, done = ids, out_ptr[:-1], counts, out

    def root_seeding():
        if owner[tree.root] != rank:
            return None
        return seeding.seed_from_summary(done[:done_count[0]], k, options.n_init, seed, tree.root)

    centers = agree(comm, root_seeding)
    centers = channel.send_down(centers, (k, points.shape[1]))
    channel.free()
    return centers


def initial_centers(comm, exchange, points, offsets, agents, network, owner, options):
    """The given centers, the network-wide seeding, or seeds (flood: only the lowest
    qualifying agent; local: every qualifying one) then flood rounds over neighbour
    exchanges until every agent has centers.  Writes into exchange.centers."""
    centers = exchange.centers
    if not isinstance(options.init, str):
        centers[:] = options.init
        return
    if options.init == "network":
        centers[:] = network_seeding(comm, points, offsets, agents, network, owner, options)
        return
    centers[:] = np.nan
    seeders, _ = seeding_agents(comm, points, offsets, agents, options)
    for i in seeders:
        centers[i] = agent_seed(points[offsets[i]:offsets[i + 1]], int(agents[i]),
                                options.n_clusters, options.seed)
    lacking = len(agents) - len(seeders)
    while comm.allreduce(lacking, op=MPI.SUM) > 0:
        ext = exchange.exchange()
        lacking = adopt_from_neighbours(centers, ext, exchange.nbr_ptr, exchange.nbr_idx)


def shared_initial_centers(comm, points, offsets, agents, network, owner, options):
    """Lloyd's one set of (K, p) centers: the given ones, the network-wide seeding, or
    the k-means++ seed of the agent that flood init would spread (so both algorithms
    start alike)."""
    if not isinstance(options.init, str):
        return np.array(options.init, dtype=np.float64)
    if options.init == "network":
        return network_seeding(comm, points, offsets, agents, network, owner, options)
    seeders, source = seeding_agents(comm, points, offsets, agents, options)
    seed = None
    if seeders:
        i = seeders[0]
        seed = agent_seed(points[offsets[i]:offsets[i + 1]], int(agents[i]), options.n_clusters,
                          options.seed)
    return comm.bcast(seed, root=int(owner[source]))


def run(comm, points, offsets, agents, network, owner, options, stream=sys.stdout, resume=None,
        checkpoint=None, checkpoint_every=0, stop_requested=None):
    """Run NK-means (or Lloyd's baseline, by options.algorithm) on this rank's block;
    collective over `comm`.

    points : (n, p) the block's rows, grouped by agent.
    offsets : (L+1,) block-local row offsets of the agents.
    agents : (L,) ascending global ids of the block's agents.
    network : graph.Network over all agents; owner : (M,) rank of each agent.
    resume : this rank's share of a checkpoint (io.read_checkpoint) to continue from.
    checkpoint : called as checkpoint(BlockResult) on every rank after each
        `checkpoint_every`-th iteration (not the last), to write it.
    stop_requested : polled before the first iteration and every iteration after (a
        signal arrived): the ranks then agree on an iteration after which they all
        stop, interrupted (before the first: with `iterations` where they began).
    """
    options = agree(comm, options.resolve, comm.allreduce(len(points)), len(owner))
    loop = _Loop(comm, points, offsets, agents, network, owner, options, stream, resume,
                 checkpoint, checkpoint_every, stop_requested)
    return loop.run_lloyd() if options.algorithm == "lloyd" else loop.run_nkmeans()


class _Loop:
    """State shared by the two iteration loops: rows, labels, timings, monitor."""

    def __init__(self, comm, points, offsets, agents, network, owner, options, stream, resume,
                 checkpoint, checkpoint_every, stop_requested):
        self.entered = time.perf_counter()
        self.comm, self.points, self.options = comm, points, options
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.agents = np.asarray(agents, dtype=np.int64)
        self.network, self.owner = network, owner
        self.shape = (options.n_clusters, points.shape[1])
        self.resume = resume
        self.checkpoint, self.checkpoint_every = checkpoint, checkpoint_every
        self.stop_requested = stop_requested or (lambda: False)
        self.monitor = Monitor(options, comm=comm, stream=stream, earlier=resume and resume["metrics"])
        self.seconds = dict.fromkeys(LOOP_PHASES + ("checkpoint",), 0.0)
        if resume is None:
            self.labels = np.full(points.shape[0], -1, dtype=np.int32)
            self.done, self.stage = 0, 0
        else:
            self.labels = np.ascontiguousarray(resume["labels"], dtype=np.int32)
            self.done = int(resume["attrs"]["iteration"])
            self.stage = int(resume["attrs"]["rho_stage"])
        self.converged = False

    def snapshot(self, centers, start_centers, iteration, bytes_sent, interrupted=False):
        return BlockResult(centers, start_centers, self.labels, self.monitor.metrics(), iteration,
                           self.converged, bytes_sent, self.seconds, interrupted, self.stage)

    def add_times(self, **spent):
        for phase, seconds in spent.items():
            self.seconds[phase] += seconds

    def stopped_during_setup(self):
        """Whether a stop was requested on any rank during set-up (the seeding can take
        a while): then the run ends before its first iteration, with nothing to save."""
        return bool(self.comm.allreduce(bool(self.stop_requested()), op=MPI.LOR))

    def checkpoint_due(self, iteration):
        return (self.checkpoint is not None and self.checkpoint_every
                and iteration % self.checkpoint_every == 0 and iteration < self.options.max_iter)

    def at_rest(self, rested):
        """A monitoring point found the stretch at rest: the end, or the next rho stretch."""
        if rested and self.stage + 1 < len(self.options.rho_stages()):
            self.stage += 1
            return False
        self.converged = rested
        return rested

    def run_nkmeans(self):
        """Each iteration: start sending x(t), the local pass while it travels, wait,
        update; then inner - 1 more exchanges and updates on the same partition."""
        clock, options = time.perf_counter, self.options
        exchange = NeighbourExchange(self.comm, self.network, self.owner, self.agents, self.shape)
        if self.resume is None:
            initial_centers(self.comm, exchange, self.points, self.offsets, self.agents,
                            self.network, self.owner, options)
            start_centers = exchange.centers.copy()
        else:
            exchange.centers[:] = self.resume["centers"]
            start_centers = self.resume["initial_centers"]
        stages, q = options.rho_stages(), options.inner
        n_points = self.comm.allreduce(len(self.points)) if options.rho_schedule else 0
        statistics = kernels.accumulators(len(self.agents), *self.shape)
        points, offsets, labels, agents, seconds = (self.points, self.offsets, self.labels,
                                                    self.agents, self.seconds)
        loop_started = clock()
        seconds["initialization"] = loop_started - self.entered
        if self.stopped_during_setup():
            exchange.free()
            return self.snapshot(exchange.centers, start_centers, self.done, 0, interrupted=True)

        iteration, interrupted = self.done, False
        for iteration in range(self.done + 1, options.max_iter + 1):
            t0 = clock()
            if exchange.control == np.inf and self.stop_requested():
                exchange.control = iteration + exchange.rank_diameter
            rho = stages[self.stage]
            monitoring = options.is_monitor_point(iteration)
            exchange.start()
            centers = exchange.centers
            sums, counts, sse, changed = kernels.assign_and_accumulate(points, offsets, centers, labels,
                                                                       out=statistics)
            t1 = clock()
            ext = exchange.finish()
            t2 = clock()
            if monitoring:
                disagreement = kernels.edge_disagreement(ext, exchange.edge_a, exchange.edge_b)
                before = centers.copy() if q > 1 else centers
            waited = t2 - t1
            first_update = (iteration - 1) * q + 1
            for step in range(q):            # the first update uses the exchange started above
                if step:
                    t_wait = clock()
                    ext = exchange.exchange()
                    waited += clock() - t_wait
                    centers = exchange.centers
                kernels.center_update(centers, ext, exchange.nbr_ptr, exchange.nbr_idx, sums, counts,
                                      rho, options.alpha, out=exchange.spare, agent_ids=agents,
                                      nbr_ids=exchange.nbr_ids, iteration=first_update + step,
                                      seed=options.seed, link_failure_prob=options.link_failure_prob,
                                      dropout_prob=options.dropout_prob)
                exchange.swap()
            t3 = clock()
            stop = False
            if monitoring:
                rested = self.monitor.record(iteration, kernels.exact_partials(sse), disagreement,
                                             changed, kernels.largest_move(before, exchange.centers), rho,
                                             options.stage_rest(self.stage, n_points))
                stop = self.at_rest(rested)
            t4 = clock()
            seconds["local"] += t1 - t0
            seconds["exchange"] += waited
            seconds["update"] += t3 - t1 - waited
            seconds["monitor"] += t4 - t3
            if stop:
                break
            if iteration >= exchange.control and iteration < options.max_iter:
                interrupted = True
                break
            if self.checkpoint_due(iteration):
                self.checkpoint(self.snapshot(exchange.centers, start_centers, iteration,
                                              exchange.bytes_sent))
                seconds["checkpoint"] += clock() - t4
        seconds["loop"] = clock() - loop_started
        if not interrupted:
            kernels.nearest_labels(points, offsets, exchange.centers, labels)
        result = self.snapshot(exchange.centers, start_centers, iteration, exchange.bytes_sent,
                               interrupted)
        exchange.free()
        return result

    def run_lloyd(self):
        """Exact Lloyd on the pooled rows: each iteration the local pass, one fused
        allreduce of the block's cluster totals, and the means on every rank.

        Every agent holds the same centers, so the pass runs over fixed chunks of
        the block's rows rather than over its agents: no per-agent copies, and
        the same sums whatever the thread count."""
        clock, options = time.perf_counter, self.options
        n_local, n_rows = len(self.agents), len(self.points)
        if self.resume is None:
            centers = shared_initial_centers(self.comm, self.points, self.offsets, self.agents,
                                             self.network, self.owner, options)
            start_centers = np.broadcast_to(centers, (n_local,) + self.shape).copy()
        else:
            centers = self.comm.bcast(self.resume["centers"][0] if n_local else None,
                                      root=int(self.owner[0]))
            start_centers = self.resume["initial_centers"]
        chunks = np.append(np.arange(0, max(n_rows, 1), LLOYD_CHUNK_ROWS), n_rows)
        statistics = kernels.accumulators(len(chunks) - 1, *self.shape)
        chunk_centers = np.empty((len(chunks) - 1,) + self.shape)
        totals = ClusterTotals(self.comm, self.shape)

        def block_centers():
            return np.broadcast_to(centers, (n_local,) + self.shape).copy()

        loop_started = clock()
        self.seconds["initialization"] = loop_started - self.entered
        if self.stopped_during_setup():
            return self.snapshot(block_centers(), start_centers, self.done, 0, interrupted=True)
        iteration, interrupted = self.done, False
        for iteration in range(self.done + 1, options.max_iter + 1):
            t0 = clock()
            chunk_centers[:] = centers
            sums, counts, sse, changed = kernels.assign_and_accumulate(
                self.points, chunks, chunk_centers, self.labels, out=statistics)
            block_sse = sse.sum()
            t1 = clock()
            sums, counts, _, total_changed, signalled = totals.allreduce(
                sums.sum(axis=0), counts.sum(axis=0), block_sse, changed, self.stop_requested())
            t2 = clock()
            updated = kernels.cluster_means(sums, counts, centers)
            t3 = clock()
            rested = options.monitor_every > 0 and total_changed == 0
            if options.is_monitor_point(iteration) or rested:
                self.monitor.record(iteration, block_sse, 0.0, changed,
                                    kernels.largest_move(centers[None], updated[None]), options.rho)
                self.converged = rested
            centers = updated
            t4 = clock()
            self.add_times(local=t1 - t0, exchange=t2 - t1, update=t3 - t2, monitor=t4 - t3)
            if rested:
                break
            if signalled and iteration < options.max_iter:
                interrupted = True
                break
            if self.checkpoint_due(iteration):
                self.checkpoint(self.snapshot(block_centers(), start_centers, iteration,
                                              totals.bytes_sent))
                self.seconds["checkpoint"] += clock() - t4
        self.seconds["loop"] = clock() - loop_started
        if not interrupted:
            chunk_centers[:] = centers
            kernels.nearest_labels(self.points, chunks, chunk_centers, self.labels)
        return self.snapshot(block_centers(), start_centers, iteration, totals.bytes_sent, interrupted)
