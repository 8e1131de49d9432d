"""NKMeans: the scikit-learn style estimator for a user's own mpi4py program.

Each rank passes the rows of the agents it hosts and the agent graph (the
same on every rank); `fit` is collective over the communicator.

    from mpi4py import MPI
    from nkmpi import NKMeans
    model = NKMeans(n_clusters=6, rho=10).fit(X_local, agent_offsets=offsets_local,
                                              graph="ring")
    model.cluster_centers_   # (L, K, p): this rank's agents' centers
"""

from numbers import Integral

import numpy as np

from .errors import InputError, agree
from .graph import Network, build_network, require_connected_graph
from .io import check_rows
from .options import N_INIT, Options


class NKMeans:
    """Networked K-means over the agents hosted by the ranks of `comm`.

    Parameters
    ----------
    n_clusters : int, K.
    rho : float, relaxation parameter (> 0); default: `coupling` x mean points per agent.
    coupling : float, rho relative to the mean points per agent (default 5; give
        rho or coupling, not both).
    alpha : float, step size in (0, 1].
    max_iter : int, at most this many iterations.
    tol : float, absolute center-move tolerance for stopping (data units).
    init : 'network' (k-means++ over summaries merged across the network),
        'flood', 'local' or a (K, p) array.
    n_init : int, seedings of the merged summary tried with init 'network'.
    random_state : int, seeds k-means++ and random graph specs.
    monitor_every : int, gather metrics and test convergence every this many
        iterations (0: only at the end, no early stop).
    algorithm : 'nkmeans', or 'lloyd' (exact centralized Lloyd, the baseline).
    inner : center updates per pass over the data (same fixed points, fewer passes;
        default 5 for NK-means, 1 for Lloyd).
    rho_schedule : None or (start, factor[, settled]): raise rho from `start` by
        `factor` each time the partition settles, up to `rho` (see Options).
    n_threads : compute threads of this rank (default 1: one per rank under MPI).
    comm : mpi4py communicator (default MPI.COMM_WORLD).

    Attributes after fit
    --------------------
    cluster_centers_ : (L, K, p) centers of this rank's agents.
    labels_ : (n,) label of each local row against its agent's final centers.
    n_iter_ : iterations run.  converged_ : bool.
    metrics_ : dict of 1-D arrays (the result file's metrics/), on every rank.
    inertia_ : sum over all agents of the squared distance of each row to its
        nearest own-agent center, at the last monitoring point.
    agents_ : (L,) global ids of this rank's agents.
    """

    def __init__(self, n_clusters=8, *, rho=None, coupling=None, alpha=0.5, max_iter=1000, tol=1e-6,
                 init="network", n_init=N_INIT, random_state=0, monitor_every=10, algorithm="nkmeans",
                 inner=None, rho_schedule=None, n_threads=1, comm=None):
        self.n_clusters = n_clusters
        self.rho = rho
        self.coupling = coupling
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.monitor_every = monitor_every
        self.algorithm = algorithm
        self.inner = inner
        self.rho_schedule = rho_schedule
        self.n_threads = n_threads
        self.comm = comm

    def _options(self):
        if self.rho is not None and self.coupling is not None:
            raise InputError("give rho or coupling, not both (rho = coupling x mean points per agent)")
        return Options(n_clusters=self.n_clusters, rho=self.rho, coupling=self.coupling,
                       alpha=self.alpha, max_iter=self.max_iter, tol=self.tol, init=self.init,
                       n_init=self.n_init, seed=self.random_state, monitor_every=self.monitor_every,
                       algorithm=self.algorithm, inner=self.inner, rho_schedule=self.rho_schedule)

    def fit(self, X, agent_offsets=None, graph="ring", agents=None):
        """Fit on this rank's rows.

        X : (n, p) rows of this rank's agents, grouped by agent.
        agent_offsets : (L+1,) local row offsets of the agents (default: one agent).
        graph : networkx graph, (E, 2) edge array or graph spec string, over
            global agent ids; the same on every rank.
        agents : (L,) ascending global ids of this rank's agents (default: agents
            numbered in rank order).
        """
        from mpi4py import MPI

        from . import driver, kernels
        comm = self.comm if self.comm is not None else MPI.COMM_WORLD
        options = agree(comm, self._options)
        if not (isinstance(self.n_threads, Integral) and self.n_threads >= 1):
            raise InputError(f"n_threads must be a positive integer, got {self.n_threads!r}")
        kernels.set_threads(self.n_threads)
        X, offsets = agree(comm, _rows_and_offsets, X, agent_offsets)
        agree(comm, options.check_data, X.shape[1], X.dtype)
        n_local = len(offsets) - 1
        if agents is None:
            counts = comm.allgather(n_local)
            first = sum(counts[:comm.Get_rank()])
            agents = np.arange(first, first + n_local)
        agents = np.asarray(agents, dtype=np.int64)
        all_agents = comm.allgather(agents)
        features = set(comm.allgather(X.shape[1]))
        owner_list = np.concatenate([np.full(len(a), r) for r, a in enumerate(all_agents)])
        ids = np.concatenate(all_agents)
        n_agents = len(ids)

        def check_agents():
            if agents.shape != (n_local,):
                raise InputError(f"agents must list this rank's {n_local} agents (one per agent_offsets "
                                 f"interval), got shape {agents.shape}")
            if not np.array_equal(np.sort(ids), np.arange(n_agents)):
                raise InputError("the ranks' agents must together be 0..M-1, each on one rank")
            if (np.diff(agents) <= 0).any():
                raise InputError("a rank's agents must be listed in ascending order")
            if len(features) != 1:
                raise InputError(f"ranks disagree on the number of features: {sorted(features)}")

        agree(comm, check_agents)
        owner = np.empty(n_agents, dtype=np.int64)
        owner[ids] = owner_list
        network = agree(comm, _network, graph, n_agents, options.seed)
        result = driver.run(comm, X, offsets, agents, network, owner, options, stream=None)
        self.cluster_centers_ = result.centers
        self.labels_ = result.labels.astype(np.int64)
        self.n_iter_ = result.iterations
        self.converged_ = result.converged
        self.metrics_ = comm.bcast(result.metrics, root=0)
        self.inertia_ = float(self.metrics_["sse"][-1])
        self.agents_ = agents
        return self

    def predict(self, X, agent_offsets=None):
        """Nearest center of each row among its own agent's centers (rows grouped as in fit)."""
        from . import kernels
        X, offsets = _rows_and_offsets(X, agent_offsets)
        if X.shape[1] != self.cluster_centers_.shape[2]:
            raise InputError(f"X has {X.shape[1]} features, the model {self.cluster_centers_.shape[2]}")
        if len(offsets) - 1 != len(self.cluster_centers_):
            raise InputError(f"predict needs rows grouped by this rank's {len(self.cluster_centers_)} "
                             "agents: pass agent_offsets")
        return kernels.nearest_labels(X, offsets, self.cluster_centers_).astype(np.int64)

    def fit_predict(self, X, agent_offsets=None, graph="ring", agents=None):
        return self.fit(X, agent_offsets, graph, agents).labels_


def _rows_and_offsets(X, agent_offsets):
    """X as a C-contiguous float32/float64 (n, p) array of checked rows, and the agents'
    row offsets (default: one agent), or InputError (a ValueError)."""
    try:
        X = np.ascontiguousarray(X)
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        offsets = np.array([0, len(X)] if agent_offsets is None else agent_offsets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"X and agent_offsets must be numeric arrays: {exc}") from None
    if X.ndim != 2 or X.shape[1] < 1:
        raise InputError(f"X must be 2-D (n, p) with p >= 1, has shape {X.shape}")
    if (offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != len(X)
            or (np.diff(offsets) < 0).any()):
        raise InputError("agent_offsets must start at 0, not decrease and end at len(X)")
    check_rows(X, "X")
    return X, offsets


def _network(graph, n_agents, seed):
    if isinstance(graph, str) or graph is None:
        return build_network(graph, n_agents, seed)
    if hasattr(graph, "edges") and callable(graph.edges):
        graph = np.array(list(graph.edges()), dtype=np.int64)
    network = Network.from_edges(n_agents, graph)
    require_connected_graph(network, "the agent graph")
    return network
