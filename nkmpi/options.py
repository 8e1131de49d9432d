"""The parameters that define an NK-means run, validated in one place."""

import math
from dataclasses import asdict, dataclass, replace
from numbers import Integral, Real

import numpy as np

from .errors import InputError

INIT_METHODS = ("network", "flood", "local")
ALGORITHMS = ("nkmeans", "lloyd")
#: Default fraction of points that may still change cluster when a rho stretch counts as settled.
SETTLED_FRACTION = 1e-3
#: Default coupling: rho = COUPLING x the mean number of points per agent (see Options).
COUPLING = 5.0
#: Default center updates per pass of NK-means (Lloyd makes one).
INNER = 5
#: Default seedings of the merged summary tried by the network-wide seeding.
N_INIT = 10
#: Largest counts accepted (iterations, updates per pass, seedings, clusters): far beyond any
#: run, and small enough that iteration x inner and every stored attribute fit in int64.
MAX_ITERATIONS, MAX_REPEATS, MAX_CLUSTERS = 2**40, 2**20, 2**31 - 1
#: The coupling (rho over the mean points per agent) must lie within these: beyond them one of
#: a center's two pulls, its own points (n / rho) or its neighbours, is lost to rounding.
COUPLING_RANGE = (1e-12, 1e12)
#: At most this many stretches of constant rho in a rho schedule.
MAX_STAGES = 1000


