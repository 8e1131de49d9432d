"""The consensus model of a run: the network-average centers and their cost on all rows.

NK-means ends with M sets of K centers that agree up to the disagreement; a user wants
one model to label new data with, to start another run from, to compare with
centralized k-means.  The consensus model is the plain average of the agents' centers,
center by center, and its cost is that of the pooled data (weighted) against it.

Both are computed as the metrics are, so that neither depends on the ranks: each
coordinate's sum over the agents is kept as exact partials, joined exactly up a
reduction tree (an MPI operation on whole coordinates) and rounded once; the cost adds
each agent's rows in order and the agents' sums exactly.  Collective, once, at the end.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .local_pass import LocalPass

if TYPE_CHECKING:
    from mpi4py import MPI


#: Coordinates reduced in one message: the partials take 49 numbers a coordinate, so that many
#: clusters are reduced in pieces rather than in one buffer 49 times the K x p centers.
COORDINATES_AT_ONCE = 1024


def _merge(inbuf, inoutbuf, datatype):
    """The reduction's operation on whole coordinate rows (`datatype` is one row)."""
    width = 1 + kernels.EXACT_PARTIALS
    other = np.frombuffer(inbuf, dtype=np.float64).reshape(-1, width)
    into = np.frombuffer(inoutbuf, dtype=np.float64).reshape(-1, width)
    kernels.merge_partials(into, other)


def reduce_partials(comm: MPI.Comm, partials: np.ndarray) -> np.ndarray | None:
    """The ranks' `coordinate_partials` joined exactly, on rank 0 (None elsewhere)."""
    from mpi4py import MPI
    row = MPI.DOUBLE.Create_contiguous(partials.shape[1]).Commit()    # never split a coordinate
    operation = MPI.Op.Create(_merge, commute=True)
    try:
        total = np.empty_like(partials) if comm.Get_rank() == 0 else None
        comm.Reduce([partials, len(partials), row], None if total is None else [total, len(partials), row],
                    op=operation, root=0)
    finally:
        operation.Free()
        row.Free()
    return total


def rounded_sums(partials: np.ndarray) -> list[float]:
    """Each coordinate's exact sum (rows of `coordinate_partials`), rounded once."""
    return [math.fsum(coordinate[1:1 + int(coordinate[0])]) for coordinate in partials]


#: Agents whose copies of the model are costed at once: a block's cost takes memory for that
#: many agents' centers and cluster sums, not for all of them.
AGENTS_AT_ONCE = 4096


def agents_cost(model: np.ndarray, points: np.ndarray, offsets: np.ndarray,
                weights: np.ndarray = kernels.UNWEIGHTED) -> np.ndarray:
    """Exact partials of the cost of `model` (K, p) over these agents' rows: each row's
    weight times its squared distance to the nearest center, in the kernels' precision,
    each agent's rows added in order.  The loop's pass (LocalPass, whose labels and sse are
    the exact kernel's bit for bit) computes it, so that a run loads no kernel for it."""
    n_agents = len(offsets) - 1
    sse = np.zeros(n_agents)
    centers = np.broadcast_to(model, (min(n_agents, AGENTS_AT_ONCE),) + model.shape).copy()
    for first in range(0, n_agents, AGENTS_AT_ONCE):
        stop = min(first + AGENTS_AT_ONCE, n_agents)
        start, end = int(offsets[first]), int(offsets[stop])
        block = LocalPass(points[start:end], offsets[first:stop + 1] - start, model.shape[0],
                          weights[start:end] if len(weights) else weights, moves_given=True)
        labels, out = np.full(end - start, -1, dtype=np.int32), kernels.accumulators(stop - first, *model.shape)
        block.run(centers[:stop - first], labels, out)
        block.sse(centers[:stop - first], labels, sse[first:stop])
    return kernels.exact_partials(sse)


def consensus(comm: MPI.Comm | None, centers: np.ndarray, n_agents: int, points: np.ndarray, offsets: np.ndarray,
              weights: np.ndarray = kernels.UNWEIGHTED) -> tuple[np.ndarray, float]:
    """(the network-average centers (K, p), their cost over all rows), on every rank;
    `comm` None: one process holding every agent (`nkmpi simulate`), the same numbers."""
    shape = centers.shape[1:]
    if comm is None:
        model = (np.array(rounded_sums(kernels.coordinate_partials(centers))) / n_agents).reshape(shape)
        return model, math.fsum(agents_cost(model, points, offsets, weights))
    sums, width = [], shape[0] * shape[1]
    for first in range(0, width, COORDINATES_AT_ONCE):
        total = reduce_partials(comm, kernels.coordinate_partials(centers, first, min(first + COORDINATES_AT_ONCE,
                                                                                       width)))
        if total is not None:
            sums += rounded_sums(total)
    model = comm.bcast((np.array(sums) / n_agents).reshape(shape) if sums else None, root=0)
    everyone = comm.gather(agents_cost(model, points, offsets, weights), root=0)
    cost = comm.bcast(None if everyone is None else math.fsum(np.concatenate(everyone)), root=0)
    return model, cost
