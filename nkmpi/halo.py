"""The halo plan of one rank: which centers it sends to and receives from which rank.

No MPI here: the plan is a function of the graph, the placement and the rank, so
it can be built (and checked) for every rank of a run in one process.

A rank sends each neighbour rank, once per exchange, exactly the centers of its
agents that have a neighbour there, and receives the centers of that rank's
agents that neighbour one of its own ("ghosts"); neighbours on the same rank
are read from memory.  Each message ends with one control row carrying a single
number (a stop agreement, nkmpi.stop), so every message has at least one row.

The block's centers and the ghosts form one array `ext` (the block's L agents
first, then the messages received, in the order of `ranks`), so the kernels
index one array and nothing is copied: `nbr_idx` are rows of `ext`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from .graph import LocalGraph, concat_ranges

#: The index that marks a message's control row in `send_index` and `recv_ids`.
CONTROL = -1


@dataclass(frozen=True)
class HaloPlan:
    """The exchange plan of one rank (int64 arrays, but nbr_idx: int32 where ext's rows allow).

    rank : this rank; agents : (L,) ascending global ids of its agents.
    ranks : (R,) the neighbour ranks, ascending: those hosting a neighbour of one of
        the block's agents.  Messages go to and come from them in this order.
    send_index : block index of each row sent, CONTROL for each message's last row;
        the message to ranks[i] is send_index[send_displs[i]:][:send_counts[i]],
        its agents in ascending id.
    recv_ids : global id of each row received, CONTROL for each message's last row,
        laid out like send_index by recv_counts and recv_displs; row i of them is
        row L + i of `ext`.
    control_rows : rows of `ext` holding the control rows received.
    nbr_ptr, nbr_idx : each block agent's neighbours as rows of `ext`, in ascending
        global id (the kernels' order).
    ext_ids : the global id of each row of `ext` (CONTROL for control rows): a neighbour
        entry's id is ext_ids[nbr_idx[e]], so that the plan keeps no id per entry.
    """

    rank: int
    agents: np.ndarray
    ranks: np.ndarray
    send_index: np.ndarray
    send_counts: np.ndarray
    send_displs: np.ndarray
    recv_ids: np.ndarray
    recv_counts: np.ndarray
    recv_displs: np.ndarray
    control_rows: np.ndarray
    nbr_ptr: np.ndarray
    nbr_idx: np.ndarray
    ext_ids: np.ndarray

    @classmethod
    def build(cls, graph: LocalGraph, owner: np.ndarray, rank: int) -> HaloPlan:
        """The plan of `rank`, whose agents' rows of the graph are `graph` (owner[graph.agents]
        == rank); owner[ids] : the ranks of agents (graph.BlockOwners or an (M,) array).  Only
        the entries that name a ghost are sorted (by rank, then id); the others find their row
        by their id alone."""
        agents, target = graph.agents, graph.indices               # target: global id of v, ascending per u
        n_local = len(agents)
        block = n_local and agents[-1] - agents[0] + 1 == n_local
        if block:                   # outside the block is another rank's: no owner looked up inside
            remote = np.flatnonzero((target < agents[0]) | (target > agents[-1]))
        else:
            remote = np.flatnonzero(owner[target] != rank)
        remote_target = target[remote]
        remote_source = np.searchsorted(graph.indptr, remote, side="right") - 1    # block index of u
        ghost_rank = np.asarray(owner[remote_target], dtype=np.int64)
        # Rows of ext, written straight into their final type: no array of the entries' number
        # is made in passing (each would be a first touch of fresh memory).
        ext_row = np.empty(len(target), dtype=np.int32 if n_local + 2 * len(remote) <= np.iinfo(np.int32).max
                           else np.int64)
        if block:                   # rows by subtraction
            np.subtract(target, agents[0], out=ext_row, casting="unsafe")
        else:
            ext_row[:] = np.searchsorted(agents, target)

        # The ghosts received, each once, by rank then id; what goes out, each block agent
        # with a neighbour on q once, ascending, per rank.  Each message ends with its control row.
        by_ghost, first = _distinct_by_rank(ghost_rank, remote_target)
        ranks = np.unique(ghost_rank)
        recv_ids, recv_counts, messages = _messages(ranks, ghost_rank[by_ghost][first], remote_target[by_ghost][first])
        ghost_row = np.cumsum(first) - 1                             # each sorted entry's ghost
        ext_row[remote[by_ghost]] = n_local + ghost_row + messages[ghost_row]   # + the controls before
        by_sent, first = _distinct_by_rank(ghost_rank, remote_source)
        send_index, send_counts, _ = _messages(ranks, ghost_rank[by_sent][first], remote_source[by_sent][first])

        return cls(rank=int(rank), agents=agents, ranks=ranks.astype(np.int64), send_index=send_index,
                   send_counts=send_counts, send_displs=np.cumsum(send_counts) - send_counts, recv_ids=recv_ids,
                   recv_counts=recv_counts, recv_displs=np.cumsum(recv_counts) - recv_counts,
                   control_rows=n_local + np.flatnonzero(recv_ids == CONTROL),
                   nbr_ptr=graph.indptr.astype(np.int64), nbr_idx=ext_row,
                   ext_ids=np.concatenate([agents, recv_ids]).astype(np.int64))

    @property
    def n_local(self) -> int:
        """L, the block's agents: the first rows of `ext`."""
        return len(self.agents)

    @property
    def n_ext(self) -> int:
        """Rows of `ext`: the block's agents, then every row received."""
        return len(self.agents) + len(self.recv_ids)

    def boundary(self) -> np.ndarray:
        """Block indices, ascending, of the agents with a neighbour on another rank (each sent
        somewhere)."""
        return np.unique(self.send_index[self.send_index != CONTROL])


def _distinct_by_rank(entry_rank: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries sorted by rank, then key (an order), and which of them is the first of its
    (rank, key) pair (a mask over that order)."""
    order = np.lexsort((key, entry_rank))
    first = np.ones(len(order), dtype=bool)
    first[1:] = (np.diff(entry_rank[order]) != 0) | (np.diff(key[order]) != 0)
    return order, first


def _messages(ranks: np.ndarray, item_rank: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, ...]:
    """Items sorted by rank laid out as one message per rank of `ranks`, each closed by a
    CONTROL row: (the layout, each message's rows, each item's message)."""
    message = np.searchsorted(ranks, item_rank)
    counts = np.bincount(message, minlength=len(ranks)).astype(np.int64) + 1
    layout = np.full(counts.sum(), CONTROL, dtype=np.int64)
    layout[np.arange(len(items)) + message] = items
    return layout, counts, message


def rank_eccentricity(neighbour_ranks: list[np.ndarray], rank: int) -> int:
    """Hops a value from `rank` needs to reach every other rank when each rank tells only its
    neighbour ranks (neighbour_ranks[r] : HaloPlan.ranks of rank r; the rank graph is
    connected).  The largest over the ranks is the rank graph's diameter.  One breadth-first
    search from `rank`, level by level: O(ranks + links) time and memory, where all pairs at
    once would take O(ranks^2) on every rank (2 GiB each at 16,384 ranks)."""
    size = len(neighbour_ranks)
    if size == 1:
        return 0
    lengths = [len(n) for n in neighbour_ranks]
    ends_a = np.repeat(np.arange(size), lengths)
    ends_b = np.concatenate(neighbour_ranks).astype(np.int64)
    ends_a, ends_b = np.concatenate([ends_a, ends_b]), np.concatenate([ends_b, ends_a])    # both ways
    order = np.argsort(ends_a, kind="stable")
    ptr, links = np.searchsorted(ends_a[order], np.arange(size + 1)), ends_b[order]
    depth = np.full(size, -1, dtype=np.int64)
    depth[rank], frontier, hops = 0, np.array([rank]), 0
    while True:
        reached = np.unique(links[concat_ranges(ptr[frontier], ptr[frontier + 1])])
        frontier = reached[depth[reached] < 0]
        if not len(frontier):
            return hops
        hops += 1
        depth[frontier] = hops
