"""Monitoring points: global metrics on rank 0, progress lines, and the stop decision.

At a monitoring point every rank contributes its agents' share of four
metrics (sse and edge disagreement as exact partial sums, changed
assignments, largest center move); rank 0 combines them, rounding each sum
once so that no metric depends on how the agents are split among ranks,
keeps the row, prints a progress line, decides whether the run has reached a
generalized Lloyd minimum, and every rank learns the decision in one
broadcast.  Metrics are for monitoring only: nothing in the iteration
depends on them except that decision (and, under a rho schedule, when to
raise rho, which is the same decision).

The loop's own record, the time each rank spends in each phase, is kept by a
`PhaseTimer`.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, TextIO

import numpy as np

if TYPE_CHECKING:
    from .options import Options

#: The timed phases of one iteration, in order (per-rank totals in the result's attributes):
#: the assignment pass; waiting for the exchange (of neighbours' centers: the part the local
#: pass did not hide; Lloyd: the reduction of cluster totals); the center update; metrics and
#: the stop decision.
LOOP_PHASES = ("local", "exchange", "update", "monitor")

#: The per-monitoring-point series of a result file (group metrics/), in column order: name -> dtype.
METRICS = {"iteration": np.int64, "objective": np.float64, "sse": np.float64,
           "edge_disagreement": np.float64, "changed": np.int64, "max_move": np.float64,
           "rho": np.float64, "seconds": np.float64}


class Monitor:
    """Collects metrics rows on rank 0 (or in a serial run, comm=None)."""

    def __init__(self, options: Options, comm=None, stream: TextIO | None = sys.stdout, earlier: dict | None = None):
        """`earlier`: the metrics dict of the run this one resumes (rank 0's rows go on)."""
        self.options = options
        self.comm = comm
        self.is_root = comm is None or comm.Get_rank() == 0
        self.stream = stream if options.monitor_every > 0 else None
        #: One dict name -> value per monitoring point (METRICS).
        self.rows = []
        self.start = time.perf_counter()
        if earlier is not None and len(earlier["iteration"]) and self.is_root:
            self.rows = [{name: earlier[name][i].item() for name in METRICS}
                         for i in range(len(earlier["iteration"]))]
            self.start -= self.rows[-1]["seconds"]     # seconds go on from where they stopped

    def record(self, iteration: int, sse, disagreement, changed: int, move: float, rho: float,
               rest: tuple[float, int] | None = None) -> bool:
        """Record one monitoring point, with the objective at `rho` (the current one).

        sse, disagreement : this rank's share, as numbers whose exact sum it is
        (kernels.exact_partials, or one number).

        Returns, on every rank, whether the run is at rest: with rest = (tol,
        allowed), at most `allowed` assignments changed and no center moved more
        than `tol` (default (options.tol, 0); never with monitor_every 0).
        """
        tol, allowed = (self.options.tol, 0) if rest is None else rest
        partial = (np.atleast_1d(sse), np.atleast_1d(disagreement), int(changed), float(move))
        parts = [partial] if self.comm is None else self.comm.gather(partial, root=0)
        stop = False
        if self.is_root:
            sse = math.fsum(np.concatenate([p[0] for p in parts]))
            disagreement = math.fsum(np.concatenate([p[1] for p in parts]))
            changed = sum(p[2] for p in parts)
            move = max(p[3] for p in parts)
            row = dict(iteration=iteration, objective=sse + rho * disagreement, sse=sse,
                       edge_disagreement=disagreement, changed=changed, max_move=move, rho=rho,
                       seconds=time.perf_counter() - self.start)
            self.rows.append(row)
            stop = self.options.monitor_every > 0 and changed <= allowed and move <= tol
            if self.stream is not None:
                self.stream.write(format_progress(row, self.options.max_iter) + "\n")
                self.stream.flush()
        if self.comm is not None:
            stop = self.comm.bcast(stop, root=0)
        return stop

    def metrics(self) -> dict:
        """dict name -> 1-D array of the recorded rows (empty arrays off rank 0)."""
        return {name: np.array([row[name] for row in self.rows], dtype=dtype) for name, dtype in METRICS.items()}


def format_progress(row: dict, max_iter: int) -> str:
    """A progress line for one row of metrics (a dict name -> value)."""
    return (f"nkmpi: iter {row['iteration']:>{len(str(max_iter))}}/{max_iter}  "
            f"objective {row['objective']:.9e}  sse {row['sse']:.6e}  "
            f"disagreement {row['edge_disagreement']:.3e}  changed {row['changed']}  "
            f"move {row['max_move']:.3e}  rho {row['rho']:g}  {row['seconds']:.2f} s")


class PhaseTimer:
    """Seconds a rank spends in each phase of its run, charged lap by lap.

    `lap(phase)` charges the time since the previous lap (or `restart`) to the
    phase: an iteration restarts the clock and laps at the end of each phase, so a
    phase entered twice (waiting for an exchange between two updates) adds up, and
    time between iterations (bookkeeping) is charged to none.

    seconds : dict phase -> seconds: LOOP_PHASES, then 'initialization' (set-up up
        to the first iteration), 'checkpoint' (writing checkpoints) and 'loop' (all
        iterations, wall).
    """

    def __init__(self):
        self.seconds = dict.fromkeys(LOOP_PHASES + ("initialization", "checkpoint", "loop"), 0.0)
        self._last = time.perf_counter()

    def restart(self) -> None:
        self._last = time.perf_counter()

    def lap(self, phase: str) -> float:
        """Charge the time since the last lap to `phase`; returns the clock's reading."""
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now
        return now

    def charge_since(self, phase: str, since: float) -> None:
        """Charge the time since the clock read `since` to `phase` (a span of many laps)."""
        self.seconds[phase] += time.perf_counter() - since
