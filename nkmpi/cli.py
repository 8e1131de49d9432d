"""Command line: `nkmpi run | predict | simulate | info | summary | status`; parsing and
printing only (runs are nkmpi.app's, predictions nkmpi.predict's, the flags come from the
schema in nkmpi.options).

`run` and `predict` are MPI programs (launched with mpiexec or srun, or alone on one
rank); the others are serial tools and never initialize MPI.  Bad input is found before the first
iteration, agreed on by all ranks, and reported once by rank 0 as
`nkmpi: error: ...` with exit status 2.  Any other failure on any rank aborts
the whole job, so no rank is left waiting in a collective.
"""

import contextlib
import sys
import time
import traceback
from io import StringIO

import numpy as np

from . import __version__, stop
from .errors import InputError, Parser, RankFailed, agree
from .graph import build_network, default_spec, graph_stats
from .monitor import LOOP_PHASES
from .options import Options, add_arguments, init_file

#: The commands that run under MPI; the others never initialize it.
MPI_COMMANDS = ("run", "predict")
EXIT_INPUT_ERROR = 2
EXIT_CHECKPOINTED = 3
EXIT_FAILURE = 1
#: Seconds a rank that stops because another failed (RankFailed) leaves that rank to report
#: and abort the job before it aborts it itself: its own end could cut that message short.
ABORT_GRACE = 30
#: Seconds a rank that reports a failure leaves its launcher to pass the message on before it
#: aborts the job: the abort kills the launcher's forwarding too, and on a loaded node it
#: did before the message was out (an empty stderr, one CI run in dozens).
REPORT_GRACE = 3


def state_status():
    """`nkmpi status`'s exit status for each answer: 0 only for a checkpoint a stopped run goes
    on from, so that `if nkmpi status CHECKPOINT` asks just that; none is 1 (a crash), 2 (bad
    input) or 3 (`nkmpi run` stopped).  nkmpi.app is imported only here and when a command
    runs, so that importing the command line loads nothing heavy."""
    from .app import FINISHED, INTERRUPTED, PERIODIC
    return {INTERRUPTED: 0, PERIODIC: 4, FINISHED: 5}


def make_parser():
    parser = Parser(prog="nkmpi", description="Networked K-means (NK-means) with distributed data.")
    parser.add_argument("--version", action="version", version=f"nkmpi {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command, text in (("run", "run NK-means under MPI (mpiexec -n R nkmpi run ...)"),
                          ("simulate", "run NK-means serially with the reference simulator")):
        parser_of = sub.add_parser(command, help=text)
        parser_of.add_argument("data", help="dataset v1 HDF5 file")
        add_arguments(parser_of, command)
    info = sub.add_parser("info", help="describe a dataset and a communication graph")
    info.add_argument("data", help="dataset v1 HDF5 file")
    info.add_argument("--graph", default=None, metavar="SPEC", help="graph to describe (default as in run)")
    info.add_argument("--seed", type=int, default=0, help="seed of random graphs (default 0)")
    summary = sub.add_parser("summary", help="summarize a result against centralized Lloyd (serial)")
    summary.add_argument("result", help="result v1 HDF5 file")
    summary.add_argument("--data", default=None, help="its dataset (default: the path stored in the result)")
    answers = ", ".join(f"{code} {state}" for state, code in state_status().items())
    status = sub.add_parser("status", help="how the run that wrote a checkpoint or result ended (for job scripts)",
                            description="Print how the run that wrote FILE ended and after how many iterations, "
                            f"as STATE ITERATION, and exit with the state's status: {answers}; 2 when FILE is "
                            "not a readable checkpoint or result.")
    status.add_argument("file", metavar="FILE", help="a checkpoint or result HDF5 file")
    predict = sub.add_parser("predict", help="label a dataset's rows with a run's model (mpiexec -n R nkmpi "
                             "predict ...)")
    predict.add_argument("result", help="result v1 HDF5 file of a finished run")
    predict.add_argument("data", help="dataset v1 HDF5 file whose rows to label (the run's features and dtype)")
    predict.add_argument("--model", default="consensus", metavar="consensus|own|AGENT",
                         help="the network-average centers (default), each row's own agent's centers (data with "
                         "the run's agents: its own rows get its assignments), or agent AGENT's centers")
    predict.add_argument("--out", default=None, metavar="LABELS.h5",
                         help="labels file (default: DATA's name with .labels.h5)")
    predict.add_argument("--quiet", action="store_true", help="no closing line")
    return parser


def command_run(args, comm, stop_requested=None):
    """`nkmpi run` on one rank: the run itself is nkmpi.app's; here its messages and status."""
    from . import app
    rank = comm.Get_rank()
    options = agree(comm, Options.from_args, args)

    def report(text, always=False):
        if always or not options.quiet:
            print(text, flush=True)

    outcome = app.execute(comm, options, app.DatasetSource(args.data), init_file=init_file(args.init),
                          report=report, stream=None if options.quiet else sys.stdout,
                          stop_requested=stop_requested)
    if outcome.status != app.FINISHED:
        return EXIT_CHECKPOINTED
    if rank == 0 and not options.quiet:
        result = outcome.result
        report(final_line(result.metrics, result.iterations, result.converged, outcome.attrs["seconds"],
                          outcome.out))
        report(resource_line(outcome.attrs, result.iterations))
    return 0


