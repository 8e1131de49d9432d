"""How centers travel between ranks: the neighbour exchange of NK-means (the
only neighbour-MPI code of nkmpi), the global reduction of Lloyd's baseline,
and the spanning-tree messages of the network-wide seeding.

The neighbour exchange runs a halo.HaloPlan over a distributed-graph
communicator that joins the ranks hosting neighbouring agents.  It owns the
centers: the block's centers are the first rows of an array `ext` whose
remaining rows receive the ghosts, so the kernels index one array and nothing
is copied.  Two such arrays alternate: an update writes the new centers into
the spare one, and `swap` makes them current.  Every message ends with a
control row carrying one number, through which the ranks agree on when to stop
(stop.StopAgreement).

MPI 3 libraries (Open MPI 4, many site MPIs) and mpi4py 3 lack the persistent
neighbourhood collective of MPI 4; there the exchange starts the non-blocking
one afresh each time, on the same buffers, with the same results.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from .halo import HaloPlan
from .kernels import pack_rows, written_zeros

if TYPE_CHECKING:
    from .tree import LocalTree


@functools.cache
def persistent_neighbour_collectives() -> bool:
    """Whether mpi4py and the MPI library offer MPI 4's persistent neighbourhood
    collectives: mpi4py 3 has no Neighbor_alltoallv_init, and over an MPI 3 library
    mpi4py 4's raises NotImplementedError.  Tried once per process, on an empty
    graph of this rank alone, so that no exchange needs to handle the failure."""
    if not hasattr(MPI.Distgraphcomm, "Neighbor_alltoallv_init"):
        return False
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([], [], reorder=False)
    nothing = [np.empty(0), [], [], MPI.DOUBLE]
    try:
        graph.Neighbor_alltoallv_init(nothing, nothing).Free()
        return True
    except NotImplementedError:
        return False
    finally:
        graph.Free()


class RestartedNeighbourCollective:
    """MPI 3's stand-in for a persistent Neighbor_alltoallv: Start begins the
    non-blocking Ineighbor_alltoallv on the same buffers each time.  It offers the
    persistent request's Start, Wait and Free, so the exchange runs either alike."""

    def __init__(self, graph_comm: MPI.Distgraphcomm, send: list, receive: list):
        self._begin = functools.partial(graph_comm.Ineighbor_alltoallv, send, receive)
        self._request = MPI.REQUEST_NULL

    def Start(self) -> None:
        self._request = self._begin()

    def Wait(self) -> None:
        self._request.Wait()

    def Free(self) -> None:
        """Nothing to release: each started request ends in its Wait."""


class NeighbourExchange:
    """Run the center exchange of one rank's halo plan: start, then wait.

    Each exchange is one persistent neighbourhood collective (MPI 4's
    Neighbor_alltoallv_init) per `ext` array, set up once: every iteration only
    starts and waits.  Without it (MPI 3), each start begins a non-blocking
    Ineighbor_alltoallv on the same buffers instead (RestartedNeighbourCollective).

    Parameters
    ----------
    comm : the communicator of the run.
    plan : this rank's halo.HaloPlan (it also gives the kernels their indices).
    shape : (K, p) of one agent's centers.
    persistent : whether to use the persistent collective; by default wherever
        mpi4py and the MPI library offer it (persistent_neighbour_collectives).
        Every rank of a run must choose alike.

    Attributes
    ----------
    centers : (L, K, p) the block's current centers (rows 0..L-1 of `ext`).
    spare : (L, K, p) where the next centers are written before `swap`.
    persistent : whether the exchange uses the persistent collective.
    """

    def __init__(self, comm: MPI.Comm, plan: HaloPlan, shape: tuple[int, int],
                 persistent: bool | None = None):
        self.plan = plan
        self.persistent = persistent_neighbour_collectives() if persistent is None else persistent
        shape = tuple(shape)
        # Written now (set-up), not on first use: the first iteration should not pay the page faults.
        self._ext = [written_zeros((plan.n_ext,) + shape) for _ in range(2)]
        self._send = written_zeros((len(plan.send_index),) + shape)
        self.graph_comm = comm.Create_dist_graph_adjacent(plan.ranks.tolist(), plan.ranks.tolist(),
                                                          reorder=False)

        def doubles(rows):              # the plan counts rows of centers, MPI counts doubles
            return (rows * int(np.prod(shape))).tolist()

        send = [self._send, doubles(plan.send_counts), doubles(plan.send_displs), MPI.DOUBLE]
        collective = self.graph_comm.Neighbor_alltoallv_init if self.persistent else \
            functools.partial(RestartedNeighbourCollective, self.graph_comm)
        self._requests = [collective(
            send, [ext[plan.n_local:], doubles(plan.recv_counts), doubles(plan.recv_displs), MPI.DOUBLE])
            for ext in self._ext]
        self._current = 0

    @property
    def ext(self) -> np.ndarray:
        """The block's centers, then the ghosts of the last exchange."""
        return self._ext[self._current]

    @property
    def centers(self) -> np.ndarray:
        return self._ext[self._current][:self.plan.n_local]

    @property
    def spare(self) -> np.ndarray:
        return self._ext[1 - self._current][:self.plan.n_local]

    def swap(self) -> None:
        """Make the spare centers current (the ghosts are stale until the next exchange)."""
        self._current = 1 - self._current

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sends per exchange."""
        return self._send.nbytes

    def start(self, control: float = math.inf) -> None:
        """Begin sending the block's centers, and `control` in every message's control row
        (non-blocking); the local pass may run meanwhile."""
        pack_rows(self.centers, self.plan.send_index, control, self._send)
        self._requests[self._current].Start()

    def finish(self) -> float:
        """Wait for the ghosts (now in `ext`); returns the smallest control value received
        (inf when no message came)."""
        self._requests[self._current].Wait()
        rows = self.plan.control_rows
        return float(self.ext[rows, 0, 0].min()) if len(rows) else math.inf

    def exchange(self, control: float = math.inf) -> float:
        """A blocking exchange: `start`, then `finish`."""
        self.start(control)
        return self.finish()

    def free(self) -> None:
        for request in self._requests:
            request.Free()
        self.graph_comm.Free()


class ClusterTotals:
    """Lloyd's baseline: one fused Allreduce per iteration of the K x p cluster
    sums, the K counts, the changed labels and a stop request.

    Every rank then holds the pooled totals and computes the same means; a stop
    (a signal on any rank) reaches every rank in the same iteration.
    """

    def __init__(self, comm: MPI.Comm, shape: tuple[int, int]):
        self.comm = comm
        self.shape = tuple(shape)
        n_clusters, n_features = self.shape
        self.buffer = np.empty(n_clusters * n_features + n_clusters + 2)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank contributes per iteration."""
        return self.buffer.nbytes

    def allreduce(self, sums: np.ndarray, counts: np.ndarray, changed: int,
                  stop: bool) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """Sum (K, p) sums, (K,) counts and changed over ranks; whether any rank stops.

        Returns the pooled (sums, counts, changed, stop) on every rank.
        """
        n_clusters, n_features = self.shape
        width = n_clusters * n_features
        buffer = self.buffer
        buffer[:width] = sums.reshape(-1)
        buffer[width:width + n_clusters] = counts
        buffer[-2:] = changed, float(stop)
        self.comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        return (buffer[:width].reshape(self.shape), buffer[width:width + n_clusters],
                int(buffer[-2]), bool(buffer[-1] > 0))


