"""The options of an NK-means run: one schema, validated in one place.

Each field of `Options` carries, in its metadata, everything the rest of the
project says about it: its command-line flag and help, its name as an
`NKMeans` parameter, the commands that take it, and its role:

* 'algorithm' options fix the result together with the data and the graph:
  they are stored in every result and checkpoint, and a resumed run must
  share them (`resume_keys`), except those marked resume=False: the iteration
  limit (a resumed run may go further), and what only the seeding or the
  choice of rho uses (a checkpoint holds centers and the resolved rho);
* 'run' options change how a run goes but not its result (stored, not compared);
* 'io' options name files and output (neither stored nor compared).

The command-line parser (`add_arguments`), the estimator's parameters
(`estimator_fields`), the options table of docs/usage.md (`option_table`,
printed by `python -m nkmpi.options`), the resume keys and the result
attributes (`Options.as_attrs`) are all generated from it: a new option is one
new field here.
"""

from __future__ import annotations

import math
import os
import pickle
import tokenize
from dataclasses import asdict, dataclass, field, fields, replace
from numbers import Integral, Real

import numpy as np

from .errors import InputError
from .graph import GRAPH_SPECS
from .init import AGENT_SEEDINGS, INIT_METHODS, NETWORK_SEEDING
from .seeding import MIN_GROUP

ALGORITHMS = ("nkmeans", "lloyd")
#: Default fraction of points that may still change cluster when a rho stretch counts as settled.
SETTLED_FRACTION = 1e-3
#: Default factor between stretches of a rho schedule.
SCHEDULE_FACTOR = 10.0
#: Default coupling: rho = COUPLING x the mean number of points per agent (see Options).
COUPLING = 5.0
#: Default center updates per pass of NK-means (Lloyd makes one).
INNER = 5
#: Largest counts accepted (iterations, updates per pass, seedings, threads, clusters): far
#: beyond any run, and small enough that iteration x inner and every stored attribute fit in int64.
MAX_ITERATIONS, MAX_REPEATS, MAX_CLUSTERS = 2**40, 2**20, 2**31 - 1
#: The coupling (rho over the mean points per agent) must lie within these: beyond them one of
#: a center's two pulls, its own points (n / rho) or its neighbours, is lost to rounding.
COUPLING_RANGE = (1e-12, 1e12)
#: At most this many stretches of constant rho in a rho schedule.
MAX_STAGES = 1000

RUN_AND_SIMULATE = ("run", "simulate")


def init_file(spec):
    """The file named by an init spec file:PATH, else None."""
    return spec[len("file:"):] if isinstance(spec, str) and spec.startswith("file:") else None


def read_init(spec):
    """An --init value as Options takes it: a method name, or the (K, p) array of file:PATH
    (a .npy file, a result's consensus model, or an HDF5 file's (K, p) 'centers')."""
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

            from .formats.result import CONSENSUS_CENTERS
            with h5py.File(path, "r") as f:
                name = CONSENSUS_CENTERS if CONSENSUS_CENTERS in f else "centers"
                if not isinstance(f.get(name), h5py.Dataset):
                    raise InputError(f"--init {spec}: the HDF5 file has no 'centers' dataset")
                centers = f[name][()]
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
    defaults = (None, SCHEDULE_FACTOR, SETTLED_FRACTION)
    parts = spec.split(":")
    try:
        if len(parts) > 3:
            raise ValueError
        return tuple(float(p) for p in parts) + defaults[len(parts):]
    except ValueError:
        raise InputError(f"--rho-schedule {spec!r}: expected START[:FACTOR[:SETTLED]], "
                         "for example 1 or 1:10 or 1:10:0.001") from None


def option(default, help, *, role="algorithm", flag=None, estimator=True, commands=RUN_AND_SIMULATE,
           type=None, parse=None, metavar=None, choices=None, default_text=None, required=False,
           exclusive=None, action=None, resume=True):
    """A field of Options with its schema (see the module docstring).

    flag : the command-line flag(s), '/'-separated (default --NAME with dashes);
    estimator : the NKMeans parameter name (True: the field's name, None: none);
    type, parse : argparse's conversion, then `parse` on the value (files, compound specs);
    default_text : how the default reads in help and docs (default: the value);
    required : the command line must give it (the estimator keeps the default);
    exclusive : a name shared by options that exclude each other;
    resume : for 'algorithm' options, whether a resumed run must share the value.
    """
    return field(default=default, metadata=dict(
        help=help, role=role, flag=flag, estimator=estimator, commands=commands, type=type, parse=parse,
        metavar=metavar, choices=choices, default_text=default_text, required=required,
        exclusive=exclusive, action=action, resume=resume and role == "algorithm"))


