"""The fixed runs whose result arrays must not change when the code is reorganized.

`python tests/regression_runs.py --write` records them in tests/data/regression.npz
(done once, before a refactor); tests/test_regression.py reruns them and asks
for byte-identical arrays.  The dataset itself is stored in the fixture, so a
change to the data generators cannot hide a change of results.
"""

import argparse
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

FIXTURE = Path(__file__).with_name("data") / "regression.npz"
COMMON = ["-k", "4", "--quiet", "--seed", "3", "--monitor-every", "5"]
#: name -> (ranks, arguments of `nkmpi run`), run in this order; "resume" continues "resume-first".
RUNS = {
    "plain": (2, ["--inner", "1", "--iters", "120"]),
    "inner": (2, ["--inner", "3", "--iters", "80", "--graph", "er:p=0.4"]),
    "schedule": (3, ["--rho-schedule", "2:4", "--rho", "40", "--iters", "150"]),
    "faults": (2, ["--init", "local", "--link-failure-prob", "0.2", "--dropout-prob", "0.1",
                   "--iters", "90", "--graph", "ws:k=4,p=0.3"]),
    "lloyd": (2, ["--algorithm", "lloyd", "--init", "flood", "--iters", "50"]),
    "resume-first": (2, ["--iters", "25", "--checkpoint-every", "10", "--monitor-every", "0"]),
    "resume": (3, ["--iters", "60", "--monitor-every", "0"]),
}
ARRAYS = ("centers", "initial_centers", "assignments")


def dataset_arrays(seed=7, n_agents=10, n_features=3, n_clusters=4):
    """Non-IID blobs: each agent sees two of the clusters, in uneven amounts."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(4, 30, size=n_agents)
    sizes[6] = 0
    centers = rng.uniform(-6, 6, size=(n_clusters, n_features))
    rows = []
    for size in sizes:
        own = rng.choice(n_clusters, size=2, replace=False)
        rows.append(centers[own[rng.integers(2, size=size)]] + rng.standard_normal((size, n_features)))
    return np.concatenate(rows), np.concatenate([[0], np.cumsum(sizes)])


def write_data(path, points, offsets):
    with h5py.File(path, "w") as f:
        f.attrs["format"], f.attrs["version"] = "nkmpi-dataset", 1
        f["points"], f["agent_offsets"] = points, offsets


def read_arrays(path):
    with h5py.File(path, "r") as f:
        arrays = {name: f[name][()] for name in ARRAYS}
        for name in f["metrics"]:
            if name != "seconds":
                arrays["metrics/" + name] = f["metrics"][name][()]
    return arrays


def run_all(run_mpi, folder, points, offsets):
    """Every run's result arrays as {"RUN:ARRAY": array}."""
    folder = Path(folder)
    data = folder / "data.h5"
    write_data(data, points, offsets)
    found = {}
    for name, (ranks, args) in RUNS.items():
        out = folder / f"{name}.h5"
        extra = []
        if name == "resume-first":
            extra = ["--checkpoint", folder / "resume.ck.h5"]
        elif name == "resume":
            extra = ["--resume", folder / "resume.ck.h5", "--checkpoint", folder / "resume2.ck.h5"]
        proc = run_mpi(ranks, ["run", data, *COMMON, *args, *extra, "--out", out])
        if proc.returncode != 0:
            raise RuntimeError(f"run {name} failed: {proc.stderr}")
        found.update({f"{name}:{key}": value for key, value in read_arrays(out).items()})
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record the fixture in {FIXTURE}")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import run_mpi
    points, offsets = dataset_arrays()
    with tempfile.TemporaryDirectory() as folder:
        found = run_all(run_mpi, folder, points, offsets)
    if args.write:
        FIXTURE.parent.mkdir(exist_ok=True)
        np.savez_compressed(FIXTURE, points=points, offsets=offsets, **found)
    for key, value in found.items():
        print(key, value.shape, value.dtype)


if __name__ == "__main__":
    main()
