"""Quality of nkmpi's clusters against centralized k-means on the pooled data.

    python jobs/quality.py --out-dir quality                          # every dataset and configuration
    python jobs/quality.py --out-dir quality --configs default lloyd --only digits wine
    python jobs/quality.py --out-dir quality --check                  # exit 1 when a target fails
    python jobs/quality.py --out-dir quality --quick                  # two small datasets (a smoke test)

Every run is `mpiexec -n RANKS nkmpi run DATA -k K --graph SPEC [CONFIG OPTIONS]`, read
back from its result file.  The yardstick is scikit-learn's KMeans (k-means++) on the
pooled data, best of random_state 0, 1 and 2: for each agent's centers c the ratio
J(c) / J(best), where J is the centralized k-means cost over every row.  A run's line
gives the median and worst agent ratio and the ratio of the network-average centers.

Datasets are non-IID: Gaussian blobs split by cluster, by Dirichlet label skew and
spatially over 16 to 256 agents on rings, tori and random geometric graphs, and data
sets scikit-learn ships, standardized and split by class.  They are built once into
OUT_DIR/data and runs are cached in OUT_DIR/runs, keyed by data, options, ranks and
nkmpi's source files; --fresh rebuilds the data and reruns everything.  Results go to
OUT_DIR/quality.csv.  Targets, for the default configuration: on every blob dataset
median <= 1.02 and worst <= 1.05; on every real dataset median <= 1.05.
"""

import argparse
import csv
import hashlib
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nkmpi.formats.dataset import read_all  # noqa: E402
from nkmpi.formats.hdf5 import atomic_file  # noqa: E402
from nkmpi.formats.result import read_result  # noqa: E402
from nkmpi.launch import BIN, launch_command, mpi_env  # noqa: E402

#: Extra `nkmpi run` options nkmpi recommends where quality matters more than time:
#: agents tied four times tighter than the default, and time to settle.
RECOMMENDED_COUPLING = 20
RECOMMENDED = ["--coupling", str(RECOMMENDED_COUPLING), "--iters", "5000"]


def scheduled(n_points, n_agents):
    """The recommended coupling reached in tens of passes: rho rises to it from a thousandth
    of its value in factors of 100 (--rho-schedule), with 1,000 center updates a pass at the
    full step (--alpha 1).  Each update is a neighbour exchange, so on many ranks the
    passes are fewer but dearer (docs/usage.md#fewer-passes-over-the-data)."""
    rho = RECOMMENDED_COUPLING * n_points / n_agents
    return [*RECOMMENDED, "--alpha", "1", "--inner", "1000", "--rho-schedule", f"{rho / 1000:g}:100"]


#: Configuration name -> extra `nkmpi run` options, or a function of (points, agents) giving them.
CONFIGS = {
    "default": [],
    "recommended": RECOMMENDED,
    "scheduled": scheduled,
    "lloyd": ["--algorithm", "lloyd"],       # exact distributed Lloyd from the default seeding
    "flood": ["--init", "flood"],            # one agent's k-means++ spread over the graph
}
#: Ratio targets of the default configuration: kind -> (median, worst); None: no bound.
TARGETS = {"blobs": (1.02, 1.05), "real": (1.05, None)}
#: scikit-learn seeds whose best inertia is the optimum.
SKLEARN_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Dataset:
    """One benchmark dataset and the `python -m data_tools...` command that builds it."""

    name: str
    kind: str           # "blobs" or "real"
    k: int
    graph: str
    partition: str
    command: tuple      # PATH stands for the file to write

    @property
    def key(self):
        """Short hash of the command: a changed definition builds a new file."""
        return hashlib.sha1(" ".join(map(str, self.command)).encode()).hexdigest()[:8]


def blobs(name, k, features, points, agents, partition, graph, seed, *extra):
    return Dataset(name, "blobs", k, graph, partition,
                   ("data_tools.generate", "PATH", "--points", points, "--features", features,
                    "--clusters", k, "--agents", agents, "--partition", partition, "--seed", seed,
                    "--quiet", *extra))


def real(source, k, agents, partition, graph):
    return Dataset(source, "real", k, graph, partition,
                   ("data_tools.convert", f"sklearn:{source}", "PATH", "--agents", agents,
                    "--partition", partition, "--standardize", "--seed", 0))


