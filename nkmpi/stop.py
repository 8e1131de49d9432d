"""Stop requests: SIGTERM and SIGUSR1, what SLURM sends before a time limit or preemption.

`nkmpi run` catches them from its first instant (nkmpi/__main__.py installs
the handlers before numpy, numba or MPI load), so a stop that arrives during
start-up is never fatal: the run ends with status 3 and the job script
requeues it.  The handlers only take note; the iteration loop polls
`requested()` and the ranks agree on when to stop.
"""

import signal

#: The signals that ask a run to stop (and checkpoint, once it has iterated).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_received = []


def catch_stop_signals():
    """Note stop signals instead of dying by them (call as early as possible)."""
    for number in STOP_SIGNALS:
        signal.signal(number, lambda number, frame: _received.append(number))


def ignore_stop_signals():
    """Ignore further stop signals once a run's outcome is settled: Python puts the
    default handlers (death by the signal) back while it shuts down, and a repeated
    signal then would turn a clean status 3 or 0 into a kill."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def requested():
    """Whether a stop signal has arrived since `catch_stop_signals`."""
    return bool(_received)
