"""Dataset v1: the points a run clusters, grouped by agent, with the agents' offsets and
optionally ground-truth labels, row weights and the agents' graph (docs/formats.md gives
the schema).

The data tools (and tests, and benchmarks) write it through `write_dataset` or, in pieces
for data larger than memory, `write_dataset_rows`; every file is checked by this
module's own reader before it takes its name.  `nkmpi run` reads it here: each rank
opens the file for its shapes, reads one slice of the offsets to place the agents
(`place_blocks`), then only its own block's offsets and rows, the ranks together through
MPI-IO where h5py has it (`hdf5.io_driver`), and its own agents' rows of the graph
(`StoredGraph.rows`): no rank reads anything of every agent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import h5py
import numpy as np
from numpy.typing import DTypeLike

from ..errors import InputError, agree
from ..graph import Network, block_bounds, check_rank_count, malformed_row, placement_targets
from .hdf5 import atomic_file, check_header, reading, shared_file, write_header

if TYPE_CHECKING:
    from mpi4py import MPI

FORMAT, VERSION = "nkmpi-dataset", 1
#: (N, p) float32 or float64 rows, grouped by agent; (M+1,) int64 offsets: agent m owns
#: rows offsets[m]:offsets[m+1]; optional (N,) int64 ground truth; optional group
#: holding the agents' undirected graph.
POINTS, AGENT_OFFSETS, LABELS, GRAPH = "points", "agent_offsets", "labels", "graph"
#: The graph as a CSR adjacency, what nkmpi writes: (M+1,) int64 `indptr` and (2E,) int64
#: `indices`; agent m's neighbours are indices[indptr[m]:indptr[m+1]], strictly ascending,
#: never m itself, and m is among each of theirs.
INDPTR, INDICES = "graph/indptr", "graph/indices"
#: The graph as an (E, 2) int64 edge list, as earlier nkmpi versions wrote it (still read).
EDGES = "graph/edges"
#: Optional (N,) float32 or float64 weight of each row, non-negative and finite.
WEIGHTS = "weights"


@dataclass(frozen=True)
class DatasetInfo:
    """What every rank knows about a dataset: its shapes and the optional graph, and, for
    serial tools, every agent's offsets."""

    path: str
    n_points: int
    n_features: int
    dtype: np.dtype
    n_agents: int
    has_labels: bool
    graph: StoredGraph | None       # None when the file has no graph
    has_weights: bool = False
    #: Whether points, labels, weights or offsets are virtual datasets, which HDF5 1.10 does
    #: not read through MPI-IO: each rank then reads its slices alone.
    virtual: bool = False
    #: (M+1,) int64 every agent's offsets, checked: read by `open_dataset(path)`, None from
    #: `open_dataset(path, whole_offsets=False)`, whose callers read blocks (`read_block`).
    offsets: np.ndarray | None = None

    @property
    def points_per_agent(self) -> np.ndarray:
        return np.diff(self.offsets)

    def block(self, first: int, stop: int) -> AgentBlock:
        """Agents first..stop-1 and their rows, from the offsets read whole."""
        return AgentBlock(first, self.offsets[first:stop + 1])


@dataclass(frozen=True)
class AgentBlock:
    """Consecutive agents first..stop-1 of a dataset and where their rows are: agent first + i
    owns rows offsets[i]:offsets[i+1] of the file; offsets (L+1,) int64."""

    first: int
    offsets: np.ndarray

    @property
    def stop(self) -> int:
        return self.first + len(self.offsets) - 1

    @property
    def row_start(self) -> int:
        return int(self.offsets[0])

    @property
    def row_stop(self) -> int:
        return int(self.offsets[-1])

    @property
    def local_offsets(self) -> np.ndarray:
        """(L+1,) the agents' offsets within the block's rows."""
        return self.offsets - self.offsets[0]

    def agent_of(self, row: int) -> int:
        """The agent that owns `row` (a row of the block's)."""
        return self.first + int(np.searchsorted(self.offsets, row, side="right")) - 1


def _fail(path, what):
    raise InputError(f"{path}: {what}")


