"""The paper's claims measured, against exact Lloyd, and the accelerated variants.

    python jobs/experiments.py --out-dir experiments                 # all
    python jobs/experiments.py --only rho alpha --out-dir experiments
    python jobs/experiments.py --report-only --out-dir experiments   # re-render REPORT.md

Every run is `mpiexec -n RANKS nkmpi run` (or srun), read back from its result
file; nothing is simulated in-process.  The runs are the paper's algorithm
unless they say otherwise (`--init flood`: one agent's k-means++; `--inner 1`),
so that the iteration itself has work to do; how close the default start and options come to the pooled optimum is
`make quality`'s subject (jobs/quality.py).  Each experiment writes a CSV and a PNG
into OUT_DIR, and REPORT.md is generated from the CSVs.

rho          rho from 1 to 10^4 (Theorems 6-7): centralized cost of each agent's
             centers over exact Lloyd from the same start, disagreement, how far
             one centralized Lloyd step moves the network average (zero at a
             Lloyd fixed point), iterations to converge.
topology     ring, ws, rgg, torus, er, star, complete over the same 64 agents:
             iterations to converge against lambda_2 of the graph Laplacian and
             against the time constant of the fixed-partition update (slowest_mode).
alpha        the step size.
data         iid and the non-IID partitions of data_tools, on synthetic blobs and
             on scikit-learn's digits, at rho = 1000: quality against Lloyd, and
             passes over the data and wall time to reach 0.1% of the final
             objective for plain NK-means against --inner and --rho-schedule;
             also on 400,000 x 8 blobs, where a pass costs more than an exchange.
"""

import argparse
import csv
import hashlib
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nkmpi.formats.dataset import open_dataset, read_all  # noqa: E402
from nkmpi.formats.result import read_result  # noqa: E402
from nkmpi.graph import build_network, graph_stats  # noqa: E402
from nkmpi.launch import BIN, LAUNCHERS, launch_command, mpi_env  # noqa: E402
from nkmpi.reference import centralized_cost, lloyd_step  # noqa: E402
from quality import optimum, write_csv  # noqa: E402

EXPERIMENTS = ("rho", "topology", "alpha", "data")
#: Fraction above the final objective that counts as reached.
WITHIN = 1e-3
#: The variants of the acceleration table: label -> extra `nkmpi run` options.
VARIANTS = {
    "plain": [],
    "inner 10": ["--inner", "10"],
    "inner 20": ["--inner", "20"],
    "schedule 1:10": ["--rho-schedule", "1:10"],
    "schedule 1:10 + inner 20": ["--rho-schedule", "1:10", "--inner", "20"],
}


#: The paper's algorithm, for every run that does not say otherwise: one agent's k-means++
#: spread over the graph, one center update per pass.
PAPER = {"--init": "flood", "--inner": "1"}


def paper_defaults(args):
    """PAPER's options that `args` does not set itself."""
    return [item for option, value in PAPER.items() if option not in map(str, args)
            for item in (option, value)]


class Runner:
    """Launches `nkmpi run` and caches results in OUT_DIR/runs, keyed by data and options:
    a rerun reuses them (remove OUT_DIR/runs to measure a changed nkmpi)."""

    def __init__(self, folder, n_ranks, launcher):
        self.folder, self.n_ranks, self.launcher = folder, n_ranks, launcher
        (folder / "runs").mkdir(parents=True, exist_ok=True)
        (folder / "data").mkdir(parents=True, exist_ok=True)

    def run(self, name, data, args):
        key = hashlib.sha1(" ".join(map(str, [data, *args])).encode()).hexdigest()[:8]
        out = self.folder / "runs" / f"{name}-{key}.h5"
        if not out.exists():
            run = [BIN / "nkmpi", "run", data, "--quiet", "--out", out, *paper_defaults(args), *args]
            subprocess.run(launch_command(self.n_ranks, run, self.launcher), check=True, env=mpi_env())
        return read_result(out)

    def dataset(self, name, command):
        """OUT_DIR/data/NAME.h5, made once by `python -m data_tools.COMMAND` (PATH in it)."""
        path = self.folder / "data" / f"{name}.h5"
        if not path.exists():
            subprocess.run([sys.executable, "-m"] + [str(path) if a == "PATH" else str(a) for a in command],
                           check=True, stdout=subprocess.DEVNULL)
        return path


