"""data_tools: generate and convert round trips through nkmpi's own loader, the
generator under a memory limit, and the plots."""

import resource
import struct
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy.spatial import cKDTree
from sklearn.datasets import load_iris

from conftest import mpi_env, run_mpi, run_script
from data_tools.convert import convert
from data_tools.generate import generate
from data_tools.plot import plot_run
from nkmpi.graph import build_network
from nkmpi.io import open_dataset, read_all

LOAD_BACK = Path(__file__).parent / "mpi_scripts" / "load_back.py"


def load_back(path, n_ranks, tmp_path):
    out = tmp_path / f"back{n_ranks}.npz"
    proc = run_script(n_ranks, LOAD_BACK, path, out)
    assert proc.returncode == 0, proc.stderr
    return np.load(out)


def raw(path):
    with h5py.File(path) as f:
        return {name: f[name][()] for name in ("points", "agent_offsets", "labels")} | {
            "edges": f["graph/edges"][()] if "graph" in f else np.zeros((0, 2))}


def sorted_rows(points, labels):
    table = np.column_stack([points, labels])
    return table[np.lexsort(table.T[::-1])]


def test_convert_npz_round_trip_on_1_and_3_ranks(tmp_path):
    rng = np.random.default_rng(0)
    points, labels = rng.standard_normal((500, 3)), rng.integers(4, size=500)
    np.savez(tmp_path / "in.npz", X=points, y=labels)
    offsets = convert(str(tmp_path / "in.npz"), tmp_path / "out.h5", 7, "dirichlet:0.5", key="X",
                      labels_key="y", graph="ring")
    stored = raw(tmp_path / "out.h5")
    # Exactly the rows that went in, each with its own label, grouped by agent.
    np.testing.assert_array_equal(sorted_rows(stored["points"], stored["labels"]), sorted_rows(points, labels))
    np.testing.assert_array_equal(stored["agent_offsets"], offsets)
    np.testing.assert_array_equal(stored["edges"], build_network("ring", 7).edges)
    for n_ranks in (1, 3):
        back = load_back(tmp_path / "out.h5", n_ranks, tmp_path)
        for name in ("points", "labels", "edges"):
            np.testing.assert_array_equal(back[name], stored[name])
        np.testing.assert_array_equal(back["offsets"], offsets)


def test_convert_csv_with_header_columns_and_labels(tmp_path):
    (tmp_path / "in.csv").write_text("a,b,c,kind\n1,2,3,x\n4,5,6,y\n7,8,9,y\n1.5,1,1,x\n")
    subprocess.run([sys.executable, "-m", "data_tools.convert", tmp_path / "in.csv", tmp_path / "out.h5",
                    "--agents", "2", "--columns", "c,a", "--label-column", "3", "--partition", "by-cluster:1"],
                   check=True, capture_output=True)
    info, points = read_all(tmp_path / "out.h5")
    stored = raw(tmp_path / "out.h5")
    # by-cluster:1 with 2 agents: agent 0 holds class 0 ("x"), agent 1 class 1 ("y").
    np.testing.assert_array_equal(points, [[3, 1], [1, 1.5], [6, 4], [9, 7]])
    np.testing.assert_array_equal(stored["labels"], [0, 0, 1, 1])
    np.testing.assert_array_equal(info.offsets, [0, 2, 4])


def test_convert_sklearn_standardized(tmp_path):
    convert("sklearn:iris", tmp_path / "iris.h5", 3, "by-cluster:1", standardize=True)
    stored = raw(tmp_path / "iris.h5")
    iris = load_iris()
    scaled = (iris.data - iris.data.mean(0)) / iris.data.std(0)
    np.testing.assert_allclose(sorted_rows(stored["points"], stored["labels"]),
                               sorted_rows(scaled, iris.target), rtol=1e-12, atol=1e-12)
    for m in range(3):      # each agent holds exactly one species
        lo, hi = stored["agent_offsets"][m:m + 2]
        assert set(stored["labels"][lo:hi]) == {m}


