"""Communication graphs between agents, and the placement of agents on ranks.

No MPI here.  A graph comes from its spec and seed, the same on every rank, in two
forms: the whole `Network` (a sorted edge array and a CSR adjacency, O(M + E) memory,
never a dense matrix) for the serial reference, `nkmpi info`, the data tools and the
network seeding's spanning tree; and a `LocalGraph`, the rows of one rank's agents
only, which is all a run's exchanges need.  `local_graph` builds the rows of ring,
path, star, complete, torus, rgg, er and ws without the rest of the graph, and reads a
dataset's CSR graph for the rank's agents alone; the other sources (an edge file, a
dataset's edge list, a given graph) are built whole, checked, and cut to the rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numba import njit

from .errors import InputError

#: The graphs a spec builds or reads, as `--graph` takes them.
TOPOLOGIES = ("ring", "path", "complete", "star", "torus[:rows=R]", "er:p=P",
              "rgg:radius=R", "ws:k=K,p=P", "file:EDGES.txt")
#: Every graph spec of a run: a topology, or the dataset's own graph.
GRAPH_SPECS = TOPOLOGIES + ("dataset",)


@njit(cache=True, nogil=True)
def _adjacency(n_agents, ends_a, ends_b):
    """CSR of the undirected graph with edges (ends_a[e], ends_b[e]): each agent's distinct
    neighbours, ascending, self loops dropped.  Rows filled by counting, then each short row
    sorted and deduplicated: O(M + E) memory and about linear time, where sorting the 2E
    entries as keys took seconds at 10^7 edges."""
    indptr = np.zeros(n_agents + 1, dtype=np.int64)
    for e in range(len(ends_a)):
        if ends_a[e] != ends_b[e]:
            indptr[ends_a[e] + 1] += 1
            indptr[ends_b[e] + 1] += 1
    for m in range(n_agents):
        indptr[m + 1] += indptr[m]
    fill = indptr[:-1].copy()
    entries = np.empty(indptr[-1], dtype=np.int64)
    for e in range(len(ends_a)):
        a, b = ends_a[e], ends_b[e]
        if a != b:
            entries[fill[a]] = b
            fill[a] += 1
            entries[fill[b]] = a
            fill[b] += 1
    kept = 0                                # rows compacted in place, duplicates dropped
    start = 0
    for m in range(n_agents):
        stop = indptr[m + 1]
        row = entries[start:stop]
        row.sort()
        for i in range(len(row)):
            if i == 0 or row[i] != row[i - 1]:
                entries[kept] = row[i]
                kept += 1
        start = stop
        indptr[m + 1] = kept
    return indptr, entries[:kept].copy()


@njit(cache=True, nogil=True)
def _upper_edges(indptr, indices):
    """Each edge (a, b), a < b, of a CSR adjacency once, sorted: (E, 2)."""
    edges = np.empty((len(indices) // 2, 2), dtype=np.int64)
    e = 0
    for a in range(len(indptr) - 1):
        for i in range(indptr[a], indptr[a + 1]):
            if indices[i] > a:
                edges[e, 0], edges[e, 1] = a, indices[i]
                e += 1
    return edges


@dataclass(frozen=True)
class Network:
    """An undirected simple graph over agents 0..M-1.

    edges : (E, 2) int64, each edge once as (a, b) with a < b, sorted.
    indptr, indices : CSR adjacency; agent m's neighbours, ascending, are
        indices[indptr[m]:indptr[m+1]].
    """

    n_agents: int
    edges: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_edges(cls, n_agents: int, edges) -> Network:
        """Drop self loops and duplicates, orient a < b, sort, and build the CSR."""
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if edges.size and (edges.min() < 0 or edges.max() >= n_agents):
            bad = edges[(edges < 0).any(axis=1) | (edges >= n_agents).any(axis=1)][0]
            raise InputError(f"edge ({bad[0]}, {bad[1]}) names an agent outside 0..{n_agents - 1}")
        indptr, indices = _adjacency(n_agents, np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1]))
        return cls.from_csr(n_agents, indptr, indices)

    @classmethod
    def from_csr(cls, n_agents: int, indptr: np.ndarray, indices: np.ndarray) -> Network:
        """The Network of a symmetric CSR adjacency without self loops, rows ascending."""
        return cls(n_agents, _upper_edges(indptr, indices), indptr, indices)

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def neighbours(self, agent: int) -> np.ndarray:
        return self.indices[self.indptr[agent]:self.indptr[agent + 1]]

    def to_networkx(self):
        import networkx as nx
        graph = nx.Graph()
        graph.add_nodes_from(range(self.n_agents))
        graph.add_edges_from(self.edges.tolist())
        return graph

    def is_connected(self) -> bool:
        if self.n_agents <= 1:
            return True
        return bool((_breadth_first(self.indptr, self.indices, 0)[1] >= 0).all())

    def rows(self, agents) -> LocalGraph:
        """The LocalGraph of `agents` (ascending global ids)."""
        agents = np.asarray(agents, dtype=np.int64)
        starts, stops = self.indptr[agents], self.indptr[agents + 1]
        indptr = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
        return LocalGraph(self.n_agents, agents, indptr, self.indices[concat_ranges(starts, stops)])


@njit(cache=True, nogil=True)
def malformed_row(agents, indptr, indices, n_agents):
    """The first of the CSR rows of `agents` that is not a row of a simple graph over
    0..n_agents-1, and why: (row, 1) when it names an agent outside, (row, 2) when it is not
    strictly ascending, (row, 3) when it names its own agent; (-1, 0) when all are rows.
    In place: no array of the entries' number."""
    for i in range(len(agents)):
        previous = -1
        for e in range(indptr[i], indptr[i + 1]):
            v = indices[e]
            if v < 0 or v >= n_agents:
                return i, 1
            if v <= previous:
                return i, 2
            if v == agents[i]:
                return i, 3
            previous = v
    return -1, 0


@dataclass(frozen=True)
class LocalGraph:
    """The rows of the agent graph that one rank needs: its agents' neighbours.

    n_agents : M, the agents of the whole graph.  agents : (L,) ascending global ids.
    indptr, indices : CSR over the L agents: agents[i]'s neighbours, ascending global
        ids, are indices[indptr[i]:indptr[i+1]].
    Every rank's rows together are the whole graph, whatever the placement.
    """

    n_agents: int
    agents: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def fingerprint_share(self) -> int:
        """This block's share of the graph's fingerprint: the sum modulo 2**64 of a 64-bit
        mix of each (agent, neighbour) entry, mix(mix(agent) ^ neighbour).  The shares of
        any placement add up to the same value, so no rank needs the whole graph to
        fingerprint it."""
        return int(_fingerprint_share(self.agents, self.indptr, self.indices))


