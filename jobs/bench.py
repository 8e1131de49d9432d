"""Performance benchmarks of nkmpi, each measured side by side with its peer in one run.

    python jobs/bench.py [--csv bench.csv] [--skip-large]

1. big shard: the local pass on one agent, 200,000 x 32 float64, K = 16, one
   thread, against scikit-learn's Lloyd iteration (threadpoolctl: one thread);
   the same in float32; and against a plain X.sum(0) pass (the bandwidth floor).
2. many small agents: 4,096 agents x 64 points x p = 8, K = 8 on one rank
   (assignment pass and center update): points per second against target 1's.
3. communication: 4 ranks on a ring, tiny data: time per iteration minus the
   local pass, against a bare Neighbor_alltoall of the same payload.
4. memory: peak memory per rank above its start-up footprint against its shard.
5. start-up: import plus kernel loading on a warm cache.
6. a sensor network: 1,000,000 agents x 16 points x p = 8, K = 8 on a random
   geometric graph, 2 ranks: set-up time, iterations per second, memory.

Prints a table (nkmpi, peer, ratio, target, pass/fail) and writes it as CSV.
Ranks are oversubscribed when the machine has fewer cores than ranks.
"""

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nkmpi.formats.dataset import write_dataset_rows
from nkmpi.formats.hdf5 import atomic_file
from nkmpi.formats.result import read_result
from nkmpi.launch import BIN, launch_command, mpi_env

HERE = Path(__file__).resolve().parent