@pytest.mark.parametrize("source,message", [
    ("sklearn:mnist", "unknown scikit-learn data set"), ("nothere.npy", "no such file"),
    ("data.xyz", "cannot tell the format"),
])
def test_convert_errors(tmp_path, source, message):
    proc = subprocess.run([sys.executable, "-m", "data_tools.convert", source, tmp_path / "o.h5"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("partition", ["iid", "by-cluster:2", "dirichlet:0.2", "spatial"])
def test_generate_round_trip_and_partition_shape(tmp_path, partition):
    path = tmp_path / "gen.h5"
    offsets = generate(path, 3000, 5, 3, 6, partition, anisotropy=3, imbalance=4, graph="er:p=0.7",
                       seed=3, chunk_rows=700)       # several chunks
    stored = raw(path)
    for n_ranks in (1, 3):
        back = load_back(path, n_ranks, tmp_path)
        for name in ("points", "labels", "edges"):
            np.testing.assert_array_equal(back[name], stored[name])
        np.testing.assert_array_equal(back["offsets"], offsets)
    np.testing.assert_array_equal(stored["edges"], build_network("er:p=0.7", 6, 3).edges)
    labels, points = stored["labels"], stored["points"]
    counts = np.bincount(labels, minlength=5)
    assert counts[-1] > 2 * counts[0]                 # imbalance 4: the last cluster is the largest
    agent_sets = [set(labels[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    if partition == "by-cluster:2":
        assert all(s <= {(2 * m) % 5, (2 * m + 1) % 5} for m, s in enumerate(agent_sets))
    if partition == "dirichlet:0.2":                  # label skew: most agents see few clusters
        assert np.median([len(s) for s in agent_sets]) < 5
    if partition == "spatial":                        # agents own Voronoi cells of the first 2 features
        agents = np.repeat(np.arange(6), np.diff(offsets))
        centroids = np.array([points[agents == m, :2].mean(0) for m in range(6) if (agents == m).any()])
        assert len(centroids) >= 2
        owners = cKDTree(centroids).query(points[:, :2])[1]
        assert (owners == np.searchsorted(np.unique(agents), agents)).mean() > 0.8


def test_generate_larger_than_its_memory_limit(tmp_path):
    """The generator writes a file larger than the address space it may use."""
    env = mpi_env()
    probe = subprocess.run([sys.executable, "-c", "import data_tools.generate, resource;"
                            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss);"
                            "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1])"],
                           capture_output=True, text=True, env=env, check=True)
    baseline = int(probe.stdout.split()[1]) * 1024
    limit = baseline + 200 * 2**20
    n_points, n_features = 20_000_000, 4                # 640 MB of float64 points
    path = tmp_path / "big.h5"

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "data_tools.generate", path, "--points", str(n_points),
                           "--features", str(n_features), "--agents", "64", "--partition", "by-cluster:2",
                           "--quiet"], preexec_fn=cap, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert path.stat().st_size > limit
    info = open_dataset(path)                      # structure valid
    assert info.n_points == n_points and info.offsets[-1] == n_points
    with h5py.File(path) as f:                     # complete: no row left unwritten (all zero)
        for start in range(0, n_points, 4_000_000):
            block = f["points"][start:start + 4_000_000]
            assert np.isfinite(block).all() and (np.abs(block).sum(axis=1) > 0).all()


def png_size(path):
    with open(path, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.parametrize("n_features", [2, 5])
def test_plots_are_pngs_of_the_expected_size(tmp_path, n_features):
    path = tmp_path / "d.h5"
    generate(path, 2000, 4, n_features, 6, "by-cluster:2", seed=1)
    proc = run_mpi(2, ["run", path, "-k", 4, "--iters", 30, "--quiet", "--out", tmp_path / "r.h5"])
    assert proc.returncode == 0, proc.stderr
    clusters, convergence = plot_run(path, tmp_path / "r.h5", tmp_path / "pic", dpi=50)
    assert png_size(clusters) == (600, 275)        # 12 x 5.5 inches at 50 dpi
    assert png_size(convergence) == (600, 200)     # 12 x 4 inches
    assert Path(clusters).stat().st_size > 5000 and Path(convergence).stat().st_size > 5000
