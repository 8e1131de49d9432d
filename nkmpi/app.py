"""One run on one rank, from options and data to an outcome: what `nkmpi run`,
`nkmpi simulate` and `NKMeans.fit` have in common.

A run reads or takes its rows, checks everything that can be wrong with its
input before the first iteration (every check agreed on by all ranks,
errors.agree), seeds, iterates (nkmpi.driver), writes checkpoints when asked
or stopped, and assembles the result.  The callers differ only in where the
rows come from (`DatasetSource`: a dataset file read by block placement;
`ArraySource`: a user's arrays placed as the user placed them) and in what they
do with the `Outcome` (a result file and an exit status, or estimator
attributes).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import InputError, agree
from .formats import checkpoint as checkpoint_format
from .formats import result as result_format
from .formats.dataset import (DatasetInfo, check_rows, check_total_weight, check_weights, open_dataset, place_blocks,
                              read_all, read_rows, read_weights, weight_sum)
from .formats.hdf5 import check_output, new_run_id, read_attributes, refuse_overwriting
from .graph import BlockOwners, edge_file, graph_text, local_graph, network_of, not_connected, reads_stored_rows
from .init import check_enough_distinct, distinct_rows, weighed_rows
from .memory import peak_resident_bytes, release_compiler_code, release_freed_memory, resident_bytes
from .monitor import LOOP_PHASES
from .options import Options, resume_keys

#: How a run ended: every iteration it needed ran; stopped by a signal with its checkpoint
#: written; stopped by a signal before its first iteration, with nothing to save.
FINISHED, STOPPED, STOPPED_AT_START = "finished", "stopped", "stopped at start"
#: What a checkpoint says of its run (`nkmpi status`; a result says FINISHED): written because
#: a stop request ended the run, which goes on from it; written while the run went on.
INTERRUPTED, PERIODIC = "interrupted", "periodic"


@dataclass
class Shard:
    """This rank's part of the data, and where the rest of it lives.

    info : the whole data: its size, dtype and the file's own graph (not every agent's
        offsets: no rank holds those).
    agents : (L,) ascending global ids of this rank's agents.
    owner : the rank hosting each agent, owner[ids]: graph.BlockOwners when the ranks hold
        consecutive agents in rank order (as files store them), else an (M,) array.
    rank : this rank.
    offsets : (L+1,) offsets of this rank's agents within its rows.
    row_start : where its rows start among all rows, when the ranks hold consecutive agents
        in rank order (the rows of the ranks before it).
    load : returns this rank's rows, grouped by agent and checked (collective).
    load_weights : returns their weights, checked, or None when the data are unweighted
        (collective).
    """

    info: DatasetInfo
    agents: np.ndarray
    owner: BlockOwners | np.ndarray
    rank: int
    offsets: np.ndarray
    row_start: int
    load: Callable[[], np.ndarray]
    load_weights: Callable[[], np.ndarray | None]

    @property
    def consecutive(self) -> bool:
        """Whether the ranks hold consecutive agents in rank order, as files store them."""
        return isinstance(self.owner, BlockOwners)

    @property
    def agent_start(self) -> int:
        """The first of this rank's agents, where its slice of a file starts (consecutive ranks)."""
        if self.consecutive:
            return int(self.owner.bounds[self.rank])
        return int(self.agents[0]) if len(self.agents) else 0


class DatasetSource:
    """Rows from a dataset v1 file: each rank reads the offsets and rows of its block of
    agents (block placement balances the rows, `place_blocks`) and nothing else, the ranks
    together through MPI-IO where h5py has it."""

    def __init__(self, path: str):
        self.path = path

    def open(self, comm) -> Shard:
        info = agree(comm, open_dataset, self.path, whole_offsets=False)
        bounds, block = place_blocks(info, comm)
        return Shard(info, np.arange(block.first, block.stop), BlockOwners(bounds), comm.Get_rank(),
                     block.local_offsets, block.row_start,
                     lambda: agree(comm, read_rows, info, block, comm=comm),
                     lambda: agree(comm, read_weights, info, block, comm=comm))