@dataclass(frozen=True)
class Options:
    """Parameters of one NK-means run; together with the data and graph they fix the result.

    n_clusters : K, clusters per agent.
    rho : relaxation parameter (> 0); larger ties agents together more tightly.
        None: `coupling` times the mean number of points per agent, fixed by
        `resolve` once the data are known.
    coupling : rho relative to the mean points per agent (default COUPLING when
        rho is None).  An agent's points in a cluster weigh n / rho against
        its neighbours' centers, so the same coupling ties agents equally
        tightly whatever the data's size.  A given rho wins; once resolved,
        both hold the values in use.
    alpha : step size in (0, 1].
    max_iter : at most this many iterations.
    tol : absolute; the run stops at a monitoring point when no assignment
        changed and no center moved farther than `tol` (in data units).
    init : 'network' (k-means++ over summaries merged across the whole network,
        nkmpi.seeding), 'flood' (one agent's k-means++ spread over the graph),
        'local' (every agent seeds itself), or a (K, p) array shared by all agents.
    n_init : seedings tried on the merged summary with init 'network' (the one of
        lowest summary cost is kept); other inits ignore it.
    seed : seeds k-means++ and random graphs.
    monitor_every : gather metrics every this many iterations (0: only at the end,
        which also disables early stopping).
    link_failure_prob : each undirected link is down at an iteration with this probability.
    dropout_prob : each agent sits out an iteration (keeps its centers) with this probability.
    algorithm : 'nkmeans', or 'lloyd': exact centralized Lloyd over the pooled data
        (every agent holds the same centers; a baseline, with one global reduction
        per iteration).
    inner : center updates per pass over the data (q; default INNER for NK-means,
        1 for Lloyd).  The partition stays fixed
        during them, so the objective still never increases and the fixed points
        are unchanged; each update is one neighbour exchange.
    rho_schedule : None, or (start, factor[, settled]): run at rho = start, and each
        time the partition settles (a monitoring point at which at most a fraction
        `settled`, default 0.001, of the points changed cluster) multiply rho by
        `factor`, up to `rho`.  Only the last stretch, at `rho` itself, ends the
        run (by `tol`).
    """

    n_clusters: int
    rho: object = None
    coupling: object = None
    alpha: float = 0.5
    max_iter: int = 1000
    tol: float = 1e-6
    init: object = "network"
    n_init: int = N_INIT
    seed: int = 0
    monitor_every: int = 10
    link_failure_prob: float = 0.0
    dropout_prob: float = 0.0
    algorithm: str = "nkmeans"
    inner: object = None
    rho_schedule: object = None

    def __post_init__(self):
        def need(ok, what):
            if not ok:
                raise InputError(what)

        def count(value, low, high):
            return isinstance(value, Integral) and not isinstance(value, bool) and low <= value <= high

        need(count(self.n_clusters, 1, MAX_CLUSTERS),
             f"the number of clusters must be an integer in 1..{MAX_CLUSTERS}, got {self.n_clusters!r}")
        def positive(value):
            try:
                return isinstance(value, Real) and 0 < float(value) < np.inf
            except OverflowError:          # an int beyond float64
                return False

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
        if self.rho_schedule is not None:
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
        if self.algorithm == "lloyd":
            need(self.inner == 1 and self.rho_schedule is None,
                 "inner updates and a rho schedule are NK-means options, not Lloyd's")
            need(self.link_failure_prob == 0 and self.dropout_prob == 0,
                 "simulated faults are NK-means options: Lloyd has no links to fail")
            need(not (isinstance(self.init, str) and self.init == "local"),
                 "Lloyd keeps one set of centers: use --init network, flood or file:PATH, not local")
        need(count(self.n_init, 1, MAX_REPEATS),
             f"n-init must be an integer in 1..{MAX_REPEATS}, got {self.n_init!r}")
        if isinstance(self.init, str):
            need(self.init in INIT_METHODS,
                 f"unknown init {self.init!r}: use network, flood, local or file:PATH")

        else:
            try:
                init = np.asarray(self.init, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(f"initial centers must be a numeric (K, p) array, got {self.init!r}") from None
            need(init.ndim == 2 and init.shape[0] == self.n_clusters,
                 f"initial centers must have shape (K={self.n_clusters}, p), got {init.shape}")
            need(bool(np.isfinite(init).all()), "initial centers contain NaN or Inf")
            object.__setattr__(self, "init", init)

    def resolve(self, n_points, n_agents):
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

    def check_data(self, n_features, dtype):
        """The initial centers, when given, must match the data's dimension and lie within
        the coordinates the kernels take for data of `dtype` (io.coordinate_limit)."""
        if isinstance(self.init, str):
            return
        if self.init.shape[1] != n_features:
            raise InputError(f"initial centers have {self.init.shape[1]} features, "
                             f"the data has {n_features}")
        from .io import coordinate_limit
        limit = coordinate_limit(dtype, n_features)
        if not (np.abs(self.init) <= limit).all():
            raise InputError(f"initial centers have a coordinate beyond +-{limit:.3g}, where squared "
                             "distances overflow")

    def is_monitor_point(self, iteration):
        """Metrics are gathered every `monitor_every` iterations and at the last one."""
        return (iteration == self.max_iter
                or (self.monitor_every > 0 and iteration % self.monitor_every == 0))

    def stage_rest(self, stage, n_points):
        """(tol, changed) that end stretch `stage` of a run over n_points points: the
        last stretch must come to rest (no point changed, no center moved more than
        tol); the others end once at most a `settled` fraction of points changed."""
        if stage + 1 >= len(self.rho_stages()):
            return self.tol, 0
        return np.inf, int(self.rho_schedule[2] * n_points)

    def rho_stages(self):
        """The rho of each stretch of the run: start, start*factor, ... below rho, then rho."""
        if self.rho_schedule is None:
            return [float(self.rho)]
        start, factor, _ = self.rho_schedule
        stages = []
        while start < self.rho * (1 - 1e-12):
            stages.append(start)
            start *= factor
        return stages + [float(self.rho)]

    def as_attrs(self):
        """The options as HDF5 attributes (the init array is stored as a dataset)."""
        attrs = asdict(self)
        attrs["init"] = self.init if isinstance(self.init, str) else "array"
        attrs["rho_schedule"] = ("none" if self.rho_schedule is None
                                 else "%r:%r:%r" % self.rho_schedule)
        return attrs
