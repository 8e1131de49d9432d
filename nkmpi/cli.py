"""Command line: `nkmpi run | simulate | info | summary`.

`run` is the MPI program (launched with mpiexec or srun); the others are
serial tools and never initialize MPI.  Bad input is found before the first
iteration, agreed on by all ranks, and reported once by rank 0 as
`nkmpi: error: ...` with exit status 2.  Any other failure on any rank aborts
the whole job, so no rank is left waiting in a collective.
"""

import contextlib
import os
import pickle
import sys
import time
import tokenize
import traceback
from io import StringIO

import numpy as np

from . import __version__, stop
from .errors import InputError, Parser, agree
from .graph import (GRAPH_SPECS, block_placement, build_network, default_spec, edge_file, graph_stats,
                    owners_from_bounds)
from .init import check_enough_distinct, distinct_rows
from .io import FINGERPRINTS
from .monitor import LOOP_PHASES
from .options import (ALGORITHMS, COUPLING, INNER, MAX_ITERATIONS, MAX_REPEATS, N_INIT,
                      SETTLED_FRACTION, Options)
from .seeding import MIN_GROUP

EXIT_INPUT_ERROR = 2
EXIT_CHECKPOINTED = 3
EXIT_FAILURE = 1


def _add_run_options(parser):
    parser.add_argument("data", help="dataset v1 HDF5 file")
    parser.add_argument("-k", "--clusters", type=int, required=True, help="clusters per agent (K)")
    tie = parser.add_mutually_exclusive_group()
    tie.add_argument("--rho", type=float, default=None,
                     help="relaxation parameter: larger ties agents closer, converges slower "
                          "(default: --coupling times the mean points per agent)")
    tie.add_argument("--coupling", type=float, default=None, metavar="C",
                     help=f"rho relative to the data: rho = C x mean points per agent, so that agents "
                          f"are tied alike whatever the data's size (default {COUPLING:g})")
    parser.add_argument("--alpha", type=float, default=0.5, help="step size in (0, 1] (default 0.5)")
    parser.add_argument("--graph", default=None, metavar="SPEC",
                        help="communication graph: " + ", ".join(GRAPH_SPECS)
                        + " (default: the dataset's graph/edges if present, else ring)")
    parser.add_argument("--iters", type=int, default=1000, help="at most this many iterations (default 1000)")
    parser.add_argument("--tol", type=float, default=1e-6,
                        help="stop when no assignment changed and no center moved more than TOL, "
                             "in data units, at a monitoring point (default 1e-6)")
    parser.add_argument("--init", default="network", metavar="network|flood|local|file:PATH",
                        help="network: k-means++ on summaries merged over the whole network (default; "
                             f"only means of groups of at least {MIN_GROUP} points leave an agent); "
                             "flood: one agent's k-means++ spread over the graph; local: every agent "
                             "seeds itself; "
                             "file:PATH: (K, p) centers from .npy or HDF5 'centers'")
    parser.add_argument("--n-init", type=int, default=N_INIT, metavar="R",
                        help="with --init network: R seedings of the merged summary, the one of lowest "
                             f"summary cost kept (nearly free; default {N_INIT})")
    parser.add_argument("--seed", type=int, default=0, help="seed of k-means++ and random graphs (default 0)")
    parser.add_argument("--monitor-every", type=int, default=10, metavar="N",
                        help="gather metrics, print progress and test convergence every N iterations; "
                             "0: only at the end, no early stop (default 10)")
    parser.add_argument("--link-failure-prob", type=float, default=0.0, metavar="Q",
                        help="simulate links that fail: each link is down at an iteration with "
                             "probability Q (default 0)")
    parser.add_argument("--dropout-prob", type=float, default=0.0, metavar="D",
                        help="simulate agents that sit out an iteration with probability D (default 0)")
    parser.add_argument("--algorithm", default="nkmeans", choices=ALGORITHMS,
                        help="nkmeans (default), or lloyd: exact centralized Lloyd over the pooled "
                             "data with one global reduction per iteration, the baseline to compare with")
    parser.add_argument("--inner", type=int, default=None, metavar="Q",
                        help="center updates per pass over the data, each one neighbour exchange; "
                             f"same fixed points, fewer passes (default {INNER}; Lloyd: 1)")
    parser.add_argument("--rho-schedule", default=None, metavar="START[:FACTOR[:SETTLED]]",
                        help="start at rho=START and multiply rho by FACTOR (default 10) each time "
                             "the partition settles (at most a fraction SETTLED, default 0.001, of the "
                             "points changed cluster), up to --rho (default: --rho throughout)")
    parser.add_argument("--out", default=None, metavar="RESULT.h5",
                        help="result file (default: DATA's name with .result.h5)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def make_parser():
    parser = Parser(prog="nkmpi", description="Networked K-means (NK-means) with distributed data.")
    parser.add_argument("--version", action="version", version=f"nkmpi {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = sub.add_parser("run", help="run NK-means under MPI (mpiexec -n R nkmpi run ...)")
    _add_run_options(run)
    run.add_argument("--threads", type=int, default=1,
                     help="compute threads per rank, each taking whole agents (default 1)")
    run.add_argument("--checkpoint", default=None, metavar="PATH",
                     help="checkpoint file (default: OUT's name with .checkpoint.h5); written every "
                          "--checkpoint-every iterations and on SIGTERM or SIGUSR1")
    run.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                     help="write a checkpoint every N iterations (default 0: only on a signal)")
    run.add_argument("--resume", default=None, metavar="PATH",
                     help="continue from this checkpoint (same data and settings; any rank count)")
    simulate = sub.add_parser("simulate", help="run NK-means serially with the reference simulator")
    _add_run_options(simulate)
    info = sub.add_parser("info", help="describe a dataset and a communication graph")
    info.add_argument("data", help="dataset v1 HDF5 file")
    info.add_argument("--graph", default=None, metavar="SPEC", help="graph to describe (default as in run)")
    info.add_argument("--seed", type=int, default=0, help="seed of random graphs (default 0)")
    summary = sub.add_parser("summary", help="summarize a result against centralized Lloyd (serial)")
    summary.add_argument("result", help="result v1 HDF5 file")
    summary.add_argument("--data", default=None, help="its dataset (default: the path stored in the result)")
    return parser


def init_file(spec):
    """The file named by --init file:PATH, else None."""
    return spec[len("file:"):] if spec.startswith("file:") else None


def read_init(spec):
    """The --init value as Options expects it: a method name or a (K, p) array."""
    path = init_file(spec)
    if path is None:
        return spec
    if not os.path.isfile(path):
        raise InputError(f"--init {spec}: no such file")
    try:
        if path.endswith(".npy"):
            centers = np.load(path)
        else:
            import h5py
            with h5py.File(path, "r") as f:
                if not isinstance(f.get("centers"), h5py.Dataset):
                    raise InputError(f"--init {spec}: the HDF5 file has no 'centers' dataset")
                centers = f["centers"][()]
    except InputError:
        raise
    except (OSError, ValueError, TypeError, EOFError, SyntaxError, tokenize.TokenError,
            pickle.UnpicklingError, MemoryError) as exc:       # SyntaxError...: a garbled .npy header
        raise InputError(f"--init {spec}: cannot read: {exc!r}") from None
    if not isinstance(centers, np.ndarray) or centers.dtype.kind not in "iuf":
        raise InputError(f"--init {spec}: expected a numeric (K, p) array, found "
                         f"{getattr(centers, 'dtype', type(centers).__name__)}")
    return centers


def read_rho_schedule(spec):
    """--rho-schedule START[:FACTOR[:SETTLED]] as (start, factor, settled)."""
    if spec is None:
        return None
    defaults = (None, 10.0, SETTLED_FRACTION)
    parts = spec.split(":")
    try:
        if len(parts) > 3:
            raise ValueError
        return tuple(float(p) for p in parts) + defaults[len(parts):]
    except ValueError:
        raise InputError(f"--rho-schedule {spec!r}: expected START[:FACTOR[:SETTLED]], "
                         "for example 1 or 1:10 or 1:10:0.001") from None


def options_from(args):
    if not 1 <= getattr(args, "threads", 1) <= MAX_REPEATS:
        raise InputError(f"--threads must be in 1..{MAX_REPEATS}, got {args.threads}")
    if not 0 <= getattr(args, "checkpoint_every", 0) <= MAX_ITERATIONS:
        raise InputError(f"--checkpoint-every must be in 0..{MAX_ITERATIONS}, got {args.checkpoint_every}")
    return Options(n_clusters=args.clusters, rho=args.rho, coupling=args.coupling, alpha=args.alpha,
                   max_iter=args.iters,
                   tol=args.tol, init=read_init(args.init), n_init=args.n_init, seed=args.seed,
                   monitor_every=args.monitor_every, link_failure_prob=args.link_failure_prob,
                   dropout_prob=args.dropout_prob, algorithm=args.algorithm, inner=args.inner,
                   rho_schedule=read_rho_schedule(args.rho_schedule))


def sibling(path, suffix):
    """`path` with its extension replaced by `suffix`: where default outputs go."""
    return os.path.splitext(path)[0] + suffix


def output_paths(args):
    """The result and checkpoint paths of a run (checkpoint None for `simulate`),
    refused when one would replace an input or the other output.

    A checkpoint may replace the one it resumes from: that is how a requeued
    job goes on, and every rank has read its share before the first is written.
    """
    from . import io
    out = args.out or sibling(args.data, ".result.h5")
    inputs = {"the dataset": args.data, "the --init file": init_file(args.init),
              "the --graph edge file": edge_file(args.graph)}
    io.refuse_overwriting("--out", out, {**inputs, "the --resume checkpoint": getattr(args, "resume", None)})
    if not hasattr(args, "checkpoint"):
        return out, None
    checkpoint = args.checkpoint or sibling(out, ".checkpoint.h5")
    io.refuse_overwriting("--checkpoint", checkpoint, {**inputs, "the result (--out)": out})
    return out, checkpoint


def static_attrs(args, options, info, n_ranks):
    """The run's parameters as stored in its result and checkpoints (known before it runs)."""
    attrs = options.as_attrs()
    attrs.update(data=os.path.abspath(args.data), graph=default_spec(args.graph, info.edges),
                 n_ranks=n_ranks, n_agents=info.n_agents, n_points=info.n_points,
                 n_features=info.n_features)
    return attrs


def outcome_attrs(result, seconds):
    return {"iterations": result.iterations, "converged": result.converged, "seconds": seconds}


def command_run(args, comm, stop_requested=None):
    from threadpoolctl import threadpool_limits

    from . import kernels
    entered = time.perf_counter()
    options = agree(comm, options_from, args)
    kernels.set_threads(args.threads)      # also starts the kernels' OpenMP pool, so it is limited below
    with threadpool_limits(limits={"blas": 1, "openmp": args.threads}):
        return run_rank(args, comm, options, entered, stop_requested)


def run_rank(args, comm, options, entered, stop_requested):
    """The body of `nkmpi run` on one rank, with thread pools set."""
    from mpi4py import MPI

    from . import driver, io, kernels
    rank, size = comm.Get_rank(), comm.Get_size()
    out, checkpoint_path = agree(comm, output_paths, args)
    run_id = comm.bcast(io.new_run_id() if rank == 0 else None, root=0)
    info = agree(comm, io.open_dataset, args.data)
    options = agree(comm, options.resolve, info.n_points, info.n_agents)
    agree(comm, options.check_data, info.n_features, info.dtype)
    network = agree(comm, build_network, args.graph, info.n_agents, options.seed, info.edges)
    attrs = static_attrs(args, options, info, size)
    for path in (out, checkpoint_path):
        agree(comm, io.check_output if rank == 0 else (lambda *_: None), path, run_id, attrs)
    bounds = agree(comm, block_placement, info.points_per_agent, size)
    first, stop = int(bounds[rank]), int(bounds[rank + 1])
    row_start, row_stop = int(info.offsets[first]), int(info.offsets[stop])
    agents = np.arange(first, stop)
    resume = None
    if args.resume:
        resume = agree(comm, io.read_checkpoint, args.resume, first, stop, row_start, row_stop)
        agree(comm, check_resumable, args.resume, resume, options, attrs)
    kernels.warm_up(info.dtype)
    memory_before_load = resident_bytes()
    points = agree(comm, io.read_rows, info, first, stop)
    offsets = info.offsets[first:stop + 1] - info.offsets[first]
    attrs.update(io.combine_fingerprints(
        comm.allgather(io.block_fingerprint(points, offsets, agents)), info.offsets, network))
    if resume:
        agree(comm, check_same_data, args.resume, resume["attrs"], attrs)
    samples = comm.allgather(distinct_rows(points, options.n_clusters))
    agree(comm, check_enough_distinct, samples, options.n_clusters)
    stream = None if args.quiet or rank != 0 else sys.stdout

    def say(text, always=False):
        if rank == 0 and (always or not args.quiet):
            print(text, flush=True)

    say(f"nkmpi: {info.n_agents} agents, {info.n_points} points x {info.n_features} features, "
        f"K={options.n_clusters}, {method_text(options)}, "
        f"graph {default_spec(args.graph, info.edges)} ({len(network.edges)} edges), {size} rank(s)"
        + (f", resuming at iteration {resume['attrs']['iteration']}" if resume else ""))
    first_iteration = int(resume["attrs"]["iteration"]) if resume else 0

    def stopped_before_start():
        """A stop requested during start-up: nothing to save, the next attempt redoes it."""
        kept = f"; --resume {args.resume} still holds" if resume else "; the next attempt starts afresh"
        say(f"nkmpi: stopped by a signal before the first iteration: no checkpoint was needed{kept}",
            always=True)
        return EXIT_CHECKPOINTED

    if comm.allreduce(stop_requested(), op=MPI.LOR):     # before the seeding's work
        return stopped_before_start()

    def write_checkpoint(snapshot):
        state = dict(attrs, **outcome_attrs(snapshot, time.perf_counter() - started),
                     iteration=snapshot.iterations, rho_stage=snapshot.rho_stage)
        io.write_checkpoint(checkpoint_path, comm, run_id=run_id, n_agents=info.n_agents,
                            n_points=info.n_points, agent_start=first, centers=snapshot.centers,
                            initial_centers=snapshot.initial_centers, row_start=row_start,
                            labels=snapshot.labels, metrics=snapshot.metrics, attrs=state)
        say(f"nkmpi: checkpoint after iteration {snapshot.iterations} written to {checkpoint_path}")

    started = time.perf_counter()
    result = driver.run(comm, points, offsets, agents, network, owners_from_bounds(bounds), options,
                        stream, resume=resume, checkpoint=write_checkpoint,
                        checkpoint_every=args.checkpoint_every, stop_requested=stop_requested)
    if result.interrupted:
        if result.iterations == first_iteration:
            return stopped_before_start()
        write_checkpoint(result)
        say(f"nkmpi: stopped by a signal; resume with --resume {checkpoint_path}", always=True)
        return EXIT_CHECKPOINTED
    seconds = time.perf_counter() - started
    attrs.update(outcome_attrs(result, seconds))
    attrs.update(rank_statistics(comm, result, points.nbytes, memory_before_load))
    attrs.update(seconds_setup=started - entered + result.seconds["initialization"],
                 seconds_loop=result.seconds["loop"])
    if resume:
        attrs.update(resumed_from=os.path.abspath(args.resume), resumed_at_iteration=first_iteration)
    io.write_result(out, comm, run_id=run_id, n_agents=info.n_agents, n_points=info.n_points,
                    agent_start=first, centers=result.centers, initial_centers=result.initial_centers,
                    row_start=row_start, assignments=result.labels, metrics=result.metrics,
                    attrs=attrs)
    if rank == 0 and not args.quiet:
        say(final_line(result.metrics, result.iterations, result.converged, seconds, out))
        say(resource_line(attrs, result.iterations))
    return 0


#: What a checkpoint must share with the run that resumes it for the result to be the same.
RESUME_KEYS = ("algorithm", "n_clusters", "rho", "alpha", "tol", "seed", "monitor_every",
               "link_failure_prob", "dropout_prob", "inner", "rho_schedule", "graph", "n_agents",
               "n_points", "n_features")


def check_resumable(path, checkpoint, options, attrs):
    """Refuse a checkpoint made with other settings, or one with nothing left to do."""
    saved = checkpoint["attrs"]
    differ = [f"{key} {saved.get(key)!r} -> {attrs[key]!r}" for key in RESUME_KEYS
              if saved.get(key) != attrs[key]]
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


def check_same_data(path, saved, attrs):
    """Refuse a checkpoint of other points, offsets or edges, even of the same shapes."""
    differ = [what for key, what in FINGERPRINTS.items() if saved.get(key) != attrs[key]]
    if differ:
        raise InputError(f"--resume {path}: the checkpoint was made for other data: "
                         + ", ".join(differ) + " differ")


def resident_bytes():
    """This process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return peak_resident_bytes()


def peak_resident_bytes():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rank_statistics(comm, result, shard_bytes, memory_before_load):
    """Per-rank phase times, traffic and memory, gathered at the end for the result's attributes.

    rank_peak_memory_bytes is the peak resident memory above what the rank held
    before it read its rows (interpreter, libraries, compiled kernels).
    """
    peak = peak_resident_bytes()
    mine = [result.seconds[p] for p in LOOP_PHASES] + [result.bytes_sent, shard_bytes,
                                                  peak - memory_before_load, peak]
    table = np.array(comm.allgather(mine), dtype=np.float64)
    stats = {f"rank_seconds_{p}": table[:, i] for i, p in enumerate(LOOP_PHASES)}
    stats.update(rank_bytes_sent_per_iteration=table[:, 4].astype(np.int64),
                 rank_shard_bytes=table[:, 5].astype(np.int64),
                 rank_peak_memory_bytes=table[:, 6].astype(np.int64),
                 rank_peak_resident_bytes=table[:, 7].astype(np.int64))
    return stats


def resource_line(attrs, iterations):
    per_iteration = {p: 1e3 * attrs[f"rank_seconds_{p}"].max() / iterations for p in LOOP_PHASES}
    mib = 2.0 ** 20
    phases = ", ".join(f"{p} {v:.3g} ms" for p, v in per_iteration.items())
    return (f"nkmpi: set-up {attrs['seconds_setup']:.2f} s; per iteration (slowest rank): {phases}"
            f"; sent {attrs['rank_bytes_sent_per_iteration'].max() / 1024:.3g} KiB per rank; "
            f"peak memory {attrs['rank_peak_memory_bytes'].max() / mib:.1f} MiB per rank "
            f"for a {attrs['rank_shard_bytes'].max() / mib:.1f} MiB shard")


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


def final_line(metrics, iterations, converged, seconds, out):
    state = "converged" if converged else "iteration limit reached"
    return (f"nkmpi: {iterations} iterations ({state}) in {seconds:.2f} s: objective "
            f"{metrics['objective'][-1]:.9e}, disagreement {metrics['edge_disagreement'][-1]:.3e}; "
            f"wrote {out}")


def command_simulate(args):
    from . import io
    from .reference import simulate
    out, _ = output_paths(args)
    run_id = io.new_run_id()
    options = options_from(args)
    info, points = io.read_all(args.data)
    options = options.resolve(info.n_points, info.n_agents)
    options.check_data(info.n_features, info.dtype)
    check_enough_distinct([distinct_rows(points, options.n_clusters)], options.n_clusters)
    network = build_network(args.graph, info.n_agents, options.seed, info.edges)
    attrs = static_attrs(args, options, info, 1)
    io.check_output(out, run_id, attrs)
    attrs.update(io.combine_fingerprints([io.block_fingerprint(points, info.offsets,
                                                               range(info.n_agents))],
                                         info.offsets, network))
    started = time.perf_counter()
    result = simulate(points, info.offsets, network, options, stream=None if args.quiet else sys.stdout)
    seconds = time.perf_counter() - started
    attrs.update(outcome_attrs(result, seconds), simulated=True)
    io.write_result(out, None, run_id=run_id, n_agents=info.n_agents, n_points=info.n_points,
                    agent_start=0, centers=result.centers, initial_centers=result.initial_centers,
                    row_start=0, assignments=result.assignments, metrics=result.metrics, attrs=attrs)
    if not args.quiet:
        print(final_line(result.metrics, result.iterations, result.converged, seconds, out))
    return 0


def command_info(args):
    from . import io
    info = io.open_dataset(args.data)
    per_agent = info.points_per_agent
    print(f"dataset   {info.path}")
    print(f"points    N = {info.n_points}, p = {info.n_features} ({info.dtype})")
    print(f"agents    M = {info.n_agents}; points per agent min {per_agent.min()}, "
          f"median {np.median(per_agent):g}, max {per_agent.max()}; "
          f"{int((per_agent == 0).sum())} without points")
    print(f"labels    {'yes' if info.has_labels else 'no'}")
    print(f"graph     in file: {'%d edges' % len(info.edges) if info.edges is not None else 'no'}")
    spec = default_spec(args.graph, info.edges)
    stats = graph_stats(build_network(spec, info.n_agents, args.seed, info.edges, require_connected=False))
    print(f"graph     {spec}: {stats['edges']} edges, degree {stats['degree_min']}..{stats['degree_max']}, "
          f"diameter {stats['diameter']}, lambda_2 {stats['lambda_2']:.6g}, "
          f"connected {'yes' if stats['connected'] else 'NO: nkmpi run refuses it'}")
    return 0


def command_summary(args):
    from . import io
    from .reference import centralized_cost, lloyd
    result = io.read_result(args.result)
    attrs = {key: io.plain(value) for key, value in result["attrs"].items()}
    data = args.data or attrs.get("data")
    if not isinstance(data, str):
        raise InputError(f"{args.result}: holds no dataset path; pass --data")
    _, points = io.read_all(data)
    centers, start = result["centers"], result["initial_centers"]
    if centers.shape[2] != points.shape[1] or len(result["assignments"]) != len(points):
        raise InputError(f"{args.result} does not belong to {data}: {len(result['assignments'])} points "
                         f"x {centers.shape[2]} features against {len(points)} x {points.shape[1]}")
    if not (len(centers) and np.isfinite(centers).all() and np.isfinite(start).all()):
        raise InputError(f"{args.result}: its centers are missing or not finite (a damaged file)")
    metrics = result["metrics"]
    if not (np.isfinite(metrics["objective"][-1]) and np.isfinite(metrics["edge_disagreement"][-1])
            and isinstance(attrs.get("iterations"), int)):
        raise InputError(f"{args.result}: its metrics or iteration count are not numbers (a damaged file)")
    lloyd_centers, lloyd_iters = lloyd(points, start[0], max_iter=10000)
    best = centralized_cost(points, lloyd_centers)
    costs = np.array([centralized_cost(points, c) for c in centers]) / best
    print(f"result        {args.result}")
    print(f"iterations    {attrs.get('iterations')} "
          f"({'converged' if attrs.get('converged') is True else 'not converged'})")
    print(f"objective     {metrics['objective'][-1]:.9e}")
    print(f"disagreement  {metrics['edge_disagreement'][-1]:.3e} (sum over edges of squared center gaps)")
    print(f"agents' centers, centralized cost / centralized Lloyd from the same start "
          f"({lloyd_iters} iterations): min {costs.min():.6f}, median {np.median(costs):.6f}, "
          f"max {costs.max():.6f}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    serial_command = next((a for a in argv if not a.startswith("-")), None) != "run"
    if serial_command:
        try:
            args = make_parser().parse_args(argv)
            handler = {"simulate": command_simulate, "info": command_info, "summary": command_summary}
            return handler[args.command](args)
        except InputError as exc:
            print(f"nkmpi: error: {exc}", file=sys.stderr)
            return EXIT_INPUT_ERROR
    return main_mpi(argv)


def main_mpi(argv):
    """`nkmpi run`: every rank runs this; failures end every rank."""
    stop.catch_stop_signals()           # again, for callers that did not come through __main__
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        with contextlib.redirect_stdout(sys.stdout if rank == 0 else StringIO()):
            args = agree(comm, make_parser().parse_args, argv)      # --help prints once
        status = command_run(args, comm, stop_requested=stop.requested)
        stop.ignore_stop_signals()
        return status
    except InputError as exc:
        if exc.collective or comm.Get_size() == 1:
            if rank == 0:
                print(f"nkmpi: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_INPUT_ERROR
        print(f"nkmpi: error: {exc} (rank {rank})", file=sys.stderr, flush=True)
        comm.Abort(EXIT_INPUT_ERROR)
    except BaseException as exc:          # a bug or an I/O failure on this rank only
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(f"nkmpi: error: rank {rank} failed: {exc!r}\n{detail}",
              file=sys.stderr, flush=True)
        comm.Abort(EXIT_FAILURE)