class ArraySource:
    """Rows a user's program holds: `points` (n, p) of this rank's agents grouped by agent,
    their local `agent_offsets` (default: one agent), their global ids `agents` (default:
    agents numbered in rank order) and their `weights` (n,) (default: every row weighs 1;
    every rank gives weights or none does)."""

    def __init__(self, points, agent_offsets=None, agents=None, weights=None):
        self.path = None
        self.points, self.agent_offsets, self.agents, self.weights = points, agent_offsets, agents, weights

    def open(self, comm) -> Shard:
        rank = comm.Get_rank()
        points, offsets = agree(comm, rows_and_offsets, self.points, self.agent_offsets)
        weights = agree(comm, sample_weights, self.weights, len(points))
        if len(set(comm.allgather(weights is None))) > 1:
            raise InputError("sample_weight must be given on every rank or on none", collective=True)
        n_local = len(offsets) - 1
        agents = self.agents
        if agents is None:
            first = sum(comm.allgather(n_local)[:rank])
            agents = np.arange(first, first + n_local)
        agents = agree(comm, _agent_ids, agents, n_local)
        everyone = comm.allgather((agents, np.diff(offsets), points.shape[1], points.dtype.str))
        ids = np.concatenate([a for a, *_ in everyone])

        def check_placement():
            if not np.array_equal(np.sort(ids), np.arange(len(ids))):
                raise InputError("the ranks' agents must together be 0..M-1, each on one rank")
            shapes = sorted({(p, dtype) for *_, p, dtype in everyone})
            if len(shapes) != 1:
                raise InputError(f"ranks disagree on the number of features or the dtype: {shapes}")

        agree(comm, check_placement)
        counts = [len(a) for a, *_ in everyone]
        if np.array_equal(ids, np.arange(len(ids))):         # consecutive agents in rank order
            owner = BlockOwners(np.concatenate([[0], np.cumsum(counts)]))
        else:
            owner = np.repeat(np.arange(len(everyone), dtype=np.int64), counts)[np.argsort(ids)]
        rows = [int(s.sum()) for _, s, *_ in everyone]
        info = DatasetInfo(None, sum(rows), points.shape[1], points.dtype, len(ids), False, None, weights is not None)
        return Shard(info, agents, owner, rank, offsets, sum(rows[:rank]), lambda: points, lambda: weights)


def rows_and_offsets(points, agent_offsets):
    """`points` as a C-contiguous float32/float64 (n, p) array of checked rows, and the
    agents' row offsets (default: one agent)."""
    try:
        points = np.ascontiguousarray(points)
        if points.dtype not in (np.float32, np.float64):
            points = points.astype(np.float64)
        offsets = np.array([0, len(points)] if agent_offsets is None else agent_offsets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"X and agent_offsets must be numeric arrays: {exc}") from None
    if points.ndim != 2 or points.shape[1] < 1:
        raise InputError(f"X must be 2-D (n, p) with p >= 1, has shape {points.shape}")
    if (offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != len(points)
            or (np.diff(offsets) < 0).any()):
        raise InputError("agent_offsets must start at 0, not decrease and end at len(X)")
    check_rows(points, "X")
    return points, offsets


def sample_weights(weights, n_rows):
    """`weights` as a checked (n,) float64 array of finite non-negative row weights, or None."""
    if weights is None:
        return None
    try:
        weights = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"sample_weight must be a numeric array: {exc}") from None
    if weights.shape != (n_rows,):
        raise InputError(f"sample_weight must hold one weight per row of X ({n_rows}), has shape {weights.shape}")
    check_weights(weights, "sample_weight")
    return weights


