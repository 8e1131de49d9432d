"""NKMeans: the scikit-learn style estimator for a user's own mpi4py program.

Each rank passes the rows of the agents it hosts; `fit` is collective over the
communicator and runs exactly what `nkmpi run` runs (nkmpi.app): the same
options, faults, checkpoints and resume.

    from mpi4py import MPI
    from nkmpi import NKMeans
    model = NKMeans(n_clusters=6, rho=10, graph="ring").fit(X_local, agent_offsets=offsets_local)
    model.cluster_centers_   # (L, K, p): this rank's agents' centers

Its parameters are the options of nkmpi.options under their estimator names
(`seed` is `random_state`, `threads` is `n_threads`), plus `comm`.
What it leaves out: no result file (the fitted attributes are the result) and
no progress lines.  Stop signals (SIGTERM, SIGUSR1) are caught only while a fit
with a `checkpoint` runs: the fit then writes the checkpoint and raises
nkmpi.errors.Stopped, and a new fit with `resume` set to it goes on.
"""

from __future__ import annotations

import inspect

import numpy as np

from .errors import InputError, Stopped, agree
from .options import Options, estimator_fields
from .stop import noting_stop_signals


def _parameters():
    """The estimator's parameters: every option with an estimator name, then comm."""
    specs = estimator_fields()
    first, *rest = specs
    return ([inspect.Parameter(first, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=specs[first].default)]
            + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=specs[name].default)
               for name in rest]
            + [inspect.Parameter("comm", inspect.Parameter.KEYWORD_ONLY, default=None)])


def _parameter_doc():
    return "\n".join(f"    {name} : {spec.metadata['help']}." for name, spec in estimator_fields().items())


class NKMeans:
    """Networked K-means over the agents hosted by the ranks of `comm`.

    Parameters (the options of `nkmpi run`, see docs/usage.md)
    ----------
{parameters}
    comm : mpi4py communicator (default MPI.COMM_WORLD).

    Attributes after fit
    --------------------
    cluster_centers_ : (L, K, p) centers of this rank's agents.
    labels_ : (n,) label of each local row against its agent's final centers.
    n_iter_ : iterations run.  converged_ : bool.
    metrics_ : dict of 1-D arrays (the result file's metrics/), on every rank.
    inertia_ : sum over all agents of the squared distance of each row to its
        nearest own-agent center, at the last monitoring point (weighted).
    consensus_centers_ : (K, p) the network-average centers (nkmpi.consensus), on every rank.
    consensus_cost_ : their cost over all ranks' rows (weighted).
    agents_ : (L,) global ids of this rank's agents.
    """

    def __init__(self, *args, **params):
        bound = _SIGNATURE.bind(*args, **params)
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            setattr(self, name, value)

    def get_params(self, deep=True) -> dict:
        """The parameters, as scikit-learn's clone and grid search expect."""
        return {name: getattr(self, name) for name in _SIGNATURE.parameters}

    def set_params(self, **params) -> NKMeans:
        known = self.get_params()
        for name, value in params.items():
            if name not in known:
                raise ValueError(f"invalid parameter {name!r} for NKMeans: use one of {sorted(known)}")
            setattr(self, name, value)
        return self

    def __repr__(self):
        changed = {name: value for name, value in self.get_params().items()
                   if value is not _SIGNATURE.parameters[name].default}
        return "NKMeans(" + ", ".join(f"{name}={value!r}" for name, value in changed.items()) + ")"

    def _options(self) -> Options:
        values = {spec.name: getattr(self, name) for name, spec in estimator_fields().items()}
        if values["rho"] is not None and values["coupling"] is not None:
            raise InputError("give rho or coupling, not both (rho = coupling x mean points per agent)")
        return Options(**values)

    def fit(self, X, agent_offsets=None, agents=None, sample_weight=None) -> NKMeans:
        """Fit on this rank's rows.

        X : (n, p) rows of this rank's agents, grouped by agent.
        agent_offsets : (L+1,) local row offsets of the agents (default: one agent).
        agents : (L,) ascending global ids of this rank's agents (default: agents
            numbered in rank order).  Checkpoints need consecutive ids in rank order.
        sample_weight : (n,) finite non-negative weight of each row (default: all 1),
            on every rank or on none.
        """
        from mpi4py import MPI

        from . import app
        comm = self.comm if self.comm is not None else MPI.COMM_WORLD
        options = agree(comm, self._options)
        with noting_stop_signals(options.checkpoint is not None) as stop_requested:
            outcome = app.execute(comm, options, app.ArraySource(X, agent_offsets, agents, sample_weight),
                                  stop_requested=stop_requested)
        if outcome.status == app.STOPPED:
            raise Stopped(f"stopped by a signal after iteration {outcome.result.iterations}; "
                          f"checkpoint {outcome.checkpoint} written: fit with resume= it to go on")
        if outcome.status == app.STOPPED_AT_START:
            raise Stopped("stopped by a signal before the first iteration: nothing to save")
        result = outcome.result
        self.cluster_centers_ = result.centers
        self.labels_ = result.labels.astype(np.int64)
        self.n_iter_ = result.iterations
        self.converged_ = result.converged
        self.metrics_ = comm.bcast(result.metrics, root=0)
        self.inertia_ = float(self.metrics_["sse"][-1])
        self.consensus_centers_ = result.consensus
        self.consensus_cost_ = float(outcome.attrs["consensus_cost"])
        self.agents_ = outcome.agents
        return self

    def predict(self, X, agent_offsets=None, model="own") -> np.ndarray:
        """Nearest center of each row (ties to the lowest index), as `nkmpi predict`.

        model : 'own' (rows grouped by this rank's agents as in fit, each against its
            own agent's centers) or 'consensus' (every row against consensus_centers_).
        """
        from . import kernels
        from .app import rows_and_offsets
        X, offsets = rows_and_offsets(X, agent_offsets)
        if X.shape[1] != self.cluster_centers_.shape[2]:
            raise InputError(f"X has {X.shape[1]} features, the model {self.cluster_centers_.shape[2]}")
        if model == "consensus":
            centers = np.broadcast_to(self.consensus_centers_, (len(offsets) - 1,) + self.consensus_centers_.shape)
        elif model == "own":
            if len(offsets) - 1 != len(self.cluster_centers_):
                raise InputError(f"predict needs rows grouped by this rank's {len(self.cluster_centers_)} "
                                 "agents: pass agent_offsets")
            centers = self.cluster_centers_
        else:
            raise InputError(f"model must be 'own' or 'consensus', got {model!r}")
        return kernels.nearest_labels(X, offsets, np.ascontiguousarray(centers)).astype(np.int64)

    def fit_predict(self, X, agent_offsets=None, agents=None, sample_weight=None) -> np.ndarray:
        return self.fit(X, agent_offsets, agents, sample_weight).labels_


_SIGNATURE = inspect.Signature(_parameters())
NKMeans.__signature__ = _SIGNATURE
NKMeans.__init__.__signature__ = _SIGNATURE.replace(
    parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + _parameters())
NKMeans.__doc__ = NKMeans.__doc__.replace("{parameters}", _parameter_doc())
