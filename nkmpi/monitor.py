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
"""

import math
import sys
import time

import numpy as np

#: The timed phases of one iteration, in order (per-rank totals in the result's attributes).
LOOP_PHASES = ("local", "exchange", "update", "monitor")

#: The per-monitoring-point series of a result file (group metrics/).
METRICS = ("iteration", "objective", "sse", "edge_disagreement", "changed", "max_move", "rho",
           "seconds")


class Monitor:
    """Collects metrics rows on rank 0 (or in a serial run, comm=None)."""

    def __init__(self, options, comm=None, stream=sys.stdout, earlier=None):
        """`earlier`: the metrics dict of the run this one resumes (rank 0's rows go on)."""
        self.options = options
        self.comm = comm
        self.is_root = comm is None or comm.Get_rank() == 0
        self.stream = stream if options.monitor_every > 0 else None
        self.rows = []
        self.start = time.perf_counter()
        if earlier is not None and len(earlier["iteration"]) and self.is_root:
            self.rows = [tuple(earlier[name][i].item() for name in METRICS)
                         for i in range(len(earlier["iteration"]))]
            self.start -= self.rows[-1][-1]           # seconds go on from where they stopped

    def record(self, iteration, sse, disagreement, changed, move, rho, rest=None):
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
            objective = sse + rho * disagreement
            row = (iteration, objective, sse, disagreement, changed, move, rho,
                   time.perf_counter() - self.start)
            self.rows.append(row)
            stop = self.options.monitor_every > 0 and changed <= allowed and move <= tol
            if self.stream is not None:
                self.stream.write(format_progress(row, self.options.max_iter) + "\n")
                self.stream.flush()
        if self.comm is not None:
            stop = self.comm.bcast(stop, root=0)
        return stop

    def metrics(self):
        """dict name -> 1-D array of the recorded rows (empty arrays off rank 0)."""
        columns = list(zip(*self.rows)) if self.rows else [()] * len(METRICS)
        dtypes = (np.int64, float, float, float, np.int64, float, float, float)
        return {name: np.asarray(col, dtype=dt) for name, col, dt in zip(METRICS, columns, dtypes)}


def format_progress(row, max_iter):
    iteration, objective, sse, disagreement, changed, move, rho, seconds = row
    return (f"nkmpi: iter {iteration:>{len(str(max_iter))}}/{max_iter}  objective {objective:.9e}  "
            f"sse {sse:.6e}  disagreement {disagreement:.3e}  changed {changed}  "
            f"move {move:.3e}  rho {rho:g}  {seconds:.2f} s")
