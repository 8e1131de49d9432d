"""Synthetic datasets: Gaussian blobs split over agents, of any size.

    python -m data_tools.generate OUT.h5 --clusters 6 --features 2 --points 9600 \\
        --agents 16 --partition by-cluster:3 --seed 1

Rows are drawn in chunks from fixed random streams (one per chunk), so a file
far larger than memory is written in two passes over the same stream: the
first counts each agent's rows, the second writes every row at its agent's
place.  Memory stays at a few chunks whatever the number of points.
"""

import argparse
import math
import sys

import numpy as np

from nkmpi.errors import InputError, Parser
from nkmpi.graph import TOPOLOGIES, build_network, edge_file
from nkmpi.formats.dataset import coordinate_limit, write_dataset_rows

from .dataset import check_outputs, check_space, command, describe
from .partition import PARTITIONS, check_split, parse_partition

#: Standard deviations no normal draw reaches (each does with probability 1.5e-23): a blob's
#: points lie within TAIL * sqrt(p) * spread of its mean, whatever its rotation.
TAIL = 10


class Blobs:
    """A Gaussian mixture: K means, weights and per-cluster linear shapes."""

    def __init__(self, n_clusters, n_features, spread=1.0, separation=10.0, imbalance=1.0,
                 anisotropy=1.0, seed=0):
        rng = np.random.default_rng([seed, 0])
        self.means = rng.uniform(-separation, separation, size=(n_clusters, n_features))
        # Cluster k is imbalance**(k/(K-1)) times as likely as cluster 0; in logarithms,
        # the largest weight 1, so that no imbalance overflows their sum.
        log_weights = np.log(imbalance) * np.arange(n_clusters) / max(n_clusters - 1, 1)
        weights = np.exp(log_weights - log_weights.max())
        self.weights = weights / weights.sum()
        self.shapes = None
        if anisotropy != 1.0:
            # A random rotation times axis scales between 1/anisotropy and 1, per cluster.
            self.shapes = np.empty((n_clusters, n_features, n_features))
            for k in range(n_clusters):
                rotation, _ = np.linalg.qr(rng.standard_normal((n_features, n_features)))
                scales = np.exp(rng.uniform(-np.log(anisotropy), 0, size=n_features))
                self.shapes[k] = rotation * scales
        self.spread = spread

    def labels(self, n, rng):
        return rng.choice(len(self.weights), size=n, p=self.weights)

    def points(self, labels, rng, dtype=np.float64):
        noise = rng.standard_normal((len(labels), self.means.shape[1]))
        if self.shapes is not None:
            noise = np.einsum("nij,nj->ni", self.shapes[labels], noise)
        return (self.means[labels] + self.spread * noise).astype(dtype, copy=False)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def progress_bar(total, what, shown):
    """A tqdm bar on stderr when `shown` and tqdm is installed (the `progress` extra,
    pip install 'nkmpi[progress]'); else one that shows nothing."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="row", unit_scale=True, desc=what, disable=not shown, file=sys.stderr)


def chunk_streams(seed, chunk):
    """Three independent streams of a chunk: labels, points, partition draws."""
    return (np.random.default_rng([seed, 1, chunk, s]) for s in range(3))


def check_shape(spread, separation, imbalance, anisotropy):
    """Refuse blobs no Gaussian mixture has: NaN or infinite sizes, negative widths, axis ratios
    below 1, cluster weight ratios of 0."""
    rules = (("--spread", spread, spread >= 0, ">= 0"), ("--separation", separation, separation >= 0, ">= 0"),
             ("--imbalance", imbalance, imbalance > 0, "> 0"), ("--anisotropy", anisotropy, anisotropy >= 1, ">= 1"))
    for name, value, ok, bound in rules:
        if not (ok and math.isfinite(value)):
            raise InputError(f"{name} must be a finite number {bound}, got {value!r}")


def placed(chunks, offsets):
    """The rows of each (labels, points, agents) chunk, agent by agent, as (first row, points,
    labels) blocks at their agent's place in the file (`offsets`), after the agent's rows of
    earlier chunks."""
    cursor = offsets[:-1].copy()
    for labels, points, agents in chunks:
        order = np.argsort(agents, kind="stable")
        present, first = np.unique(agents[order], return_index=True)
        bounds = np.append(first, len(order))
        for agent, lo, hi in zip(present, bounds[:-1], bounds[1:]):
            rows = order[lo:hi]
            yield cursor[agent], points[rows], labels[rows]
            cursor[agent] += len(rows)


def generate(out, n_points, n_clusters, n_features, n_agents, partition="iid", spread=1.0,
             separation=10.0, imbalance=1.0, anisotropy=1.0, dtype="float64", graph=None, seed=0,
             chunk_rows=None, progress=False):
    """Write a dataset v1 file of blobs split over agents; returns its agent offsets.

    Every option is checked before any work, so that what is written is a file nkmpi takes;
    nkmpi's loader checks it once more before it takes its name.
    """
    check_outputs([out], {"the edge file": edge_file(graph)})
    check_split(n_agents, seed)
    if n_points < 1 or n_clusters < 1 or n_features < 1:
        raise InputError("points, clusters and features must all be at least 1")
    if n_clusters > n_points:
        raise InputError(f"{n_clusters} clusters need at least as many points, got {n_points}")
    if chunk_rows is not None and chunk_rows < 1:
        raise InputError(f"--chunk-rows must be at least 1, got {chunk_rows}")
    check_shape(spread, separation, imbalance, anisotropy)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise InputError(f"points are float32 or float64, not {dtype}")
    check_space(out, n_points, n_features, dtype.itemsize, n_agents)
    reach, limit = separation + TAIL * math.sqrt(n_features) * spread, coordinate_limit(dtype, n_features)
    if not reach <= limit:
        raise InputError(f"--separation {separation:g} and --spread {spread:g} put coordinates at up to "
                         f"+-{reach:.3g}, beyond +-{limit:.3g}, where squared distances overflow {dtype}")
    model = Blobs(n_clusters, n_features, spread, separation, imbalance, anisotropy, seed)
    site_rng = np.random.default_rng([seed, 2])
    rules = parse_partition(partition, n_agents, n_clusters, site_rng,
                            site_sampler=lambda m: model.points(model.labels(m, site_rng), site_rng))
    edges = build_network(graph, n_agents, seed).edges if graph else None
    chunk_rows = chunk_rows or max(1024, (1 << 24) // (8 * n_features))
    starts = range(0, n_points, chunk_rows)

    def chunks(what):
        bar = progress_bar(n_points, what, progress)
        for index, start in enumerate(starts):
            label_rng, point_rng, agent_rng = chunk_streams(seed, index)
            labels = model.labels(min(chunk_rows, n_points - start), label_rng)
            points = model.points(labels, point_rng, dtype) if (what == "writing"
                                                                or rules.name == "spatial") else None
            yield labels, points, rules.agents_of(labels, points, agent_rng)
            bar.update(len(labels))
        bar.close()

    counts = np.zeros(n_agents, dtype=np.int64)
    for _, _, agents in chunks("counting"):
        counts += np.bincount(agents, minlength=n_agents)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    write_dataset_rows(out, (n_points, n_features), dtype, offsets, placed(chunks("writing"), offsets),
                       has_labels=True, edges=edges)
    return offsets


@command
def main(argv=None):
    parser = Parser(prog="python -m data_tools.generate", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="dataset v1 file to write")
    parser.add_argument("--points", type=int, default=10000, help="N (default 10000)")
    parser.add_argument("--clusters", type=int, default=6, help="K (default 6)")
    parser.add_argument("--features", type=int, default=2, help="p (default 2)")
    parser.add_argument("--agents", type=int, default=16, help="M (default 16)")
    parser.add_argument("--partition", default="iid", help=f"{', '.join(PARTITIONS)} (default iid)")
    parser.add_argument("--spread", type=float, default=1.0, help="standard deviation of a blob (default 1)")
    parser.add_argument("--separation", type=float, default=10.0,
                        help="means drawn uniformly in [-s, s]^p (default 10)")
    parser.add_argument("--imbalance", type=float, default=1.0,
                        help="largest / smallest cluster weight (default 1: equal sizes)")
    parser.add_argument("--anisotropy", type=float, default=1.0,
                        help="longest / shortest axis of each blob, randomly rotated (default 1: round)")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--graph", default=None, metavar="SPEC",
                        help="store this graph in the file (CSR): " + ", ".join(TOPOLOGIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-rows", type=int, default=None, help="rows per chunk (default: 16 MB of points)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    offsets = generate(args.out, args.points, args.clusters, args.features, args.agents, args.partition,
                       args.spread, args.separation, args.imbalance, args.anisotropy, args.dtype, args.graph,
                       args.seed, args.chunk_rows, progress=not args.quiet)
    describe(args.out, offsets, args.partition, detail=f" x {args.features} features, {args.clusters} clusters")


if __name__ == "__main__":
    sys.exit(main())
