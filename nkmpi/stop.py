"""Stop requests: SIGTERM and SIGUSR1, what SLURM sends before a time limit or preemption.

`nkmpi run` catches them from its first instant (nkmpi/__main__.py installs
the handlers before numpy, numba or MPI load), so a stop that arrives during
start-up is never fatal: the run ends with status 3 and the job script
requeues it.  The handlers only take note; the iteration loop polls
`requested()` and the ranks agree on when to stop (`StopAgreement`).

Imported before anything heavy: this module needs only the standard library.
"""

from __future__ import annotations

import contextlib
import math
import signal
from collections.abc import Callable, Iterator

#: The signals that ask a run to stop (and checkpoint, once it has iterated).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received = []


def catch_stop_signals() -> None:
    """Note stop signals instead of dying by them (call as early as possible)."""
    for number in STOP_SIGNALS:
        signal.signal(number, lambda number, frame: _received.append(number))


def ignore_stop_signals() -> None:
    """Ignore further stop signals once a run's outcome is settled: Python puts the
    default handlers (death by the signal) back while it shuts down, and a repeated
    signal then would turn a clean status 3 or 0 into a kill."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def requested() -> bool:
    """Whether a stop signal has arrived since `catch_stop_signals`."""
    return bool(_received)


@contextlib.contextmanager
def noting_stop_signals(active: bool = True) -> Iterator[Callable[[], bool]]:
    """For a library call inside someone else's program (NKMeans.fit with a checkpoint):
    note the stop signals while the body runs, put the program's own handlers back
    after, and yield the poll.  Inactive, or off the main thread (where Python allows
    no handlers), the signals stay the program's and the poll says no."""
    received = []
    previous = {}
    if active:
        try:
            for number in STOP_SIGNALS:
                previous[number] = signal.signal(number, lambda number, frame: received.append(number))
        except ValueError:          # not the main thread
            pass
    try:
        yield lambda: bool(received)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _never() -> bool:
    return False


class StopAgreement:
    """After a stop request on any rank, the iteration after which every rank stops.

    A rank that sees a request (`requested()`, polled once per iteration) at iteration t
    proposes to stop after iteration t + hops, where hops is how many iterations a
    number takes to reach every rank: the rank graph's diameter when ranks tell only
    their neighbour ranks (the control row of each neighbour message), 0 when a global
    reduction carries it.  Every rank keeps the earliest proposal it has heard of, so
    all stop after the same iteration, with no collective of its own in the loop.
    """

    def __init__(self, requested: Callable[[], bool] | None = None, hops: int = 0):
        self.requested = requested or _never
        self.hops = hops
        #: The iteration after which to stop (inf: none agreed on yet): what a rank tells the others.
        self.deadline = math.inf

    def poll(self, iteration: int) -> None:
        """Propose a deadline if a stop has been requested here and none is known."""
        if self.deadline == math.inf and self.requested():
            self.deadline = iteration + self.hops

    def hear(self, deadline: float) -> None:
        """Take another rank's proposal (the earliest wins)."""
        if deadline < self.deadline:
            self.deadline = deadline

    def due(self, iteration: int) -> bool:
        """Whether to stop after this iteration."""
        return iteration >= self.deadline

    def requested_anywhere(self, comm) -> bool:
        """Whether a stop was requested on any rank (one collective over `comm`): before the
        first iteration, where a run stopped during its set-up ends with nothing to save."""
        return comm.allreduce(int(bool(self.requested()))) > 0
