"""Numerical kernels of NK-means for a block of agents.

Pure numpy, no MPI.  Every kernel works on a *block*: the agents one rank
hosts, their rows stacked in agent order.  Results for one agent never depend
on which other agents share its block, so the outcome of a run does not depend
on the number of ranks.  To keep that true to the last bit, every reduction
that feeds the centers runs in a fixed order: distances sum over the features
of one point, cluster sums and counts accumulate rows in dataset order, and
neighbour centers are added in ascending agent id.
"""

import numpy as np

#: Rows per chunk of the assignment pass: bounds the (rows, K, p) temporary.
CHUNK_ROWS = 256


def row_agents(offsets):
    """Index (within the block) of the agent owning each row, from block offsets."""
    offsets = np.asarray(offsets, dtype=np.int64)
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.intp), np.diff(offsets))


def squared_distances(points, centers):
    """||y - c||^2 for rows `points` (n, p) against `centers` (n, K, p) or (K, p).

    Computed from differences, not by the GEMM expansion, so that a point's
    distances are exact to rounding and identical wherever it is computed.
    """
    diff = points[:, None, :] - centers
    return (diff * diff).sum(axis=-1)


def assign_and_accumulate(points, row_agent, centers, labels):
    """One assignment pass (eq. 25) with the statistics of the center update.

    Parameters
    ----------
    points : (n, p) array, the block's rows.
    row_agent : (n,) int array, block index of each row's agent.
    centers : (L, K, p) float64, the block's current centers.
    labels : (n,) int64, previous labels (-1: none yet); overwritten.

    Returns
    -------
    sums : (L, K, p) float64, per-agent per-cluster sums of the rows.
    counts : (L, K) int64, per-agent cluster sizes.
    sse : (L,) float64, per-agent sum of squared distances to the nearest center.
    changed : int, rows whose label differs from the previous one.
    """
    n_agents, n_clusters, n_features = centers.shape
    n_rows = points.shape[0]
    cell = np.empty(n_rows, dtype=np.intp)
    nearest = np.empty(n_rows, dtype=np.float64)
    changed = 0
    for start in range(0, n_rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n_rows)
        dist = squared_distances(points[start:stop], centers[row_agent[start:stop]])
        chunk_labels = dist.argmin(axis=1)          # first minimum: ties go to the lowest k
        nearest[start:stop] = dist[np.arange(stop - start), chunk_labels]
        changed += int(np.count_nonzero(chunk_labels != labels[start:stop]))
        labels[start:stop] = chunk_labels
        cell[start:stop] = row_agent[start:stop] * n_clusters + chunk_labels
    n_cells = n_agents * n_clusters
    sums = np.empty((n_cells, n_features), dtype=np.float64)
    for j in range(n_features):
        # bincount adds the weights in row order: the same order as the reference.
        sums[:, j] = np.bincount(cell, weights=points[:, j], minlength=n_cells)
    counts = np.bincount(cell, minlength=n_cells).astype(np.int64)
    sse = np.bincount(row_agent, weights=nearest, minlength=n_agents)
    return (sums.reshape(n_agents, n_clusters, n_features),
            counts.reshape(n_agents, n_clusters), sse, changed)


def nearest_labels(points, row_agent, centers):
    """Label of each row: its nearest center among its own agent's centers."""
    labels = np.full(points.shape[0], -1, dtype=np.int64)
    assign_and_accumulate(points, row_agent, centers, labels)
    return labels


def neighbour_sum(centers_ext, nbr_ptr, nbr_idx):
    """Sum of each agent's neighbours' centers (eq. 26, second term).

    `centers_ext` holds the block's centers followed by those received from
    other ranks; agent i's neighbours are rows nbr_idx[nbr_ptr[i]:nbr_ptr[i+1]]
    of it, listed in ascending global agent id, and are added in that order.
    """
    n_agents = len(nbr_ptr) - 1
    degree = np.diff(nbr_ptr)
    total = np.zeros((n_agents,) + centers_ext.shape[1:], dtype=np.float64)
    for slot in range(int(degree.max(initial=0))):
        agents = np.flatnonzero(degree > slot)
        total[agents] += centers_ext[nbr_idx[nbr_ptr[agents] + slot]]
    return total


def center_update(centers, sums, counts, nbr_total, degree, rho, alpha):
    """x <- x - alpha (x - mu), mu = (S/rho + sum_l x_l) / (n/rho + |Omega|)  (eqs. 26-27).

    An empty local cluster averages the neighbours; a cluster with neither
    points nor neighbours (an isolated agent) keeps its center.
    """
    weight = counts / rho + np.asarray(degree, dtype=np.float64)[:, None]
    lonely = weight == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = (sums / rho + nbr_total) / weight[:, :, None]
    mu[lonely] = centers[lonely]
    return centers - alpha * (centers - mu)


def edge_disagreement(centers_ext, edge_a, edge_b):
    """sum over edges (a, b) of sum_k ||x_a^k - x_b^k||^2, rows indexing centers_ext."""
    diff = centers_ext[edge_a] - centers_ext[edge_b]
    return float((diff * diff).sum())


def largest_move(old, new):
    """Largest Euclidean distance any center moved."""
    if old.size == 0:
        return 0.0
    return float(np.sqrt(((new - old) ** 2).sum(axis=-1)).max())