def blobs(runner, partition, agents=16):
    return runner.dataset(f"blobs-{partition.replace(':', '')}-{agents}",
                          ["data_tools.generate", "PATH", "--points", 8000, "--features", 4, "--clusters", 5,
                           "--agents", agents, "--partition", partition, "--separation", 6, "--seed", 3,
                           "--quiet"])


def digits(runner, partition, agents=16):
    return runner.dataset(f"digits-{partition.replace(':', '')}-{agents}",
                          ["data_tools.convert", "sklearn:digits", "PATH", "--agents", agents,
                           "--partition", partition, "--seed", 0])


def quality(points, result, best):
    """Agents' centralized cost over exact Lloyd's from the same start and over the pooled
    optimum (median, max; `best` from lloyd_baseline), and the Lloyd step of their average."""
    costs = np.array([centralized_cost(points, c) for c in result["centers"]])
    average = result["centers"].mean(axis=0)
    moved, _, _ = lloyd_step(points, average)
    step = float(np.sqrt(((moved - average) ** 2).sum(axis=1)).max())
    lloyd, pooled = costs / best["lloyd"], costs / best["optimum"]
    return {"cost_ratio_median": float(np.median(lloyd)), "cost_ratio_max": float(lloyd.max()),
            "optimum_ratio_median": float(np.median(pooled)), "optimum_ratio_max": float(pooled.max()),
            "lloyd_step": step}


def lloyd_baseline(runner, name, data, k, points, seed=0):
    """Exact Lloyd from the runs' start, and the two yardsticks of a cost: Lloyd's from that
    start and the pooled optimum (scikit-learn's KMeans, best of 3 seeds)."""
    result = runner.run(f"{name}-lloyd", data, ["-k", k, "--algorithm", "lloyd", "--iters", 10000,
                                                "--seed", seed])
    return result, {"lloyd": centralized_cost(points, result["centers"][0]),
                    "optimum": optimum(points, k)}


def outcome(result):
    a, m = result["attrs"], result["metrics"]
    return {"iterations": int(a["iterations"]), "converged": bool(a["converged"]),
            "disagreement": float(m["edge_disagreement"][-1]), "objective": float(m["objective"][-1]),
            "seconds": float(a["seconds_loop"])}


#: The accelerated variants the sweeps compare with plain NK-means, and their CSV column prefixes.
FAST = {"inner 20": "inner", "schedule 1:10 + inner 20": "both"}


def accelerated(runner, name, data, args, plain, rho):
    """The same run with each FAST variant: passes until Q^rho is within WITHIN of plain's
    final objective, and where the variant ends relative to plain."""
    plain_passes, _, plain_objective = reached(plain, rho)
    row = {"plain_passes": plain_passes}
    for label, prefix in FAST.items():
        fast = runner.run(f"{name}-{prefix}", data, args + VARIANTS[label])
        same_start(fast, plain)
        passes, _, objective = reached(fast, rho, plain_objective[-1])
        row.update({f"{prefix}_passes": passes or "",
                    f"{prefix}_pass_ratio": plain_passes / passes if passes else "",
                    f"{prefix}_objective_ratio": objective[-1] / plain_objective[-1]})
    return row


def same_start(nkmeans, lloyd):
    if not np.array_equal(nkmeans["initial_centers"], lloyd["initial_centers"]):
        raise SystemExit("NK-means and Lloyd did not start from the same centers")


def experiment_rho(runner, rhos=(1, 3, 10, 30, 100, 300, 1000, 3000, 10000)):
    data = blobs(runner, "by-cluster:2")
    _, points = read_all(data)
    base, best = lloyd_baseline(runner, "rho", data, 5, points)
    rows = []
    for rho in rhos:
        args = ["-k", 5, "--rho", rho, "--graph", "ring", "--iters", 400000, "--monitor-every", 1]
        result = runner.run(f"rho-{rho}", data, args)
        same_start(result, base)
        rows.append({"rho": rho, **outcome(result), **quality(points, result, best),
                     **accelerated(runner, f"rho-{rho}", data, args, result, rho)})
        print(f"rho {rho:>6}: {rows[-1]['iterations']} iterations, cost/Lloyd "
              f"{rows[-1]['cost_ratio_max']:.6f}", flush=True)
    return rows


