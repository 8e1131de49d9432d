"""Simulated faults: links that fail and agents that sit out, decided without talking.

Whether the link between agents a and b is up at iteration t, or whether
agent m takes part in iteration t, is a pure function of (seed, ids,
iteration): a counter-based random number (SplitMix64 finalizer over the
key).  Both ends of a link reach the same verdict with no message, and the
outcome is the same for any number of ranks and in the serial reference.
"""

import numpy as np
from numba import njit

_LINK, _DROPOUT = 0x4C494E4B, 0x44524F50


@njit(cache=True, nogil=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def uniform(seed, a, b, iteration, salt):
    """A uniform number in [0, 1) determined by its key alone."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    z = np.uint64(salt)
    for part in (seed, a, b, iteration):
        z = _mix(z + golden + np.uint64(part))
    return (z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def link_up(seed, a, b, iteration, failure_prob):
    """Is the undirected link a-b up at this iteration?"""
    if failure_prob == 0.0:
        return True
    return uniform(seed, min(a, b), max(a, b), iteration, _LINK) >= failure_prob


@njit(cache=True, nogil=True)
def takes_part(seed, agent, iteration, dropout_prob):
    """Does the agent update its centers at this iteration?"""
    if dropout_prob == 0.0:
        return True
    return uniform(seed, agent, agent, iteration, _DROPOUT) >= dropout_prob
