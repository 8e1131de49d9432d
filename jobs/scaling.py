"""Strong and weak scaling of `nkmpi run`: one CSV row per run.

    python jobs/scaling.py --ranks 1 2 4 --out-dir scaling            # mpiexec, this machine
    python jobs/scaling.py --ranks 1 2 4 8 16 --launcher srun ...     # inside a SLURM allocation

strong: a fixed dataset (--points over --agents-per-rank x max(ranks) agents)
        on each rank count;
weak:   --points-per-rank and --agents-per-rank on every rank, so the data grows
        with the ranks.

Each row: mode, ranks, agents, points, iterations, seconds per iteration split
into local pass (assignment and center update) / exchange wait / monitoring
(the slowest rank's), seconds per iteration overall, bytes sent per rank per
iteration (the largest), and whether the ranks outnumbered the cores
(oversubscribed: the times then measure sharing, not scaling).  Plot with
`python -m data_tools.plot scaling OUT_DIR/strong.csv OUT_DIR/weak.csv`.
"""

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

from nkmpi.formats.hdf5 import atomic_file
from nkmpi.formats.result import read_result
from nkmpi.launch import BIN, LAUNCHERS, launch_command, mpi_env

COLUMNS = ("mode", "ranks", "agents", "points", "iterations", "seconds_local", "seconds_exchange",
           "seconds_monitor", "seconds_per_iteration", "bytes_sent_per_rank", "oversubscribed")


def cores():
    """CPUs this job may use: SLURM's allocation when inside one, else the machine's."""
    for name in ("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE"):
        value = os.environ.get(name, "").split("(")[0].split(",")[0]
        if value.isdigit():
            return int(value) * int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def measure(mode, n_ranks, data, args, folder):
    out = folder / f"{mode}-{n_ranks}.result.h5"
    run = [BIN / "nkmpi", "run", data, "-k", args.clusters, "--graph", args.graph, "--iters", args.iters,
           "--tol", 0, "--monitor-every", args.monitor_every, "--quiet", "--out", out]
    subprocess.run(launch_command(n_ranks, run, args.launcher), check=True, env=mpi_env())
    a = read_result(out)["attrs"]
    iterations = int(a["iterations"])
    local = (a["rank_seconds_local"] + a["rank_seconds_update"]).max() / iterations
    return {"mode": mode, "ranks": n_ranks, "agents": int(a["n_agents"]), "points": int(a["n_points"]),
            "iterations": iterations, "seconds_local": local,
            "seconds_exchange": a["rank_seconds_exchange"].max() / iterations,
            "seconds_monitor": a["rank_seconds_monitor"].max() / iterations,
            "seconds_per_iteration": a["seconds_loop"] / iterations,
            "bytes_sent_per_rank": int(a["rank_bytes_sent_per_iteration"].max()),
            "oversubscribed": n_ranks > cores()}


def make_data(path, n_points, n_agents, args):
    if not path.exists():
        subprocess.run([sys.executable, "-m", "data_tools.generate", path, "--points", str(n_points),
                        "--agents", str(n_agents), "--features", str(args.features), "--clusters",
                        str(args.clusters), "--seed", "1", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("strong", "weak", "both"), default="both")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--launcher", choices=LAUNCHERS, default="mpiexec")
    parser.add_argument("--points", type=int, default=800_000, help="strong scaling: total points")
    parser.add_argument("--points-per-rank", type=int, default=400_000, help="weak scaling: points per rank")
    parser.add_argument("--agents-per-rank", type=int, default=16)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--graph", default="ring")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--monitor-every", type=int, default=10)
    parser.add_argument("--out-dir", default="scaling")
    args = parser.parse_args(argv)
    folder = Path(args.out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    modes = ("strong", "weak") if args.mode == "both" else (args.mode,)
    for mode in modes:
        rows = []
        for n_ranks in args.ranks:
            if mode == "strong":
                n_agents = args.agents_per_rank * max(args.ranks)
                data = make_data(folder / f"strong-{args.points}-{n_agents}.h5", args.points, n_agents, args)
            else:
                data = make_data(folder / f"weak-{n_ranks}.h5", args.points_per_rank * n_ranks,
                                 args.agents_per_rank * n_ranks, args)
            rows.append(measure(mode, n_ranks, data, args, folder))
            row = rows[-1]
            print(f"{mode} {n_ranks} rank(s): {row['seconds_per_iteration'] * 1e3:.2f} ms/iteration"
                  + (" (oversubscribed)" if row["oversubscribed"] else ""), flush=True)
        with atomic_file(folder / f"{mode}.csv") as temporary, open(temporary, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {folder / f'{mode}.csv'}")


if __name__ == "__main__":
    main()