def open_dataset(path: str | os.PathLike, whole_offsets: bool = True) -> DatasetInfo:
    """Validate the structure of a dataset v1 file and read its metadata: with
    `whole_offsets`, every agent's offsets, checked; without, only their shape (a run's
    ranks read and check them by blocks: `place_blocks`, `read_block`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        _fail(path, "no such file")
    if os.path.isdir(path):
        _fail(path, "is a directory, not a dataset file")
    with reading(f"{path}: cannot read"):
        if not h5py.is_hdf5(path):
            _fail(path, "not an HDF5 file")
        with h5py.File(path, "r") as f:
            return _read_metadata(path, f, whole_offsets)


def _read_metadata(path, f, whole_offsets):
    check_header(f, path, FORMAT, VERSION, "dataset")
    for name in (POINTS, AGENT_OFFSETS):
        if not isinstance(f.get(name), h5py.Dataset):
            _fail(path, f"missing dataset {name!r}")
    points = f[POINTS]
    if points.ndim != 2 or points.shape[1] < 1:
        _fail(path, f"{POINTS!r} must be 2-D (N, p) with p >= 1, has shape {points.shape}")
    if points.dtype not in (np.float32, np.float64):
        _fail(path, f"{POINTS!r} must be float32 or float64, is {points.dtype}")
    n_points = points.shape[0]
    offsets_ds = f[AGENT_OFFSETS]
    if offsets_ds.ndim != 1 or offsets_ds.shape[0] < 2 or offsets_ds.dtype.kind not in "iu":
        _fail(path, f"{AGENT_OFFSETS!r} must be a 1-D integer array of length M+1 >= 2, "
                    f"has shape {offsets_ds.shape} and dtype {offsets_ds.dtype}")
    n_agents = offsets_ds.shape[0] - 1
    offsets = None
    if whole_offsets:
        offsets = offsets_ds[()].astype(np.int64)
        check_offsets(path, offsets, 0, n_agents, n_points)
    has_labels = LABELS in f
    if has_labels:
        labels = f[LABELS]
        if not isinstance(labels, h5py.Dataset) or labels.shape != (n_points,) or labels.dtype.kind not in "iu":
            _fail(path, f"{LABELS!r} must be an integer array of shape ({n_points},)")
    has_weights = WEIGHTS in f
    if has_weights:
        weights = f[WEIGHTS]
        if not isinstance(weights, h5py.Dataset) or weights.shape != (n_points,) \
                or weights.dtype not in (np.float32, np.float64):
            _fail(path, f"{WEIGHTS!r} must be a float32 or float64 array of shape ({n_points},)")
    graph = _read_graph_layout(path, f, n_agents)
    virtual = _check_virtual_sources(path, f)
    return DatasetInfo(path, n_points, points.shape[1], points.dtype, n_agents, has_labels, graph, has_weights,
                       virtual, offsets)


def check_offsets(path: str, offsets: np.ndarray, first: int, n_agents: int, n_points: int) -> None:
    """Fail unless offsets[first:first+len(offsets)] of a file of `n_agents` agents and
    `n_points` rows can be its agent offsets: starting at 0 (when the slice starts at agent
    0), never decreasing, ending at N (when it ends at agent M).  Slices that overlap by one
    offset and cover 0..M check the whole, and the first fault in agent order is the first
    slice's, as agreed among ranks (errors.agree)."""
    if first == 0 and offsets[0] != 0:
        _fail(path, f"{AGENT_OFFSETS!r} must start at 0, starts at {offsets[0]}")
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if drops.size:
        i = int(drops[0])
        _fail(path, f"{AGENT_OFFSETS!r} decreases at agent {first + i} ({offsets[i]} -> {offsets[i + 1]})")
    if first + len(offsets) - 1 == n_agents and offsets[-1] != n_points:
        _fail(path, f"{AGENT_OFFSETS!r} ends at {offsets[-1]}, but {POINTS!r} has {n_points} rows")


