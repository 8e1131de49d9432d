"""Neighbour exchange of centers: the only neighbour-MPI code of nkmpi.

A distributed-graph communicator joins the ranks that host neighbouring
agents.  Each iteration a rank sends each neighbour rank exactly the centers
of its agents that have a neighbour there, and receives the centers of that
rank's agents that neighbour one of its own ("ghosts").  Neighbours on the
same rank are read from memory.

The exchange owns the centers: the block's centers are the first rows of an
array `ext` whose remaining rows receive the ghosts, so the kernels index one
array and nothing is copied.  Two such arrays alternate: an update writes the
new centers into the spare one, and `swap` makes them current.
"""

import numpy as np
from mpi4py import MPI

from .graph import concat_ranges
from .kernels import gather_rows


def _displacements(counts):
    return [int(x) for x in np.cumsum([0] + counts[:-1])] if counts else []


class NeighbourExchange:
    """Plan and run the center exchange of one rank.

    Parameters
    ----------
    comm : the communicator of the run.
    network : graph.Network over all agents.
    owner : (M,) rank hosting each agent.
    agents : ascending global ids of this rank's agents.
    shape : (K, p) of one agent's centers.

    Attributes the kernels use
    --------------------------
    centers : (L, K, p) the block's current centers (rows 0..L-1 of `ext`).
    spare : (L, K, p) where the next centers are written before `swap`.
    nbr_ptr, nbr_idx : each block agent's neighbours as rows of `ext`, ascending global id.
    edge_a, edge_b : rows of `ext` for each edge (a < b) whose lower end is a block agent.
    """

    def __init__(self, comm, network, owner, agents, shape):
        rank = comm.Get_rank()
        self.shape = tuple(shape)
        agents = np.asarray(agents, dtype=np.int64)
        n_local = len(agents)
        block_size = int(np.prod(self.shape))

        starts, stops = network.indptr[agents], network.indptr[agents + 1]
        degree = stops - starts
        source = np.repeat(np.arange(n_local), degree)             # block index of u
        target = network.indices[concat_ranges(starts, stops)]     # global id of v, ascending per u
        target_rank = owner[target]
        remote = target_rank != rank

        self.ranks = np.unique(target_rank[remote])
        send_lists, recv_lists = [], []
        for q in self.ranks:
            to_q = remote & (target_rank == q)
            send_lists.append(np.unique(source[to_q]))
            recv_lists.append(np.unique(target[to_q]))
        self.send_index = np.concatenate(send_lists) if send_lists else np.zeros(0, np.int64)
        ghosts = np.concatenate(recv_lists) if recv_lists else np.zeros(0, np.int64)
        self.send_counts = [len(s) * block_size for s in send_lists]
        self.recv_counts = [len(r) * block_size for r in recv_lists]
        self.send_displs = _displacements(self.send_counts)
        self.recv_displs = _displacements(self.recv_counts)
        self.n_local, self.n_ghosts = n_local, len(ghosts)

        ext_ids = np.concatenate([agents, ghosts])
        order = np.argsort(ext_ids, kind="stable")
        ext_row = order[np.searchsorted(ext_ids[order], target)]
        self.nbr_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
        self.nbr_idx = ext_row.astype(np.int64)
        lower = agents[source] < target
        self.edge_a, self.edge_b = source[lower], ext_row[lower]

        self.graph_comm = comm.Create_dist_graph_adjacent(
            self.ranks.tolist(), self.ranks.tolist(), reorder=False)
        self._ext = [np.empty((n_local + len(ghosts),) + self.shape) for _ in range(2)]
        self._send = np.empty((len(self.send_index),) + self.shape)
        # One persistent neighbourhood collective per buffer: the counts are parsed
        # once, and each iteration only starts and waits.
        self._requests = [self.graph_comm.Neighbor_alltoallv_init(
            [self._send, self.send_counts, self.send_displs, MPI.DOUBLE],
            [ext[n_local:], self.recv_counts, self.recv_displs, MPI.DOUBLE]) for ext in self._ext]
        self._current = 0
        self._pending = None

    @property
    def ext(self):
        return self._ext[self._current]

    @property
    def centers(self):
        return self._ext[self._current][:self.n_local]

    @property
    def spare(self):
        return self._ext[1 - self._current][:self.n_local]

    def swap(self):
        """Make the spare centers current (the ghosts are stale until the next exchange)."""
        self._current = 1 - self._current

    @property
    def bytes_sent(self):
        """Bytes this rank sends per exchange."""
        return 8 * int(sum(self.send_counts))

    def start(self):
        """Begin sending the block's centers (non-blocking); the local pass may run meanwhile."""
        gather_rows(self.centers, self.send_index, self._send)
        self._pending = self._requests[self._current]
        self._pending.Start()

    def finish(self):
        """Wait for the ghosts; returns `ext`: the block's centers, then the ghosts."""
        self._pending.Wait()
        self._pending = None
        return self.ext

    def exchange(self):
        """Blocking exchange (set-up rounds)."""
        self.start()
        return self.finish()

    def free(self):
        for request in self._requests:
            request.Free()
        self.graph_comm.Free()