@dataclass(frozen=True)
class Options:
    """Parameters of one NK-means run; together with the data and graph they fix the result.

    Each field's help is in its schema below (`option_table` lists them);
    `resolve` fixes rho, and the coupling it amounts to, once the data are known.
    """

    n_clusters: int = option(
        8, "clusters per agent (K)", flag="-k/--clusters", type=int, metavar="K", required=True)
    rho: object = option(
        None, "relaxation parameter: larger ties agents closer, converges slower",
        type=float, exclusive="tie", default_text="--coupling x mean points per agent")
    coupling: object = option(
        None, "rho relative to the data: rho = C x mean points per agent, so that agents are tied "
        "alike whatever the data's size (an agent's points in a cluster weigh n / rho against its "
        "neighbours' centers); give rho or coupling, not both",
        type=float, metavar="C", exclusive="tie", default_text=f"{COUPLING:g}", resume=False)
    alpha: float = option(0.5, "step size in (0, 1]; the objective never increases for any such alpha", type=float)
    max_iter: int = option(1000, "at most this many iterations", flag="--iters", type=int, metavar="N",
                           resume=False)
    tol: float = option(
        1e-6, "stop at a monitoring point when no assignment changed and no center moved more than "
        "TOL, in data units", type=float)
    init: object = option(
        "network", "; ".join(f"{name}: {text}" for name, text in INIT_METHODS.items())
        + "; file:PATH: (K, p) centers from a .npy file, a result's consensus model or an HDF5 file's "
        f"'centers' (the estimator takes the array). With network, only means of groups of at least {MIN_GROUP} "
        "points leave an agent",
        metavar="|".join(INIT_METHODS) + "|file:PATH", parse=read_init, resume=False)
    n_init: int = option(
        10, "with init network: seedings of the merged summary tried, the one of lowest summary cost "
        "kept (nearly free)", type=int, metavar="R", resume=False)
    seed: int = option(0, "seed of k-means++ and random graphs", estimator="random_state", type=int)
    monitor_every: int = option(
        10, "gather metrics, print progress and test convergence every N iterations; 0: only at the "
        "end, no early stop", type=int, metavar="N")
    link_failure_prob: float = option(
        0.0, "simulated faults: each link is down at an iteration with probability Q", type=float,
        metavar="Q")
    dropout_prob: float = option(
        0.0, "simulated faults: each agent sits out an iteration (keeps its centers) with "
        "probability D", type=float, metavar="D")
    algorithm: str = option(
        "nkmeans", "nkmeans, or lloyd: exact centralized Lloyd over the pooled data with one global "
        "reduction per iteration, the baseline to compare with", choices=ALGORITHMS)
    inner: object = option(
        None, "center updates per pass over the data, each one neighbour exchange; same fixed "
        "points, fewer passes", type=int, metavar="Q", default_text=f"{INNER}; Lloyd: 1")
    rho_schedule: object = option(
        None, f"start at rho=START and multiply rho by FACTOR (default {SCHEDULE_FACTOR:g}) each time "
        f"the partition settles (at most a fraction SETTLED, default {SETTLED_FRACTION:g}, of the "
        "points changed cluster), up to rho (the estimator takes a tuple)",
        metavar="START[:FACTOR[:SETTLED]]", parse=read_rho_schedule, default_text="rho throughout")
    graph: object = option(
        None, "communication graph: " + ", ".join(GRAPH_SPECS) + " (the estimator also takes a "
        "networkx graph or an (E, 2) edge array)", metavar="SPEC",
        default_text="the dataset's graph if it has one, else ring")
    threads: int = option(
        1, "compute threads per rank, each taking whole agents", role="run", estimator="n_threads",
        commands=("run",), type=int)
    checkpoint_every: int = option(
        0, "write a checkpoint every N iterations (0: only on SIGTERM or SIGUSR1)", role="run",
        commands=("run",), type=int, metavar="N")
    checkpoint: object = option(
        None, "checkpoint file, written every checkpoint-every iterations and on SIGTERM or SIGUSR1",
        role="io", commands=("run",), metavar="PATH",
        default_text="the result's name with .checkpoint.h5 (estimator: none)")
    resume: object = option(
        None, "continue from this checkpoint (same data and settings; any rank count)", role="io",
        commands=("run",), metavar="PATH")
    out: object = option(
        None, "result file", role="io", estimator=None, metavar="RESULT.h5",
        default_text="DATA's name with .result.h5")
    quiet: bool = option(False, "no progress lines", role="io", estimator=None, action="store_true")

    def __post_init__(self):
        def need(ok, what):
            if not ok:
                raise InputError(what)

        def count(value, low, high):
            return isinstance(value, Integral) and not isinstance(value, bool) and low <= value <= high

        def positive(value):
            try:
                return isinstance(value, Real) and 0 < float(value) < np.inf
            except OverflowError:          # an int beyond float64
                return False

        need(count(self.n_clusters, 1, MAX_CLUSTERS),
             f"the number of clusters must be an integer in 1..{MAX_CLUSTERS}, got {self.n_clusters!r}")
        need(self.rho is None or positive(self.rho), f"rho must be a positive finite number, got {self.rho!r}")
        need(self.coupling is None or positive(self.coupling),
             f"coupling must be a positive finite number, got {self.coupling!r}")
        need(isinstance(self.alpha, Real) and 0 < self.alpha <= 1,
             f"alpha must be in (0, 1], got {self.alpha!r}")
        need(count(self.max_iter, 1, MAX_ITERATIONS),
             f"the iteration count must be an integer in 1..{MAX_ITERATIONS}, got {self.max_iter!r}")
        need(isinstance(self.tol, Real) and self.tol >= 0,
             f"tol must be >= 0, got {self.tol!r}")
        need(count(self.seed, 0, 2**63 - 1),
             f"the seed must be an integer in 0..2**63-1, got {self.seed!r}")
        need(count(self.monitor_every, 0, MAX_ITERATIONS),
             f"monitor-every must be an integer in 0..{MAX_ITERATIONS}, got {self.monitor_every!r}")
        for name in ("link_failure_prob", "dropout_prob"):
            value = getattr(self, name)
            need(isinstance(value, Real) and 0 <= value < 1,
                 f"{name.replace('_', '-')} must be in [0, 1), got {value!r}")
        need(self.algorithm in ALGORITHMS,
             f"unknown algorithm {self.algorithm!r}: use {' or '.join(ALGORITHMS)}")
        if self.inner is None:
            object.__setattr__(self, "inner", 1 if self.algorithm == "lloyd" else INNER)
        need(count(self.inner, 1, MAX_REPEATS),
             f"inner updates per pass must be an integer in 1..{MAX_REPEATS}, got {self.inner!r}")
        need(count(self.threads, 1, MAX_REPEATS),
             f"threads must be an integer in 1..{MAX_REPEATS}, got {self.threads!r}")
        need(count(self.checkpoint_every, 0, MAX_ITERATIONS),
             f"checkpoint-every must be an integer in 0..{MAX_ITERATIONS}, got {self.checkpoint_every!r}")
        for name in ("checkpoint", "resume", "out"):
            value = getattr(self, name)
            need(value is None or (isinstance(value, (str, os.PathLike)) and os.fspath(value)),
                 f"{name} must be a file path, got {value!r}")
        if self.rho_schedule is not None:
            self._check_schedule(need)
        if self.algorithm == "lloyd":
            need(self.inner == 1 and self.rho_schedule is None,
                 "inner updates and a rho schedule are NK-means options, not Lloyd's")
            need(self.link_failure_prob == 0 and self.dropout_prob == 0,
                 "simulated faults are NK-means options: Lloyd has no links to fail")
            shared = [NETWORK_SEEDING] + [name for name, how in AGENT_SEEDINGS.items() if how.only_first]
            need(not isinstance(self.init, str) or self.init not in AGENT_SEEDINGS or self.init in shared,
                 f"Lloyd keeps one set of centers: use --init {', '.join(shared)} or file:PATH, "
                 f"not {self.init}")
        need(count(self.n_init, 1, MAX_REPEATS),
             f"n-init must be an integer in 1..{MAX_REPEATS}, got {self.n_init!r}")
        if isinstance(self.init, str):
            need(self.init in INIT_METHODS,
                 f"unknown init {self.init!r}: use {', '.join(INIT_METHODS)} or file:PATH")
        else:
            try:
                init = np.asarray(self.init, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(f"initial centers must be a numeric (K, p) array, got {self.init!r}") from None
            need(init.ndim == 2 and init.shape[0] == self.n_clusters,
                 f"initial centers must have shape (K={self.n_clusters}, p), got {init.shape}")
            need(bool(np.isfinite(init).all()), "initial centers contain NaN or Inf")
            object.__setattr__(self, "init", init)

    def _check_schedule(self, need):
        try:
            values = tuple(float(v) for v in self.rho_schedule)
        except (TypeError, ValueError):
            values = ()
        need(len(values) in (2, 3),
             f"the rho schedule is (start, factor[, settled]), got {self.rho_schedule!r}")
        start, factor, settled = (values + (SETTLED_FRACTION,))[:3]
        need(np.isfinite(start) and 0 < start and (self.rho is None or start <= self.rho),
             f"the rho schedule must start at a positive rho <= rho={self.rho}, got {start!r}")
        need(np.isfinite(factor) and factor > 1,
             f"the rho schedule's factor must be > 1, got {factor!r}")
        need(np.isfinite(settled) and 0 <= settled < 1,
             f"the rho schedule's settled fraction must be in [0, 1), got {settled!r}")
        need(self.monitor_every > 0,
             "a rho schedule moves on when the partition settles, which is tested at "
             "monitoring points: monitor-every must be > 0")
        object.__setattr__(self, "rho_schedule", (start, factor, settled))

    @classmethod
    def from_args(cls, args) -> Options:
        """The options of a parsed command line (see `add_arguments`), files read."""
        given = {}
        for spec in fields(cls):
            if hasattr(args, spec.name):
                parse = spec.metadata["parse"]
                value = getattr(args, spec.name)
                given[spec.name] = parse(value) if parse else value
        return cls(**given)

    def resolve(self, n_points: int, n_agents: int) -> Options:
        """These options with rho (and the coupling it amounts to) fixed for data of
        n_points rows over n_agents agents."""
        per_agent = max(n_points, 1) / n_agents
        if self.rho is None:
            coupling = COUPLING if self.coupling is None else self.coupling
            resolved = replace(self, rho=float(coupling * per_agent), coupling=float(coupling))
        else:
            resolved = replace(self, coupling=float(self.rho / per_agent))
        low, high = COUPLING_RANGE
        for what, rho in [("rho", resolved.rho)] + ([("the rho schedule's start", self.rho_schedule[0])]
                                                     if self.rho_schedule else []):
            if not low <= rho / per_agent <= high:
                raise InputError(f"{what} = {rho:g} is coupling {rho / per_agent:g} x the {per_agent:g} "
                                 f"mean points per agent; the coupling must be within [{low:g}, {high:g}]: "
                                 "beyond, a center's pull to its own points or to its neighbours is lost "
                                 "to rounding")
        if self.rho_schedule:
            start, factor, _ = self.rho_schedule
            if math.log(resolved.rho / start) / math.log(factor) > MAX_STAGES:
                raise InputError(f"the rho schedule {start:g}:{factor!r} needs more than {MAX_STAGES} "
                                 f"stretches to reach rho = {resolved.rho:g}: raise its factor")
        return resolved

    def check_data(self, n_features: int, dtype) -> None:
        """The initial centers, when given, must match the data's dimension and lie within
        the coordinates the kernels take for data of `dtype` (formats.dataset.coordinate_limit)."""
        if isinstance(self.init, str):
            return
        if self.init.shape[1] != n_features:
            raise InputError(f"initial centers have {self.init.shape[1]} features, "
                             f"the data has {n_features}")
        from .formats.dataset import coordinate_limit
        limit = coordinate_limit(dtype, n_features)
        if not (np.abs(self.init) <= limit).all():
            raise InputError(f"initial centers have a coordinate beyond +-{limit:.3g}, where squared "
                             "distances overflow")

    def is_monitor_point(self, iteration: int) -> bool:
        """Metrics are gathered every `monitor_every` iterations and at the last one."""
        return (iteration == self.max_iter
                or (self.monitor_every > 0 and iteration % self.monitor_every == 0))

    def stage_rest(self, stage: int, n_points: int):
        """(tol, changed) that end stretch `stage` of a run over n_points points: the
        last stretch must come to rest (no point changed, no center moved more than
        tol); the others end once at most a `settled` fraction of points changed."""
        if stage + 1 >= len(self.rho_stages()):
            return self.tol, 0
        return np.inf, int(self.rho_schedule[2] * n_points)

    def rho_stages(self) -> list:
        """The rho of each stretch of the run: start, start*factor, ... below rho, then rho."""
        if self.rho_schedule is None:
            return [float(self.rho)]
        start, factor, _ = self.rho_schedule
        stages = []
        while start < self.rho * (1 - 1e-12):
            stages.append(start)
            start *= factor
        return stages + [float(self.rho)]

    def as_attrs(self, graph: str) -> dict:
        """The options a result or checkpoint stores, as HDF5 attributes: every
        'algorithm' and 'run' option, with `graph` the spec in use (the init
        array itself is stored by the caller)."""
        values = asdict(self)
        attrs = {spec.name: values[spec.name] for spec in fields(self) if spec.metadata["role"] != "io"}
        attrs["init"] = self.init if isinstance(self.init, str) else "array"
        attrs["rho_schedule"] = ("none" if self.rho_schedule is None
                                 else "%r:%r:%r" % self.rho_schedule)
        attrs["graph"] = graph
        return attrs


def resume_keys() -> tuple:
    """The stored options a checkpoint must share with the run that resumes it."""
    return tuple(spec.name for spec in fields(Options) if spec.metadata["resume"])


def estimator_fields() -> dict:
    """{NKMeans parameter name: Options field} for every option the estimator takes."""
    return {(spec.name if spec.metadata["estimator"] is True else spec.metadata["estimator"]): spec
            for spec in fields(Options) if spec.metadata["estimator"]}


def _flags(spec):
    return (spec.metadata["flag"] or "--" + spec.name.replace("_", "-")).split("/")


def _default_text(spec):
    text = spec.metadata["default_text"]
    if text is None and spec.default is not None and spec.metadata["action"] is None:
        text = f"{spec.default:g}" if isinstance(spec.default, float) else str(spec.default)
    return text


def add_arguments(parser, command: str) -> None:
    """Add the flags of every option `command` ('run' or 'simulate') takes to an argparse parser."""
    groups = {}
    for spec in fields(Options):
        meta = spec.metadata
        if command not in meta["commands"]:
            continue
        target = parser
        if meta["exclusive"]:
            if meta["exclusive"] not in groups:
                groups[meta["exclusive"]] = parser.add_mutually_exclusive_group()
            target = groups[meta["exclusive"]]
        default = None if meta["required"] else _default_text(spec)
        help_text = meta["help"] + ("" if default is None else f" (default {default})")
        kwargs = dict(dest=spec.name, help=help_text.replace("%", "%%"))
        if meta["action"]:
            kwargs.update(action=meta["action"])
        else:
            kwargs.update(default=None if meta["required"] else spec.default, required=meta["required"],
                          metavar=meta["metavar"], type=meta["type"], choices=meta["choices"])
        target.add_argument(*_flags(spec), **kwargs)


def option_table() -> str:
    """The Markdown table of `nkmpi run`'s options, for docs/usage.md."""
    lines = ["| flag | NKMeans parameter | default | meaning |", "|---|---|---|---|"]
    for spec in fields(Options):
        meta = spec.metadata
        flag = " / ".join(f"`{f}`" for f in _flags(spec))
        if meta["metavar"]:
            flag += f" {meta['metavar']}"
        name = spec.name if meta["estimator"] is True else meta["estimator"]
        default = "required" if meta["required"] else (_default_text(spec) or "-")
        if meta["required"]:
            default += f" (NKMeans: {spec.default})"
        only = "" if meta["commands"] == RUN_AND_SIMULATE else " (`nkmpi run` only)"
        cells = [flag, f"`{name}`" if name else "-", default, meta["help"] + only]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


TABLE_BEGIN = "<!-- BEGIN options table: generated by python -m nkmpi.options; do not edit by hand -->"
TABLE_END = "<!-- END options table -->"


def update_table(path) -> None:
    """Replace the options table between TABLE_BEGIN and TABLE_END in the Markdown file `path`."""
    with open(path) as f:
        text = f.read()
    head, rest = text.split(TABLE_BEGIN + "\n", 1)
    _, tail = rest.split(TABLE_END, 1)
    with open(path, "w") as f:
        f.write(head + TABLE_BEGIN + "\n" + option_table() + TABLE_END + tail)


if __name__ == "__main__":
    import sys
    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        update_table(sys.argv[2])
    else:
        print(option_table(), end="")
