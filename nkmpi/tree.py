"""The network seeding's spanning tree, found by the ranks together from their own rows.

graph.spanning_tree is the breadth-first tree of a whole graph from agent 0, its
queue taking neighbours in ascending id: an agent's parent is the first agent of
the level above, in queue order, that neighbours it, and a level's queue order is
its agents sorted by (their parent's place in the level above, their id).  The
ranks find the same tree level by level without the whole graph:

1. the places of the last level's agents travel to the neighbour ranks in one halo
   exchange (exchange.NeighbourExchange of one number an agent);
2. each agent not yet reached that neighbours one of them takes the one of
   smallest place as its parent;
3. the new level's places, the ranks of the (parent's place, id) pairs, are counted
   by the ranks that own ranges of parent places: the pairs go there (Alltoallv),
   are sorted, numbered from an exclusive scan of the counts, and the places come
   back (Alltoallv).

A level costs O(its agents + the halo) on a rank and six collectives; the tree,
O(height) levels.  Every tree edge is a graph edge, so a parent's or child's rank is
that of a neighbour, known from the halo plan: no rank needs the owner of every agent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI
from numba import njit

from .errors import InputError
from .exchange import NeighbourExchange
from .halo import HaloPlan

#: The agent the tree grows from (graph.spanning_tree's default).
ROOT = 0


@dataclass(frozen=True)
class LocalTree:
    """One rank's agents' part of the breadth-first spanning tree (graph.SpanningTree's
    rows of plan.agents; all arrays int64, by block index).

    root, height : as in graph.SpanningTree (the same on every rank).
    depth : (L,) hops from the root; parent : (L,) its global id, -1 at the root;
    parent_rank : (L,) the rank hosting it, -1 at the root.
    child_ptr, child_index : CSR of each agent's children (global ids, ascending);
    child_rank : the rank hosting each child.
    """

    root: int
    height: int
    depth: np.ndarray
    parent: np.ndarray
    parent_rank: np.ndarray
    child_ptr: np.ndarray
    child_index: np.ndarray
    child_rank: np.ndarray


@njit(cache=True, nogil=True)
def _reached(frontier, ghosts, place, nbr_ptr, nbr_idx, ghost_ptr, ghost_idx, depth, best, best_row, reached):
    """Step 2 of a level: the last level's agents here (`frontier`, block indices) and among
    the ghosts (`ghosts`, ghost indices; their rows of `ext` follow the block's) offer their
    places (`place`, by row of `ext`) to the block agents they neighbour that no level has
    reached; each keeps the smallest offer (best, and its row in best_row).  Returns how
    many agents were reached, listed in `reached` in the order first offered."""
    n_local, n = len(depth), 0
    for s in range(len(frontier) + len(ghosts)):
        if s < len(frontier):                   # a block agent: its row of the graph
            row = frontier[s]
            targets, first, stop = nbr_idx, nbr_ptr[row], nbr_ptr[row + 1]
        else:                                   # a ghost: the block agents it neighbours
            ghost = ghosts[s - len(frontier)]
            row = n_local + ghost
            targets, first, stop = ghost_idx, ghost_ptr[ghost], ghost_ptr[ghost + 1]
        offer = place[row]
        for e in range(first, stop):
            v = targets[e]
            if v >= n_local or depth[v] >= 0:
                continue
            if best[v] == np.inf:               # listed at its first offer
                reached[n] = v
                n += 1
            if offer < best[v]:
                best[v], best_row[v] = offer, row
    return n


def warm_up() -> None:
    """Load `_reached` with the types of its call, on an empty block (driver.warm_up)."""
    none, no_offsets, no_nbr = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32)
    _reached(none, none, np.zeros(0), no_offsets, no_nbr, no_offsets, no_nbr, none, np.zeros(0), none, none)


def _ext_ranks(plan: HaloPlan) -> np.ndarray:
    """The rank hosting each row of `ext` (this rank for the block's agents)."""
    message = np.repeat(np.arange(len(plan.ranks)), plan.recv_counts)
    return np.concatenate([np.full(plan.n_local, plan.rank, dtype=np.int64), plan.ranks[message]])


def _exchange_by_rank(comm: MPI.Comm, dest: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Send each row of the (n, w) int64 `rows` to rank dest[i] (Alltoallv).  Returns the
    rows received (by source rank, each source's in its sending order), the source of each,
    and the layout to send answers back along (`_answer`)."""
    size = comm.Get_size()
    order = np.argsort(dest, kind="stable")
    send_counts = np.bincount(dest, minlength=size).astype(np.int64)
    recv_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    width = rows.shape[1]
    received = np.empty((int(recv_counts.sum()), width), dtype=np.int64)
    comm.Alltoallv([np.ascontiguousarray(rows[order]), send_counts * width, MPI.INT64_T],
                   [received, recv_counts * width, MPI.INT64_T])
    source = np.repeat(np.arange(size), recv_counts)
    return received, source, (order, send_counts, recv_counts)


def _answer(comm: MPI.Comm, answers: np.ndarray, layout: tuple) -> np.ndarray:
    """One int64 back to the sender of each row received by `_exchange_by_rank`, in the
    order of that call's `rows`."""
    order, send_counts, recv_counts = layout
    back = np.empty(int(send_counts.sum()), dtype=np.int64)
    comm.Alltoallv([np.ascontiguousarray(answers, dtype=np.int64), recv_counts, MPI.INT64_T],
                   [back, send_counts, MPI.INT64_T])
    result = np.empty_like(back)
    result[order] = back
    return result


def _places(comm: MPI.Comm, parent_place: np.ndarray, ids: np.ndarray, level_size: int) -> np.ndarray:
    """Step 3: the place of each (parent_place, id) pair among all ranks' pairs of a level
    (sorted by parent place, then id).  Parent places 0..level_size-1 are shared out in
    ranges, one per rank."""
    dest = parent_place * comm.Get_size() // level_size
    received, _, layout = _exchange_by_rank(comm, dest, np.column_stack([parent_place, ids]))
    order = np.lexsort((received[:, 1], received[:, 0]))
    first = comm.exscan(len(received)) or 0
    place = np.empty(len(received), dtype=np.int64)
    place[order] = first + np.arange(len(received))
    return _answer(comm, place, layout)


def local_spanning_tree(comm: MPI.Comm, plan: HaloPlan, root: int = ROOT) -> LocalTree:
    """graph.spanning_tree(whole graph, root) cut to this rank's agents, found from the
    block's rows and halo (`plan`) alone; collective over `comm`."""
    n_local, agents = plan.n_local, plan.agents
    ext_rank = _ext_ranks(plan)
    # The block agents each ghost neighbours (the graph is symmetric): a local agent's are its own row.
    halo = np.flatnonzero(plan.nbr_idx >= n_local)
    ghost_of = plan.nbr_idx[halo] - n_local
    ghost_idx = (np.searchsorted(plan.nbr_ptr, halo, side="right") - 1)[np.argsort(ghost_of, kind="stable")]
    ghost_idx = ghost_idx.astype(plan.nbr_idx.dtype)        # block indices, listed as nbr_idx lists rows
    ghost_ptr = np.zeros(len(plan.recv_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(ghost_of, minlength=len(plan.recv_ids)), out=ghost_ptr[1:])

    depth = np.full(n_local, -1, dtype=np.int64)
    parent = np.full(n_local, -1, dtype=np.int64)
    parent_rank = np.full(n_local, -1, dtype=np.int64)
    best, best_row = np.full(n_local, np.inf), np.zeros(n_local, dtype=np.int64)
    reached = np.empty(n_local, dtype=np.int64)
    exchange = NeighbourExchange(comm, plan, (1, 1))
    place = exchange.centers[:, 0, 0]            # the last level's places, inf elsewhere (sent)
    place[:] = np.inf
    frontier = np.flatnonzero(agents == root)
    depth[frontier], place[frontier] = 0, 0
    level, level_size = 0, 1
    try:
        while True:
            exchange.exchange()             # control rows carry inf, as ghosts off the last level do
            ext_place = exchange.ext[:, 0, 0]
            ghosts = np.flatnonzero(np.isfinite(ext_place[n_local:]))
            new = reached[:_reached(frontier, ghosts, ext_place, plan.nbr_ptr, plan.nbr_idx, ghost_ptr, ghost_idx,
                                    depth, best, best_row, reached)].copy()
            new_size = comm.allreduce(len(new))
            if new_size == 0:
                break
            rows = best_row[new]
            parent[new], parent_rank[new] = plan.ext_ids[rows], ext_rank[rows]
            level += 1
            depth[new] = level
            place[frontier] = np.inf
            place[new] = _places(comm, best[new].astype(np.int64), agents[new], level_size)
            frontier, level_size = new, new_size
    finally:
        exchange.free()
    if comm.allreduce(int((depth < 0).sum())):
        raise InputError("the agent graph is not connected: no spanning tree reaches every agent",
                         collective=True)
    return LocalTree(root, level, depth, parent, parent_rank, *_children(comm, plan, parent, parent_rank))


def _children(comm: MPI.Comm, plan: HaloPlan, parent: np.ndarray, parent_rank: np.ndarray) -> tuple:
    """(child_ptr, child_index, child_rank) of the block's agents: each agent tells its
    parent's rank that it is a child (one Alltoallv)."""
    agents = plan.agents
    has_parent = np.flatnonzero(parent >= 0)
    pairs = np.column_stack([parent[has_parent], agents[has_parent]])
    received, source, _ = _exchange_by_rank(comm, parent_rank[has_parent], pairs)
    order = np.lexsort((received[:, 1], received[:, 0]))
    parents, children, child_rank = received[order, 0], received[order, 1], source[order]
    child_ptr = np.append(np.searchsorted(parents, agents), len(parents)).astype(np.int64)
    return child_ptr, children, child_rank.astype(np.int64)
