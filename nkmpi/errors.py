"""Errors the user can fix, and how ranks agree on them.

Bad input must stop every rank at once with one message, before any
iteration runs.  Each rank checks what it holds; `agree` then lets every rank
learn the first failure (in rank order) through one collective, so all ranks
raise the same InputError together instead of some waiting forever.
`agree_on_failure` does the same for any failure in a step that the ranks end
together (writing a shared file), reported by the rank that failed.
"""


import argparse


class InputError(ValueError):
    """Bad input or options: reported as `nkmpi: error: ...` with exit status 2.

    A ValueError, as scikit-learn raises for bad parameters, so that callers
    of the estimator catch what they expect.

    `collective` is True when every rank of the run raises it together (it
    came out of `agree`, or from a value all ranks share), so the ranks may
    simply exit; otherwise the raising rank must abort the job.
    """

    def __init__(self, message, collective=False):
        super().__init__(message)
        self.collective = collective


class Stopped(RuntimeError):
    """A fit stopped by a signal (SIGTERM, SIGUSR1): its checkpoint, if any, is written."""


def agree(comm, check, /, *args, **kwargs):
    """Run `check` on every rank; if it raised InputError anywhere, raise it everywhere.

    `comm` is an mpi4py communicator (or None for a serial caller).  Returns
    what `check` returned on this rank.
    """
    result, message = None, None
    try:
        result = check(*args, **kwargs)
    except InputError as exc:
        message = str(exc)
    if comm is None or comm.Get_size() == 1:
        if message is not None:
            raise InputError(message, collective=True)
        return result
    messages = comm.allgather(message)
    first = next((m for m in messages if m is not None), None)
    if first is not None:
        raise InputError(first, collective=True)
    return result


class RankFailed(RuntimeError):
    """Another rank failed in a step the ranks take together, and reports it: this rank
    only stops (`agree_on_failure`), so that the job ends with that rank's message alone."""


def agree_on_failure(comm, failure):
    """After a step that may fail on some ranks only (writing a rank's slice of a file),
    raise on every rank when it failed on any: the first rank that failed (in rank order)
    raises its own `failure`, the others RankFailed.  So no rank goes on to a collective
    step (closing a file shared through MPI-IO) that a failed rank never reaches.

    `failure` is this rank's exception, or None; `comm` an mpi4py communicator, or None.
    """
    mine = None if failure is None else repr(failure)
    failures = [mine] if comm is None else comm.allgather(mine)
    first = next((rank for rank, text in enumerate(failures) if text is not None), None)
    if first is None:
        return
    if first == (0 if comm is None else comm.Get_rank()):
        raise failure
    raise RankFailed(f"rank {first} failed: {failures[first]}")


class Parser(argparse.ArgumentParser):
    """argparse whose errors are InputErrors: one `nkmpi: error:` line and status 2 from
    every command, and under MPI the ranks agree on them instead of each exiting."""

    def error(self, message):
        raise InputError(f"{message} (see '{self.prog} --help')")