@njit(inline='always', cache=True, nogil=True)
def mix64(z):
    """SplitMix64's finalizer on a uint64 (wrapping arithmetic): a well-spread 64-bit hash."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _fingerprint_share(agents, indptr, indices):
    """The wrapping sum of every entry's mix in one pass.  Arrays of the entries' number
    (14 million on a rank of bench target 6) would each cost their first touch: 1.1 s for
    the five numpy made, on a machine whose fresh memory costs 2 s a gigabyte."""
    total = np.uint64(0)
    for i in range(len(agents)):
        source = mix64(np.uint64(agents[i]))
        for e in range(indptr[i], indptr[i + 1]):
            total += mix64(source ^ np.uint64(indices[e]))
    return total


@njit(cache=True, nogil=True)
def _breadth_first(indptr, indices, root):
    """Breadth-first search from `root`, neighbours taken in CSR order (ascending): each
    agent's parent (the first agent to reach it; -1 at the root and where unreached) and
    depth (-1 where unreached)."""
    n_agents = len(indptr) - 1
    parent = np.full(n_agents, -1, dtype=np.int64)
    depth = np.full(n_agents, -1, dtype=np.int64)
    queue = np.empty(n_agents, dtype=np.int64)
    queue[0], depth[root] = root, 0
    head, tail = 0, 1
    while head < tail:
        a = queue[head]
        head += 1
        for i in range(indptr[a], indptr[a + 1]):
            b = indices[i]
            if depth[b] < 0:
                depth[b], parent[b] = depth[a] + 1, a
                queue[tail] = b
                tail += 1
    return parent, depth


@dataclass(frozen=True)
class SpanningTree:
    """A breadth-first spanning tree of a connected agent graph: the paths along which
    the network-wide seeding merges summaries towards the root and sends the
    centers back.  Every tree edge is a graph edge, and the height (the
    seeding's rounds each way) is at most the graph's diameter.

    parent : (M,) int64, -1 at the root.  depth : (M,) int64 hops from the root.
    child_ptr, child_index : CSR of each agent's children, ascending.
    """

    root: int
    parent: np.ndarray
    depth: np.ndarray
    child_ptr: np.ndarray
    child_index: np.ndarray

    @property
    def height(self) -> int:
        return int(self.depth.max())

    def children(self, agent: int) -> np.ndarray:
        return self.child_index[self.child_ptr[agent]:self.child_ptr[agent + 1]]


def spanning_tree(network: Network, root: int = 0) -> SpanningTree:
    """The breadth-first tree of `network` from `root` (neighbours taken in ascending
    id, so every rank builds the same tree)."""
    parent, depth = _breadth_first(network.indptr, network.indices, root)
    if (depth < 0).any():
        raise InputError("the agent graph is not connected: no spanning tree reaches every agent")
    child_index = np.argsort(parent, kind="stable")[1:]          # by parent, then by id
    child_ptr = np.zeros(network.n_agents + 1, dtype=np.int64)
    np.cumsum(np.bincount(parent[child_index], minlength=network.n_agents), out=child_ptr[1:])
    return SpanningTree(root, parent, depth, child_ptr, child_index)


def _parse_params(spec, text, allowed):
    params = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise InputError(f"graph spec {spec!r}: expected {', '.join(k + '=...' for k in allowed)}")
        if key in params:
            raise InputError(f"graph spec {spec!r}: {key} given twice")
        try:
            params[key] = allowed[key](value)
        except ValueError:
            raise InputError(f"graph spec {spec!r}: {key}={value!r} is not a number") from None
    return params


def _require(condition, spec, what):
    if not condition:
        raise InputError(f"graph spec {spec!r}: {what}")


def _read_edge_file(path, n_agents):
    try:
        with warnings.catch_warnings():     # an empty file: its own message below, not numpy's warning
            warnings.simplefilter("ignore", UserWarning)
            edges = np.loadtxt(path, dtype=np.int64, comments="#", ndmin=2)
    except OSError as exc:
        raise InputError(f"cannot read edge file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"edge file {path}: expected one 'a b' pair of agent ids per line ({exc})") from None
    if not edges.size and n_agents > 1:
        raise InputError(f"edge file {path} lists no edges, and {n_agents} agents need some")
    if edges.size and edges.shape[1] != 2:
        raise InputError(f"edge file {path}: expected two columns, found {edges.shape[1]}")
    return edges.reshape(-1, 2)


def _spread_bits(v):
    """Put a zero bit between each of the low 16 bits of v (for Morton codes)."""
    v = v.astype(np.uint64) & 0xFFFF
    v = (v | (v << 8)) & 0x00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F
    v = (v | (v << 2)) & 0x33333333
    return (v | (v << 1)) & 0x55555555


def _rows_from_candidates(agents, candidates, valid):
    """CSR of each agent's candidate neighbours (L, C) where `valid`, self loops dropped,
    ascending and distinct."""
    candidates = np.where(valid & (candidates != agents[:, None]), candidates, -1)
    candidates.sort(axis=1)
    keep = candidates >= 0
    keep[:, 1:] &= candidates[:, 1:] != candidates[:, :-1]
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
    return indptr, candidates[keep].astype(np.int64)


def _analytic_rows(name, n_agents, agents, rows=None):
    """(indptr, indices) of `agents` in ring, path, star, complete or torus over
    `n_agents`: the neighbours of an agent follow from its id alone."""
    m, a = n_agents, agents
    if name in ("ring", "path"):
        candidates = np.stack([a - 1, a + 1], axis=1)
        if name == "ring":
            return _rows_from_candidates(a, candidates % m, np.ones(candidates.shape, bool))
        return _rows_from_candidates(a, candidates, (candidates >= 0) & (candidates < m))
    if name == "torus":
        if rows is None:
            rows = max(d for d in range(1, int(np.sqrt(m)) + 1) if m % d == 0)
        if rows < 1 or m % rows:
            raise InputError(f"graph spec torus: rows={rows} does not divide {m} agents")
        cols = m // rows
        i, j = a // cols, a % cols
        candidates = np.stack([((i - 1) % rows) * cols + j, ((i + 1) % rows) * cols + j,
                               i * cols + (j - 1) % cols, i * cols + (j + 1) % cols], axis=1)
        return _rows_from_candidates(a, candidates, np.ones(candidates.shape, bool))
    if name == "star":                       # agent 0 the hub
        hub = a == 0
        indptr = np.concatenate([[0], np.cumsum(np.where(hub, m - 1, 1))]).astype(np.int64)
        indices = np.zeros(indptr[-1], dtype=np.int64)
        for i in np.flatnonzero(hub):
            indices[indptr[i]:indptr[i + 1]] = np.arange(1, m)
        return indptr, indices
    # complete: each row lists the M - 1 other agents
    indptr = np.arange(len(a) + 1, dtype=np.int64) * (m - 1)
    indices = np.tile(np.arange(m - 1, dtype=np.int64), len(a)).reshape(len(a), m - 1)
    indices += indices >= a[:, None]
    return indptr, indices.reshape(-1)


#: Agents an rgg's tile holds at most on average: the unit square is cut into 4**T tiles, Morton
#: cells of the level T (`rgg_tile_level`), each drawing its agents' positions from a generator
#: of its own, so that a rank draws only the tiles around its agents.
RGG_TILE_AGENTS = 4096
#: The finest level of the grid of cells the rgg rows search (4**level cells at most), and of
#: the tiles.
RGG_MAX_LEVEL = 11
#: Neighbours an agent is first given room for in the rgg rows' buffer (it grows as needed).
RGG_ROW_GUESS = 32
#: The side, in cells, of the grid whose Morton codes number an rgg's agents: 2**RGG_GRID_BITS.
RGG_GRID_BITS = 16
RGG_GRID = 1 << RGG_GRID_BITS


def rgg_tile_level(n_agents: int) -> int:
    """T, the level of an rgg's tiles: the fewest with at most RGG_TILE_AGENTS agents a tile
    on average, at most RGG_MAX_LEVEL (a graph of up to RGG_TILE_AGENTS agents is one tile)."""
    level = 0
    while n_agents > RGG_TILE_AGENTS * 4**level and level < RGG_MAX_LEVEL:
        level += 1
    return level


def rgg_tile_starts(n_agents: int, seed: int = 0) -> np.ndarray:
    """The first agent of each of the 4**T tiles, in Morton order, and n_agents at the end:
    how many agents each tile holds is one multinomial draw (uniform over the tiles, so that
    the positions are M independent uniform points), the same on every rank, O(tiles)."""
    level = rgg_tile_level(n_agents)
    counts = (np.random.default_rng([seed, 19]).multinomial(n_agents, np.full(4**level, 4.0**-level)) if level
              else np.array([n_agents]))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _morton_codes(cells):
    """The Morton codes of (n, 2) grid cells (x, y), y's bits the odd ones."""
    return _spread_bits(cells[:, 0]) | (_spread_bits(cells[:, 1]) << 1)


def _rgg_tile(level, tile, n_agents_in_tile, seed):
    """The positions (n, 2) of one tile's agents, uniform in its square, and their Morton codes
    on the RGG_GRID, in the agents' order: along the curve (ties in the order drawn).  Drawn
    from a generator keyed by (seed, level, tile); the one tile of level 0 from (seed) alone."""
    positions = np.random.default_rng([seed, 17, level, tile] if level else [seed, 17]).random((n_agents_in_tile, 2))
    if level:
        corner = np.array([_compact_bits(tile), _compact_bits(tile >> 1)], dtype=np.float64)
        side = 2.0**-level
        # Inside the tile's square whatever the rounding: its cells' codes are the tile's.
        positions = np.minimum((corner + positions) * side, np.nextafter((corner + 1) * side, 0))
    codes = _morton_codes(np.minimum((positions * RGG_GRID).astype(np.int64), RGG_GRID - 1))
    order = np.argsort(codes, kind="stable")
    return positions[order], codes[order]


def _compact_bits(code: int) -> int:
    """The even bits of a Morton code, packed: a cell's x (and, of code >> 1, its y)."""
    value, bit = 0, 0
    while code >> (2 * bit):
        value |= ((code >> (2 * bit)) & 1) << bit
        bit += 1
    return value


def _rgg_tiles(level, seed, starts, tiles):
    """The positions, Morton codes and global ids of the agents of `tiles` (ascending) of the
    level-`level` tiles that `starts` (rgg_tile_starts) delimits, in ascending id."""
    drawn = [_rgg_tile(level, t, starts[t + 1] - starts[t], seed) for t in tiles.tolist()]
    positions = np.concatenate([p for p, _ in drawn]) if drawn else np.zeros((0, 2))
    codes = np.concatenate([c for _, c in drawn]) if drawn else np.zeros(0, dtype=np.uint64)
    return positions, codes, concat_ranges(starts[tiles], starts[tiles + 1])


def rgg_positions(n_agents: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The positions of a random geometric graph's agents, uniform in the unit square and
    numbered along a Morton (Z-order) curve of a RGG_GRID x RGG_GRID grid, so that the
    contiguous blocks of the placement are compact regions and few edges cross ranks; and
    each one's Morton code: (positions (M, 2), codes (M,)).  Every tile of them: a run's
    ranks draw only the tiles around their agents (`_rgg_local_rows`)."""
    starts = rgg_tile_starts(n_agents, seed)
    positions, codes, _ = _rgg_tiles(rgg_tile_level(n_agents), seed, starts, np.arange(len(starts) - 1))
    return positions, codes


@njit(cache=True, nogil=True)
def _rgg_scan(positions, cell_codes, cell_first, level, row, limit, out):
    """The neighbours of agent `row` (of the drawn agents: `positions` holds those of whole
    cells, in ascending id) in the random geometric graph, as rows of `positions` in
    ascending id, written to `out` when it is long enough (the first pass only counts): the
    agents whose squared distance, summed over x then y as the k-d tree sums it, is at most
    `limit`, among the 3 x 3 cells of side 2**-level around its own.  cell_codes, cell_first :
    the Morton codes of the cells that hold drawn agents, ascending, and the row of each one's
    first (agents are numbered along the curve, so a cell's agents are consecutive and the
    cells, in ascending code, list them in ascending id).  Returns how many there are."""
    side = 1 << level
    x, y = positions[row, 0], positions[row, 1]
    cx, cy = min(int(x * side), side - 1), min(int(y * side), side - 1)
    codes = np.empty(9, dtype=np.int64)
    n_cells = 0
    for ny in range(max(cy - 1, 0), min(cy + 2, side)):
        for nx_ in range(max(cx - 1, 0), min(cx + 2, side)):
            code = 0
            for bit in range(level):
                code |= (((nx_ >> bit) & 1) << (2 * bit)) | (((ny >> bit) & 1) << (2 * bit + 1))
            at = n_cells                        # insertion: the codes stay ascending
            while at > 0 and codes[at - 1] > code:
                codes[at] = codes[at - 1]
                at -= 1
            codes[at] = code
            n_cells += 1
    found = 0
    for c in range(n_cells):
        at = np.searchsorted(cell_codes, codes[c])
        if at == len(cell_codes) or cell_codes[at] != codes[c]:
            continue                            # no agent there
        for b in range(cell_first[at], cell_first[at + 1]):
            dx, dy = x - positions[b, 0], y - positions[b, 1]
            if b != row and dx * dx + dy * dy <= limit:
                if found < len(out):
                    out[found] = b
                found += 1
    return found


@njit(cache=True, nogil=True)
def _rgg_rows(positions, ids, cell_codes, cell_first, level, rows, radius):
    """CSR of the neighbours (global ids, ascending) of the drawn agents `rows` in the random
    geometric graph (_rgg_scan; ids : each drawn agent's global id).  One scan an agent: the
    rows go into a buffer that grows by half when a row would not fit (that row is scanned
    again).  The buffer is returned as it is, not copied to the rows' exact length: its end
    is never written, so it never becomes resident, and a copy would hold the rows twice at
    the rank's set-up peak."""
    limit = radius * radius
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    buffer = np.empty(RGG_ROW_GUESS * len(rows) + 1, dtype=np.int64)
    for i in range(len(rows)):
        start = indptr[i]
        found = _rgg_scan(positions, cell_codes, cell_first, level, rows[i], limit, buffer[start:])
        if start + found > len(buffer):
            grown = np.empty(max(len(buffer) + len(buffer) // 2, start + found), dtype=np.int64)
            grown[:start] = buffer[:start]
            buffer = grown
            _rgg_scan(positions, cell_codes, cell_first, level, rows[i], limit, buffer[start:])
        for e in range(start, start + found):
            buffer[e] = ids[buffer[e]]
        indptr[i + 1] = start + found
    return indptr, buffer[:indptr[-1]]


def rgg_level(n_agents: int, radius: float) -> int:
    """The level of the grid of Morton cells the rgg search uses: cells of side 2**-level at
    least `radius` wide (so every neighbour is in the 3 x 3 cells around an agent's own),
    not many more of them than agents, and at most RGG_MAX_LEVEL."""
    level = int(min(RGG_MAX_LEVEL, np.ceil(np.log2(max(n_agents, 1)) / 2),
                    np.floor(-np.log2(radius)) if radius < 1 else 0))
    while level > 0 and 2.0 ** -level < radius:       # log2's rounding just above a power of two
        level -= 1
    return max(level, 0)


def _rgg_tiles_around(tiles, tile_level, level):
    """The tiles (ascending) that hold every agent within the 3 x 3 search cells (level
    `level`) around any agent of `tiles`: each tile's block of search cells (one cell, or the
    cell holding the tile when tiles are finer than the cells) and its 8 neighbours, in tiles."""
    shift = max(tile_level - level, 0)      # tiles a search cell holds, a side: 2**shift
    per_side = 1 << (tile_level - shift)    # blocks a side
    x = np.array([_compact_bits(t) for t in tiles.tolist()], dtype=np.int64) >> shift
    y = np.array([_compact_bits(t >> 1) for t in tiles.tolist()], dtype=np.int64) >> shift
    bx, by = x[:, None] + np.repeat([-1, 0, 1], 3), y[:, None] + np.tile([-1, 0, 1], 3)
    inside = (bx >= 0) & (bx < per_side) & (by >= 0) & (by < per_side)
    blocks = np.unique(_morton_codes(np.stack([bx[inside], by[inside]], axis=1)).astype(np.int64))
    # A block's tiles are the 4**shift consecutive Morton codes below it.
    return (blocks[:, None] * 4**shift + np.arange(4**shift)).reshape(-1)


def _rgg_local_rows(n_agents, agents, radius, seed):
    """(indptr, indices) of `agents` (ascending) in rgg:radius over `n_agents`, from the
    positions of the tiles around them alone (`_rgg_tiles_around`): O(their agents + the
    halo's) for a rank, and O(tiles) for the tiles' counts."""
    starts = rgg_tile_starts(n_agents, seed)
    tile_level, level = rgg_tile_level(n_agents), rgg_level(n_agents, radius)
    own_tiles = np.unique(np.searchsorted(starts, agents, side="right") - 1)
    tiles = _rgg_tiles_around(own_tiles, tile_level, level)
    positions, codes, ids = _rgg_tiles(tile_level, seed, starts, tiles)
    cells = (codes >> np.uint64(2 * (RGG_GRID_BITS - level))).astype(np.int64)      # of the search grid
    cell_codes, cell_first = np.unique(cells, return_index=True)
    cell_first = np.append(cell_first, len(codes)).astype(np.int64)
    del codes, cells
    return _rgg_rows(positions, ids, cell_codes, cell_first, level, np.searchsorted(ids, agents), radius)


#: Agents a side of the tiles an er graph is drawn by (`_er_tile_edges`), and of those whose
#: lattice edges a ws graph rewires from a stream of their own (`_ws_tile_rewirings`).
ER_TILE = 16384


def _er_tile_edges(n_agents, p, seed, first, second):
    """The edges (a, b), a < b, of er:p between tile `first` and tile `second` >= first (the
    agents t * ER_TILE .. (t + 1) * ER_TILE - 1 of tile t): each pair is an edge with
    probability p, independently, drawn from a generator of the tile pair's own, keyed
    by (seed, first, second).  The gaps between successes over the tiles' pairs, row by
    row, are geometric: the work is the edges', not the pairs'."""
    rows = min(ER_TILE, n_agents - first * ER_TILE)
    cols = min(ER_TILE, n_agents - second * ER_TILE)
    size = rows * cols
    rng = np.random.default_rng([seed, 29, first, second])
    places = _geometric_places(rng, p, size)
    a, b = first * ER_TILE + places // cols, second * ER_TILE + places % cols
    keep = a < b                                # a tile with itself: each pair once
    return np.stack([a[keep], b[keep]], axis=1)


def _er_local_rows(n_agents, agents, p, seed):
    """(indptr, indices) of `agents` (ascending) in er:p over `n_agents`: only the tile pairs
    that hold one of them are drawn, O(their edges + tiles) for a rank, the same edges
    whichever rank draws them."""
    n_tiles = -(-n_agents // ER_TILE)
    own_tiles = np.unique(agents // ER_TILE)
    pairs = {(min(t, u), max(t, u)) for t in own_tiles.tolist() for u in range(n_tiles)}
    edges = np.concatenate([_er_tile_edges(n_agents, p, seed, t, u) for t, u in sorted(pairs)]
                           or [np.zeros((0, 2), dtype=np.int64)])
    entries = np.concatenate([edges, edges[:, ::-1]])           # both directions: (row, neighbour)
    return _rows_of_entries(n_agents, agents, entries[_is_in(agents, entries[:, 0])])


def _geometric_places(rng, p, size):
    """The places 0..size-1 of the successes of `size` Bernoulli(p) trials, drawn as the
    geometric gaps between them: the work is the successes', not the trials'."""
    if p == 0 or size == 0:
        return np.zeros(0, dtype=np.int64)
    expected = p * size
    batch = int(expected + 6 * np.sqrt(expected) + 16)
    places, last = [], -1
    while last < size:
        gaps = np.minimum(rng.geometric(p, batch), size + 1)    # (numpy caps a gap at 2**63 - 1)
        steps = last + np.cumsum(gaps)
        places.append(steps)
        last = int(steps[-1])
    places = np.concatenate(places)
    return places[places < size]


#: Rounds of the Feistel networks that number a ws graph's rewirings (`_permuted`), and the
#: fewest bits of each half: on a tile of a few edges, 4 rounds on halves of a bit or two
#: give a few permutations far more often than others.
FEISTEL_ROUNDS, FEISTEL_HALF_BITS = 8, 4


#: The salt of the permutation of all rewirings (`WsDraws`), beyond any tile's id.
WS_SLOTS = -1


@njit(inline='always', cache=True, nogil=True)
def _feistel_round(key, turn, half, mask):
    """The round function of `_permuted`'s round `turn`: a keyed mix64 of one half."""
    return mix64(key + np.uint64(turn) * np.uint64(0x9E3779B97F4A7C15) ^ half) & mask


@njit(cache=True, nogil=True)
def _permuted(values, sizes, streams, seed, inverse):
    """Each values[i] sent through a pseudo-random permutation of 0..sizes[i]-1 keyed by
    (seed, streams[i]) (or its inverse): a Feistel network on the smallest even number of
    bits, at least 2 FEISTEL_HALF_BITS, that holds the range, FEISTEL_ROUNDS rounds of mix64,
    walked again while it leaves the range (at most 4 steps expected on ranges above 2**8,
    2**8 / size on smaller ones).  Counter-based: any one number's image costs O(1),
    so a rank finds the rewirings it needs without drawing the others'."""
    out = np.empty(len(values), dtype=np.int64)
    base = mix64(np.uint64(seed) ^ np.uint64(0x57535F5045524D))
    for i in range(len(values)):
        size = np.uint64(sizes[i])
        bits = FEISTEL_HALF_BITS
        while (np.uint64(1) << np.uint64(2 * bits)) < size:
            bits += 1
        half = np.uint64(bits)
        mask = (np.uint64(1) << half) - np.uint64(1)
        key = mix64(base ^ np.uint64(streams[i]))
        x = np.uint64(values[i])
        while True:
            left, right = x >> half, x & mask
            for r in range(FEISTEL_ROUNDS):
                if inverse:
                    left, right = right ^ _feistel_round(key, FEISTEL_ROUNDS - 1 - r, left, mask), left
                else:
                    left, right = right, left ^ _feistel_round(key, r, right, mask)
            x = (left << half) | right
            if x < size:
                break
        out[i] = np.int64(x)
    return out


@njit(cache=True, nogil=True)
def _uniform_below(counters, seed, sizes):
    """floor(U * sizes[i]) for each counter, U uniform in [0, 1) from mix64 of the counter
    keyed by `seed`: where in its tile a rewired edge lands, drawn by its rank among the
    new ends."""
    out = np.empty(len(counters), dtype=np.int64)
    key = mix64(np.uint64(seed) ^ np.uint64(0x57535F454E4453))
    for i in range(len(counters)):
        bits = mix64(key ^ np.uint64(counters[i]))
        out[i] = np.int64(np.float64(bits >> np.uint64(11)) * (1.0 / 9007199254740992.0) * sizes[i])
    return out


@dataclass(frozen=True)
class WsDraws:
    """What every rank of a ws graph of more than one tile draws alike, O(tiles):

    rewired : (T+1,) where each source tile's rewirings start among all of them: tile s's
        lattice edges (its agents' (u, u + j), numbered s * ER_TILE * half + ...) are each
        rewired with probability p, so their count is binomial, drawn for every tile at once.
    landing : (T'+1,) where the rewirings whose new end lands in each target tile start,
        ranked by that end: their counts, multinomial over the target tiles (ER_TILE ids of
        the other agents each, w' = 0..M-2, the agent w' + (w' >= u)), drawn at once.
    A rewiring is slot g among all, the i-th of its tile's (a Feistel permutation of the
    tile's edges keyed by the tile gives its edge) and has rank r = sigma(g) among the
    new ends (sigma: a Feistel permutation of the slots), which gives its target tile
    (`landing`) and, with a counter-based uniform keyed by r, its new end.  So each edge
    is rewired with probability p, independently, its new end uniform among the other
    agents, and a rank reaches any rewiring from either end in O(1)."""

    n_agents: int
    half: int
    seed: int
    rewired: np.ndarray
    landing: np.ndarray

    @classmethod
    def draw(cls, n_agents, half, p, seed):
        tiles = -(-n_agents // ER_TILE)
        edges = np.minimum(ER_TILE, n_agents - np.arange(tiles) * ER_TILE) * half
        counts = np.random.default_rng([seed, 37]).binomial(edges, p)
        ends = np.minimum(ER_TILE, n_agents - 1 - np.arange(-(-(n_agents - 1) // ER_TILE)) * ER_TILE)
        landing = np.random.default_rng([seed, 41]).multinomial(int(counts.sum()), ends / (n_agents - 1))
        return cls(n_agents, half, seed, np.concatenate([[0], np.cumsum(counts)]),
                   np.concatenate([[0], np.cumsum(landing)]))

    def _ends(self, ranks, sources):
        """The new ends of the rewirings of `ranks` (among the new ends) from `sources`."""
        tiles = np.searchsorted(self.landing, ranks, side="right") - 1
        sizes = np.minimum(ER_TILE, self.n_agents - 1 - tiles * ER_TILE)
        others = tiles * ER_TILE + _uniform_below(ranks, self.seed, sizes)
        return others + (others >= sources)

    def _sources(self, slots):
        """(edge numbers, u) of the rewirings of `slots`."""
        tiles = np.searchsorted(self.rewired, slots, side="right") - 1
        n_edges = np.minimum(ER_TILE, self.n_agents - tiles * ER_TILE) * self.half
        numbers = tiles * ER_TILE * self.half + _permuted(slots - self.rewired[tiles], n_edges, tiles, self.seed, False)
        return numbers, numbers // self.half

    def _ranks(self, slots, inverse=False):
        """sigma(slots), or sigma^-1 with `inverse`."""
        return _permuted(slots, np.full(len(slots), self.rewired[-1]), np.full(len(slots), WS_SLOTS), self.seed,
                         inverse)

    def of_tile(self, tile):
        """(edge numbers, u, w): the rewirings of source tile `tile`, in slot order."""
        slots = np.arange(self.rewired[tile], self.rewired[tile + 1])
        numbers, sources = self._sources(slots)
        return numbers, sources, self._ends(self._ranks(slots), sources)

    def landing_in(self, target_tiles):
        """(u, w): the rewirings whose new end w' (0..M-2) lies in `target_tiles`."""
        target_tiles = np.asarray(target_tiles, dtype=np.int64)
        ranks = concat_ranges(self.landing[target_tiles], self.landing[target_tiles + 1])
        _, sources = self._sources(self._ranks(ranks, inverse=True))
        return sources, self._ends(ranks, sources)


def _ws_tile_rewirings(n_agents, half, p, seed, tile, draws=None):
    """The rewired lattice edges of ws whose first agent u is in `tile` (agents
    tile * ER_TILE ..): each lattice edge (u, u + j mod M), j = 1..half, numbered
    u * half + j - 1, is rewired with probability p, independently, to (u, w) with w
    uniform among the other agents.  A graph of one tile draws them from a generator of
    its own, keyed by (seed, tile); one of more tiles as `WsDraws` (`draws`, drawn here
    when not given).  Returns (edge numbers, u, w)."""
    if n_agents > ER_TILE:
        return (draws or WsDraws.draw(n_agents, half, p, seed)).of_tile(tile)
    first = tile * ER_TILE
    n_edges = min(ER_TILE, n_agents - first) * half
    rng = np.random.default_rng([seed, 31, tile])
    numbers = first * half + _geometric_places(rng, p, n_edges)
    sources = numbers // half
    targets = rng.integers(0, n_agents - 1, len(numbers)) if len(numbers) else np.zeros(0, dtype=np.int64)
    return numbers, sources, targets + (targets >= sources)


def _ws_local_rows(n_agents, agents, k, p, seed):
    """(indptr, indices) of `agents` (ascending) in ws:k,p over `n_agents`: the ring
    lattice of k // 2 neighbours a side, each lattice edge rewired as `_ws_tile_rewirings`
    draws it (an edge rewired onto one already there merges with it).  A rank draws the
    rewirings of the tiles that hold its agents or the lattice edges ending at them, and,
    in a graph of more than one tile, those that land on its agents (`WsDraws.landing_in`):
    O(its agents' edges + tiles), not the whole graph's rewirings."""
    half, m = k // 2, n_agents
    n_tiles = -(-m // ER_TILE)
    draws = WsDraws.draw(m, half, p, seed) if half and n_tiles > 1 else None

    def mine(ids):
        return _is_in(agents, ids)
    kept_numbers, extra = [np.zeros(0, dtype=np.int64)], [np.zeros((0, 2), dtype=np.int64)]
    reach = (agents[:, None] - np.arange(half + 1)) % m                  # x and the lattice edges' first ends
    for tile in np.unique(reach // ER_TILE).tolist() if half else []:
        numbers, sources, targets = _ws_tile_rewirings(m, half, p, seed, tile, draws)
        near = mine(sources) | mine((sources + numbers % half + 1) % m)    # either end of the lattice edge
        kept_numbers.append(numbers[near])
        extra.append(np.stack([sources, targets], axis=1)[mine(sources) | mine(targets)])
    if draws is not None:                   # the rewirings that land on the agents, from any tile
        others = np.concatenate([agents[agents < m - 1], agents[agents > 0] - 1])
        sources, targets = draws.landing_in(np.unique(others // ER_TILE))
        extra.append(np.stack([sources, targets], axis=1)[mine(targets)])
    rewired = np.concatenate(kept_numbers)
    rewired.sort()
    j = np.arange(1, half + 1)
    forward = agents[:, None] * half + j - 1                         # (x, x + j)
    backward = ((agents[:, None] - j) % m) * half + j - 1            # (x - j, x)
    lattice = np.concatenate([np.stack([np.broadcast_to(agents[:, None], forward.shape), (agents[:, None] + j) % m],
                                       axis=-1)[~_is_in(rewired, forward)],
                              np.stack([np.broadcast_to(agents[:, None], backward.shape), (agents[:, None] - j) % m],
                                       axis=-1)[~_is_in(rewired, backward)]]).reshape(-1, 2)
    shortcuts = np.concatenate(extra)
    entries = np.concatenate([lattice, shortcuts, shortcuts[:, ::-1]])
    entries = entries[mine(entries[:, 0])]
    return _rows_of_entries(m, agents, entries)


def _is_in(ordered, values):
    """Which of `values` (any shape) are in the ascending array `ordered`."""
    where = np.minimum(np.searchsorted(ordered, values), max(len(ordered) - 1, 0))
    return ordered[where] == values if len(ordered) else np.zeros(np.shape(values), dtype=bool)


def _rows_of_entries(n_agents, agents, entries):
    """CSR of `agents` (ascending) from (row agent, neighbour) entries, each row ascending
    and each neighbour once: sorted as one int64 key an entry (row index x M + neighbour)."""
    keys = np.searchsorted(agents, entries[:, 0]) * n_agents + entries[:, 1]
    keys.sort()                             # (np.unique's hashing is several times slower)
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    counts = np.bincount(keys // n_agents, minlength=len(agents)) if len(keys) else np.zeros(len(agents), np.int64)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), keys % n_agents


#: The specs whose rows `local_graph` builds without the rest of the graph.
LOCAL_SPECS = ("ring", "path", "star", "complete", "torus", "rgg", "er", "ws")
#: Of those, the ones connected by construction (rgg is checked).
CONNECTED_SPECS = ("ring", "path", "star", "complete", "torus")


def _spec_rows(spec, n_agents, agents, seed):
    """(indptr, indices) of `agents` in a graph of LOCAL_SPECS, built for them alone."""
    name, _, arg = spec.partition(":")
    if name in ("ring", "path", "complete", "star") and arg:
        raise InputError(f"graph spec {spec!r}: {name} takes no parameters")
    if name == "rgg":
        return _rgg_local_rows(n_agents, agents, _rgg_radius(spec, arg), seed)
    if name == "er":
        return _er_local_rows(n_agents, agents, _er_probability(spec, arg), seed)
    if name == "ws":
        params = _parse_params(spec, arg, {"k": int, "p": float})
        k, p = params.get("k", 4), params.get("p", 0.1)
        _require(0 <= k < n_agents, spec, f"k must be in 0..{n_agents - 1} (below the number of agents)")
        _require(k % 2 == 0, spec, "k must be even: each agent joins k/2 neighbours on either side")
        _require(0 <= p <= 1, spec, f"p must be a probability in [0, 1], got {p}")
        return _ws_local_rows(n_agents, agents, k, p, seed)
    params = _parse_params(spec, arg, {"rows": int}) if name == "torus" else {}
    return _analytic_rows(name, n_agents, agents, **params)


def local_graph(graph, n_agents: int, agents, seed: int = 0, dataset_graph=None) -> tuple[LocalGraph, bool]:
    """The rows of `agents` (ascending global ids) of a run's graph option, and whether the
    whole graph is known to be connected (False: the caller checks, as
    nkmpi.connectivity does across the ranks).  A spec in LOCAL_SPECS is built for these
    agents alone, a dataset's CSR graph read for them alone (`reads_stored_rows`: the
    caller checks it symmetric); any other graph whole (network_of, which checks it), then
    cut.  dataset_graph : the dataset's formats.dataset.StoredGraph, or None."""
    agents = np.asarray(agents, dtype=np.int64)
    if reads_stored_rows(graph, dataset_graph):
        return LocalGraph(n_agents, agents, *dataset_graph.rows(agents)), False
    spec = default_spec(graph, dataset_graph) if graph is None or isinstance(graph, str) else ""
    name = spec.partition(":")[0]
    if name not in LOCAL_SPECS:
        return network_of(graph, n_agents, seed, dataset_graph).rows(agents), True
    indptr, indices = _spec_rows(spec, n_agents, agents, seed)
    return LocalGraph(n_agents, agents, indptr, indices), name in CONNECTED_SPECS


def reads_stored_rows(graph, dataset_graph) -> bool:
    """Whether a run's rows come from the dataset's CSR graph, each rank's read for its
    agents alone: then no rank sees both rows of a cut edge, and the ranks check together
    that the rows are symmetric (nkmpi.connectivity.one_sided_entry)."""
    return (graph is None or graph == "dataset") and dataset_graph is not None and dataset_graph.edges is None


@njit(cache=True, nogil=True)
def first_unlisted(agents, indptr, indices, listed, rows):
    """The first q for which the row of agent rows[q] (one of `agents`, ascending) does not
    list agent listed[q]; -1 when every one does.  Binary searches, in place."""
    n = len(agents)
    for q in range(len(rows)):
        i = np.searchsorted(agents, rows[q])
        if i == n or agents[i] != rows[q]:
            return q
        row = indices[indptr[i]:indptr[i + 1]]
        j = np.searchsorted(row, listed[q])
        if j == len(row) or row[j] != listed[q]:
            return q
    return -1


@njit(cache=True, nogil=True)
def first_one_sided_inside(agents, indptr, indices):
    """(u, v): the first entry, in row order, of the rows of `agents` (ascending) that
    lists v in u's row where v is one of `agents` but u is not in v's row; (-1, -1) when
    there is none.  Binary searches, in place: no array of the entries' number."""
    n = len(agents)
    for i in range(n):
        for e in range(indptr[i], indptr[i + 1]):
            v = indices[e]
            j = np.searchsorted(agents, v)
            if j < n and agents[j] == v:
                row = indices[indptr[j]:indptr[j + 1]]
                k = np.searchsorted(row, agents[i])
                if k == len(row) or row[k] != agents[i]:
                    return agents[i], v
    return -1, -1


def _er_probability(spec, arg):
    p = _parse_params(spec, arg, {"p": float}).get("p", 0.2)
    _require(0 <= p <= 1, spec, f"p must be a probability in [0, 1], got {p}")
    return p


def _rgg_radius(spec, arg):
    radius = _parse_params(spec, arg, {"radius": float}).get("radius", 0.3)
    _require(0 < radius < np.inf, spec, f"radius must be a positive number, got {radius}")
    return radius


def edge_file(spec: str | None) -> str | None:
    """The edge file a graph spec reads (file:PATH), else None: an input no output may replace."""
    name, _, path = (spec or "").partition(":")
    return path if name == "file" and path else None


def default_spec(spec: str | None, dataset_graph) -> str:
    """The graph a run uses: the spec given, else the dataset's own graph (`dataset_graph`,
    a formats.dataset.StoredGraph, or None), else a ring."""
    if spec is not None:
        return spec
    return "dataset" if dataset_graph is not None else "ring"


def graph_text(graph, dataset_graph=None) -> str:
    """How a run's graph option is named in its result: the spec in use, or 'given edges'
    for a networkx graph or an edge array (whose fingerprint tells them apart)."""
    if graph is None or isinstance(graph, str):
        return default_spec(graph, dataset_graph)
    return "given edges"


def network_of(graph, n_agents: int, seed: int = 0, dataset_graph=None) -> Network:
    """The connected Network of a run's graph option: a spec (None: the dataset's graph,
    else a ring), a networkx graph or an (E, 2) array of agent ids."""
    if graph is None or isinstance(graph, str):
        return build_network(graph, n_agents, seed, dataset_graph)
    if hasattr(graph, "edges") and callable(graph.edges):
        graph = list(graph.edges())
    try:
        edges = np.array(graph, dtype=np.int64).reshape(-1, 2)
    except (TypeError, ValueError, OverflowError):
        raise InputError("the graph must be a spec, a networkx graph or an (E, 2) array of agent ids")
    network = Network.from_edges(n_agents, edges)
    require_connected_graph(network, "the agent graph")
    return network


def build_network(spec: str | None, n_agents: int, seed: int = 0, dataset_graph=None,
                  require_connected: bool = True) -> Network:
    """The Network named by `spec` over `n_agents` agents; random graphs seeded by `seed`.

    spec None means the dataset's graph (`dataset_graph`, a formats.dataset.StoredGraph)
    when it has one, else a ring.
    A disconnected graph is an InputError (NK-means cannot reach agreement on
    it) unless require_connected is False.
    """
    spec = default_spec(spec, dataset_graph)
    name, _, arg = spec.partition(":")
    m = n_agents
    csr = name in LOCAL_SPECS
    if name == "dataset":
        if dataset_graph is None:
            raise InputError("graph 'dataset' requested, but the dataset has no graph")
        edges, csr = dataset_graph.edges, dataset_graph.edges is None
        if csr:
            indptr, indices = dataset_graph.rows(np.arange(m))
            u, v = first_one_sided_inside(np.arange(m), indptr, indices)
            if u >= 0:
                raise InputError(dataset_graph.one_sided(u, v))
    elif name == "file":
        if not arg:
            raise InputError("graph spec file: needs a path, as in file:EDGES.txt")
        edges = _read_edge_file(arg, m)
    elif name in LOCAL_SPECS:
        indptr, indices = _spec_rows(spec, m, np.arange(m), seed)
    else:
        raise InputError(f"unknown graph spec {spec!r}; use one of: {', '.join(GRAPH_SPECS)}")
    network = Network.from_csr(m, indptr, indices) if csr else Network.from_edges(m, edges)
    if require_connected:
        require_connected_graph(network, f"graph {spec!r}")
    return network


def not_connected(name: str, n_agents: int) -> str:
    """The error of a disconnected graph: NK-means cannot reach agreement on it."""
    return (f"{name} over {n_agents} agents is not connected: agents could never agree (use another seed, "
            "a denser graph, or a connected edge list)")


def require_connected_graph(network: Network, name: str) -> None:
    """InputError for a disconnected graph."""
    if not network.is_connected():
        raise InputError(not_connected(name, network.n_agents))


def graph_stats(network: Network) -> dict:
    """Degree range, diameter, algebraic connectivity lambda_2 and connectivity, for `nkmpi info`."""
    degree = network.degree
    stats = {"agents": network.n_agents, "edges": len(network.edges),
             "degree_min": int(degree.min()), "degree_max": int(degree.max()),
             "connected": network.is_connected()}
    import networkx as nx
    graph = network.to_networkx()
    if network.n_agents < 2:
        stats.update(diameter=0, lambda_2=0.0)
    elif stats["connected"]:
        stats["diameter"] = nx.diameter(graph)
        if network.n_agents <= 2000:
            laplacian = nx.laplacian_matrix(graph, nodelist=range(network.n_agents)).toarray()
            stats["lambda_2"] = float(np.linalg.eigvalsh(laplacian.astype(float))[1])
        else:
            stats["lambda_2"] = float(nx.algebraic_connectivity(graph, method="tracemin_lu", seed=0))
    else:
        stats.update(diameter=float("inf"), lambda_2=0.0)
    return stats


def block_placement(points_per_agent: np.ndarray, n_ranks: int) -> np.ndarray:
    """Contiguous blocks of agents over ranks, balanced by work.

    An agent's work is its point count plus one (its center update), so agents
    without points still spread out.  Returns bounds (R+1,): rank r hosts
    agents bounds[r]:bounds[r+1], at least one each.  (A run's ranks find the same
    bounds from a slice of the offsets each: formats.dataset.place_blocks.)
    """
    n_agents = len(points_per_agent)
    check_rank_count(n_agents, n_ranks)
    work = np.cumsum(np.asarray(points_per_agent, dtype=np.float64) + 1.0)
    targets = placement_targets(int(np.sum(points_per_agent)), n_agents, n_ranks)
    return block_bounds(np.searchsorted(work, targets, side="left"), n_agents)


def check_rank_count(n_agents: int, n_ranks: int) -> None:
    """Refuse more ranks than agents: a block placement gives every rank one agent at least."""
    if n_ranks > n_agents:
        raise InputError(f"{n_ranks} ranks but only {n_agents} agents: use at most one rank per agent")


def placement_targets(n_points: int, n_agents: int, n_ranks: int) -> np.ndarray:
    """(R-1,) the work done before ranks 1..R-1 start in a balanced placement, where the
    work of all agents is N + M (exact in float64 below 2**53, as are its prefix sums)."""
    return float(n_points + n_agents) * np.arange(1, n_ranks) / n_ranks


def block_bounds(below: np.ndarray, n_agents: int) -> np.ndarray:
    """Bounds (R+1,) from below[j], the number of agents whose work up to and including
    their own is below target j (`placement_targets`): rank j+1 starts after them, at
    least one agent after rank j and early enough to leave one for each later rank."""
    n_ranks = len(below) + 1
    bounds = np.concatenate([[0], np.asarray(below) + 1, [n_agents]]).astype(np.int64)
    for r in range(1, n_ranks):               # every rank gets at least one agent
        bounds[r] = max(bounds[r], bounds[r - 1] + 1)
    for r in range(n_ranks - 1, 0, -1):
        bounds[r] = min(bounds[r], bounds[r + 1] - 1)
    return bounds


def concat_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """arange(starts[0], stops[0]), arange(starts[1], stops[1]), ... concatenated, loop-free."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(stops, dtype=np.int64) - starts
    before = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)


class BlockOwners:
    """The rank hosting each agent when the ranks hold contiguous blocks (rank r hosts agents
    bounds[r]:bounds[r+1]): owner[ids] answers as an (M,) array of ranks would, by binary
    search in the R + 1 bounds, so that no rank holds a number for every agent."""

    def __init__(self, bounds: np.ndarray):
        self.bounds = np.asarray(bounds, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def __getitem__(self, ids):
        return np.searchsorted(self.bounds, ids, side="right") - 1