DATASETS = (
    blobs("blobs-bycluster2-m16-ring", 6, 2, 8000, 16, "by-cluster:2", "ring", 1),
    blobs("blobs-bycluster3-m64-torus", 10, 5, 20000, 64, "by-cluster:3", "torus", 2),
    blobs("blobs-dirichlet0.1-m32-rgg", 8, 4, 12000, 32, "dirichlet:0.1", "rgg:radius=0.3", 3),
    blobs("blobs-spatial-m16-rgg", 8, 2, 8000, 16, "spatial", "rgg:radius=0.3", 4),
    blobs("blobs-spatial-m128-torus", 12, 3, 30000, 128, "spatial", "torus", 5),
    blobs("blobs-dirichlet0.1-m256-rgg", 16, 6, 40000, 256, "dirichlet:0.1", "rgg:radius=0.12", 6),
    blobs("blobs-bycluster4-m32-ring", 20, 10, 40000, 32, "by-cluster:4", "ring", 7,
          "--anisotropy", 3, "--imbalance", 4),
    blobs("blobs-dirichlet0.3-m64-rgg", 15, 8, 50000, 64, "dirichlet:0.3", "rgg:radius=0.22", 8),
    real("digits", 10, 16, "by-cluster:3", "torus"),
    real("wine", 3, 8, "by-cluster:1", "ring"),
    real("breast_cancer", 2, 8, "by-cluster:1", "ring"),
    real("iris", 3, 8, "by-cluster:2", "ring"),
)
#: --quick: two small datasets and two configurations (the smoke test).
QUICK_DATASETS = (blobs("blobs-quick", 4, 2, 2000, 8, "by-cluster:2", "ring", 1), DATASETS[-1])
QUICK_CONFIGS = ("default", "lloyd")


def source_digest():
    """Digest of nkmpi's source files: a changed nkmpi (new defaults, say) misses the run cache."""
    digest = hashlib.sha1()
    for path in sorted((ROOT / "nkmpi").rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Runner:
    """Builds datasets into OUT_DIR/data and launches `nkmpi run` with results cached in
    OUT_DIR/runs, keyed by data, options, ranks and nkmpi's sources; `fresh` ignores both caches."""

    def __init__(self, folder, n_ranks, fresh):
        self.folder, self.n_ranks, self.fresh = folder.resolve(), n_ranks, fresh
        self.source = source_digest()
        for sub in ("data", "runs"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)

    def dataset(self, dataset):
        path = self.folder / "data" / f"{dataset.name}-{dataset.key}.h5"
        if self.fresh or not path.exists():
            subprocess.run([sys.executable, "-m"] + [str(path) if a == "PATH" else str(a)
                                                     for a in dataset.command],
                           check=True, stdout=subprocess.DEVNULL)
        return path

    def run(self, name, data, args):
        """The result dict, or the launch's error output as a string when the run failed."""
        args = [str(a) for a in args]
        key = " ".join([str(data), *args, f"ranks={self.n_ranks}", self.source])
        key = hashlib.sha1(key.encode()).hexdigest()[:8]
        out = self.folder / "runs" / f"{name}-{key}.h5"
        if self.fresh or not out.exists():
            run = [BIN / "nkmpi", "run", data, "--quiet", "--out", out, *args]
            proc = subprocess.run(launch_command(self.n_ranks, run), capture_output=True, text=True, env=mpi_env())
            if proc.returncode != 0:
                return proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}"
        return read_result(out)


