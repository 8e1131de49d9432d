"""Numerical kernels of NK-means for a block of agents (numba, no MPI).

Every kernel works on a *block*: the agents one rank hosts, their rows stacked
in agent order and delimited by block-local offsets.  An agent's results never
depend on which other agents share its block, so a run's outcome does not
depend on the number of ranks, to the last bit.  For that every reduction runs
in a fixed order, the same as in the serial reference:

* squared distances add the features of one point in feature order, in the
  data's precision (float32 data is compared with float32 copies of the
  centers: no upcast copy of the points);
* cluster sums and counts (float64) accumulate rows in dataset order, each row
  times its weight (`weights`: one per row, or empty when every row weighs 1; a
  weight of 1 multiplies exactly, so unweighted data give the same bits), in
  blocks of `sum_block_rows(K)` rows of an agent: each block's sums start from
  zero and the blocks' sums are then added in order (an agent of one block adds
  its rows straight up), so that a pass which changes a few labels of a big
  agent sums again only the blocks those rows are in (local_pass);
* neighbour centers are added in ascending global agent id.

No fastmath: reassociation would break the agreement with the reference.
Threads (`set_threads`) split the agents of a block, never one agent's rows,
so results do not depend on the thread count either.
"""

from __future__ import annotations

import glob
import time
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .faults import NO_FAULTS, FaultModel, enabled, link_up, takes_part
from .row_sums import (LANES, add_moves, add_row_vectors, add_rows_and_gaps, add_squared_gaps, prefetch_rows,
                       prefetch_span, store_row, stream_fence, tile_center_distances, transpose_rows)

_JIT = dict(cache=True, nogil=True)


def set_threads(n_threads: int) -> None:
    """Compute threads of this process's kernels (one per rank by default)."""
    numba.set_num_threads(max(1, min(int(n_threads), numba.config.NUMBA_NUM_THREADS)))


def thread_limits(n_threads: int):
    """The thread pools of a run, as a context manager: `n_threads` for the kernels
    (`set_threads`, OpenMP), one for every BLAS.

    The kernels' matrix products call scipy's BLAS, which numba loads only with the first
    kernel that uses it; threadpoolctl limits only the libraries already loaded, so it is
    loaded here first.  Else it would start as many threads as the environment asks for
    (OPENBLAS_NUM_THREADS, which srun and a plain mpiexec pass on) or one a core, in every rank.
    """
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library, see above)
    from threadpoolctl import threadpool_limits
    set_threads(n_threads)              # also starts the kernels' OpenMP pool, so that it is limited too
    return threadpool_limits(limits={"blas": 1, "openmp": n_threads})


#: A kernel whose threads would each compute fewer numbers than this between two joins runs
#: on one thread: starting and joining them costs more than they share.  (Measured on 2
#: cores, center updates of 128 / 256 / 512 agents x 512 numbers: 78 / 148 / 314 us each on
#: one thread, 108-123 / 146-151 / 226-238 us on two.)
NUMBERS_A_THREAD = 2**16


def in_parallel(kernel, parallel_kernel, n_agents, *args, numbers=None):
    """Run kernel(*args, first, stop) over all agents: directly on one thread, else
    over ranges of agents shared by the threads.  Each agent is computed the same
    way either way, so results never depend on the thread count.  numbers : what the
    threads compute between two joins, when that is small enough to matter
    (NUMBERS_A_THREAD)."""
    threads = numba.get_num_threads()
    if threads == 1 or n_agents < 2 or (numbers is not None and numbers < NUMBERS_A_THREAD * threads):
        kernel(*args, 0, n_agents)
    else:
        parallel_kernel(*args, min(n_agents, 64 * threads), n_agents)


#: Rows of one agent handled together: their features are transposed into a
#: (p, TILE) scratch so that the distance loop runs over rows, vectorized.
TILE = 256
#: A tile's (K, rows) distances hold at most this many numbers: with many clusters a
#: tile has fewer rows (`tile_rows`), so that no scratch grows with K times the rows.
TILE_ELEMENTS = 2**16