def read_block(info: DatasetInfo, first: int, stop: int, comm: MPI.Comm | None = None) -> AgentBlock:
    """Agents first..stop-1 and their offsets, read from the file and checked
    (`check_offsets`); with `comm`, every rank of it reads its own block at once
    (collective), through MPI-IO where h5py has it."""
    with reading(f"{info.path}: cannot read {AGENT_OFFSETS!r}"), _opened(info, comm) as f:
        offsets = f[AGENT_OFFSETS][first:stop + 1].astype(np.int64)
    check_offsets(info.path, offsets, first, info.n_agents, info.n_points)
    return AgentBlock(first, offsets)


def read_slice(info: DatasetInfo, comm: MPI.Comm) -> AgentBlock:
    """Rank r's slice of the agents, rM/R..(r+1)M/R, with their offsets, read and checked
    (collective): so the ranks check every offset, each reading O(M/R) of them."""
    rank, size = comm.Get_rank(), comm.Get_size()
    return agree(comm, read_block, info, rank * info.n_agents // size, (rank + 1) * info.n_agents // size, comm)


def place_blocks(info: DatasetInfo, comm: MPI.Comm) -> tuple[np.ndarray, AgentBlock]:
    """graph.block_placement of the file's agents over the ranks of `comm`, and this rank's
    block; collective.  No rank reads every agent's offsets: rank r reads and checks agents
    rM/R..(r+1)M/R, counts its agents whose work ends below each rank's target, and an
    allreduce of the R - 1 counts gives the bounds, equal to block_placement's."""
    from mpi4py import MPI
    rank, size = comm.Get_rank(), comm.Get_size()
    agree(comm, check_rank_count, info.n_agents, size)
    part = read_slice(info, comm)
    first, stop = part.first, part.stop
    work = (part.offsets[1:] + np.arange(first + 1, stop + 1)).astype(np.float64)
    below = np.searchsorted(work, placement_targets(info.n_points, info.n_agents, size), side="left")
    comm.Allreduce(MPI.IN_PLACE, below, op=MPI.SUM)
    bounds = block_bounds(below, info.n_agents)
    del part, work
    return bounds, agree(comm, read_block, info, int(bounds[rank]), int(bounds[rank + 1]), comm)


def _integer_array(path, f, name, ndim, what):
    ds = f[name]
    if not isinstance(ds, h5py.Dataset) or ds.ndim != ndim or ds.dtype.kind not in "iu" \
            or (ndim == 2 and ds.shape[1] != 2):
        _fail(path, f"{name!r} must be an integer array of shape {what}, has "
                    f"{getattr(ds, 'shape', 'a group')} {getattr(ds, 'dtype', '')}")
    return ds


def _read_graph_layout(path, f, n_agents):
    """The file's StoredGraph (None without one): an edge list is read and range-checked
    whole here; of a CSR only its shape and its two ends, the rest row by row (`rows`)."""
    if GRAPH not in f:
        return None
    if not isinstance(f[GRAPH], h5py.Group):
        _fail(path, f"{GRAPH!r} must be a group (holding 'indptr' and 'indices')")
    csr = [name for name in (INDPTR, INDICES) if name in f]
    if EDGES in f:
        if csr:
            _fail(path, f"{GRAPH!r} holds both {EDGES!r} and {csr[0]!r}: keep one form of the graph")
        edges = _integer_array(path, f, EDGES, 2, "(E, 2)")[()].astype(np.int64)
        outside = np.flatnonzero(((edges < 0) | (edges >= n_agents)).any(axis=1))
        if outside.size:
            a, b = edges[outside[0]]
            _fail(path, f"{EDGES!r} row {outside[0]} is ({a}, {b}): agent ids must be 0..{n_agents - 1}")
        return StoredGraph(path, n_agents, 2 * len(edges), edges)
    if len(csr) < 2:
        _fail(path, f"{GRAPH!r} must hold both {INDPTR!r} and {INDICES!r}" + (f", has only {csr[0]!r}" if csr else ""))
    indptr = _integer_array(path, f, INDPTR, 1, f"({n_agents + 1},)")
    if indptr.shape[0] != n_agents + 1:
        _fail(path, f"{INDPTR!r} must hold M+1 = {n_agents + 1} offsets (one more than the agents), "
                    f"has {indptr.shape[0]}")
    n_entries = _integer_array(path, f, INDICES, 1, "(2E,)").shape[0]
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0 or last != n_entries:
        _fail(path, f"{INDPTR!r} must run from 0 to the length of {INDICES!r}, {n_entries}; "
                    f"runs from {first} to {last}")
    return StoredGraph(path, n_agents, n_entries)


@dataclass(frozen=True)
class StoredGraph:
    """A dataset's own agent graph, as its file holds it: a CSR (`graph/indptr`,
    `graph/indices`), of which a rank reads only its own agents' rows, or, in files of
    earlier nkmpi versions, an edge list (`edges`), which every rank reads whole.

    A CSR's rows are checked as they are read (`rows`).  Whether they are symmetric, each
    agent among its neighbours' neighbours, spans the ranks: nkmpi.connectivity checks it."""

    path: str
    n_agents: int
    #: Entries of the adjacency: twice the edges (of a CSR that is symmetric).
    n_entries: int
    #: (E, 2) int64 the edge list of a file that holds one; None for a CSR.
    edges: np.ndarray | None = None

    @property
    def n_edges(self) -> int:
        return self.n_entries // 2

    def one_sided(self, u: int, v: int) -> str:
        """The error of a CSR that lists v among u's neighbours but not u among v's."""
        return (f"{self.path}: {INDICES!r} lists agent {v} among agent {u}'s neighbours but not {u} among "
                f"{v}'s: the graph must be undirected, each edge in both its agents' rows")

    def rows(self, agents) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, indices): the CSR rows of `agents` (ascending ids, in runs of consecutive
        ones, as a block placement gives), read from the file's CSR and checked: offsets that
        never decrease, neighbours that are agent ids, strictly ascending, never the agent."""
        if self.edges is not None:
            raise ValueError("an edge list is read whole: build its Network")
        agents = np.asarray(agents, dtype=np.int64)
        cuts = np.flatnonzero(np.diff(agents) != 1) + 1
        indptr, pieces = [np.zeros(1, dtype=np.int64)], []
        with reading(f"{self.path}: cannot read the graph's rows"), h5py.File(self.path, "r") as f:
            for run in np.split(agents, cuts) if len(agents) else []:
                first, stop = int(run[0]), int(run[-1]) + 1
                offsets = f[INDPTR][first:stop + 1].astype(np.int64, copy=False)
                drop = np.flatnonzero(np.diff(offsets) < 0)
                if drop.size:
                    at = int(drop[0])
                    _fail(self.path, f"{INDPTR!r} decreases at agent {first + at} "
                                     f"({offsets[at]} -> {offsets[at + 1]})")
                if offsets[0] < 0 or offsets[-1] > self.n_entries:
                    _fail(self.path, f"{INDPTR!r} leaves 0..{self.n_entries} between agents {first} and {stop}")
                neighbours = f[INDICES][offsets[0]:offsets[-1]].astype(np.int64, copy=False)
                offsets -= offsets[0]
                _check_rows_of(self.path, run, offsets, neighbours, self.n_agents)
                indptr.append(offsets[1:] + indptr[-1][-1])
                pieces.append(neighbours)
        if len(pieces) == 1:                    # one block of agents: its rows as read
            return np.concatenate(indptr), pieces[0]
        return np.concatenate(indptr), np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


#: What `graph.malformed_row` finds wrong with a row, by its code.
ROW_FAULTS = {1: "names an agent outside 0..{last}", 2: "is not strictly ascending (each neighbour once, in order)",
              3: "names the agent itself"}


def _check_rows_of(path, agents, indptr, indices, n_agents):
    """Fail on the first row of `agents` that names an agent outside 0..M-1, is not strictly
    ascending, or names its own agent."""
    row, fault = malformed_row(agents, indptr, indices, n_agents)
    if fault:
        neighbours = indices[indptr[row]:indptr[row + 1]]
        shown = ", ".join(map(str, neighbours[:8])) + (", ..." if len(neighbours) > 8 else "")
        _fail(path, f"{INDICES!r}: the row of agent {agents[row]} ({shown}) "
                    + ROW_FAULTS[fault].format(last=n_agents - 1))


def _check_virtual_sources(path, f):
    """Refuse a virtual `points`, `labels`, `weights` or offsets (data_tools.stitch writes the
    first three) unless
    every file it maps is where HDF5 looks for it and holds a plain dataset of the mapped size
    and dtype: HDF5 reads a missing or changed source as fill values, without an error.
    Returns whether there is any."""
    folder = os.path.dirname(os.path.join(os.getcwd(), path))     # HDF5's base for relative names
    found = False
    for name in (POINTS, LABELS, WEIGHTS, AGENT_OFFSETS):
        virtual = f.get(name)
        if not (isinstance(virtual, h5py.Dataset) and virtual.is_virtual):
            continue
        found = True
        for mapping in virtual.virtual_sources():
            stored = mapping.file_name.replace("%%", "%")         # HDF5 keeps names as printf patterns
            where = f"{path}: {name!r} maps rows of {stored}"
            if stored == ".":                                      # HDF5's name for the file itself
                _check_source(where, virtual, mapping, f)
                continue
            source = _source_file(stored, folder)
            if source is None:
                _fail(path, f"{name!r} maps rows of {stored}, but there is no {os.path.join(folder, stored)} "
                            "(a virtual dataset finds its files relative to its own folder: keep them together)")
            # Not h5py.is_hdf5, which drops `link/..` from a name: HDF5 goes up from the link's target.
            with reading(f"{path}: {name!r} maps rows of {source}, which cannot be read"):
                with h5py.File(source, "r") as g:
                    _check_source(where, virtual, mapping, g)
    return found


def _source_file(name, folder):
    """The file HDF5 opens first for a virtual dataset's source file `name`, or None: an absolute
    name as it is, a relative one under each folder of HDF5_VDS_PREFIX (`${ORIGIN}` standing for
    the virtual file's folder), then under the virtual file's folder.  HDF5's last resorts (the
    working directory, a missing absolute name's base name) are not taken: another file may
    have that name."""
    if os.path.isabs(name):
        return name if os.path.exists(name) else None
    prefixes = [p.replace("${ORIGIN}", folder) for p in os.environ.get("HDF5_VDS_PREFIX", "").split(":") if p]
    return next((c for c in (os.path.join(p, name) for p in [*prefixes, folder]) if os.path.exists(c)), None)


def _check_source(where, virtual, mapping, file):
    """The source dataset of `mapping` in the open `file` holds what the mapping reads, in the
    virtual dataset's dtype (HDF5 would convert another silently), and is not virtual itself."""
    name = mapping.dset_name.replace("%%", "%")
    source = file.get(name)
    if not isinstance(source, h5py.Dataset):
        raise InputError(f"{where}: {file.filename} has no dataset {name}")
    if source.is_virtual:
        raise InputError(f"{where}: {file.filename}:{name} is itself virtual: map the files it maps instead")
    selection = mapping.src_space
    if selection.get_select_type() == h5py.h5s.SEL_ALL:
        fits = source.shape[1:] == virtual.shape[1:] and source.size == mapping.vspace.get_select_npoints()
        wanted = f"{mapping.vspace.get_select_npoints()} values in rows of shape {virtual.shape[1:]}"
    else:
        last = selection.get_select_bounds()[1]
        fits = len(last) == source.ndim and all(i < n for i, n in zip(last, source.shape))
        wanted = f"a selection up to index {last}"
    if not fits or source.dtype != virtual.dtype:
        raise InputError(f"{where}: {file.filename}:{name} has shape {source.shape} and dtype {source.dtype}, "
                         f"the mapping reads {wanted} of {virtual.dtype} (was the file replaced?)")


def coordinate_limit(dtype: DTypeLike, n_features: int) -> float:
    """The largest |coordinate| the kernels take in `dtype`: a squared distance
    between two such points, summed over the features in the data's precision,
    stays finite, and its sums in float64 over up to 10^12 rows (and rho times
    the disagreement) do too.  Beyond it a run would end with an infinite
    objective instead of an error."""
    largest = min(np.finfo(dtype).max, np.finfo(np.float64).max * 1e-12)
    return float(np.sqrt(largest / (8 * n_features)))


#: Rows `check_rows` looks at in one go.
CHECK_ROWS = 65536


def check_rows(rows: np.ndarray, where: str, first_row: int = 0, block: AgentBlock | None = None,
               step: int = 1) -> None:
    """Fail on a row holding NaN, Inf or a coordinate beyond `coordinate_limit`,
    naming the row (and its agent, given the agents' block); `rows` are every step-th row
    from first_row on."""
    limit = coordinate_limit(rows.dtype, rows.shape[1])
    for start in range(0, len(rows), CHECK_ROWS):          # in chunks: no temporary copy of a shard
        bad = np.flatnonzero(~(np.abs(rows[start:start + CHECK_ROWS]) <= limit).all(axis=1))
        if bad.size:
            found = start + int(bad[0])
            row = first_row + step * found
            agent = "" if block is None else f" (agent {block.agent_of(row)})"
            what = ("contains NaN or Inf" if not np.isfinite(rows[found]).all()
                    else f"has a coordinate beyond +-{limit:.3g}, where squared distances overflow: "
                         "rescale the data")
            raise InputError(f"{where}: points row {row}{agent} {what}")


def _opened(info: DatasetInfo, comm: MPI.Comm | None) -> h5py.File:
    """The dataset's file, open to read rows: by the ranks of `comm` together
    (`hdf5.shared_file`) unless its data are virtual, else by this process alone."""
    return shared_file(info.path, None if info.virtual else comm)


def read_rows(info: DatasetInfo, block: AgentBlock, step: int = 1, comm: MPI.Comm | None = None) -> np.ndarray:
    """The points of the agents of `block` (every step-th row, for a thinned view),
    checked (`check_rows`); `comm` as in `read_row_range`."""
    return read_row_range(info, block.row_start, block.row_stop, step, comm, block)


def read_row_range(info: DatasetInfo, start: int, stop: int, step: int = 1, comm: MPI.Comm | None = None,
                   block: AgentBlock | None = None) -> np.ndarray:
    """Rows start..stop-1 of the points, whatever agents they belong to (every step-th),
    checked (`check_rows`, naming the agents of `block`).  With `comm`, every rank of it
    reads its own rows at once (collective), through MPI-IO where h5py has it, unless the
    data are virtual."""
    with reading(f"{info.path}: cannot read rows {start}..{stop}"), _opened(info, comm) as f:
        rows = f[POINTS][start:stop:step]
    check_rows(rows, info.path, start, block, step)
    return rows


def check_weights(weights: np.ndarray, where: str, first_row: int = 0, block: AgentBlock | None = None) -> None:
    """Fail on a weight that is negative, NaN or infinite, naming its row (and agent)."""
    bad = np.flatnonzero(~((weights >= 0) & np.isfinite(weights)))
    if bad.size:
        row = first_row + int(bad[0])
        agent = "" if block is None else f" (agent {block.agent_of(row)})"
        raise InputError(f"{where}: weights row {row}{agent} is {weights[bad[0]]!r}: weights must be finite "
                         "and non-negative")


#: The most the weights of a dataset's rows may add up to: the number of rows for which
#: `coordinate_limit` keeps the kernels' float64 sums finite.  A weight counts as that many
#: rows in the sums (a coreset's weights are counts of the rows each row stands for).
MAX_TOTAL_WEIGHT = 1e12


def weight_sum(weights: np.ndarray) -> float:
    """The rows' weights added up, inf where the sum overflows (checked by
    `check_total_weight`, so numpy's overflow warning is not printed)."""
    with np.errstate(over="ignore"):
        return float(weights.sum())


def check_total_weight(total: float) -> None:
    """Fail when the rows' weights, adding up to `total`, leave nothing to cluster or more
    than the kernels' sums hold (MAX_TOTAL_WEIGHT; an overflowing total is inf)."""
    if total == 0:
        raise InputError("every row has weight 0: nothing to cluster")
    if not total <= MAX_TOTAL_WEIGHT:
        raise InputError(f"the weights add up to {total:.3g}, more than {MAX_TOTAL_WEIGHT:.0e}, where weighted "
                         "sums could overflow: rescale the weights")


def read_weights(info: DatasetInfo, block: AgentBlock, comm: MPI.Comm | None = None) -> np.ndarray | None:
    """The row weights (float64) of the agents of `block`, checked; None when the file has
    none (every row weighs 1); `comm` as in `read_row_range`."""
    if not info.has_weights:
        return None
    start, stop = block.row_start, block.row_stop
    with reading(f"{info.path}: cannot read weights {start}..{stop}"), _opened(info, comm) as f:
        weights = f[WEIGHTS][start:stop].astype(np.float64)
    check_weights(weights, info.path, start, block)
    return weights


def read_labels(info: DatasetInfo, block: AgentBlock) -> np.ndarray | None:
    """Ground-truth labels of the agents of `block` (None when the file has none)."""
    if not info.has_labels:
        return None
    with h5py.File(info.path, "r") as f:
        return f[LABELS][block.row_start:block.row_stop]


def read_all(path: str | os.PathLike) -> tuple[DatasetInfo, np.ndarray]:
    """Every row of a dataset, for serial tools and the reference."""
    info = open_dataset(path)
    return info, read_rows(info, info.block(0, info.n_agents))


def write_graph(f: h5py.File, path: str | os.PathLike, n_agents: int, edges: np.ndarray) -> None:
    """Store the undirected graph of `edges` ((E, 2) agent ids; self loops and repeats
    dropped) in the open dataset file `f` as CSR, each edge in both its agents' rows: the
    layout a rank reads its own rows of."""
    try:
        network = Network.from_edges(n_agents, edges)
    except InputError as exc:
        raise InputError(f"{path}: the graph: {exc}") from None
    f[INDPTR], f[INDICES] = network.indptr, network.indices


def write_dataset(path: str | os.PathLike, points: np.ndarray, agent_offsets: np.ndarray,
                  labels: np.ndarray | None = None, edges: np.ndarray | None = None,
                  weights: np.ndarray | None = None) -> None:
    """Write a dataset v1 file whole (`write_dataset_rows` with all rows at once).

    points (N, p) float32/float64 grouped by agent; agent_offsets (M+1,);
    labels (N,) optional ground truth; edges (E, 2) optional agent graph (stored as
    CSR: `write_graph`); weights (N,) optional row weights.
    """
    points = np.asarray(points)
    write_dataset_rows(path, points.shape, points.dtype, agent_offsets, [(0, points, labels)],
                       has_labels=labels is not None, edges=edges, weights=weights)


def write_dataset_rows(path: str | os.PathLike, shape: tuple, dtype: DTypeLike, agent_offsets: np.ndarray,
                       blocks: Iterable[tuple], has_labels: bool = False, edges: np.ndarray | None = None,
                       weights: np.ndarray | None = None) -> None:
    """Write a dataset v1 file of `shape` (N, p) points in pieces, for data larger than memory.

    blocks yields (first_row, points, labels) with rows first_row.. of the file, labels
    None unless has_labels; weights, when given, are all N rows' weights (float64).  The
    file is written whole (`atomic_file`): `open_dataset` checks it before it takes its
    name, so a file nkmpi would refuse never does.
    """
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != tuple(shape[:1]):
            raise InputError(f"{path}: {WEIGHTS!r} must hold one weight per point: got shape {weights.shape} "
                             f"for {shape[0]} points")
        check_weights(weights, os.fspath(path))
    with atomic_file(path) as temporary:
        with h5py.File(temporary, "w") as f:
            write_header(f, FORMAT, VERSION)
            points_ds = f.create_dataset(POINTS, shape, dtype=dtype)
            labels_ds = f.create_dataset(LABELS, shape[:1], dtype=np.int64) if has_labels else None
            f[AGENT_OFFSETS] = np.asarray(agent_offsets, dtype=np.int64)
            if edges is not None:
                write_graph(f, path, len(agent_offsets) - 1, edges)
            if weights is not None:
                f[WEIGHTS] = weights
            for first_row, points, labels in blocks:
                points_ds[first_row:first_row + len(points)] = points
                if has_labels:
                    labels = np.asarray(labels, dtype=np.int64)
                    if labels.shape != (len(points),):
                        raise InputError(f"{path}: {LABELS!r} must hold one label per point: got shape "
                                         f"{labels.shape} for {len(points)} points")
                    labels_ds[first_row:first_row + len(points)] = labels
        open_dataset(temporary)
