"""Whether the agent graph is connected, decided by the ranks together from their own rows.

NK-means cannot reach agreement on a disconnected graph, so a run refuses one before it
starts.  A graph built whole (graph.network_of) is checked where it is built; one built
rank by rank (graph.local_graph) is checked here, without any rank holding the rest:

- each rank joins its agents along the edges inside its block (union-find) into pieces,
  each named by its lowest agent id;
- it asks the ranks hosting its ghosts (neighbours on other ranks) which pieces those are
  in (two all-to-all messages);
- rank 0 receives every rank's piece names and the pairs of pieces its cut edges join,
  and joins them (the same union-find): the graph is connected when one piece is left.

Rank 0 receives as many numbers as there are pieces and distinct pairs of joined pieces:
a few per neighbour rank when the placement keeps neighbours together (contiguous blocks of
a ring, a torus, a Morton-numbered rgg); up to one per agent when it scatters them.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI
from numba import njit

from .graph import LocalGraph, first_one_sided_inside, first_unlisted


@njit(cache=True, nogil=True)
def _join(root, a, b):
    """Union-find: join the pieces of a and b under the lower of their roots (halving paths)."""
    while root[a] != a:
        root[a] = root[root[a]]
        a = root[a]
    while root[b] != b:
        root[b] = root[root[b]]
        b = root[b]
    if a < b:
        root[b] = a
    elif b < a:
        root[a] = b


@njit(cache=True, nogil=True)
def _flatten(root):
    """Each index's root, the lowest index of its piece (roots are lower than their
    children: one sweep)."""
    for i in range(len(root)):
        root[i] = root[root[i]]
    return root


@njit(cache=True, nogil=True)
def _pieces(n, ends_a, ends_b):
    """Union-find over 0..n-1 joined along the edges (ends_a[e], ends_b[e]): each index's
    root, the lowest index of its piece."""
    root = np.arange(n)
    for e in range(len(ends_a)):
        _join(root, ends_a[e], ends_b[e])
    return _flatten(root)


@njit(cache=True, nogil=True)
def _block_pieces(agents, indptr, indices):
    """The block's agents joined along the edges inside the block, read from its CSR rows
    in place: (each agent's root, the block index of its piece's lowest agent; the block
    index and the neighbour id of each entry that leaves the block).  No array of the
    entries' number is made (each would be a first touch of fresh memory, 2 s a gigabyte
    on some virtual machines): a first sweep joins the pieces and counts the entries that
    leave, a second lists them."""
    n = len(agents)
    contiguous = n > 0 and agents[n - 1] - agents[0] + 1 == n
    root = np.arange(n)
    out_source, out_target = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    n_out = 0
    for sweep in range(2):
        if sweep:
            out_source, out_target = np.empty(n_out, dtype=np.int64), np.empty(n_out, dtype=np.int64)
            n_out = 0
        for i in range(n):
            for e in range(indptr[i], indptr[i + 1]):
                target = indices[e]
                if contiguous:
                    j = target - agents[0]
                    inside = 0 <= j < n
                else:
                    j = np.searchsorted(agents, target)
                    inside = j < n and agents[min(j, n - 1)] == target
                if not inside:
                    if sweep:
                        out_source[n_out], out_target[n_out] = i, target
                    n_out += 1
                elif not sweep and j > i:       # each edge inside once
                    _join(root, i, j)
    return _flatten(root), out_source, out_target


def _counts_displs(counts):
    counts = np.asarray(counts, dtype=np.int64)
    return counts, np.cumsum(counts) - counts


def is_connected(comm: MPI.Comm, graph: LocalGraph, owner: np.ndarray) -> bool:
    """Whether the graph whose rows the ranks hold is connected; collective over `comm`, the
    same answer on every rank.  graph : this rank's rows; owner[ids] : the ranks of agents
    (graph.BlockOwners or an (M,) array)."""
    size = comm.Get_size()
    agents = graph.agents
    root, out_source, out_target = _block_pieces(agents, graph.indptr, graph.indices)
    piece = agents[root]                    # the lowest agent id of each one's piece

    ghosts, ghost_of_edge = np.unique(out_target, return_inverse=True)
    by_owner = np.argsort(owner[ghosts], kind="stable")
    ask_counts, ask_displs = _counts_displs(np.bincount(owner[ghosts], minlength=size))
    asked_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(ask_counts, asked_counts)
    asked_counts, asked_displs = _counts_displs(asked_counts)
    asked = np.empty(asked_counts.sum(), dtype=np.int64)
    comm.Alltoallv([ghosts[by_owner], ask_counts, ask_displs, MPI.INT64_T],
                   [asked, asked_counts, asked_displs, MPI.INT64_T])
    answers = piece[np.searchsorted(agents, asked)]
    ghost_piece = np.empty(len(ghosts), dtype=np.int64)
    received = np.empty(len(ghosts), dtype=np.int64)
    comm.Alltoallv([answers, asked_counts, asked_displs, MPI.INT64_T],
                   [received, ask_counts, ask_displs, MPI.INT64_T])
    ghost_piece[by_owner] = received

    joined = np.unique(np.stack([piece[out_source], ghost_piece[ghost_of_edge]], axis=1), axis=0)
    gathered = comm.gather((np.unique(piece), joined), root=0)
    connected = None
    if comm.Get_rank() == 0:
        names = np.unique(np.concatenate([names for names, _ in gathered]))
        pairs = np.concatenate([pairs for _, pairs in gathered]).reshape(-1, 2)
        ends = np.searchsorted(names, pairs)
        root = _pieces(len(names), ends[:, 0].astype(np.int64), ends[:, 1].astype(np.int64))
        connected = bool((root == 0).all())     # one piece: every name's root is the first
    return bool(comm.bcast(connected, root=0))


def one_sided_entry(comm: MPI.Comm, graph: LocalGraph, owner: np.ndarray) -> tuple[int, int] | None:
    """An entry (u, v) such that u's row lists v but v's row does not list u (the lowest of
    the ranks' first findings), or None when the rows the ranks hold are symmetric;
    collective, the same answer on every rank.
    Rows read from a file are checked so before the graph is used as undirected.  Each
    rank checks its own entries between its agents, and sends each entry that leaves its
    block, (v, u), to the rank of v, which looks for u in v's row (one all-to-all of the
    cut entries)."""
    size, agents = comm.Get_size(), graph.agents
    found = [tuple(map(int, first_one_sided_inside(agents, graph.indptr, graph.indices)))]
    _, out_source, out_target = _block_pieces(agents, graph.indptr, graph.indices)
    by_owner = np.argsort(owner[out_target], kind="stable")
    send = np.stack([out_target[by_owner], agents[out_source[by_owner]]], axis=1)   # (row v, neighbour u)
    send_counts, send_displs = _counts_displs(2 * np.bincount(owner[out_target], minlength=size))
    receive_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(send_counts, receive_counts)
    receive_counts, receive_displs = _counts_displs(receive_counts)
    received = np.empty((receive_counts.sum() // 2, 2), dtype=np.int64)
    comm.Alltoallv([send, send_counts, send_displs, MPI.INT64_T],
                   [received, receive_counts, receive_displs, MPI.INT64_T])
    q = first_unlisted(agents, graph.indptr, graph.indices, received[:, 1].copy(), received[:, 0].copy())
    if q >= 0:
        found.append((int(received[q, 1]), int(received[q, 0])))
    return min(((u, v) for everyone in comm.allgather(found) for u, v in everyone if u >= 0), default=None)
