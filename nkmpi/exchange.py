"""How centers travel between ranks: the neighbour exchange of NK-means (the
only neighbour-MPI code of nkmpi) and the global reduction of Lloyd's baseline.

A distributed-graph communicator joins the ranks that host neighbouring
agents.  Each iteration a rank sends each neighbour rank exactly the centers
of its agents that have a neighbour there, and receives the centers of that
rank's agents that neighbour one of its own ("ghosts").  Neighbours on the
same rank are read from memory.  Every message ends with one control row
carrying a single number (`control`): ranks use it to agree, through
neighbours only, on the iteration at which to stop after a signal.

The exchange owns the centers: the block's centers are the first rows of an
array `ext` whose remaining rows receive the ghosts, so the kernels index one
array and nothing is copied.  Two such arrays alternate: an update writes the
new centers into the spare one, and `swap` makes them current.
"""

import numpy as np
from mpi4py import MPI
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from .graph import concat_ranges
from .kernels import pack_rows


def _rank_graph_diameter(neighbour_ranks):
    """Hops a value needs to reach every rank when each rank tells only its neighbour ranks."""
    size = len(neighbour_ranks)
    if size == 1:
        return 0
    rows = np.repeat(np.arange(size), [len(n) for n in neighbour_ranks])
    adjacency = csr_matrix((np.ones(len(rows)), (rows, np.concatenate(neighbour_ranks))), shape=(size, size))
    return int(shortest_path(adjacency, unweighted=True, directed=False).max())


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
    nbr_ids : the global id of each of those neighbour entries.
    edge_a, edge_b : rows of `ext` for each edge (a < b) whose lower end is a block agent.
    rank_diameter : hops between the farthest two ranks of the rank graph.
    control : the number sent in the control rows; lowered to the smallest received.
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
        # Each message ends with one control row (see `control`): -1 marks it.
        control = np.array([-1])
        self.send_index = np.concatenate([np.concatenate([s, control]) for s in send_lists]) \
            if send_lists else np.zeros(0, np.int64)
        received = np.concatenate([np.concatenate([r, control]) for r in recv_lists]) \
            if recv_lists else np.zeros(0, np.int64)
        self.send_counts = [(len(s) + 1) * block_size for s in send_lists]
        self.recv_counts = [(len(r) + 1) * block_size for r in recv_lists]
        self.send_displs = _displacements(self.send_counts)
        self.recv_displs = _displacements(self.recv_counts)
        self.n_local = n_local
        self.control_rows = n_local + np.flatnonzero(received < 0)

        ext_ids = np.concatenate([agents, received])
        order = np.argsort(ext_ids, kind="stable")
        ext_row = order[np.searchsorted(ext_ids[order], target)]
        self.nbr_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
        self.nbr_idx = ext_row.astype(np.int64)
        self.nbr_ids = target
        lower = agents[source] < target
        self.edge_a, self.edge_b = source[lower], ext_row[lower]

        self.graph_comm = comm.Create_dist_graph_adjacent(
            self.ranks.tolist(), self.ranks.tolist(), reorder=False)
        self.rank_diameter = _rank_graph_diameter(comm.allgather(self.ranks))
        self._ext = [np.empty((len(ext_ids),) + self.shape) for _ in range(2)]
        self._send = np.empty((len(self.send_index),) + self.shape)
        # One persistent neighbourhood collective per buffer: the counts are parsed
        # once, and each iteration only starts and waits.
        self._requests = [self.graph_comm.Neighbor_alltoallv_init(
            [self._send, self.send_counts, self.send_displs, MPI.DOUBLE],
            [ext[n_local:], self.recv_counts, self.recv_displs, MPI.DOUBLE]) for ext in self._ext]
        self._current = 0
        self._pending = None
        self.control = np.inf

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
        pack_rows(self.centers, self.send_index, self.control, self._send)
        self._pending = self._requests[self._current]
        self._pending.Start()

    def finish(self):
        """Wait for the ghosts; returns `ext`: the block's centers, then the ghosts.

        Also lowers `control` to the smallest control value a neighbour sent.
        """
        self._pending.Wait()
        self._pending = None
        if len(self.control_rows):
            self.control = min(self.control, float(self.ext[self.control_rows, 0, 0].min()))
        return self.ext

    def exchange(self):
        """Blocking exchange (set-up rounds)."""
        self.start()
        return self.finish()

    def free(self):
        for request in self._requests:
            request.Free()
        self.graph_comm.Free()


