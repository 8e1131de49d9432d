"""Simulated faults: links that fail and agents that sit out, decided without talking.

Whether the link between agents a and b is up at update t, or whether agent m
takes part in update t, is a pure function of (seed, ids, t): a counter-based
random number (SplitMix64 finalizer over the key).  Both ends of a link reach
the same verdict with no message, and the outcome is the same for any number
of ranks and in the serial reference.

A `FaultModel` holds what the verdicts depend on besides the ids and the
update: one record of parameters, which the compiled draws below read by name.
The center update kernel and the serial reference ask only `enabled`,
`link_up` and `takes_part`, so a new kind of fault is a new field of
`FaultModel.FIELDS` (named after the option that sets it) and its use here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_LINK, _DROPOUT = 0x4C494E4B, 0x44524F50


class FaultModel:
    """The simulated faults of a run.

    params : (1,) read-only record of FIELDS, as the kernels take it (a record array
        passes into compiled code far faster than a Python object or a named tuple,
        and the center update runs at every exchange).
    """

    #: The parameters, each named after the option (options.Options) that sets it; 0 is no fault.
    #: seed keys the draws; each undirected link is down at an update with probability
    #: link_failure_prob; each agent sits out an update (keeps its centers) with probability
    #: dropout_prob.
    FIELDS = np.dtype([("seed", np.int64), ("link_failure_prob", np.float64), ("dropout_prob", np.float64)])

    def __init__(self, **values: float):
        """values : parameters by name (FIELDS); those not given are 0: no such fault."""
        params = np.zeros(1, dtype=self.FIELDS)
        for name, value in values.items():
            params[name] = value
        params.flags.writeable = False          # one array type for every model: one compilation
        self.params = params

    @classmethod
    def from_options(cls, options) -> FaultModel:
        """The faults an options.Options asks for."""
        return cls(**{name: getattr(options, name) for name in cls.FIELDS.names})


#: No fault at all: every link up, every agent taking part.
NO_FAULTS = FaultModel()


@njit(cache=True, nogil=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def uniform(seed: int, a: int, b: int, iteration: int, salt: int) -> float:
    """A uniform number in [0, 1) determined by its key alone."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    z = np.uint64(salt)
    for part in (seed, a, b, iteration):
        z = _mix(z + golden + np.uint64(part))
    return (z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def enabled(params: np.ndarray) -> bool:
    """Does the model (FaultModel.params) simulate any fault?  When not, callers may skip the
    draws (and need no ids)."""
    return params[0].link_failure_prob > 0.0 or params[0].dropout_prob > 0.0


@njit(cache=True, nogil=True)
def link_up(params: np.ndarray, a: int, b: int, update: int) -> bool:
    """Is the undirected link a-b up at this update, under the model (FaultModel.params)?"""
    model = params[0]
    if model.link_failure_prob == 0.0:
        return True
    return uniform(model.seed, min(a, b), max(a, b), update, _LINK) >= model.link_failure_prob


@njit(cache=True, nogil=True)
def takes_part(params: np.ndarray, agent: int, update: int) -> bool:
    """Does the agent update its centers at this update, under the model (FaultModel.params)?"""
    model = params[0]
    if model.dropout_prob == 0.0:
        return True
    return uniform(model.seed, agent, agent, update, _DROPOUT) >= model.dropout_prob
