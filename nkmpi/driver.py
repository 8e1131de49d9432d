"""The iteration loop of one rank, for the block of agents it hosts.

`run` sets up one of two algorithms on the block and drives it through one
skeleton (`_Loop`): each iteration the algorithm's step, then the stop
agreement (nkmpi.stop) and checkpoints; in the end the final labels and the
rank's `BlockResult`.  A `monitor.PhaseTimer` times the phases of every step.

NK-means (`_NKMeans`): each iteration starts sending the block's centers x(t)
to the neighbour ranks (exchange.NeighbourExchange over a halo.HaloPlan), runs
the local pass (reassign rows, accumulate cluster sums and counts) while they
travel, waits for the neighbours' centers, and updates; then inner - 1 more
exchanges and updates on the same partition.  At monitoring points the rank
adds its share of the metrics and learns whether to stop.  Global collectives
happen only at set-up, at monitoring points and when a checkpoint is written; a
stop after a signal is agreed through the neighbour messages themselves.

Lloyd's baseline (`_Lloyd`, options.algorithm 'lloyd') runs on the same rows
and writes the same result, but replaces the neighbour exchange by one global
reduction of the cluster totals per iteration: the exact centralized algorithm.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import numpy as np
from mpi4py import MPI

from . import kernels, seeding, tree
from .errors import InputError, agree
from .exchange import ClusterTotals, NeighbourExchange, TreeChannel
from .faults import FaultModel
from .formats import checkpoint as checkpoint_format
from .graph import LocalGraph, concat_ranges
from .halo import HaloPlan, rank_eccentricity
from .init import AGENT_SEEDINGS, NETWORK_SEEDING, adopt_from_neighbours, has_distinct, slice_weights, weighed_rows
from .local_pass import LocalPass
from .memory import release_compiler_code, release_freed_memory
from .monitor import Monitor, PhaseTimer
from .options import Options
from .stop import StopAgreement
from .tree import local_spanning_tree

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
    seconds : this rank's time in each phase (monitor.PhaseTimer.seconds): each of
        monitor.LOOP_PHASES summed over iterations, 'initialization' (the exchange
        plan and initial centers), 'checkpoint' (writing them) and 'loop' (all
        iterations, wall).
    interrupted : stopped on request (a signal) before the end: write a checkpoint.
    rho_stage : index into options.rho_stages() of the rho in use.
    consensus : (K, p) the consensus model (nkmpi.consensus), once the caller has it.
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
    consensus: np.ndarray | None = None


def agent_seeds(comm: MPI.Comm, points: np.ndarray, weights: np.ndarray, offsets: np.ndarray, agents: np.ndarray,
                options: Options, only_first: bool) -> tuple[dict[int, np.ndarray], int | None]:
    """The (K, p) seeds of the block's agents that seed from their own rows, by block index,
    with the per-agent method options.init (init.AGENT_SEEDINGS).

    The agents with at least K distinct rows of positive weight seed; with `only_first` only the network's
    lowest-numbered of them does (found by one allreduce), and its global id is returned
    too (else None).
    """
    method, k = AGENT_SEEDINGS[options.init], options.n_clusters
    seeders, source = [], None
    for i in range(len(agents)):
        if has_distinct(weighed_rows(points[offsets[i]:offsets[i + 1]],
                                     slice_weights(weights, offsets[i], offsets[i + 1])), k):
            seeders.append(i)
            if only_first:
                break
    if only_first:
        mine = int(agents[seeders[0]]) if seeders else np.iinfo(np.int64).max
        source = comm.allreduce(mine, op=MPI.MIN)
        seeders = [i for i in seeders if agents[i] == source]
    if comm.allreduce(len(seeders), op=MPI.SUM) == 0:
        raise InputError(f"no agent holds {k} distinct points, so none can seed k-means++: "
                         "lower -k or pass --init file:PATH", collective=True)
    seeds = {i: method.seed_agent(points[offsets[i]:offsets[i + 1]], slice_weights(weights, offsets[i], offsets[i + 1]),
                                  int(agents[i]), k, options.seed)
             for i in seeders}
    return seeds, source


def warm_up(dtype: np.dtype | type, init, n_ranks: int) -> None:
    """Load every kernel of a run on `n_ranks` ranks on data of `dtype` with initialization
    `init` (options.init): the loop's (kernels.warm_up), the fingerprints' and set-up's, each
    called on an empty block with the types of its real call.

    Loading a kernel runs LLVM, whose code (50 MB of it for set-up's kernels) then stays
    resident.  Loaded here, before a rank reads its rows, it is let go with the rest
    (memory.release_compiler_code); loaded by set-up, it would be resident with the rows and
    count in the rank's peak memory."""
    kernels.warm_up(dtype, ghosts=n_ranks > 1)
    no_ids, no_offsets = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    for rows in (np.zeros((0, 1), dtype=dtype), np.zeros((0, 1))):         # the points, the weights
        checkpoint_format.block_fingerprint(rows, no_offsets, no_ids)
    LocalGraph(0, no_ids, no_offsets, no_ids).fingerprint_share()
    if not isinstance(init, str):                       # given centers: no seeding
        return
    if init == NETWORK_SEEDING:
        summaries = np.zeros((0, 2))
        seeding.summarize_block(np.zeros((0, 1), dtype=dtype), kernels.UNWEIGHTED, no_offsets, no_ids, 1, 1, 0,
                                no_offsets, summaries)
        seeding.merge_level(summaries, no_ids, no_ids, summaries, no_offsets, no_ids, no_ids, no_ids, 1, 1, 0,
                            no_offsets, summaries)
        seeding.kmeans_plusplus(np.zeros((0, 1)), np.zeros(0), 1, 1, 0, 0, 0)
        seeding.weighted_lloyd(np.zeros((0, 1)), np.zeros(0), np.zeros((0, 1)), 1)
        tree.warm_up()
    elif not AGENT_SEEDINGS[init].only_first:            # agents without seeds adopt their neighbours'
        no_centers, no_nbr = np.zeros((0, 1, 1)), np.zeros(0, dtype=np.int32)      # (a halo plan's nbr_idx)
        adopt_from_neighbours(no_centers, no_centers, no_offsets, no_nbr, no_ids, no_ids, np.zeros(0, dtype=bool))


def network_seeding(comm: MPI.Comm, points: np.ndarray, weights: np.ndarray, offsets: np.ndarray,
                    plan: HaloPlan, options: Options) -> np.ndarray:
    """--init network (nkmpi.seeding) for this rank's agents (plan.agents); collective over `comm`.

    The ranks find the spanning tree from their rows (tree.local_spanning_tree).
    Every agent summarizes its rows; then, tree level by tree level from the
    deepest, each agent joins its summary with its children's (received from
    the child's rank when it lives elsewhere) and sends the result to its
    parent; the root seeds, and the centers travel back down.  Returns the
    (K, p) centers, the same on every rank and for any placement.
    """
    rank, k, seed = comm.Get_rank(), options.n_clusters, options.seed
    agents = plan.agents
    tree = local_spanning_tree(comm, plan)
    n_groups, budget = seeding.summary_size(k), seeding.message_rows(k)
    width = points.shape[1] + 1
    own_ptr = np.concatenate([[0], np.cumsum(seeding.local_capacity(np.diff(offsets), k))])
    own = np.empty((own_ptr[-1], width))
    own_count = seeding.summarize_block(points, weights, offsets, agents, n_groups, seeding.MIN_GROUP, seed,
                                        own_ptr, own)
    channel = TreeChannel(comm, tree)
    # The previous (one deeper) level's merged summaries: agent ids, row ranges, rows.
    done_ids, done_ptr, done_count, done = (np.zeros(0, np.int64),) * 3 + (np.zeros((0, width)),)
    by_depth = np.argsort(tree.depth, kind="stable")                 # each level's agents, ascending
    level_start = np.searchsorted(tree.depth[by_depth], np.arange(tree.height + 2))
    for level in range(tree.height, -1, -1):
        block = by_depth[level_start[level]:level_start[level + 1]]
        if not len(block):
            continue
        ids = agents[block]
        n_kids = tree.child_ptr[block + 1] - tree.child_ptr[block]
        at = concat_ranges(tree.child_ptr[block], tree.child_ptr[block + 1])
        kids, kid_ranks = tree.child_index[at], tree.child_rank[at]
        remote = kid_ranks != rank
        order = np.argsort(kids[remote], kind="stable")            # the order they were sent in
        received = channel.receive_up(kid_ranks[remote][order], budget, width)
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
        for i, parent_rank in enumerate(tree.parent_rank[block]):
            if parent_rank >= 0 and parent_rank != rank:
                channel.send_up(out[out_ptr[i]:out_ptr[i] + counts[i]], parent_rank)
        done_ids, done_ptr, done_count, done = ids, out_ptr[:-1], counts, out

    def root_seeding():
        if not (tree.depth == 0).any():
            return None
        return seeding.seed_from_summary(done[:done_count[0]], k, options.n_init, seed, tree.root)

    centers = agree(comm, root_seeding)
    centers = channel.send_down(centers, (k, points.shape[1]))
    channel.free()
    return centers


def initial_centers(comm: MPI.Comm, exchange: NeighbourExchange, points: np.ndarray, weights: np.ndarray,
                    offsets: np.ndarray, agents: np.ndarray, owner: np.ndarray, options: Options) -> np.ndarray:
    """Each agent's initial centers, written into exchange.centers: the given ones, the
    network-wide seeding, the one seed of a method where only the first agent seeds
    (`one_seed`), or every seeding agent's seeds then flood rounds over neighbour exchanges
    until every agent has centers.  Returns them, as a read-only (L, K, p) view of one (K, p)
    where every agent starts alike (all but the last), so that a run does not keep a second
    copy of every agent's centers to report them."""
    centers = exchange.centers
    if not isinstance(options.init, str):
        shared = np.array(options.init, dtype=np.float64)
    elif options.init == NETWORK_SEEDING:
        shared = network_seeding(comm, points, weights, offsets, exchange.plan, options)
    elif AGENT_SEEDINGS[options.init].only_first:
        shared = one_seed(comm, points, weights, offsets, agents, owner, options)
    else:
        centers[:] = np.nan
        seeds, _ = agent_seeds(comm, points, weights, offsets, agents, options, only_first=False)
        for i, seed in seeds.items():
            centers[i] = seed
        plan = exchange.plan
        changed, boundary = np.fromiter(seeds, dtype=np.int64, count=len(seeds)), plan.boundary()
        queued = np.zeros(len(agents), dtype=bool)
        lacking = len(agents) - len(seeds)
        while comm.allreduce(lacking, op=MPI.SUM) > 0:
            exchange.exchange()
            changed = adopt_from_neighbours(centers, exchange.ext, plan.nbr_ptr, plan.nbr_idx, changed, boundary,
                                            queued)
            lacking -= len(changed)
        return centers.copy()
    centers[:] = shared
    return np.broadcast_to(shared, centers.shape)


def shared_initial_centers(comm: MPI.Comm, points: np.ndarray, weights: np.ndarray, offsets: np.ndarray,
                           agents: np.ndarray, graph: LocalGraph, owner: np.ndarray, options: Options) -> np.ndarray:
    """Lloyd's one set of (K, p) centers: the given ones, the network-wide seeding, or the
    seed of the agent that would seed alone with options.init's per-agent method (for
    flood, the centers flood init spreads, so both algorithms start alike)."""
    if not isinstance(options.init, str):
        return np.array(options.init, dtype=np.float64)
    if options.init == NETWORK_SEEDING:
        plan = HaloPlan.build(graph, owner, comm.Get_rank())      # the seeding's tree grows over the halo
        return network_seeding(comm, points, weights, offsets, plan, options)
    return one_seed(comm, points, weights, offsets, agents, owner, options)


def one_seed(comm: MPI.Comm, points: np.ndarray, weights: np.ndarray, offsets: np.ndarray, agents: np.ndarray,
             owner: np.ndarray, options: Options) -> np.ndarray:
    """The (K, p) seeds of the network's lowest-numbered agent that can seed with options.init's
    per-agent method, on every rank: where it alone seeds (flood), the centers every agent holds
    once they have flooded the connected graph, which the rounds would only copy, one diameter
    of rounds (hundreds on a sensor network) each with an exchange and an allreduce."""
    seeds, source = agent_seeds(comm, points, weights, offsets, agents, options, only_first=True)
    return comm.bcast(next(iter(seeds.values()), None), root=int(owner[source]))


def run(comm: MPI.Comm, points: np.ndarray, offsets: np.ndarray, agents: np.ndarray, graph: LocalGraph,
        owner: np.ndarray, options: Options, stream: TextIO | None = sys.stdout, *,
        resume: dict | None = None, checkpoint: Callable[[BlockResult], None] | None = None,
        checkpoint_every: int = 0, stop_requested: Callable[[], bool] | None = None,
        weights: np.ndarray = kernels.UNWEIGHTED) -> BlockResult:
    """Run NK-means (or Lloyd's baseline, by options.algorithm) on this rank's block;
    collective over `comm`.

    points : (n, p) the block's rows, grouped by agent.
    weights : (n,) float64 their weights, or kernels.UNWEIGHTED (empty) when every row weighs 1.
    offsets : (L+1,) block-local row offsets of the agents.
    agents : (L,) ascending global ids of the block's agents.
    graph : the graph's rows of the block's agents (graph.LocalGraph); owner[ids] : the ranks of
        agents (graph.BlockOwners, or an (M,) array).
    options : resolved (Options.resolve) for the whole data, the same on every rank.
    stream : where rank 0 writes progress lines (None: nowhere).
    resume : this rank's share of a checkpoint to continue from.
    checkpoint : called as checkpoint(BlockResult) on every rank after each
        `checkpoint_every`-th iteration (not the last), to write it.
    stop_requested : polled before the first iteration and every iteration after (a
        signal arrived): the ranks then agree on an iteration after which they all
        stop, interrupted (before the first: with `iterations` where they began).
    """
    loop = _Loop(comm, points, weights, offsets, agents, graph, owner, options, stream, resume)
    del graph                               # the loop's reference is the last: see _Loop.graph
    algorithm = _ALGORITHMS[options.algorithm](loop)
    return loop.run(algorithm, stop_requested, checkpoint, checkpoint_every)


class _Loop:
    """The skeleton both algorithms run in, and what they share: the block's rows and
    labels, the monitor and the phase timer.

    An algorithm is set up on a loop (initial centers, or those of `resume`) and has
    stop_hops : iterations a stop deadline needs to reach every rank (StopAgreement).
    iterate(iteration, stop) : one iteration, lapping the timer at the end of each of
        LOOP_PHASES; True when the run has come to rest (converged).
    pass_offsets, pass_centers : the offsets and centers the assignment pass reads;
        local_pass, statistics : that pass (a LocalPass) and its accumulators, which also
        give the final labels.
    block_centers() : (L, K, p) the block's current centers; start_centers : its initial ones.
    rho_stage, bytes_sent : as in BlockResult; free() : release its MPI objects.

    The loop's `graph` (the block's rows of it) is needed only while an algorithm sets up
    (the exchange plan, the seeding); the algorithm drops it then, so that its 8 bytes an
    edge end are not held through the iterations.
    """

    def __init__(self, comm, points, weights, offsets, agents, graph, owner, options, stream, resume):
        self.timer = PhaseTimer()
        self.comm, self.points, self.weights, self.options = comm, points, weights, options
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.agents = np.asarray(agents, dtype=np.int64)
        self.graph, self.owner = graph, owner
        self.shape = (options.n_clusters, points.shape[1])
        self.resume = resume
        self.monitor = Monitor(options, comm=comm, stream=stream, earlier=resume and resume["metrics"])
        if resume is None:
            self.labels = np.full(points.shape[0], -1, dtype=np.int32)
            self.done = 0
        else:
            self.labels = np.ascontiguousarray(resume["labels"], dtype=np.int32)
            self.done = int(resume["attrs"]["iteration"])

    def run(self, algorithm: _NKMeans | _Lloyd, stop_requested: Callable[[], bool] | None,
            checkpoint: Callable[[BlockResult], None] | None, checkpoint_every: int) -> BlockResult:
        loop_started = self.timer.lap("initialization")
        release_compiler_code()                 # what set-up's kernels faulted back in: the loop runs no LLVM
        stop = StopAgreement(stop_requested, algorithm.stop_hops)
        if stop.requested_anywhere(self.comm):
            # Stopped during set-up (the seeding can take a while): nothing to save.
            iteration, converged, interrupted = self.done, False, True
        else:
            iteration, converged, interrupted = self.iterate(algorithm, stop, checkpoint, checkpoint_every)
        self.timer.charge_since("loop", loop_started)
        if not interrupted:     # each row's nearest final center: one more pass, with its bounds and sums
            algorithm.local_pass.run(algorithm.pass_centers, self.labels, algorithm.statistics,
                                     scale=algorithm.local_pass.scale)
        result = self.result(algorithm, iteration, converged, interrupted)
        algorithm.free()
        return result

    def iterate(self, algorithm: _NKMeans | _Lloyd, stop: StopAgreement,
                checkpoint: Callable[[BlockResult], None] | None, checkpoint_every: int) -> tuple[int, bool, bool]:
        """Iterations from the first not done on; returns (last iteration, converged, interrupted)."""
        timer, max_iter = self.timer, self.options.max_iter
        iteration = self.done
        for iteration in range(self.done + 1, max_iter + 1):
            timer.restart()
            stop.poll(iteration)
            if algorithm.iterate(iteration, stop):
                return iteration, True, False
            if stop.due(iteration) and iteration < max_iter:
                return iteration, False, True
            if checkpoint is not None and checkpoint_every and iteration % checkpoint_every == 0 \
                    and iteration < max_iter:
                checkpoint(self.result(algorithm, iteration, False, False))
                timer.lap("checkpoint")
        return iteration, False, False

    def result(self, algorithm: _NKMeans | _Lloyd, iteration: int, converged: bool,
               interrupted: bool) -> BlockResult:
        return BlockResult(algorithm.block_centers(), algorithm.start_centers, self.labels,
                           self.monitor.metrics(), iteration, converged, algorithm.bytes_sent,
                           self.timer.seconds, interrupted, algorithm.rho_stage)


class _NKMeans:
    """NK-means on a block: each iteration, start sending x(t), the local pass while it
    travels, wait, update; then inner - 1 more exchanges and updates on the same
    partition.  rho follows options.rho_stages(), one stretch after another."""

    def __init__(self, loop: _Loop):
        self.loop = loop
        comm, options = loop.comm, loop.options
        self.plan = HaloPlan.build(loop.graph, loop.owner, comm.Get_rank())
        loop.graph = None
        release_freed_memory()                  # the graph and the plan's temporaries, before the exchange's buffers
        self.exchange = NeighbourExchange(comm, self.plan, loop.shape)
        # The rank graph's diameter: each rank's farthest hop count, the largest of them.
        self.stop_hops = comm.allreduce(rank_eccentricity(comm.allgather(self.plan.ranks), comm.Get_rank()),
                                        op=MPI.MAX)
        if loop.resume is None:
            self.start_centers = initial_centers(comm, self.exchange, loop.points, loop.weights, loop.offsets,
                                                 loop.agents, loop.owner, options)
            self.rho_stage = 0
        else:
            self.exchange.centers[:] = loop.resume["centers"]
            self.start_centers = loop.resume["initial_centers"]
            self.rho_stage = int(loop.resume["attrs"]["rho_stage"])
        self.stages = options.rho_stages()
        self.n_points = comm.allreduce(len(loop.points)) if options.rho_schedule else 0
        self.faults = FaultModel.from_options(options)
        self.statistics = kernels.accumulators(len(loop.agents), *loop.shape)
        # Where each update is a kernel call of its own (the agents have ghosts), it measures
        # the centers' moves for the next pass, which then keeps no copy of the centers.
        self.one_call = self.plan.n_ext == self.plan.n_local
        self.local_pass = LocalPass(loop.points, loop.offsets, options.n_clusters, loop.weights,
                                    moves_given=not self.one_call)
        # Each agent's disagreement with its higher neighbours, written by a monitoring point's
        # update, from each agent's first neighbour entry of a higher id on.
        self.edge_sums = np.zeros(0 if self.one_call else len(loop.agents))
        self.edge_first = kernels.NO_IDS if self.one_call else kernels.first_up_edges(
            self.plan.agents, self.plan.nbr_ptr, self.plan.nbr_idx, self.plan.ext_ids)
        # The neighbour rows each update would wait for, which it asks for a few agents ahead.
        self.prefetch = kernels.far_rows(self.plan.nbr_ptr, self.plan.nbr_idx, self.plan.n_ext)
        # Whether the updates write past the caches: both ways tried now, on this run's own update.
        self.streamed = kernels.choose_stores(self.exchange.spare.nbytes, self._spare_update)
        self.pass_offsets = loop.offsets

    def _spare_update(self, streamed: bool) -> None:
        """One update of the current centers into the spare ones, from empty clusters and without
        faults: what kernels.choose_stores times.  The loop overwrites the spare centers."""
        plan, exchange, options = self.plan, self.exchange, self.loop.options
        sums, counts = self.statistics[:2]
        if self.one_call:
            kernels.local_center_updates(exchange.centers, exchange.spare, plan.nbr_ptr, plan.nbr_idx, sums, counts,
                                         self.stages[0], options.alpha, 1, streamed=streamed, prefetch=self.prefetch,
                                         scaled=True)
        else:
            kernels.center_update(exchange.centers, exchange.ext, plan.nbr_ptr, plan.nbr_idx, sums, counts,
                                  self.stages[0], options.alpha, out=exchange.spare, streamed=streamed,
                                  prefetch=self.prefetch, scaled=True)

    @property
    def pass_centers(self) -> np.ndarray:
        return self.exchange.centers

    def block_centers(self) -> np.ndarray:
        return self.exchange.centers

    @property
    def bytes_sent(self) -> int:
        return self.exchange.bytes_sent

    def iterate(self, iteration: int, stop: StopAgreement) -> bool:
        loop, plan, exchange, timer = self.loop, self.plan, self.exchange, self.loop.timer
        options, inner = loop.options, loop.options.inner
        rho = self.stages[self.rho_stage]
        monitoring = options.is_monitor_point(iteration)
        exchange.start(stop.deadline)
        # Sums and counts divided by rho as the pass sums them (scaled), not in every update.
        sums, counts, changed = self.local_pass.run(exchange.centers, loop.labels, self.statistics, scale=rho)
        if monitoring:
            sse = self.local_pass.sse(exchange.centers, loop.labels, self.statistics[2])
        timer.lap("local")
        stop.hear(exchange.finish())
        timer.lap("exchange")
        if monitoring:
            before = exchange.centers.copy() if inner > 1 else exchange.centers
        first_update = (iteration - 1) * inner + 1
        if self.one_call:                   # no ghosts: every update in one call, no exchanges between
            if monitoring:
                disagreement = kernels.edge_disagreement(exchange.ext, plan.agents, plan.nbr_ptr, plan.nbr_idx,
                                                        plan.ext_ids)
            kernels.local_center_updates(exchange.centers, exchange.spare, plan.nbr_ptr, plan.nbr_idx, sums, counts,
                                         rho, options.alpha, inner, faults=self.faults, first_update=first_update,
                                         agent_ids=plan.agents, ext_ids=plan.ext_ids, streamed=self.streamed,
                                         prefetch=self.prefetch, scaled=True)
            if inner % 2:
                exchange.swap()
        else:
            for step in range(inner):       # the first update uses the exchange started above
                if step:
                    timer.lap("update")
                    stop.hear(exchange.exchange(stop.deadline))
                    timer.lap("exchange")
                # At a monitoring point the first update also sums the edges' gaps of x(t).
                edge_sums = self.edge_sums if monitoring and not step else kernels.NO_EDGE_SUMS
                kernels.center_update(exchange.centers, exchange.ext, plan.nbr_ptr, plan.nbr_idx, sums, counts, rho,
                                      options.alpha, out=exchange.spare, faults=self.faults, update=first_update + step,
                                      agent_ids=plan.agents, ext_ids=plan.ext_ids, moved=self.local_pass.moved,
                                      move_terms=self.local_pass.move_terms, edge_sums=edge_sums,
                                      edge_first=self.edge_first, streamed=self.streamed, prefetch=self.prefetch,
                                      scaled=True)
                exchange.swap()
            if monitoring:
                disagreement = kernels.exact_partials(self.edge_sums)
        timer.lap("update")
        at_rest = False
        if monitoring:
            rested = loop.monitor.record(iteration, kernels.exact_partials(sse), disagreement, changed,
                                         kernels.largest_move(before, exchange.centers), rho,
                                         options.stage_rest(self.rho_stage, self.n_points))
            if rested and self.rho_stage + 1 < len(self.stages):     # on to the next rho stretch
                self.rho_stage += 1
            else:
                at_rest = rested
        timer.lap("monitor")
        return at_rest

    def free(self) -> None:
        self.exchange.free()


class _Lloyd:
    """Exact Lloyd on the pooled rows: each iteration the local pass, one fused
    allreduce of the block's cluster totals (which also carries the stop agreement,
    to every rank at once), and the means on every rank.

    Every agent holds the same centers, so the pass runs over fixed chunks of
    the block's rows rather than over its agents: no per-agent copies, and
    the same sums whatever the thread count."""

    stop_hops = 0
    rho_stage = 0

    def __init__(self, loop: _Loop):
        self.loop = loop
        comm, n_rows = loop.comm, len(loop.points)
        if loop.resume is None:
            centers = shared_initial_centers(comm, loop.points, loop.weights, loop.offsets, loop.agents,
                                             loop.graph, loop.owner, loop.options)
        else:
            centers = comm.bcast(loop.resume["centers"][0] if len(loop.agents) else None,
                                 root=int(loop.owner[0]))
        loop.graph = None
        self.pass_offsets = np.append(np.arange(0, max(n_rows, 1), LLOYD_CHUNK_ROWS), n_rows)
        #: The centers, once per chunk of rows (each chunk is an "agent" of the pass).
        self.pass_centers = np.empty((len(self.pass_offsets) - 1,) + loop.shape)
        self.pass_centers[:] = centers
        self.start_centers = self.block_centers(view=True) if loop.resume is None else loop.resume["initial_centers"]
        self.statistics = kernels.accumulators(len(self.pass_offsets) - 1, *loop.shape)
        self.local_pass = LocalPass(loop.points, self.pass_offsets, loop.options.n_clusters, loop.weights)
        self.totals = ClusterTotals(comm, loop.shape)

    def block_centers(self, view: bool = False) -> np.ndarray:
        """(L, K, p) every agent's centers, the same for all: an array, or with `view` a
        read-only view of one (K, p) copy."""
        shared = np.broadcast_to(self.pass_centers[0].copy(), (len(self.loop.agents),) + self.loop.shape)
        return shared if view else shared.copy()

    @property
    def bytes_sent(self) -> int:
        return self.totals.bytes_sent

    def iterate(self, iteration: int, stop: StopAgreement) -> bool:
        loop, options, timer = self.loop, self.loop.options, self.loop.timer
        centers = self.pass_centers[0]
        sums, counts, changed = self.local_pass.run(self.pass_centers, loop.labels, self.statistics)
        timer.lap("local")
        sums, counts, total_changed, stopping = self.totals.allreduce(
            sums.sum(axis=0), counts.sum(axis=0), changed, stop.due(iteration))
        if stopping:
            stop.hear(iteration)
        timer.lap("exchange")
        updated = kernels.cluster_means(sums, counts, centers)
        timer.lap("update")
        rested = options.monitor_every > 0 and total_changed == 0
        if options.is_monitor_point(iteration) or rested:
            sse = self.local_pass.sse(self.pass_centers, loop.labels, self.statistics[2])
            loop.monitor.record(iteration, sse.sum(), 0.0, changed,
                                kernels.largest_move(centers[None], updated[None]), options.rho)
        self.pass_centers[:] = updated
        timer.lap("monitor")
        return rested

    def free(self) -> None:
        """Nothing to release: the reduction runs on the run's own communicator."""


#: The algorithms `run` drives, by options.algorithm.
_ALGORITHMS = {"nkmeans": _NKMeans, "lloyd": _Lloyd}