@njit(inline='always', **_JIT)
def tile_rows(n_clusters, most):
    """Rows per tile for K = n_clusters: `most`, or fewer (at least 16) to keep K x rows
    within TILE_ELEMENTS; a multiple of 16, whole vectors of rows in either precision
    (`tile_distances`).  Tiling never changes a result: each row is computed alone."""
    return max(16, min(most, TILE_ELEMENTS // max(n_clusters, 1)) // 16 * 16)


@njit(inline='always', **_JIT)
def tile_distances(points, start, n, center, rows_t, dist):
    """dist[k, i]: the squared distance of row start + i (i < n <= tile's rows) to center[k] (the
    data's precision), features added in order.  The rows are transposed into rows_t
    first, so that the loop over rows vectorizes."""
    n_features = center.shape[1]
    whole_rows, whole_features = transpose_rows(points, start, n, rows_t)     # whole blocks; the rest one by one
    for i in range(whole_rows):
        for j in range(whole_features, n_features):
            rows_t[j, i] = points[start + i, j]
    for i in range(whole_rows, n):
        for j in range(n_features):
            rows_t[j, i] = points[start + i, j]
    # Whole vectors of rows, the last running past n into stale columns of the scratch
    # (their distances go unread): a loop over n rows runs scalar below LLVM's vector step
    # (32 rows), which every row of a 16-row agent would.
    lanes = 64 // rows_t.itemsize
    tile_center_distances(dist, rows_t, center, (n + lanes - 1) // lanes)   # features in order, as the reference


#: The `weights` of unweighted data: every row weighs 1.
UNWEIGHTED = np.zeros(0)


@njit(inline='always', **_JIT)
def row_weight(weights, row):
    """The weight of `row`: weights[row], or 1 when `weights` is empty (unweighted)."""
    return weights[row] if weights.shape[0] else 1.0


#: The rows of a block of an agent's cluster sums (`sum_block_rows`): at least SUM_BLOCK_ROWS,
#: and SUM_BLOCK_ROWS_PER_CLUSTER a cluster, so that keeping every block's K x p sums and K
#: counts (local_pass) takes at most (p + 1) / 8 bytes a row, about a 64th of float64 rows.
SUM_BLOCK_ROWS, SUM_BLOCK_ROWS_PER_CLUSTER = 1024, 64


@register_jitable
def sum_block_rows(n_clusters):
    """Rows of an agent whose cluster sums are added up apart, for K = n_clusters (plain
    Python too: the serial reference adds its sums so)."""
    return max(SUM_BLOCK_ROWS, SUM_BLOCK_ROWS_PER_CLUSTER * n_clusters)


@njit(inline='always', **_JIT)
def zero_agent(sums, counts, a):
    """sums[a] = 0 and counts[a] = 0, number by number: the same as the slices, without the
    view of a row that numba makes (and counts references to) for every agent."""
    for k in range(sums.shape[1]):
        counts[a, k] = 0.0
        for j in range(sums.shape[2]):
            sums[a, k, j] = 0.0


@njit(inline='always', **_JIT)
def zeroed_block(sums, counts, a, block_sums, block_counts, first_block, b):
    """Where block b of agent a's rows is summed, zeroed: sums[a] itself where the agent is one
    block (first_block < 0), else its kept block first_block + b (then added to them: fold_block)."""
    into, into_counts, at = (sums, counts, a) if first_block < 0 else (block_sums, block_counts, first_block + b)
    zero_agent(into, into_counts, at)
    return into, into_counts, at


@njit(inline='always', **_JIT)
def fold_block(sums, counts, a, first_block, into, into_counts, at):
    """Add a block just summed (zeroed_block) to agent a's sums, which hold its blocks before it:
    the blocks in order, while the block is in the cache.  Nothing where the agent is one
    block (first_block < 0), summed in place."""
    if first_block < 0:
        return
    for k in range(sums.shape[1]):
        counts[a, k] += into_counts[at, k]
        for j in range(sums.shape[2]):
            sums[a, k, j] += into[at, k, j]


@njit(**_JIT)
def _assign(points, weights, offsets, centers, labels, sums, counts, sse, changed, first, stop):
    n_clusters, n_features = centers.shape[1], centers.shape[2]
    tile = tile_rows(n_clusters, TILE)
    rows_t = np.zeros((n_features, tile), dtype=points.dtype)      # zeros: tile_distances reads past a tile's rows
    dist = np.empty((n_clusters, tile), dtype=points.dtype)
    center = np.empty((n_clusters, n_features), dtype=points.dtype)
    block = sum_block_rows(n_clusters)
    block_sums, block_counts = np.empty((1, n_clusters, n_features)), np.empty((1, n_clusters))
    for a in range(first, stop):
        for k in range(n_clusters):
            for j in range(n_features):
                center[k, j] = centers[a, k, j]          # in the data's precision
        agent_sse = 0.0
        agent_changed = 0
        zero_agent(sums, counts, a)
        lo, hi = offsets[a], offsets[a + 1]
        own_blocks = -1 if hi - lo <= block else 0     # an agent of one block adds its rows straight up
        for block_start in range(lo, hi, block):
            block_stop = min(block_start + block, hi)
            into, into_counts, at = zeroed_block(sums, counts, a, block_sums, block_counts, own_blocks, 0)
            for start in range(block_start, block_stop, tile):
                n = min(tile, block_stop - start)
                tile_distances(points, start, n, center, rows_t, dist)
                for i in range(n):
                    best = 0
                    for k in range(1, n_clusters):
                        if dist[k, i] < dist[best, i]:   # strict: ties go to the lowest k
                            best = k
                    row = start + i
                    if labels[row] != best:
                        agent_changed += 1
                        labels[row] = best
                    weight = row_weight(weights, row)
                    agent_sse += weight * np.float64(dist[best, i])
                    into_counts[at, best] += weight
                    for j in range(n_features):
                        into[at, best, j] += weight * np.float64(points[row, j])
            fold_block(sums, counts, a, own_blocks, into, into_counts, at)
        sse[a] = agent_sse
        changed[a] = agent_changed


@njit(parallel=True, **_JIT)
def _assign_parallel(points, weights, offsets, centers, labels, sums, counts, sse, changed, n_ranges, n_agents):
    for r in prange(n_ranges):
        _assign(points, weights, offsets, centers, labels, sums, counts, sse, changed,
                r * n_agents // n_ranges, (r + 1) * n_agents // n_ranges)


#: Bytes on whose boundary `written_zeros` starts its arrays: a vector register's, so that
#: rows of whole vectors can be streamed (row_sums.store_row).
ALIGNMENT = 64


def _last_level_cache_bytes() -> int:
    """The largest cache Linux reports for the first CPU, in bytes (0 where it tells none)."""
    largest = 0
    for size_file in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(size_file) as f:
                text = f.read().strip()
            largest = max(largest, int(text.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1))
        except (OSError, ValueError, IndexError):
            pass
    return largest


#: New centers of at least this many bytes may be streamed to memory past the caches (the
#: center update, `_update`; `choose_stores`): more than the last-level cache holds, they would
#: only flush it, but where they fit (some CPUs hold hundreds of MB), the next update finds them
#: there.  At least 64 MiB, for CPUs whose reported cache is one core group's share.
STREAM_BYTES = max(64 * 2**20, _last_level_cache_bytes())


#: choose_stores times each way this many times at most ...
STORE_TRIALS = 2
#: ... and drops a way this much slower than the other after one call each.
CLEARLY_SLOWER = 1.25


def choose_stores(out_bytes: int, update) -> bool:
    """Whether a run's center updates write their new centers past the caches (streamed,
    row_sums.store_row) or in place, found by trying both at set-up: update(streamed) makes
    one of the run's own updates into its spare centers, which the loop overwrites.  Each
    way writes the same numbers; only the speed depends on the choice, and each rank makes
    its own.

    Which is faster depends on the CPU, not on the sizes alone: target 6's update with two
    ranks was 10% faster streamed on one machine of the kind CI runs on and twice as slow on
    two others (docs/performance.md).  Outputs smaller than STREAM_BYTES are written in
    place, untried.  Larger ones alternate, streamed first, until each way has STORE_TRIALS
    calls, or one each where one way is CLEARLY_SLOWER; then the way whose fastest call was
    faster is kept.  Tried in the loop instead, the slower way's calls slowed the run (target
    6's first update took 171 to 177 ms streamed against 146 in place)."""
    if out_bytes < STREAM_BYTES:
        return False
    seconds = ([], [])                  # in place, streamed
    for turn in range(2 * STORE_TRIALS):
        streamed = turn % 2 == 0
        started = time.perf_counter()
        update(streamed)
        seconds[streamed].append(time.perf_counter() - started)
        if not streamed:
            fastest = [min(way) for way in seconds]
            if max(fastest) > CLEARLY_SLOWER * min(fastest):
                break
    return fastest[True] < fastest[False]


def written_zeros(shape, dtype=np.float64) -> np.ndarray:
    """Zeros whose memory is written now, not on first use as np.zeros' is: a run allocates
    its loop's state at set-up, and its first iteration should not pay the page faults (a
    second or more per gigabyte on some virtual machines).  They start on an ALIGNMENT
    boundary."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    memory = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = -memory.ctypes.data % ALIGNMENT
    array = memory[start:start + size].view(dtype).reshape(shape)
    array.fill(0)
    return array


def accumulators(n_agents: int, n_clusters: int, n_features: int) -> tuple[np.ndarray, ...]:
    """Output arrays of `assign_and_accumulate`, allocated once and reused every iteration."""
    return (written_zeros((n_agents, n_clusters, n_features)), written_zeros((n_agents, n_clusters)),
            written_zeros(n_agents), written_zeros(n_agents, np.int64))


def assign_and_accumulate(points: np.ndarray, offsets: np.ndarray, centers: np.ndarray, labels: np.ndarray,
                          out: tuple[np.ndarray, ...] | None = None,
                          weights: np.ndarray = UNWEIGHTED) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One assignment pass (eq. 25) with the statistics of the center update.

    points : (n, p) float32/float64, the block's rows; offsets : (L+1,) block-local.
    centers : (L, K, p) float64; labels : (n,) int32, previous labels (-1: none), overwritten.
    out : arrays from `accumulators` to reuse (they are overwritten).
    weights : (n,) float64 row weights, or UNWEIGHTED.

    Returns sums (L, K, p) float64, counts (L, K) float64 (the clusters' weights), sse
    (L,) float64 (sum of each row's weight times its squared distance to its nearest
    center) and the number of rows whose label changed.
    """
    sums, counts, sse, changed = out if out is not None else accumulators(*centers.shape)
    in_parallel(_assign, _assign_parallel, len(centers),
                 points, weights, offsets, centers, labels, sums, counts, sse, changed)
    return sums, counts, sse, int(changed.sum())


@njit(inline='always', **_JIT)
def _add_neighbours(total, rows, nbr_idx, first, stop):
    """total += rows[nbr_idx[e]] for e in first..stop-1, in that order.  Whole vectors of
    columns are summed in registers (row_sums); the last width % LANES columns four rows
    at a time, with one load and store of their running total per four rows.  Either way
    each column gets the same additions in the same order."""
    add_row_vectors(total, rows, nbr_idx, first, stop)
    _add_neighbour_tails(total, rows, nbr_idx, first, stop)


@njit(inline='always', **_JIT)
def _add_neighbour_tails(total, rows, nbr_idx, first, stop):
    """`_add_neighbours` for the last width % LANES columns, which the vectors leave."""
    width = total.shape[0]
    column = width // LANES * LANES
    if column == width:
        return
    e = first
    while e + 4 <= stop:
        r0, r1, r2, r3 = rows[nbr_idx[e]], rows[nbr_idx[e + 1]], rows[nbr_idx[e + 2]], rows[nbr_idx[e + 3]]
        for w in range(column, width):
            total[w] = (((total[w] + r0[w]) + r1[w]) + r2[w]) + r3[w]
        e += 4
    while e < stop:
        row = rows[nbr_idx[e]]
        for w in range(column, width):
            total[w] += row[w]
        e += 1


NO_IDS = np.zeros(0, dtype=np.int64)

#: The update prefetches what the agent this many agents on will need: its far rows
#: (`Prefetch`), its sums and the row its new centers go to.  About a microsecond ahead.
PREFETCH_AGENTS = 8
#: A neighbour row not read within this many entries before (about 2 MB of rows read, the
#: order of a core's L2 cache) is a far row, one to prefetch.
FAR_ENTRIES = 4096


class Prefetch(NamedTuple):
    """The far rows of each agent's update (`far_rows`): far_ptr (L+1,), and the rows of
    ext agent a will read that the caches will likely have let go,
    rows[far_ptr[a]:far_ptr[a+1]].  Empty: nothing prefetched."""
    far_ptr: np.ndarray
    rows: np.ndarray


NO_PREFETCH = Prefetch(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


@njit(**_JIT)
def _far_rows(nbr_ptr, nbr_idx, n_rows, far_entries, far_ptr, rows):
    last_read = np.full(n_rows, -far_entries - 1, dtype=np.int64)
    n_far = 0
    for a in range(len(nbr_ptr) - 1):
        for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
            row = nbr_idx[e]
            if e - last_read[row] > far_entries:
                if len(rows):
                    rows[n_far] = row
                n_far += 1
            last_read[row] = e
        if len(rows):
            far_ptr[a + 1] = n_far
    return n_far


def far_rows(nbr_ptr: np.ndarray, nbr_idx: np.ndarray, n_rows: int) -> Prefetch:
    """Each agent's neighbour rows (of an `ext` of n_rows rows) that the update, taking the
    agents in order, read last more than FAR_ENTRIES entries before, or never: the rows it
    would wait for, up to a few a sensor network's agent, which no hardware prefetcher
    foresees.  Computed once a run."""
    nbr_ptr = np.asarray(nbr_ptr, dtype=np.int64)
    nbr_idx = np.asarray(nbr_idx)
    n_far = _far_rows(nbr_ptr, nbr_idx, n_rows, FAR_ENTRIES, nbr_ptr[:0], nbr_idx[:0])
    far_ptr, rows = np.zeros(len(nbr_ptr), dtype=np.int64), np.empty(n_far, dtype=nbr_idx.dtype)
    _far_rows(nbr_ptr, nbr_idx, n_rows, FAR_ENTRIES, far_ptr, rows)
    return Prefetch(far_ptr, rows)


#: No moves tracked (center_update's `moved`); never written, passed as an argument.
NO_MOVES = np.zeros((0, 0))
#: No edge sums measured (center_update's `edge_sums`); never written.
NO_EDGE_SUMS = np.zeros(0)


@njit(inline='always', **_JIT)
def _add_moves(moved, a, x, o, n_clusters, n_features, single, f64_err, eta):
    """moved[a, k] += how far each center k moved from x to o (flat K x p rows), rounded up,
    as row_sums.add_moves measures it, for centers narrower than a vector (p < LANES), which
    that would pad: four partial sums a center, so that no long chain of additions holds up
    the update."""
    for k in range(n_clusters):
        base = k * n_features
        s0 = s1 = s2 = s3 = 0.0
        j = 0
        while j + 4 <= n_features:
            if single:
                d0 = np.float64(np.float32(o[base + j])) - np.float64(np.float32(x[base + j]))
                d1 = np.float64(np.float32(o[base + j + 1])) - np.float64(np.float32(x[base + j + 1]))
                d2 = np.float64(np.float32(o[base + j + 2])) - np.float64(np.float32(x[base + j + 2]))
                d3 = np.float64(np.float32(o[base + j + 3])) - np.float64(np.float32(x[base + j + 3]))
            else:
                d0, d1 = o[base + j] - x[base + j], o[base + j + 1] - x[base + j + 1]
                d2, d3 = o[base + j + 2] - x[base + j + 2], o[base + j + 3] - x[base + j + 3]
            s0 += d0 * d0
            s1 += d1 * d1
            s2 += d2 * d2
            s3 += d3 * d3
            j += 4
        while j < n_features:
            if single:
                d0 = np.float64(np.float32(o[base + j])) - np.float64(np.float32(x[base + j]))
            else:
                d0 = o[base + j] - x[base + j]
            s0 += d0 * d0
            j += 1
        gap = (s0 + s1) + (s2 + s3)
        moved[a, k] = (moved[a, k] + np.sqrt(gap) * (1.0 + f64_err) + eta) * (1.0 + f64_err)


@njit(**_JIT)
def _update(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, scaled, alpha, out, fault_params, update,
            agent_ids, ext_ids, moved, single, f64_err, eta, edge_sums, edge_first, far_ptr, far_idx, streamed,
            first, stop):
    """The update of agents first..stop-1, prefetching their far rows (`Prefetch`) where
    far_ptr has rows; scaled: `sums` and `counts` hold S / rho and
    n / rho already (the same numbers: each is one division either way).  With rows in
    `moved`, each center's move is added to it (row_sums.add_moves, or _add_moves for centers
    narrower than a vector); with rows in `edge_sums`, each agent's `_up_edge_sum` of ext, from
    its entry `edge_first` on, is written to it while its neighbours' rows are at hand.
    streamed: the new centers are written past the caches (row_sums.store_row), else
    straight into `out`, where the next update may find them in the cache."""
    width = centers.shape[1] * centers.shape[2]
    _update_with(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, scaled, alpha, out, fault_params, update,
                 agent_ids, ext_ids, moved, single, f64_err, eta, edge_sums, edge_first, far_ptr, far_idx, streamed,
                 _update_scratch(width), first, stop)


@njit(inline='always', **_JIT)
def _update_scratch(width):
    """`_update_with`'s scratch for rows of `width` (K x p) numbers: the neighbours' sum, an
    agent's new centers when streamed, and `_up_edge_sum`'s gaps, in one array."""
    return np.zeros(2 * width + _gap_width(width))


@njit(**_JIT)
def _update_with(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, scaled, alpha, out, fault_params, update,
                 agent_ids, ext_ids, moved, single, f64_err, eta, edge_sums, edge_first, far_ptr, far_idx, streamed,
                 scratch_space, first, stop):
    """`_update` in `scratch_space` (`_update_scratch`), so that many updates in a row allocate
    it once: a few agents' update takes microseconds, of which three allocations were a tenth."""
    n_clusters, n_features = centers.shape[1], centers.shape[2]
    width = n_clusters * n_features
    # Contiguous rows of K x p, taken once: vectorizable loops, and no view made per agent.
    flat_ext = ext.reshape(ext.shape[0], width)
    flat_centers, flat_sums = centers.reshape(len(centers), width), sums.reshape(len(sums), width)
    flat_out = out.reshape(len(out), width)
    total = scratch_space[:width]
    scratch = scratch_space[width:2 * width]    # streamed: each agent's new centers, then stored past the caches
    gaps = scratch_space[2 * width:]
    faulty = enabled(fault_params)
    tracking = moved.shape[0] > 0
    measuring = edge_sums.shape[0] > 0
    prefetching = far_ptr.shape[0] > 0
    for a in range(first, stop):
        ahead = a + PREFETCH_AGENTS
        if prefetching and ahead < stop:        # what agent `ahead` will read, and where it will write
            prefetch_rows(flat_ext, far_idx, far_ptr[ahead], far_ptr[ahead + 1])
            prefetch_span(flat_sums, ahead, ahead + 1)
            if not streamed:
                prefetch_span(flat_out, ahead, ahead + 1)
        if measuring and faulty:                # of x(t), every edge whatever the faults
            edge_sums[a] = _up_edge_sum(flat_ext, a, edge_first[a], nbr_ptr[a + 1], nbr_idx, gaps)
        if faulty and not takes_part(fault_params, agent_ids[a], update):
            out[a] = centers[a]
            continue
        for w in range(width):
            total[w] = 0
        if faulty:
            degree = 0
            for e in range(nbr_ptr[a], nbr_ptr[a + 1]):
                if link_up(fault_params, agent_ids[a], ext_ids[nbr_idx[e]], update):
                    degree += 1
                    _add_neighbours(total, flat_ext, nbr_idx, e, e + 1)
        else:
            degree = nbr_ptr[a + 1] - nbr_ptr[a]
            if measuring:                       # the edges' gaps with the same rows, loaded once
                edge_sums[a] = _neighbours_and_up_edges(total, gaps, flat_ext, a, nbr_ptr[a], edge_first[a],
                                                        nbr_ptr[a + 1], nbr_idx)
            else:
                _add_neighbours(total, flat_ext, nbr_idx, nbr_ptr[a], nbr_ptr[a + 1])
        x, s = flat_centers[a], flat_sums[a]
        o = scratch if streamed else flat_out[a]
        for k in range(n_clusters):
            weight = (counts[a, k] if scaled else counts[a, k] / rho) + degree
            base = k * n_features
            if weight == 0:                     # no points, no neighbours: keep the center
                for j in range(n_features):
                    o[base + j] = x[base + j]
            elif scaled:                        # (loops from 0: range(base, ...) is not vectorized)
                for j in range(n_features):
                    w = base + j
                    mu = (s[w] + total[w]) / weight
                    o[w] = x[w] - alpha * (x[w] - mu)
            else:
                for j in range(n_features):
                    w = base + j
                    mu = (s[w] / rho + total[w]) / weight
                    o[w] = x[w] - alpha * (x[w] - mu)
        if tracking:
            if n_features >= LANES:         # whole vectors a center: eight centers at a time
                add_moves(moved, a, x, o, n_features, single, f64_err, eta)
            else:
                _add_moves(moved, a, x, o, n_clusters, n_features, single, f64_err, eta)
        if streamed:
            store_row(flat_out, a, o)
    if streamed:
        stream_fence()


@njit(parallel=True, **_JIT)
def _update_parallel(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, scaled, alpha, out, fault_params, update,
                     agent_ids, ext_ids, moved, single, f64_err, eta, edge_sums, edge_first, far_ptr, far_idx, streamed,
                     n_ranges, n_agents):
    for r in prange(n_ranges):
        _update(centers, ext, nbr_ptr, nbr_idx, sums, counts, rho, scaled, alpha, out, fault_params, update,
                agent_ids, ext_ids, moved, single, f64_err, eta, edge_sums, edge_first, far_ptr, far_idx, streamed,
                r * n_agents // n_ranges, (r + 1) * n_agents // n_ranges)


@njit(**_JIT)
def _updates(current, spare, nbr_ptr, nbr_idx, sums, counts, rho, alpha, fault_params, first_update, n_updates,
             agent_ids, ext_ids, far_ptr, far_idx, streamed, first, stop):
    # No moves, edge sums or their first entries (a global array would be read-only to numba).
    untracked, unmeasured, unstarted = np.zeros((0, 0)), np.zeros(0), np.zeros(0, dtype=np.int64)
    scratch_space = _update_scratch(current.shape[1] * current.shape[2])
    for step in range(n_updates):
        _update_with(current, current, nbr_ptr, nbr_idx, sums, counts, rho, True, alpha, spare, fault_params,
                     first_update + step, agent_ids, ext_ids, untracked, False, 0.0, 0.0, unmeasured, unstarted,
                     far_ptr, far_idx, streamed, scratch_space, first, stop)
        current, spare = spare, current


@njit(parallel=True, **_JIT)
def _updates_parallel(current, spare, nbr_ptr, nbr_idx, sums, counts, rho, alpha, fault_params, first_update,
                      n_updates, agent_ids, ext_ids, far_ptr, far_idx, streamed, n_ranges, n_agents):
    untracked, unmeasured, unstarted = np.zeros((0, 0)), np.zeros(0), np.zeros(0, dtype=np.int64)
    for step in range(n_updates):           # each update reads the whole previous one: ranges join per step
        for r in prange(n_ranges):
            _update(current, current, nbr_ptr, nbr_idx, sums, counts, rho, True, alpha, spare, fault_params,
                    first_update + step, agent_ids, ext_ids, untracked, False, 0.0, 0.0, unmeasured, unstarted,
                    far_ptr, far_idx, streamed, r * n_agents // n_ranges, (r + 1) * n_agents // n_ranges)
        current, spare = spare, current


def center_update(centers: np.ndarray, ext: np.ndarray, nbr_ptr: np.ndarray, nbr_idx: np.ndarray,
                  sums: np.ndarray, counts: np.ndarray, rho: float, alpha: float, out: np.ndarray | None = None,
                  faults: FaultModel = NO_FAULTS, update: int = 0, agent_ids: np.ndarray = NO_IDS,
                  ext_ids: np.ndarray = NO_IDS, moved: np.ndarray = NO_MOVES,
                  move_terms: tuple = (False, 0.0, 0.0), edge_sums: np.ndarray = NO_EDGE_SUMS,
                  edge_first: np.ndarray = NO_IDS, streamed: bool = False,
                  prefetch: Prefetch = NO_PREFETCH, scaled: bool = False) -> np.ndarray:
    """x <- x - alpha (x - mu), mu = (S/rho + sum_l x_l) / (n/rho + |Omega|)  (eqs. 26-27).

    Agent a's neighbours are rows nbr_idx[nbr_ptr[a]:nbr_ptr[a+1]] of `ext` (the
    block's centers followed by those received), in ascending global id.  An
    empty local cluster averages the neighbours; a cluster with neither points
    nor neighbours keeps its center.  Writes into `out` when given.

    faults : a faults.FaultModel (NO_FAULTS, the default, draws nothing); any other
    needs the global ids of the block's agents (`agent_ids`) and of each row of `ext`
    (`ext_ids`): its draws are keyed on them and on `update`, the update's number.
    Only neighbours whose link is up count in Omega, and an agent that sits out keeps
    its centers.

    moved : (L, K) a LocalPass's `moved` (one made with moves_given), to which each
    center's move is added, measured as its `move_terms` say; by default nothing.

    edge_sums : (L,) where to write each agent's sum over its edges to higher ids of the
    squared gaps of ext's centers (x(t)), as `edge_disagreement` sums them: the
    disagreement at a monitoring point, read while the update has the rows at hand
    (`exact_partials(edge_sums)`); needs `edge_first`, the agents' `first_up_edges`.  By
    default nothing.

    streamed : whether the new centers are written past the caches (row_sums.store_row,
    where out's rows are aligned; the same numbers either way; choose_stores decides a run's).

    prefetch : the agents' `far_rows` (over these nbr_ptr and nbr_idx), to prefetch with
    each agent's sums and new centers a few agents ahead; the same numbers either way.

    scaled : whether `sums` and `counts` hold S / rho and n / rho already (LocalPass.run's
    `scale`): the same numbers, without two divisions a center coordinate every update.
    """
    if out is None:
        out = np.empty_like(centers)
    if (len(agent_ids) != len(centers) or len(ext_ids) != len(ext)) and faults is not NO_FAULTS:
        raise ValueError("a fault model needs the global ids of the agents and of ext's rows")
    if len(edge_sums) and (edge_sums.shape != (len(centers),) or edge_first.shape != (len(centers),)):
        raise ValueError("edge sums need one place and one first entry (first_up_edges) per agent")
    if len(moved) and moved.shape != centers.shape[:2]:
        raise ValueError(f"moved must hold one number per center, {centers.shape[:2]}, not {moved.shape}")
    single, f64_err, eta = move_terms
    in_parallel(_update, _update_parallel, len(centers), centers, ext, nbr_ptr, nbr_idx, sums, counts,
                float(rho), bool(scaled), float(alpha), out, faults.params, int(update), agent_ids, ext_ids, moved,
                bool(single), float(f64_err), float(eta), edge_sums, edge_first, prefetch.far_ptr, prefetch.rows,
                bool(streamed), numbers=centers.size)
    return out


def local_center_updates(current: np.ndarray, spare: np.ndarray, nbr_ptr: np.ndarray, nbr_idx: np.ndarray,
                         sums: np.ndarray, counts: np.ndarray, rho: float, alpha: float, n_updates: int,
                         faults: FaultModel = NO_FAULTS, first_update: int = 0, agent_ids: np.ndarray = NO_IDS,
                         ext_ids: np.ndarray = NO_IDS, streamed: bool = False,
                         prefetch: Prefetch = NO_PREFETCH, scaled: bool = False) -> np.ndarray:
    """`n_updates` center updates in one call, for a block whose agents' neighbours are all
    its own (nbr_idx indexes the block's centers; no ghosts): each is `center_update` from
    the last, alternating between `current` and `spare`.  Returns the array holding the
    result.  Bit for bit the updates one by one, without a Python call and an exchange
    per update: on one rank, a run's inner updates and the estimator's cost microseconds
    each, not tens.  streamed, prefetch and scaled : as center_update's."""
    if (len(agent_ids) != len(current) or len(ext_ids) != len(current)) and faults is not NO_FAULTS:
        raise ValueError("a fault model needs the global ids of the agents and of ext's rows")
    if not scaled:                                  # divided once for every update
        sums, counts = sums / rho, counts / rho
    in_parallel(_updates, _updates_parallel, len(current), current, spare, nbr_ptr, nbr_idx, sums, counts,
                float(rho), float(alpha), faults.params, int(first_update), int(n_updates), agent_ids, ext_ids,
                prefetch.far_ptr, prefetch.rows, bool(streamed),
                numbers=current.size)               # the threads join every update
    return spare if n_updates % 2 else current


def cluster_means(sums: np.ndarray, counts: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Lloyd's update: each cluster's mean; an empty cluster keeps its center."""
    means = np.array(centers, dtype=np.float64)
    filled = counts > 0
    means[filled] = sums[filled] / counts[filled, None]
    return means


@njit(**_JIT)
def pack_rows(source: np.ndarray, index: np.ndarray, control: float, out: np.ndarray) -> None:
    """out[i] = source[index[i]], or a row filled with `control` where index[i] < 0:
    packing the send buffer without temporaries."""
    for i in range(len(index)):
        if index[i] < 0:
            out[i] = control
        else:
            out[i] = source[index[i]]


#: Room for the partials of an exact sum: float64 spans 2098 bits, each partial 53.
EXACT_PARTIALS = 48


@njit(**_JIT)
def _add_exact(partials, n, x):
    """Add x to the n non-overlapping `partials` without rounding (Shewchuk's
    algorithm, the one behind math.fsum); returns their new number."""
    i = 0
    for j in range(n):
        y = partials[j]
        if abs(x) < abs(y):
            x, y = y, x
        high = x + y
        low = y - (high - x)
        if low != 0.0:
            partials[i] = low
            i += 1
        x = high
    partials[i] = x
    return i + 1


@njit(**_JIT)
def _exact_partials(values):
    partials = np.zeros(EXACT_PARTIALS)
    n = 0
    for value in values:
        n = _add_exact(partials, n, value)
    return partials[:n].copy()


def exact_partials(values: np.ndarray) -> np.ndarray:
    """Floats whose exact sum is the exact sum of `values`.

    math.fsum of the partials of several blocks is the correctly rounded sum of
    all their values, however the values were split into blocks: rank 0 adds
    the ranks' metrics so, and they do not depend on the number of ranks.
    """
    return _exact_partials(np.asarray(values, dtype=np.float64))


@njit(**_JIT)
def _coordinate_partials(centers, first, out):
    """Agent by agent, each coordinate's value added to that coordinate's partials: the
    same additions in the same order as one coordinate at a time, with the centers read
    once, row by row (a coordinate at a time read them once per coordinate)."""
    flat = centers.reshape(centers.shape[0], centers.shape[1] * centers.shape[2])
    n_coordinates = out.shape[0]
    counts = np.zeros(n_coordinates, dtype=np.int64)
    for a in range(flat.shape[0]):
        for c in range(n_coordinates):
            counts[c] = _add_exact(out[c, 1:], counts[c], flat[a, first + c])
    for c in range(n_coordinates):
        out[c, 0] = counts[c]
        out[c, 1 + counts[c]:] = 0.0


def coordinate_partials(centers: np.ndarray, first: int = 0, stop: int | None = None) -> np.ndarray:
    """For coordinates first..stop-1 of the K x p (all by default), exact partials of each
    one's sum over the block's agents: rows of [count, partials...] (see `exact_partials`),
    (stop - first, 1 + EXACT_PARTIALS).  `merge_partials` joins two blocks' rows exactly, in
    any order."""
    stop = centers.shape[1] * centers.shape[2] if stop is None else stop
    out = np.zeros((stop - first, 1 + EXACT_PARTIALS))
    _coordinate_partials(np.ascontiguousarray(centers, dtype=np.float64), first, out)
    return out


@njit(**_JIT)
def merge_partials(into, other):
    """into += other, row by row, for rows of `coordinate_partials`: exact."""
    for c in range(into.shape[0]):
        partials = into[c, 1:]
        n = int(into[c, 0])
        for i in range(int(other[c, 0])):
            n = _add_exact(partials, n, other[c, 1 + i])
        into[c, 0] = n


@njit(inline='always', **_JIT)
def _first_up(a, own, nbr_ptr, nbr_idx, ext_ids):
    """The first of agent a's neighbour entries whose global id is above a's own (`own`):
    its neighbours ascend in id, so its edges to higher ids are the row's tail from there
    (nbr_ptr[a + 1] when it has none)."""
    first = nbr_ptr[a + 1]
    while first > nbr_ptr[a] and ext_ids[nbr_idx[first - 1]] > own:
        first -= 1
    return first


@njit(**_JIT)
def _first_up_edges(agents, nbr_ptr, nbr_idx, ext_ids, out):
    for a in range(agents.shape[0]):
        out[a] = _first_up(a, agents[a], nbr_ptr, nbr_idx, ext_ids)


def first_up_edges(agents: np.ndarray, nbr_ptr: np.ndarray, nbr_idx: np.ndarray, ext_ids: np.ndarray) -> np.ndarray:
    """(L,) each agent's first neighbour entry of a higher global id (`_first_up`), where
    `center_update`'s edge sums start: found once for a run, since walking back to it
    through the ids of the neighbours' rows took a monitoring point's update 40% longer."""
    out = np.empty(len(agents), dtype=np.int64)
    _first_up_edges(agents, nbr_ptr, nbr_idx, ext_ids, out)
    return out


@njit(inline='always', **_JIT)
def _up_edge_sum(rows, a, first, stop, nbr_idx, gaps):
    """sum over agent a's edges (a, b) to higher global ids b of sum_k ||x_a^k - x_b^k||^2,
    `rows` flat K x p (a is row a; those neighbours are rows nbr_idx[first:stop], ascending
    in id: `_first_up`); 0.0 when a has none.  Each coordinate's squared gaps add up over the
    edges in ascending b (`gaps`: `_gap_scratch`, `_add_squared_gaps`), then the coordinates
    in eight lanes joined as a tree: the same wherever a is placed."""
    if first == stop:
        return 0.0
    for w in range(gaps.shape[0]):
        gaps[w] = 0.0
    _add_squared_gaps(gaps, rows, a, nbr_idx, first, stop)
    return _gap_total(gaps)


@njit(inline='always', **_JIT)
def _neighbours_and_up_edges(total, gaps, rows, a, first, first_up, stop, nbr_idx):
    """`_add_neighbours(total, rows, nbr_idx, first, stop)` and `_up_edge_sum(rows, a,
    first_up, stop, nbr_idx, gaps)`, returned, in one pass over the rows (row_sums.
    add_rows_and_gaps): the same numbers, each row loaded once."""
    for w in range(gaps.shape[0]):
        gaps[w] = 0.0
    add_rows_and_gaps(total, gaps, rows, nbr_idx, first, first_up, stop, a)
    _add_neighbour_tails(total, rows, nbr_idx, first, stop)
    _add_squared_gap_tails(gaps, rows, a, nbr_idx, first_up, stop)
    return _gap_total(gaps)


@njit(inline='always', **_JIT)
def _gap_total(gaps):
    """The sum of `_up_edge_sum`'s gaps: the coordinates in eight lanes joined as a tree."""
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = 0.0
    for w in range(0, gaps.shape[0], 8):    # the padding past K x p stays 0.0
        l0, l1, l2, l3 = l0 + gaps[w], l1 + gaps[w + 1], l2 + gaps[w + 2], l3 + gaps[w + 3]
        l4, l5, l6, l7 = l4 + gaps[w + 4], l5 + gaps[w + 5], l6 + gaps[w + 6], l7 + gaps[w + 7]
    return ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))


@njit(inline='always', **_JIT)
def _add_squared_gaps(gaps, rows, anchor, nbr_idx, first, stop):
    """gaps[w] += (rows[anchor, w] - rows[nbr_idx[e], w])**2 for e in first..stop-1, in
    that order, the square rounded before it is added: whole vectors of columns in
    registers (row_sums), like `_add_neighbours`, then the last width % LANES columns."""
    add_squared_gaps(gaps, rows, nbr_idx, first, stop, anchor)
    _add_squared_gap_tails(gaps, rows, anchor, nbr_idx, first, stop)


@njit(inline='always', **_JIT)
def _add_squared_gap_tails(gaps, rows, anchor, nbr_idx, first, stop):
    """`_add_squared_gaps` for the last width % LANES columns, which the vectors leave."""
    width = rows.shape[1]
    column = width // LANES * LANES
    x = rows[anchor]
    for e in range(first, stop):
        y = rows[nbr_idx[e]]
        for w in range(column, width):
            d = x[w] - y[w]
            gaps[w] += d * d


@njit(inline='always', **_JIT)
def _gap_scratch(width):
    """The scratch of `_up_edge_sum` for rows of `width` (K x p) numbers: zeros, padded to
    whole lanes of eight."""
    return np.zeros(_gap_width(width))


@njit(inline='always', **_JIT)
def _gap_width(width):
    """`_gap_scratch`'s length: `width` padded to whole lanes of eight."""
    return -(-width // 8) * 8


@njit(**_JIT)
def _disagreement(ext, agents, nbr_ptr, nbr_idx, ext_ids):
    rows = ext.reshape(ext.shape[0], ext.shape[1] * ext.shape[2])
    gaps = _gap_scratch(rows.shape[1])
    partials = np.zeros(EXACT_PARTIALS)
    n = 0
    for a in range(agents.shape[0]):
        first = _first_up(a, agents[a], nbr_ptr, nbr_idx, ext_ids)
        n = _add_exact(partials, n, _up_edge_sum(rows, a, first, nbr_ptr[a + 1], nbr_idx, gaps))
    return partials[:n].copy()


def edge_disagreement(ext: np.ndarray, agents: np.ndarray, nbr_ptr: np.ndarray, nbr_idx: np.ndarray,
                      ext_ids: np.ndarray) -> np.ndarray:
    """sum over edges (a, b), a < b, a one of `agents` (the block's, ascending global ids), of
    sum_k ||x_a^k - x_b^k||^2, as exact partials (see `exact_partials`).  a's neighbours are
    rows nbr_idx[nbr_ptr[a]:nbr_ptr[a+1]] of `ext`, whose rows have global ids ext_ids
    (halo.HaloPlan's).
    Each edge is counted by the rank of its lower end, which sums that agent's edges alike
    wherever it is (`_up_edge_sum`; `center_update` does the same given `edge_sums`); the
    partials add the agents' sums without rounding, so the total does not depend on the
    placement."""
    return _disagreement(ext, agents, nbr_ptr, nbr_idx, ext_ids)


@njit(**_JIT)
def _largest_move(old, new):
    largest = 0.0
    for a in range(old.shape[0]):
        for k in range(old.shape[1]):
            step = 0.0
            for j in range(old.shape[2]):
                diff = new[a, k, j] - old[a, k, j]
                step += diff * diff
            largest = max(largest, step)
    return np.sqrt(largest)


def largest_move(old: np.ndarray, new: np.ndarray) -> float:
    """Largest Euclidean distance any center moved."""
    return float(_largest_move(old, new))


def warm_up(dtype: np.dtype | type, ghosts: bool | None = None) -> None:
    """Load (or compile) the loop's kernels for data of `dtype` before timing or measuring memory.

    ghosts : whether the block's agents have neighbours on other ranks (a run on 2+ ranks:
    the graph is connected), so that each update is a kernel call of its own
    (center_update), or not (local_center_updates, edge_disagreement); None: both.  Each
    kernel loaded holds a few MB of the compiler's data for the whole run."""
    points = np.zeros((2, 1), dtype=dtype)
    centers = np.zeros((1, 1, 1))
    offsets = np.array([0, 2])
    sums, counts = np.zeros((1, 1, 1)), np.zeros((1, 1))
    nbr = np.zeros(1, dtype=np.int64)
    nbr_rows = np.zeros(1, dtype=np.int32)   # a halo plan's nbr_idx
    prefetch = far_rows(np.array([0, 0]), nbr_rows, 1)
    if ghosts is None or ghosts:
        center_update(centers, centers, np.array([0, 0]), nbr_rows, sums, counts, 1.0, 1.0, prefetch=prefetch)
        first_up_edges(nbr, np.array([0, 0]), nbr_rows, nbr)
    if ghosts is None or not ghosts:
        local_center_updates(centers, centers.copy(), np.array([0, 0]), nbr_rows, sums, counts, 1.0, 1.0, 2,
                             prefetch=prefetch)
        edge_disagreement(centers, nbr, np.array([0, 0]), nbr_rows, nbr)
    exact_partials(np.zeros(1))
    merge_partials(coordinate_partials(centers), coordinate_partials(centers))  # rank 0's, of 2+ ranks
    largest_move(centers, centers)
    pack_rows(centers, nbr, 0.0, centers.copy())    # NeighbourExchange.start, on any number of ranks
    from .local_pass import LocalPass       # built on this module's in_parallel
    for n_features in (1, 16):              # the plain and the screening paths
        rows = np.zeros((64, n_features), dtype=dtype)
        local_pass = LocalPass(rows, np.array([0, 64]), 1)
        labels, out = np.full(64, -1, dtype=np.int32), accumulators(1, 1, n_features)
        for _ in range(2):                  # cold, then bounded
            local_pass.run(np.zeros((1, 1, n_features)), labels, out)
        local_pass.sse(np.zeros((1, 1, n_features)), labels, out[2])


def nearest_labels(points: np.ndarray, offsets: np.ndarray, centers: np.ndarray,
                   labels: np.ndarray | None = None) -> np.ndarray:
    """Each row's nearest center among its own agent's centers (into `labels` if given)."""
    if labels is None:
        labels = np.full(points.shape[0], -1, dtype=np.int32)
    assign_and_accumulate(points, offsets, centers, labels)
    return labels