def resource_line(attrs, iterations):
    per_iteration = {p: 1e3 * attrs[f"rank_seconds_{p}"].max() / iterations for p in LOOP_PHASES}
    mib = 2.0 ** 20
    phases = ", ".join(f"{p} {v:.3g} ms" for p, v in per_iteration.items())
    return (f"nkmpi: kernels loaded in {attrs['seconds_kernels']:.2f} s, set-up {attrs['seconds_setup']:.2f} s; "
            f"per iteration (slowest rank): {phases}"
            f"; sent {attrs['rank_bytes_sent_per_iteration'].max() / 1024:.3g} KiB per rank; "
            f"peak memory {attrs['rank_peak_memory_bytes'].max() / mib:.1f} MiB per rank "
            f"for a {attrs['rank_shard_bytes'].max() / mib:.1f} MiB shard")


def final_line(metrics, iterations, converged, seconds, out):
    state = "converged" if converged else "iteration limit reached"
    return (f"nkmpi: {iterations} iterations ({state}) in {seconds:.2f} s: objective "
            f"{metrics['objective'][-1]:.9e}, disagreement {metrics['edge_disagreement'][-1]:.3e}; "
            f"wrote {out}")


def command_predict(args, comm):
    """`nkmpi predict` on one rank: labels written by every rank; rank 0 says where."""
    from .predict import predict
    predict(comm, args.result, args.data, args.out, args.model,
            report=None if args.quiet else (lambda text: print(text, flush=True)))
    return 0


def command_simulate(args):
    from . import app
    options = Options.from_args(args)
    outcome = app.simulate(options, args.data, init_file=init_file(args.init),
                           stream=None if options.quiet else sys.stdout)
    if not options.quiet:
        result = outcome.result
        print(final_line(result.metrics, result.iterations, result.converged, outcome.attrs["seconds"],
                         outcome.out))
    return 0


def command_info(args):
    from .formats.dataset import open_dataset
    info = open_dataset(args.data)
    per_agent = info.points_per_agent
    print(f"dataset   {info.path}")
    print(f"points    N = {info.n_points}, p = {info.n_features} ({info.dtype})")
    print(f"agents    M = {info.n_agents}; points per agent min {per_agent.min()}, "
          f"median {np.median(per_agent):g}, max {per_agent.max()}; "
          f"{int((per_agent == 0).sum())} without points")
    print(f"labels    {'yes' if info.has_labels else 'no'}")
    print(f"weights   {'yes' if info.has_weights else 'no (every row weighs 1)'}")
    stored = info.graph
    print(f"graph     in file: {'no' if stored is None else '%d edges, %s' % (stored.n_edges, 'an edge list' if stored.edges is not None else 'CSR')}")
    spec = default_spec(args.graph, stored)
    stats = graph_stats(build_network(spec, info.n_agents, args.seed, stored, require_connected=False))
    print(f"graph     {spec}: {stats['edges']} edges, degree {stats['degree_min']}..{stats['degree_max']}, "
          f"diameter {stats['diameter']}, lambda_2 {stats['lambda_2']:.6g}, "
          f"connected {'yes' if stats['connected'] else 'NO: nkmpi run refuses it'}")
    return 0


def command_summary(args):
    from . import app
    summary = app.summarize(args.result, args.data)
    costs = summary["cost_ratios"]
    print(f"result        {args.result}")
    print(f"iterations    {summary['iterations']} "
          f"({'converged' if summary['converged'] else 'not converged'})")
    print(f"objective     {summary['objective']:.9e}")
    print(f"disagreement  {summary['disagreement']:.3e} (sum over edges of squared center gaps)")
    print(f"agents' centers, centralized cost / centralized Lloyd from the same start "
          f"({summary['lloyd_iterations']} iterations): min {costs.min():.6f}, median {np.median(costs):.6f}, "
          f"max {costs.max():.6f}")
    if summary["consensus_ratio"] is not None:
        print(f"consensus     the network-average centers: cost {summary['consensus_cost']:.9e}, "
              f"{summary['consensus_ratio']:.6f} of centralized Lloyd's")
    return 0


def command_status(args):
    from .app import run_state
    state, iteration = run_state(args.file)
    print(state, iteration)
    return state_status()[state]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    serial_command = next((a for a in argv if not a.startswith("-")), None) not in MPI_COMMANDS
    if serial_command:
        try:
            args = make_parser().parse_args(argv)
            handler = {"simulate": command_simulate, "info": command_info, "summary": command_summary,
                       "status": command_status}
            return handler[args.command](args)
        except InputError as exc:
            print(f"nkmpi: error: {exc}", file=sys.stderr)
            return EXIT_INPUT_ERROR
    return main_mpi(argv)


def main_mpi(argv):
    """`nkmpi run` and `nkmpi predict`: every rank runs this; failures end every rank."""
    if next((a for a in argv if not a.startswith("-")), None) == "run":
        stop.catch_stop_signals()       # again, for callers that did not come through __main__
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        with contextlib.redirect_stdout(sys.stdout if rank == 0 else StringIO()):
            args = agree(comm, make_parser().parse_args, argv)      # --help prints once
        if args.command == "predict":
            status = command_predict(args, comm)
        else:
            status = command_run(args, comm, stop_requested=stop.requested)
        stop.ignore_stop_signals()
        return status
    except InputError as exc:
        if exc.collective or comm.Get_size() == 1:
            if rank == 0:
                print(f"nkmpi: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_INPUT_ERROR
        print(f"nkmpi: error: {exc} (rank {rank})", file=sys.stderr, flush=True)
        time.sleep(REPORT_GRACE)
        comm.Abort(EXIT_INPUT_ERROR)
    except RankFailed:                    # another rank failed; it reports and aborts
        time.sleep(ABORT_GRACE)
        comm.Abort(EXIT_FAILURE)
    except BaseException as exc:          # a bug or an I/O failure on this rank only
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(f"nkmpi: error: rank {rank} failed: {exc!r}\n{detail}",
              file=sys.stderr, flush=True)
        time.sleep(REPORT_GRACE)
        comm.Abort(EXIT_FAILURE)