class TreeChannel:
    """Point-to-point messages along the cross-rank edges of the seeding's spanning
    tree (tree.LocalTree): summaries up, centers down.  Every tree edge is an
    edge of the agent graph, so only ranks that host neighbouring agents talk.

    Messages between two ranks keep their order (MPI does not overtake), so no
    tag is needed: a rank sends its summaries level by level, deepest first, in
    ascending agent id, and its parent ranks receive them in that order.
    """

    def __init__(self, comm: MPI.Comm, tree: LocalTree):
        self.comm = comm.Dup()
        rank = comm.Get_rank()
        #: One message down arrives from each remote parent and leaves for each remote child.
        self.down_sources = tree.parent_rank[(tree.parent_rank >= 0) & (tree.parent_rank != rank)]
        self.down_targets = tree.child_rank[tree.child_rank != rank]
        self._sends = []

    def send_up(self, rows: np.ndarray, target: int) -> None:
        """Start sending a summary (n, p + 1) to the rank of its agent's parent.  The rows are
        copied: the send keeps its buffer until `free`, and a view would keep the whole
        level's summaries it was cut from (hundreds of MB over a deep tree)."""
        rows = np.array(rows, dtype=np.float64, order="C", copy=True)
        self._sends.append((self.comm.Isend(rows, dest=int(target)), rows))

    def receive_up(self, sources: np.ndarray, max_rows: int, width: int) -> list[np.ndarray]:
        """The summaries of remote children, one from each entry of `sources` (ranks,
        listed in the children's ascending id): a list of (n, width) arrays."""
        buffers = [np.empty((max_rows, width)) for _ in sources]
        requests = [self.comm.Irecv(buffer, source=int(source))
                    for buffer, source in zip(buffers, sources)]
        statuses = [MPI.Status() for _ in requests]
        MPI.Request.Waitall(requests, statuses)
        return [buffer[:status.Get_count(MPI.DOUBLE) // width]
                for buffer, status in zip(buffers, statuses)]

    def send_down(self, centers: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
        """Pass the root's centers on: wait for them from a parent rank (unless this
        rank has them), then send them to every rank hosting a child of one of its
        agents.  Returns the centers."""
        buffers = [np.empty(shape) for _ in self.down_sources]
        requests = [self.comm.Irecv(buffer, source=int(source))
                    for buffer, source in zip(buffers, self.down_sources)]
        if centers is None:
            centers = buffers[MPI.Request.Waitany(requests)].copy()
        centers = np.ascontiguousarray(centers, dtype=np.float64)
        sends = [self.comm.Isend(centers, dest=int(target)) for target in self.down_targets]
        MPI.Request.Waitall(requests + sends)
        return centers

    def free(self) -> None:
        MPI.Request.Waitall([request for request, _ in self._sends])
        self._sends = []
        self.comm.Free()