def costs(points, centers):
    """J of each of S center sets (S, K, p): the sum over rows of the squared distance to
    the nearest center, in float64.  One matrix product per chunk of rows serves all S sets;
    rows and centers are first shifted by the rows' mean so that |x|^2 - 2 x.c + |c|^2 does
    not lose digits to cancellation when the data sit far from the origin."""
    points = np.asarray(points, dtype=np.float64)
    centers = np.asarray(centers, dtype=np.float64)
    n_sets, k, p = centers.shape
    shift = points.mean(axis=0)
    flat = centers.reshape(-1, p) - shift
    flat_norms = (flat ** 2).sum(axis=1)
    chunk = max(1, 2 ** 22 // len(flat))
    total = np.zeros(n_sets)
    for start in range(0, len(points), chunk):
        rows = points[start:start + chunk] - shift
        squared = (rows ** 2).sum(axis=1)[:, None] - 2 * rows @ flat.T + flat_norms
        total += np.maximum(squared.reshape(len(rows), n_sets, k).min(axis=2), 0).sum(axis=0)
    return total


def optimum(points, k):
    """The lowest scikit-learn KMeans inertia over SKLEARN_SEEDS: the yardstick J(best)."""
    return min(KMeans(k, random_state=seed).fit(points).inertia_ for seed in SKLEARN_SEEDS)


def measure(result, points, best):
    """Cost ratios of a run's agents and of their average centers, and how the run went."""
    centers = result["centers"]
    ratios = costs(points, np.concatenate([centers, centers.mean(axis=0)[None]])) / best
    attrs = result["attrs"]
    return {"median": float(np.median(ratios[:-1])), "worst": float(ratios[:-1].max()),
            "average_centers": float(ratios[-1]), "iterations": int(attrs["iterations"]),
            "converged": bool(attrs["converged"]), "seconds": float(attrs["seconds"]),
            "seconds_setup": float(attrs.get("seconds_setup", math.nan)),
            "seconds_loop": float(attrs.get("seconds_loop", math.nan))}


HEADER = (f"{'dataset':<28} {'config':<12} {'median':>8} {'worst':>8} {'average':>8} {'iters':>6} "
          f"{'conv':>5} {'seconds':>8}")


def table_line(row):
    return (f"{row['dataset']:<28} {row['config']:<12} {row['median']:>8.4f} {row['worst']:>8.4f} "
            f"{row['average_centers']:>8.4f} {row['iterations']:>6} {str(row['converged']):>5} "
            f"{row['seconds']:>8.2f}")


def benchmark(runner, datasets, configs):
    """Every dataset under every configuration: CSV rows, and (dataset, config, error) of failed runs."""
    rows, failures = [], []
    print(HEADER, flush=True)
    for dataset in datasets:
        path = runner.dataset(dataset)
        info, points = read_all(path)
        best = optimum(points, dataset.k)
        for config in configs:
            options = CONFIGS[config](info.n_points, info.n_agents) if callable(CONFIGS[config]) else CONFIGS[config]
            result = runner.run(f"{dataset.name}-{config}", path, ["-k", dataset.k, "--graph", dataset.graph, *options])
            if isinstance(result, str):
                failures.append((dataset.name, config, result))
                print(f"{dataset.name:<28} {config:<12} run failed: {result.splitlines()[-1]}", flush=True)
                continue
            rows.append({"dataset": dataset.name, "config": config, **measure(result, points, best),
                         "kind": dataset.kind, "agents": info.n_agents, "points": info.n_points,
                         "features": info.n_features, "k": dataset.k, "graph": dataset.graph,
                         "partition": dataset.partition, "options": " ".join(options),
                         "sklearn_best_cost": best})
            print(table_line(rows[-1]), flush=True)
    return rows, failures


def check_targets(rows, datasets, failures):
    """Print a PASS or FAIL line per dataset for the default configuration; True if all pass."""
    default = {row["dataset"]: row for row in rows if row["config"] == "default"}
    failed = {name for name, config, _ in failures if config == "default"}
    print("\ntargets (default): " + "; ".join(
        f"{kind} median <= {median}" + (f" and worst <= {worst}" if worst else "")
        for kind, (median, worst) in TARGETS.items()))
    passed = True
    for dataset in datasets:
        if dataset.name in failed:
            print(f"FAIL {dataset.name}: the run failed")
            passed = False
            continue
        row = default[dataset.name]
        median_bound, worst_bound = TARGETS[dataset.kind]
        ok = row["median"] <= median_bound and (worst_bound is None or row["worst"] <= worst_bound)
        passed &= ok
        print(f"{'PASS' if ok else 'FAIL'} {dataset.name}: median {row['median']:.4f}, worst {row['worst']:.4f}")
    return passed


def write_csv(path, rows):
    with atomic_file(path) as temporary, open(temporary, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", default="quality")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="datasets to run (default: all)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), metavar="NAME",
                        help=f"configurations to run, of {', '.join(CONFIGS)} (default: all)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="rebuild the data and rerun every run")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target of the default fails")
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_DATASETS)} small datasets, configurations {', '.join(QUICK_CONFIGS)}")
    args = parser.parse_args(argv)
    datasets = QUICK_DATASETS if args.quick else DATASETS
    if args.only:
        unknown = set(args.only) - {d.name for d in datasets}
        if unknown:
            parser.error(f"unknown dataset(s) {', '.join(sorted(unknown))}; "
                         f"choose from {', '.join(d.name for d in datasets)}")
        datasets = tuple(d for d in datasets if d.name in args.only)
    configs = args.configs or (QUICK_CONFIGS if args.quick else tuple(CONFIGS))

    started = time.perf_counter()
    folder = Path(args.out_dir)
    rows, failures = benchmark(Runner(folder, args.ranks, args.fresh), datasets, configs)
    if rows:
        write_csv(folder / "quality.csv", rows)
    passed = check_targets(rows, datasets, failures) if "default" in configs else True
    print(f"total {time.perf_counter() - started:.0f} s")
    if failures:
        for name, config, error in failures:
            print(f"\nrun failed: {name} {config}:\n{error}", file=sys.stderr)
        return 1
    return 1 if args.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