def median_time(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mpi(n_ranks, *args, timeout=1800):
    command = launch_command(n_ranks, args)
    proc = subprocess.run(command, capture_output=True, text=True, env=mpi_env(), timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def big_shard(rows):
    """Target 1: returns table rows and nkmpi's points per second."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    from nkmpi import kernels
    kernels.set_threads(1)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((200_000, 32))
    init = data[rng.choice(len(data), 16, replace=False)]
    offsets = np.array([0, len(data)])
    out = []
    speed = None
    for dtype in (np.float64, np.float32):
        x = data.astype(dtype)
        labels = np.full(len(x), -1, dtype=np.int32)
        work = kernels.accumulators(1, 16, 32)
        ours, theirs = [], []
        for _ in range(3):                          # interleaved: both see the same machine state
            kernels.assign_and_accumulate(x, offsets, init[None], labels, out=work)
            ours.append(median_time(lambda: kernels.assign_and_accumulate(x, offsets, init[None], labels,
                                                                          out=work), 5))
            with threadpool_limits(limits=1):
                model = KMeans(16, init=init.astype(dtype), n_init=1, algorithm="lloyd", tol=0, max_iter=10)
                start = time.perf_counter()
                model.fit(x)
                theirs.append((time.perf_counter() - start) / model.n_iter_)
        ours_t, theirs_t = min(ours), min(theirs)
        name = np.dtype(dtype).name
        out.append((f"1 big shard {name}: s/iteration vs scikit-learn Lloyd", ours_t, theirs_t,
                    ours_t / theirs_t, 1.0, "<="))
        if dtype is np.float64:
            speed = len(x) / ours_t
            floor = median_time(lambda: x.sum(axis=0), 10)
            out.append(("1 big shard float64: s/iteration vs X.sum(0)", ours_t, floor, ours_t / floor,
                        None, "info"))
    rows.extend(out)
    return speed


def many_agents(rows, big_speed):
    """Target 2."""
    from nkmpi import kernels
    from nkmpi.graph import build_network
    rng = np.random.default_rng(1)
    n_agents, per, p, k = 4096, 64, 8, 8
    x = rng.standard_normal((n_agents * per, p))
    offsets = np.arange(n_agents + 1) * per
    centers = rng.standard_normal((n_agents, k, p))
    network = build_network("ring", n_agents)
    labels = np.full(len(x), -1, dtype=np.int32)
    work = kernels.accumulators(n_agents, k, p)
    spare = np.empty_like(centers)

    def one_iteration():
        sums, counts, _, _ = kernels.assign_and_accumulate(x, offsets, centers, labels, out=work)
        kernels.center_update(centers, centers, network.indptr, network.indices, sums, counts, 10.0, 0.5,
                              out=spare)

    one_iteration()
    seconds = median_time(one_iteration, 15)
    speed = len(x) / seconds
    rows.append(("2 many small agents: points/s vs target 1's points/s", speed, big_speed, speed / big_speed,
                 0.5, ">="))


def communication(rows):
    """Target 3: runs jobs/bench_exchange.py on 4 ranks."""
    out = mpi(4, sys.executable, HERE / "bench_exchange.py")
    loop, bare = map(float, out.split()[-2:])
    rows.append(("3 communication (4 ranks, ring): s/iteration minus local pass vs bare "
                 "Neighbor_alltoall", loop, bare, loop / bare, 1.5, "<="))


def memory(rows, folder):
    """Target 4."""
    data, result = folder / "memory.h5", folder / "memory.result.h5"
    subprocess.run([sys.executable, "-m", "data_tools.generate", data, "--points", "4000000", "--features",
                    "16", "--agents", "64", "--quiet"], check=True, capture_output=True)
    mpi(2, BIN / "nkmpi", "run", data, "-k", 8, "--iters", 5, "--quiet", "--out", result)
    attrs = read_result(result)["attrs"]
    shard = attrs["rank_shard_bytes"].max()
    peak = attrs["rank_peak_memory_bytes"].max()
    allowance = 8 * 2**20
    rows.append(("4 memory: peak bytes per rank above start-up vs shard bytes (+8 MiB)", peak, shard,
                 (peak - allowance) / shard, 1.3, "<="))


def startup(rows):
    """Target 5: warm cache, so run twice and keep the second."""
    code = ("import time; t = time.perf_counter(); import numpy as np; import nkmpi.cli, nkmpi.driver; "
            "from nkmpi import kernels; kernels.warm_up(np.float64); kernels.warm_up(np.float32); "
            "print(time.perf_counter() - t)")
    for _ in range(2):
        seconds = float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                       text=True).stdout)
    rows.append(("5 start-up: import and kernel loading, warm cache (s)", seconds, 2.0, seconds / 2.0, 1.0,
                 "<="))


def sensor_network(rows, folder):
    """Target 6."""
    n_agents, per, p = 1_000_000, 16, 8
    data, result = folder / "sensors.h5", folder / "sensors.result.h5"
    rng = np.random.default_rng(2)
    means = rng.uniform(-10, 10, (8, p))
    n_points, chunk = n_agents * per, 1_000_000
    blocks = ((start, means[rng.integers(8, size=chunk)] + rng.standard_normal((chunk, p)), None)
              for start in range(0, n_points, chunk))
    write_dataset_rows(data, (n_points, p), np.float64, np.arange(n_agents + 1, dtype=np.int64) * per, blocks)
    started = time.perf_counter()
    # One center update per pass (--inner 1): the rate counts the paper's iterations.
    mpi(2, BIN / "nkmpi", "run", data, "-k", 8, "--graph", "rgg:radius=0.003", "--iters", 10,
        "--inner", 1, "--monitor-every", 5, "--quiet", "--out", result)
    wall = time.perf_counter() - started
    attrs = read_result(result)["attrs"]
    rate = attrs["iterations"] / attrs["seconds_loop"]
    rows.append(("6 sensor network 1M agents: set-up seconds", attrs["seconds_setup"], 60.0,
                 attrs["seconds_setup"] / 60.0, 1.0, "<="))
    rows.append(("6 sensor network 1M agents: iterations per second", rate, 1.0, rate, 1.0, ">="))
    resident = attrs["rank_peak_resident_bytes"].sum()
    rows.append(("6 sensor network 1M agents: peak resident bytes, all ranks, vs 24 GiB", resident,
                 24 * 2**30, resident / (24 * 2**30), 1.0, "<="))
    rows.append(("6 sensor network 1M agents: whole job wall seconds", wall, None, None, None, "info"))


def verdict(ratio, target, sense):
    if sense == "info" or target is None:
        return "-"
    return "pass" if (ratio <= target if sense == "<=" else ratio >= target) else "FAIL"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", default="bench.csv", help="where to write the table (default bench.csv)")
    parser.add_argument("--skip-large", action="store_true", help="skip target 6 (1 GB of data, ~2 min)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        folder = Path(tmp)
        big_speed = big_shard(rows)
        many_agents(rows, big_speed)
        communication(rows)
        memory(rows, folder)
        startup(rows)
        if not args.skip_large:
            sensor_network(rows, folder)
    header = ("benchmark", "nkmpi", "peer", "ratio", "target", "result")
    table = [(name, f"{ours:.4g}", "" if peer is None else f"{peer:.4g}",
              "" if ratio is None else f"{ratio:.3f}",
              "" if target is None else f"{sense} {target:g}", verdict(ratio, target, sense))
             for name, ours, peer, ratio, target, sense in rows]
    widths = [max(len(r[i]) for r in table + [header]) for i in range(len(header))]
    for line in [header] + table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))
    with atomic_file(args.csv) as temporary, open(temporary, "w", newline="") as f:
        csv.writer(f).writerows([header] + table)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