class ClusterTotals:
    """Lloyd's baseline: one fused Allreduce per iteration of the K x p cluster
    sums, the K counts, the cost, the changed labels and a stop request.

    Every rank then holds the pooled totals and computes the same means; the
    stop request (a signal on any rank) reaches every rank in the same iteration.
    """

    def __init__(self, comm, shape):
        self.comm = comm
        self.shape = tuple(shape)
        n_clusters, n_features = self.shape
        self.buffer = np.empty(n_clusters * n_features + n_clusters + 3)

    @property
    def bytes_sent(self):
        """Bytes this rank contributes per iteration."""
        return self.buffer.nbytes

    def allreduce(self, sums, counts, sse, changed, stop_requested):
        """Sum (K, p) sums, (K,) counts, sse and changed over ranks; any stop request.

        Returns the pooled (sums, counts, sse, changed, stop) on every rank.
        """
        n_clusters, n_features = self.shape
        width = n_clusters * n_features
        buffer = self.buffer
        buffer[:width] = sums.reshape(-1)
        buffer[width:width + n_clusters] = counts
        buffer[-3:] = sse, changed, float(stop_requested)
        self.comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        return (buffer[:width].reshape(self.shape), buffer[width:width + n_clusters],
                float(buffer[-3]), int(buffer[-2]), bool(buffer[-1] > 0))


class TreeChannel:
    """Point-to-point messages along the cross-rank edges of the seeding's spanning
    tree (graph.SpanningTree): summaries up, centers down.  Every tree edge is an
    edge of the agent graph, so only ranks that host neighbouring agents talk.

    Messages between two ranks keep their order (MPI does not overtake), so no
    tag is needed: a rank sends its summaries level by level, deepest first, in
    ascending agent id, and its parent ranks receive them in that order.
    """

    def __init__(self, comm, tree, owner, agents):
        self.comm = comm.Dup()
        rank = comm.Get_rank()
        agents = np.asarray(agents, dtype=np.int64)
        parents = tree.parent[agents]
        parent_ranks = owner[parents[parents >= 0]]
        children = tree.child_index[concat_ranges(tree.child_ptr[agents], tree.child_ptr[agents + 1])]
        #: One message down arrives from each remote parent and leaves for each remote child.
        self.down_sources = parent_ranks[parent_ranks != rank]
        self.down_targets = owner[children][owner[children] != rank]
        self._sends = []

    def send_up(self, rows, target):
        """Start sending a summary (n, p + 1) to the rank of its agent's parent."""
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        self._sends.append((self.comm.Isend(rows, dest=int(target)), rows))

    def receive_up(self, sources, max_rows, width):
        """The summaries of remote children, one from each entry of `sources` (ranks,
        listed in the children's ascending id): a list of (n, width) arrays."""
        buffers = [np.empty((max_rows, width)) for _ in sources]
        requests = [self.comm.Irecv(buffer, source=int(source))
                    for buffer, source in zip(buffers, sources)]
        statuses = [MPI.Status() for _ in requests]
        MPI.Request.Waitall(requests, statuses)
        return [buffer[:status.Get_count(MPI.DOUBLE) // width]
                for buffer, status in zip(buffers, statuses)]

    def send_down(self, centers, shape):
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

    def free(self):
        MPI.Request.Waitall([request for request, _ in self._sends])
        self._sends = []
        self.comm.Free()