def slowest_mode(network, points_per_agent, n_clusters, rho):
    """Smallest eigenvalue s of (D + C)^-1 (L + C), C = diag(n_m / (K rho)): for a fixed
    partition with clusters of average size, the center update contracts the slowest
    mode by 1 - alpha s per iteration, so about 1 / (alpha s) iterations per e-fold."""
    laplacian = nx.laplacian_matrix(network.to_networkx(), nodelist=range(network.n_agents)).toarray()
    weight = points_per_agent / (n_clusters * rho)
    scaled = (laplacian + np.diag(weight)) / (np.diag(laplacian) + weight)[:, None]
    return float(np.linalg.eigvals(scaled).real.min())


def experiment_topology(runner, specs=("ring", "ws:k=4,p=0.2", "rgg:radius=0.2", "torus", "er:p=0.15",
                                       "star", "complete")):
    data = blobs(runner, "by-cluster:2", agents=64)
    _, points = read_all(data)
    base, best = lloyd_baseline(runner, "topology", data, 5, points)
    rows = []
    per_agent = open_dataset(data).points_per_agent
    for spec in specs:
        network = build_network(spec, 64, seed=0)
        stats = graph_stats(network)
        name = f"topology-{spec.replace(':', '').replace(',', '').replace('=', '')}"
        args = ["-k", 5, "--rho", 100, "--graph", spec, "--iters", 400000, "--monitor-every", 1]
        result = runner.run(name, data, args)
        same_start(result, base)
        rows.append({"graph": spec, "edges": stats["edges"], "degree_mean": 2 * stats["edges"] / 64,
                     "lambda_2": stats["lambda_2"], "diameter": stats["diameter"],
                     "time_constant": 1 / (0.5 * slowest_mode(network, per_agent, 5, 100)), **outcome(result),
                     **quality(points, result, best), **accelerated(runner, name, data, args, result, 100)})
        print(f"graph {spec}: lambda_2 {stats['lambda_2']:.3f}, {rows[-1]['iterations']} iterations",
              flush=True)
    return rows


def experiment_alpha(runner, alphas=(0.1, 0.2, 0.35, 0.5, 0.75, 1.0)):
    data = blobs(runner, "by-cluster:2")
    _, points = read_all(data)
    base, best = lloyd_baseline(runner, "alpha", data, 5, points)
    rows = []
    for alpha in alphas:
        result = runner.run(f"alpha-{alpha}", data, ["-k", 5, "--rho", 100, "--alpha", alpha, "--graph",
                                                     "ring", "--iters", 400000, "--monitor-every", 1])
        same_start(result, base)
        rows.append({"alpha": alpha, **outcome(result), **quality(points, result, best)})
        print(f"alpha {alpha}: {rows[-1]['iterations']} iterations", flush=True)
    return rows


def reached(result, rho, target=None):
    """Passes and loop seconds until Q^rho (at the target rho) is within WITHIN of `target`
    (default: the run's own final value); (None, None) if it never gets there."""
    m = result["metrics"]
    objective = m["sse"] + rho * m["edge_disagreement"]
    target = objective[-1] if target is None else target
    hits = np.flatnonzero(objective <= target * (1 + WITHIN))
    if len(hits) == 0:
        return None, None, objective
    return int(m["iteration"][hits[0]]), float(m["seconds"][hits[0]]), objective


def blobs_large(runner, partition, agents=16):
    return runner.dataset(f"blobs-large-{partition.replace(':', '')}-{agents}",
                          ["data_tools.generate", "PATH", "--points", 400_000, "--features", 8, "--clusters",
                           8, "--agents", agents, "--partition", partition, "--separation", 6, "--seed", 5,
                           "--quiet"])


#: The data experiment: (name, dataset maker, K, partitions, variants) per source, and the
#: case whose objective trace is plotted.  --quick runs a small subset (used by the tests).
SOURCES = (("blobs", blobs, 5, ("iid", "by-cluster:3", "dirichlet:0.3", "spatial"), tuple(VARIANTS)),
           ("digits", digits, 10, ("iid", "by-cluster:3", "dirichlet:0.3", "spatial"), tuple(VARIANTS)),
           ("blobs-large", blobs_large, 8, ("by-cluster:3",),
            ("plain", "inner 20", "schedule 1:10 + inner 20")))
