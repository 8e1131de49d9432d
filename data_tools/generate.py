"""Synthetic datasets: Gaussian blobs split over agents.

    python -m data_tools.generate OUT.h5 --clusters 6 --features 2 --points 9600 \\
        --agents 16 --partition by-cluster:2 --seed 1

Partitions: `iid` (every agent draws from all clusters) and `by-cluster:c`
(agent m sees only clusters m*c .. m*c+c-1, modulo K: non-IID data).
"""

import argparse
import sys

import numpy as np

from nkmpi.errors import InputError
from nkmpi.graph import GRAPH_SPECS, build_network

from .dataset import group_by_agent, write_dataset


def blob_centers(n_clusters, n_features, separation, rng):
    """Cluster means spread in a cube so that they are well apart for the default spread."""
    return rng.uniform(-separation, separation, size=(n_clusters, n_features))


def partition(labels, spec, n_agents, n_clusters, rng):
    """Agent of each point for a partition spec."""
    name, _, arg = spec.partition(":")
    if name == "iid":
        return rng.integers(n_agents, size=len(labels))
    if name == "by-cluster":
        try:
            per_agent = int(arg)
        except ValueError:
            raise InputError(f"partition {spec!r}: expected by-cluster:c with an integer c") from None
        if not 1 <= per_agent <= n_clusters:
            raise InputError(f"partition {spec!r}: c must be in 1..{n_clusters}")
        seen_by = [[] for _ in range(n_clusters)]
        for m in range(n_agents):
            for j in range(per_agent):
                seen_by[(m * per_agent + j) % n_clusters].append(m)
        agent = np.empty(len(labels), dtype=np.int64)
        for k in range(n_clusters):
            rows = np.flatnonzero(labels == k)
            if not seen_by[k]:
                raise InputError(f"partition {spec!r}: cluster {k} is seen by no agent "
                                 f"(need agents * c >= clusters)")
            agent[rows] = np.asarray(seen_by[k])[rng.integers(len(seen_by[k]), size=len(rows))]
        return agent
    raise InputError(f"unknown partition {spec!r}: use iid or by-cluster:c")


def generate(n_points, n_clusters, n_features, n_agents, partition_spec="iid", spread=1.0,
             separation=10.0, seed=0, dtype=np.float64):
    """Blobs split over agents: returns (points, offsets, labels), rows grouped by agent."""
    rng = np.random.default_rng(seed)
    means = blob_centers(n_clusters, n_features, separation, rng)
    labels = rng.integers(n_clusters, size=n_points)
    points = (means[labels] + spread * rng.standard_normal((n_points, n_features))).astype(dtype)
    agent = partition(labels, partition_spec, n_agents, n_clusters, rng)
    offsets, points, labels = group_by_agent(agent, n_agents, points, labels)
    return points, offsets, labels


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m data_tools.generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="dataset v1 file to write")
    parser.add_argument("--clusters", type=int, default=6)
    parser.add_argument("--features", type=int, default=2)
    parser.add_argument("--points", type=int, default=10000)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--partition", default="iid", help="iid or by-cluster:c")
    parser.add_argument("--spread", type=float, default=1.0, help="standard deviation of each blob")
    parser.add_argument("--separation", type=float, default=10.0, help="means drawn in [-s, s]^p")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--graph", default=None, metavar="SPEC",
                        help="store this graph in graph/edges: " + ", ".join(GRAPH_SPECS[:-1]))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        points, offsets, labels = generate(args.points, args.clusters, args.features, args.agents,
                                           args.partition, args.spread, args.separation, args.seed,
                                           np.dtype(args.dtype))
        edges = None
        if args.graph:
            edges = build_network(args.graph, args.agents, args.seed).edges
        write_dataset(args.out, points, offsets, labels, edges)
    except InputError as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {args.points} points x {args.features} features, {args.clusters} clusters, "
          f"{args.agents} agents ({args.partition})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