def _agent_ids(agents, n_local):
    try:
        agents = np.asarray(agents, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise InputError("agents must be an array of agent ids") from None
    if agents.shape != (n_local,):
        raise InputError(f"agents must list this rank's {n_local} agents (one per agent_offsets "
                         f"interval), got shape {agents.shape}")
    if (np.diff(agents) <= 0).any():
        raise InputError("a rank's agents must be listed in ascending order")
    return agents


@dataclass
class Outcome:
    """How a run ended (FINISHED, STOPPED or STOPPED_AT_START), this rank's share of its
    result (None when stopped at start) and the global ids of its agents, the attributes
    of its result file, and the files it wrote or would write."""

    status: str
    result: object
    agents: np.ndarray
    attrs: dict
    out: object
    checkpoint: object


def sibling(path, suffix):
    """`path` with its extension replaced by `suffix`: where default outputs go."""
    return os.path.splitext(os.fspath(path))[0] + suffix


def output_paths(options: Options, data, init_file=None):
    """The result and checkpoint paths of a run (None where it writes none), refused
    when one would replace an input or the other output.

    A checkpoint may replace the one it resumes from: that is how a requeued
    job goes on, and every rank has read its share before the first is written.
    """
    out = options.out or (sibling(data, ".result.h5") if data else None)
    inputs = {"the dataset": data, "the --init file": init_file,
              "the --graph edge file": edge_file(options.graph) if isinstance(options.graph, str) else None}
    if out:
        refuse_overwriting("--out", out, {**inputs, "the --resume checkpoint": options.resume})
    checkpoint = options.checkpoint or (sibling(out, ".checkpoint.h5") if data else None)
    if checkpoint:
        refuse_overwriting("--checkpoint", checkpoint, {**inputs, "the result (--out)": out})
    return out, checkpoint


#: What a checkpoint must share with the run resuming it about the data.
DATA_KEYS = ("n_agents", "n_points", "n_features", "weighted")
#: Their values in checkpoints of an nkmpi that did not record them.
UNRECORDED_DATA_ATTRS = {"weighted": False}


def data_attrs(options: Options, info: DatasetInfo, n_ranks: int) -> dict:
    """The run's parameters as stored in its result and checkpoints (known before it runs)."""
    attrs = options.as_attrs(graph_text(options.graph, info.graph))
    if info.path is not None:
        attrs["data"] = os.path.abspath(info.path)
    attrs.update(n_ranks=n_ranks, n_agents=info.n_agents, n_points=info.n_points, n_features=info.n_features,
                 dtype=info.dtype.name, weighted=info.has_weights)
    return attrs


def outcome_attrs(result, seconds):
    return {"iterations": result.iterations, "converged": result.converged, "seconds": seconds}


def check_resumable(path, checkpoint, options, attrs):
    """Refuse a checkpoint made with other settings, or one with nothing left to do."""
    saved = dict(UNRECORDED_DATA_ATTRS, **checkpoint["attrs"])
    keys = resume_keys() + DATA_KEYS
    differ = [f"{key} {saved.get(key)!r} -> {attrs[key]!r}" for key in keys if saved.get(key) != attrs[key]]
    if differ:
        raise InputError(f"--resume {path}: the checkpoint was made with other settings or data: "
                         + "; ".join(differ))
    shape = checkpoint["centers"].shape[1:]
    if len(checkpoint["centers"]) and shape != (options.n_clusters, attrs["n_features"]):
        raise InputError(f"--resume {path}: its centers have shape {shape}, the run needs "
                         f"{(options.n_clusters, attrs['n_features'])}")
    iteration = saved.get("iteration")
    if not isinstance(iteration, int) or iteration < 1 or not isinstance(saved.get("rho_stage"), int):
        raise InputError(f"--resume {path}: the checkpoint holds no valid iteration count")
    if iteration >= options.max_iter:
        raise InputError(f"--resume {path}: the checkpoint is at iteration {iteration}, "
                         f"nothing left to do with --iters {options.max_iter}")


def points_share(points, weights, offsets, agents) -> int:
    """This block's share of the points' fingerprint, which covers their weights too."""
    share = checkpoint_format.block_fingerprint(points, offsets, agents)
    if weights is not None:
        share += checkpoint_format.block_fingerprint(weights[:, None], offsets, agents, checkpoint_format.WEIGHTS_SALT)
    return share


def earlier_points_share(points, weights, offsets, agents) -> int:
    """`points_share` of the earlier kind (checkpoint.earlier_block_fingerprint)."""
    share = checkpoint_format.earlier_block_fingerprint(points, offsets, agents)
    if weights is not None:
        share += checkpoint_format.earlier_block_fingerprint(weights[:, None], offsets, agents)
    return share


def run_graph(comm, options, info, shard):
    """This rank's rows of the run's graph (graph.LocalGraph), checked connected, and what
    builds the whole graph, for the one step that may need it: checking a checkpoint whose
    graph fingerprint is the whole graph's digest of earlier nkmpi versions."""
    from .connectivity import is_connected, one_sided_entry

    def whole_network():
        return agree(comm, network_of, options.graph, info.n_agents, options.seed, info.graph)

    graph, connected = agree(comm, local_graph, options.graph, info.n_agents, shard.agents, options.seed,
                             info.graph)
    if reads_stored_rows(options.graph, info.graph):
        entry = one_sided_entry(comm, graph, shard.owner)
        if entry is not None:
            raise InputError(info.graph.one_sided(*entry), collective=True)
    if not connected and not is_connected(comm, graph, shard.owner):
        raise InputError(not_connected(f"graph {graph_text(options.graph, info.graph)!r}", info.n_agents),
                         collective=True)
    return graph, whole_network


def check_same_data(path, saved, attrs, whole_network, earlier_points, earlier_offsets):
    """Refuse a checkpoint of other points, offsets or edges, even of the same shapes.  A
    checkpoint's fingerprints of the earlier kinds are checked: the offsets' against
    `earlier_offsets()`; where the offsets match, the points' against `earlier_points()`;
    then, where only the graph's still differs, the graph's on the whole graph
    (`whole_network()` builds it; only then).  The three callables are collective."""
    differ = [key for key in checkpoint_format.FINGERPRINTS if saved.get(key) != attrs[key]]

    def of_the_earlier_kind(key, fingerprint):
        """Whether `key` differs only as an earlier kind of fingerprint (None: none saved)."""
        return key in differ and saved.get(key) is not None and saved[key] == fingerprint()
    points, offsets, graph = (checkpoint_format.POINTS_FINGERPRINT, checkpoint_format.OFFSETS_FINGERPRINT,
                              checkpoint_format.GRAPH_FINGERPRINT)
    if of_the_earlier_kind(offsets, earlier_offsets):
        differ.remove(offsets)
    if offsets not in differ and of_the_earlier_kind(points, earlier_points):
        differ.remove(points)
    def earlier_graph():
        network = whole_network()
        return checkpoint_format.earlier_graph_fingerprint(network.indptr, network.indices)
    if differ == [graph] and of_the_earlier_kind(graph, earlier_graph):
        differ = []
    if differ:
        differ = [checkpoint_format.FINGERPRINTS[key] for key in differ]
        raise InputError(f"--resume {path}: the checkpoint was made for other data: "
                         + ", ".join(differ) + " differ")


def rank_statistics(comm, result, shard_bytes, memory_before_load):
    """Per-rank phase times, traffic and memory, gathered at the end for the result's attributes.

    rank_peak_memory_bytes is the peak resident memory above what the rank held
    before it read its rows (interpreter, libraries, compiled kernels).
    """
    peak = peak_resident_bytes()
    counters = {"bytes_sent_per_iteration": result.bytes_sent, "shard_bytes": shard_bytes,
                "peak_memory_bytes": peak - memory_before_load, "peak_resident_bytes": peak}
    mine = [result.seconds[p] for p in LOOP_PHASES] + list(counters.values())
    table = np.array(comm.allgather(mine), dtype=np.float64)
    stats = {f"rank_seconds_{p}": table[:, i] for i, p in enumerate(LOOP_PHASES)}
    stats.update({f"rank_{name}": table[:, len(LOOP_PHASES) + i].astype(np.int64)
                  for i, name in enumerate(counters)})
    return stats


def method_text(options):
    """The algorithm and its parameters, for the first progress line."""
    if options.algorithm == "lloyd":
        return "exact Lloyd (one allreduce per iteration)"
    text = f"NK-means rho={options.rho:g}, alpha={options.alpha:g}"
    if options.inner > 1:
        text += f", {options.inner} center updates per pass"
    if options.rho_schedule is not None:
        text += ", rho schedule " + " -> ".join(f"{r:g}" for r in options.rho_stages())
    return text


def execute(comm, options: Options, source, *, init_file=None, report=None, stream=None,
            stop_requested=None) -> Outcome:
    """Run `options` on the data of `source` (DatasetSource or ArraySource); collective.

    init_file : the file the initial centers were read from, an input no output may replace.
    report : called as report(text, always) on rank 0 with the run's messages (always:
        also in quiet runs); stream : where rank 0's monitor writes progress lines.
    stop_requested : polled for a stop signal; a stopped run writes its checkpoint.
    Thread pools: options.threads for the kernels, BLAS single-threaded.
    """
    from . import kernels
    entered = time.perf_counter()
    with kernels.thread_limits(options.threads):
        limited = time.perf_counter()
        return _Run(comm, options, source, init_file, report, stream, stop_requested, entered, limited).execute()


class _Run:
    """The steps of `execute`, sharing the run's state."""

    def __init__(self, comm, options, source, init_file, report, stream, stop_requested, entered, limited):
        self.comm, self.options, self.source, self.init_file = comm, options, source, init_file
        self.rank = comm.Get_rank()
        self.report = report if report is not None and self.rank == 0 else (lambda text, always=False: None)
        self.stream = stream if self.rank == 0 else None
        self.stop_requested = stop_requested or (lambda: False)
        self.entered = entered
        self.kernel_seconds = limited - entered     # thread_limits loads the BLAS the kernels call

    def load_kernels(self, dtype, init):
        """Load the run's kernels (driver.warm_up) and let the compiler's code go, timed apart
        from the set-up: like the interpreter's start, numba's own start (a third of a second
        on a warm cache, minutes on a cold one) costs every process the same whatever its
        share of the network.  It ends when every rank has them: waiting for a rank still loading
        is part of loading, not of the set-up.  (The graph's few kernels load with the graph.)"""
        from . import driver
        started = time.perf_counter()
        release_compiler_code()         # what importing numba touched: loading touches much of it again
        driver.warm_up(dtype, init, self.comm.Get_size())
        release_compiler_code()         # the loop runs no LLVM: a rank need not keep its code resident
        self.comm.Barrier()
        self.kernel_seconds += time.perf_counter() - started

    def execute(self):
        from mpi4py import MPI

        from . import driver, kernels
        from .consensus import consensus
        comm, rank = self.comm, self.rank
        out, checkpoint = agree(comm, output_paths, self.options, self.source.path, self.init_file)
        run_id = comm.bcast(new_run_id() if rank == 0 else None, root=0)
        shard = self.source.open(comm)
        info = shard.info
        options = agree(comm, self.options.resolve, info.n_points, info.n_agents)
        agree(comm, options.check_data, info.n_features, info.dtype)
        # Outputs and the checkpoint are checked before the kernels load (minutes on a cold cache).
        attrs = data_attrs(options, info, comm.Get_size())
        for path in (out, checkpoint):
            if path:
                agree(comm, check_output if rank == 0 else (lambda *_: None), path, run_id, attrs)
        if (checkpoint or options.resume) and not shard.consecutive:
            raise InputError("checkpoints need the ranks to hold consecutive agents in rank order",
                             collective=True)
        first, stop = shard.agent_start, shard.agent_start + len(shard.agents)
        row_start, row_stop = shard.row_start, shard.row_start + int(shard.offsets[-1])
        resume = None
        if options.resume:
            resume = agree(comm, checkpoint_format.read_checkpoint, options.resume, first, stop,
                           row_start, row_stop)
            agree(comm, check_resumable, options.resume, resume, options, attrs)
        self.load_kernels(info.dtype, options.init)
        graph, whole_network = run_graph(comm, options, info, shard)
        release_freed_memory()
        n_edges = comm.allreduce(len(graph.indices)) // 2
        release_compiler_code()         # what loading the graph's kernels faulted back in
        memory_before_load = resident_bytes()
        points, offsets, agents = shard.load(), shard.offsets, shard.agents
        weights = shard.load_weights()
        if out or checkpoint or resume:
            attrs.update(checkpoint_format.combine_fingerprints(*zip(*comm.allgather((
                points_share(points, weights, offsets, agents),
                checkpoint_format.offsets_share(agents, np.diff(offsets)), graph.fingerprint_share())))))
        if resume:
            def earlier_points():           # collective: every rank reaches it alike
                return checkpoint_format.added_shares(
                    comm.allgather(earlier_points_share(points, weights, offsets, agents)))

            def earlier_offsets():          # collective; every agent's offsets, as such a checkpoint was made
                everyone = comm.allgather((agents, np.diff(offsets)))
                sizes = np.zeros(info.n_agents, dtype=np.int64)
                for ids, counts in everyone:
                    sizes[ids] = counts
                return checkpoint_format.earlier_offsets_fingerprint(np.concatenate([[0], np.cumsum(sizes)]))

            agree(comm, check_same_data, options.resume, resume["attrs"], attrs, whole_network, earlier_points,
                  earlier_offsets)
        if weights is not None:
            agree(comm, check_total_weight, comm.allreduce(weight_sum(weights)))
        samples = comm.allgather(distinct_rows(weighed_rows(points, weights), options.n_clusters))
        agree(comm, check_enough_distinct, samples, options.n_clusters)
        self.report(f"nkmpi: {info.n_agents} agents, {info.n_points} points x {info.n_features} features, "
                    f"K={options.n_clusters}, {method_text(options)}, graph {attrs['graph']} "
                    f"({n_edges} edges), {comm.Get_size()} rank(s)"
                    + (f", resuming at iteration {resume['attrs']['iteration']}" if resume else ""))
        first_iteration = int(resume["attrs"]["iteration"]) if resume else 0
        if comm.allreduce(bool(self.stop_requested()), op=MPI.LOR):     # before the seeding's work
            return self.stopped_at_start(agents, attrs, out, checkpoint)
        started = time.perf_counter()

        def write_checkpoint(snapshot):
            state = dict(attrs, **outcome_attrs(snapshot, time.perf_counter() - started),
                         iteration=snapshot.iterations, rho_stage=snapshot.rho_stage)
            checkpoint_format.write_checkpoint(
                checkpoint, comm, run_id=run_id, n_agents=info.n_agents, n_points=info.n_points,
                agent_start=first, centers=snapshot.centers, initial_centers=snapshot.initial_centers,
                row_start=row_start, labels=snapshot.labels, metrics=snapshot.metrics, attrs=state,
                interrupted=snapshot.interrupted)
            self.report(f"nkmpi: checkpoint after iteration {snapshot.iterations} written to {checkpoint}")

        row_weights = kernels.UNWEIGHTED if weights is None else weights
        # The graph's rows are handed over, no name left for them here: the driver lets them go
        # once its exchange plan holds what the loop needs (8 bytes an edge end).
        handed_over = [graph]
        del graph
        result = driver.run(comm, points, offsets, agents, handed_over.pop(), shard.owner, options, self.stream,
                            resume=resume, checkpoint=write_checkpoint if checkpoint else None,
                            checkpoint_every=options.checkpoint_every, stop_requested=self.stop_requested,
                            weights=row_weights)
        if result.interrupted:
            if result.iterations == first_iteration:
                return self.stopped_at_start(agents, attrs, out, checkpoint)
            write_checkpoint(result)
            self.report(f"nkmpi: stopped by a signal; resume with --resume {checkpoint}", always=True)
            return Outcome(STOPPED, result, agents, attrs, out, checkpoint)
        result.consensus, attrs["consensus_cost"] = consensus(comm, result.centers, info.n_agents, points, offsets,
                                                              row_weights)
        attrs.update(outcome_attrs(result, time.perf_counter() - started))
        attrs.update(rank_statistics(comm, result, points.nbytes, memory_before_load))
        attrs.update(seconds_kernels=self.kernel_seconds,
                     seconds_setup=started - self.entered + result.seconds["initialization"] - self.kernel_seconds,
                     seconds_loop=result.seconds["loop"])
        if resume:
            attrs.update(resumed_from=os.path.abspath(options.resume), resumed_at_iteration=first_iteration)
        if out:
            result_format.write_result(out, comm, run_id=run_id, n_agents=info.n_agents, n_points=info.n_points,
                                       agent_start=first, centers=result.centers,
                                       initial_centers=result.initial_centers, row_start=row_start,
                                       assignments=result.labels, metrics=result.metrics, attrs=attrs,
                                       consensus=result.consensus)
        return Outcome(FINISHED, result, agents, attrs, out, checkpoint)

    def stopped_at_start(self, agents, attrs, out, checkpoint):
        """A stop requested during start-up: nothing to save, the next attempt redoes it."""
        kept = (f"; --resume {self.options.resume} still holds" if self.options.resume
                else "; the next attempt starts afresh")
        self.report(f"nkmpi: stopped by a signal before the first iteration: no checkpoint was needed{kept}",
                    always=True)
        return Outcome(STOPPED_AT_START, None, agents, attrs, out, checkpoint)


def simulate(options: Options, data, *, init_file=None, stream=None) -> Outcome:
    """`nkmpi simulate`: the serial reference (nkmpi.reference) on a whole dataset, its
    result written like a run's."""
    from . import kernels
    from .consensus import consensus
    from .reference import simulate as reference_simulate
    kernels.set_threads(1)      # a serial tool: no thread pool (a process that forks later must not have one)
    out, _ = output_paths(options, data, init_file)
    run_id = new_run_id()
    info, points = read_all(data)
    weights = read_weights(info, info.block(0, info.n_agents))
    options = options.resolve(info.n_points, info.n_agents)
    options.check_data(info.n_features, info.dtype)
    if weights is not None:
        check_total_weight(weight_sum(weights))
    check_enough_distinct([distinct_rows(weighed_rows(points, weights), options.n_clusters)], options.n_clusters)
    network = network_of(options.graph, info.n_agents, options.seed, info.graph)
    attrs = data_attrs(options, info, 1)
    check_output(out, run_id, attrs)
    every_agent = np.arange(info.n_agents)
    attrs.update(checkpoint_format.combine_fingerprints(
        [points_share(points, weights, info.offsets, every_agent)],
        [checkpoint_format.offsets_share(every_agent, info.points_per_agent)],
        [network.rows(every_agent).fingerprint_share()]))
    started = time.perf_counter()
    result = reference_simulate(points, info.offsets, network, options, stream=stream, weights=weights)
    model, attrs["consensus_cost"] = consensus(None, result.centers, info.n_agents, points, info.offsets,
                                               kernels.UNWEIGHTED if weights is None else weights)
    attrs.update(outcome_attrs(result, time.perf_counter() - started), simulated=True)
    result_format.write_result(out, None, run_id=run_id, n_agents=info.n_agents, n_points=info.n_points,
                               agent_start=0, centers=result.centers, initial_centers=result.initial_centers,
                               row_start=0, assignments=result.assignments, metrics=result.metrics,
                               attrs=attrs, consensus=model)
    return Outcome(FINISHED, result, np.arange(info.n_agents), attrs, out, None)


def run_state(path) -> tuple[str, int]:
    """`nkmpi status`: how the run that wrote `path`, its checkpoint or its result, ended
    (INTERRUPTED, PERIODIC or FINISHED) and after how many iterations, from the file's
    attributes alone: job scripts decide on it, since launchers report statuses their own way."""
    attrs = read_attributes(path, {checkpoint_format.FORMAT: (checkpoint_format.VERSION, "checkpoint"),
                                   result_format.FORMAT: (result_format.VERSION, "result")})
    if attrs["format"] == result_format.FORMAT:
        state, iteration = FINISHED, attrs.get("iterations")
    else:
        state = INTERRUPTED if checkpoint_format.interrupted(attrs, path) else PERIODIC
        iteration = attrs.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 1:
        raise InputError(f"{path}: holds no valid iteration count (a damaged file)")
    return state, iteration


def summarize(path, data=None) -> dict:
    """`nkmpi summary`: a result's outcome, and each agent's centers' (and the consensus
    model's) centralized cost over its dataset relative to centralized Lloyd's from the
    same start, weighted as the run was."""
    from .formats.hdf5 import plain
    from .reference import centralized_cost, lloyd
    result = result_format.read_result(path)
    attrs = {key: plain(value) for key, value in result["attrs"].items()}
    data = data or attrs.get("data")
    if not isinstance(data, str):
        raise InputError(f"{path}: holds no dataset path; pass --data")
    info, points = read_all(data)
    weights = read_weights(info, info.block(0, info.n_agents))
    centers, start = result["centers"], result["initial_centers"]
    if centers.shape[2] != points.shape[1] or len(result["assignments"]) != len(points):
        raise InputError(f"{path} does not belong to {data}: {len(result['assignments'])} points "
                         f"x {centers.shape[2]} features against {len(points)} x {points.shape[1]}")
    if not (len(centers) and np.isfinite(centers).all() and np.isfinite(start).all()):
        raise InputError(f"{path}: its centers are missing or not finite (a damaged file)")
    metrics = result["metrics"]
    if not (np.isfinite(metrics["objective"][-1]) and np.isfinite(metrics["edge_disagreement"][-1])
            and isinstance(attrs.get("iterations"), int)):
        raise InputError(f"{path}: its metrics or iteration count are not numbers (a damaged file)")
    lloyd_centers, lloyd_iterations = lloyd(points, start[0], max_iter=10000, weights=weights)
    best = centralized_cost(points, lloyd_centers, weights)
    consensus = result[result_format.CONSENSUS_CENTERS]
    return {"iterations": attrs["iterations"], "converged": attrs.get("converged") is True,
            "objective": metrics["objective"][-1], "disagreement": metrics["edge_disagreement"][-1],
            "lloyd_iterations": lloyd_iterations,
            "cost_ratios": np.array([centralized_cost(points, c, weights) for c in centers]) / best,
            "consensus_cost": attrs.get(result_format.CONSENSUS_COST),
            "consensus_ratio": None if consensus is None else centralized_cost(points, consensus, weights) / best}