TRACED = ("digits", "by-cluster:3")
QUICK = {"rho": (1, 100), "topology": ("ring", "complete"), "alpha": (0.5, 1.0),
         "sources": (("blobs", blobs, 5, ("by-cluster:3",), ("plain", "schedule 1:10 + inner 20")),),
         "traced": ("blobs", "by-cluster:3")}


def experiment_data(runner, rho=1000, sources=SOURCES, traced=TRACED):
    rows, traces = [], []
    for source, make, k, partitions, variants in sources:
        for partition in partitions:
            data = make(runner, partition)
            _, points = read_all(data)
            name = f"data-{source}-{partition.replace(':', '')}"
            base, best = lloyd_baseline(runner, name, data, k, points)
            plain = None
            for label in variants:
                result = runner.run(f"{name}-{label.replace(' ', '').replace(':', '').replace('+', '-')}",
                                    data, ["-k", k, "--rho", rho, "--graph", "ring", "--iters", 200000,
                                           "--monitor-every", 1, *VARIANTS[label]])
                same_start(result, base)
                passes, seconds, objective = reached(result, rho)
                row = {"data": source, "partition": partition, "variant": label, "passes": passes,
                       "seconds_to_reach": seconds, **outcome(result), **quality(points, result, best),
                       "lloyd_iterations": int(base["attrs"]["iterations"]),
                       "lloyd_seconds": float(base["attrs"]["seconds_loop"])}
                if plain is None:
                    plain = row
                # The same bar for every variant: plain NK-means' final objective, + 0.1%.
                passes_plain, seconds_plain, _ = reached(result, rho, plain["objective"])
                row.update(pass_ratio=plain["passes"] / passes,
                           time_ratio=plain["seconds_to_reach"] / seconds,
                           objective_ratio=row["objective"] / plain["objective"],
                           passes_to_plain=passes_plain if passes_plain else "",
                           seconds_to_plain=seconds_plain if passes_plain else "",
                           pass_ratio_to_plain=plain["passes"] / passes_plain if passes_plain else "",
                           time_ratio_to_plain=plain["seconds_to_reach"] / seconds_plain
                           if passes_plain else "")
                rows.append(row)
                if (source, partition) == traced:
                    keep = np.unique(np.geomspace(1, len(objective), 300).astype(int)) - 1
                    traces += [{"data": source, "partition": partition, "variant": label,
                                "iteration": int(result["metrics"]["iteration"][i]),
                                "objective": float(objective[i]), "final": float(objective[-1])}
                               for i in keep]
                print(f"{source} {partition} {label}: {passes} passes to {WITHIN:.1%} of its final "
                      f"objective ({row['pass_ratio']:.1f}x fewer than plain), "
                      + (f"{passes_plain} to plain's ({row['pass_ratio_to_plain']:.1f}x)" if passes_plain
                         else "never reaches plain's"), flush=True)
    return rows, traces


def read_csv(path):
    if not path.exists():
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            try:
                row[key] = float(value) if key not in ("converged",) else value == "True"
            except ValueError:
                pass
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", default="experiments")
    parser.add_argument("--only", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--launcher", choices=LAUNCHERS, default="mpiexec")
    parser.add_argument("--report-only", action="store_true", help="re-render REPORT.md and the plots")
    parser.add_argument("--quick", action="store_true",
                        help="a few settings of each experiment only (a smoke test, about a minute)")
    args = parser.parse_args(argv)
    folder = Path(args.out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        runner = Runner(folder, args.ranks, args.launcher)
        for name in args.only:
            if name == "data":
                rows, traces = experiment_data(runner, **({"sources": QUICK["sources"],
                                                          "traced": QUICK["traced"]} if args.quick else {}))
                write_csv(folder / "data.csv", rows)
                write_csv(folder / "acceleration_trace.csv", traces)
            else:
                settings = (QUICK[name],) if args.quick else ()
                write_csv(folder / f"{name}.csv", globals()[f"experiment_{name}"](runner, *settings))
    from report import write_report
    write_report(folder, {name: read_csv(folder / f"{name}.csv") for name in EXPERIMENTS},
                 read_csv(folder / "acceleration_trace.csv"), args.ranks)


if __name__ == "__main__":
    main()
