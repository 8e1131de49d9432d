"""`mpiexec -n R nkmpi run` against the serial reference, and across rank counts."""

import h5py
import numpy as np
import pytest

from conftest import MPI_TIMEOUT, assert_same_file, run_mpi, run_python, uneven_dataset
from nkmpi.formats.dataset import write_dataset
from nkmpi.formats.result import read_result
from nkmpi.graph import block_placement, build_network
from nkmpi.options import Options
from nkmpi.reference import simulate

pytestmark = pytest.mark.mpi

GRAPHS = ["ring", "torus", "er:p=0.3", "star", "rgg:radius=0.5"]
SEED = 1                                   # er:p=0.3 and rgg:radius=0.5 over 12 agents are connected for seed 1


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "uneven.h5"
    points, offsets = uneven_dataset(path)
    return path, points, offsets


def reference_for(points, offsets, spec, n_agents=12, **kw):
    options = Options(n_clusters=kw.get("k", 4), rho=kw.get("rho"), alpha=kw.get("alpha", 0.5),
                      max_iter=kw.get("iters", 40), tol=kw.get("tol", 0.0), seed=SEED,
                      monitor_every=kw.get("monitor_every", 1), init=kw.get("init", "network"))
    return simulate(points, offsets, build_network(spec, n_agents, SEED), options)


def run(path, out, n_ranks, spec, extra=()):
    proc = run_mpi(n_ranks, ["run", path, "-k", 4, "--graph", spec, "--iters", 40, "--tol", 0,
                             "--monitor-every", 1, "--seed", SEED, "--out", out, *extra])
    assert proc.returncode == 0, proc.stderr
    return read_result(out)


@pytest.mark.parametrize("spec", GRAPHS)
def test_mpi_equals_reference_on_1_to_4_ranks(dataset, tmp_path, spec):
    path, points, offsets = dataset
    expected = reference_for(points, offsets, spec)
    results = [run(path, tmp_path / f"r{n}.h5", n, spec) for n in (1, 2, 3, 4)]
    for n, got in zip((1, 2, 3, 4), results):
        np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0,
                                   err_msg=f"{n} ranks")
        np.testing.assert_array_equal(got["assignments"], expected.assignments)
        np.testing.assert_array_equal(got["initial_centers"], expected.initial_centers)
        for name, series in expected.metrics.items():
            if name != "seconds":
                np.testing.assert_allclose(got["metrics"][name], series, rtol=1e-12, err_msg=name)
        assert got["attrs"]["n_ranks"] == n and got["attrs"]["iterations"] == 40
        # Rank count invariance to the last bit, not just to 1e-12.
        np.testing.assert_array_equal(got["centers"], results[0]["centers"])
        # And the objective the MPI run reports never increases.
        objective = got["metrics"]["objective"]
        assert (np.diff(objective) <= 1e-12 * objective[0]).all()


@pytest.mark.parametrize("init", ["local", "flood"])
def test_one_agent_per_rank_local_and_flood_init(tmp_path, init):
    path = tmp_path / "four.h5"
    points, offsets = uneven_dataset(path, n_agents=6, seed=3)
    got = run(path, tmp_path / "out.h5", 6, "ring", ["--init", init])
    expected = reference_for(points, offsets, "ring", n_agents=6, init=init)
    np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(got["assignments"], expected.assignments)


def test_flood_start_is_what_the_rounds_spread_on_any_rank_count(tmp_path):
    """`nkmpi run --init flood` broadcasts the one seed where the reference runs the flood
    rounds: along a path from the middle (the first agents hold too few distinct points to
    seed), every agent starts from the reference's centers, bit for bit, on 1 and 3 ranks,
    where the seeding agent is on rank 1 (a broadcast from the wrong rank shows)."""
    sizes = [2, 3, 1, 2, 3, 1, 12, 9, 10]
    seeding = int(np.argmax(np.array(sizes) >= 4))      # the first agent with K points
    bounds = block_placement(np.array(sizes), 3)
    assert bounds[1] <= seeding < bounds[2]
    points = np.random.default_rng(5).standard_normal((sum(sizes), 3))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    path = tmp_path / "path.h5"
    write_dataset(path, points, offsets)
    expected = reference_for(points, offsets, "path", n_agents=len(sizes), init="flood")
    assert np.isnan(expected.initial_centers).sum() == 0
    for n_ranks in (1, 3):
        got = run(path, tmp_path / f"r{n_ranks}.h5", n_ranks, "path", ["--init", "flood"])
        np.testing.assert_array_equal(got["initial_centers"], expected.initial_centers)
        np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)


def test_early_stop_matches_reference_and_writes_every_parameter(dataset, tmp_path):
    path, points, offsets = dataset
    out = tmp_path / "conv.h5"
    proc = run_mpi(3, ["run", path, "-k", 4, "--graph", "torus", "--tol", "1e-9", "--rho", 2,
                       "--alpha", 1, "--monitor-every", 5, "--seed", SEED, "--out", out])
    assert proc.returncode == 0, proc.stderr
    assert "converged" in proc.stdout and "nkmpi: iter" in proc.stdout
    got = read_result(out)
    expected = reference_for(points, offsets, "torus", rho=2.0, alpha=1.0, iters=1000, tol=1e-9,
                             monitor_every=5)
    assert expected.converged and got["attrs"]["converged"]
    assert got["attrs"]["iterations"] == expected.iterations < 1000
    np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)
    attrs = got["attrs"]
    for key, value in {"n_clusters": 4, "rho": 2.0, "alpha": 1.0, "max_iter": 1000, "tol": 1e-9,
                       "init": "network", "n_init": 10, "seed": SEED, "monitor_every": 5, "graph": "torus",
                       "n_agents": 12, "n_ranks": 3, "format": "nkmpi-result", "version": 1}.items():
        assert attrs[key] == value, key
    assert "nkmpi_version" in attrs
    lengths = {len(series) for series in got["metrics"].values()}
    assert lengths == {expected.iterations // 5}


def test_default_output_next_to_the_data_and_float32(tmp_path):
    path = tmp_path / "f32.h5"
    points, offsets = uneven_dataset(path, dtype=np.float32)
    proc = run_mpi(2, ["run", path, "-k", 3, "--iters", 15, "--quiet"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    got = read_result(tmp_path / "f32.result.h5")
    expected = simulate(points, offsets, build_network("ring", 12),
                        Options(n_clusters=3, max_iter=15, tol=1e-6))
    np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)
    with h5py.File(tmp_path / "f32.result.h5") as f:
        assert f["centers"].dtype == np.float64 and f["assignments"].dtype == np.int64


def test_the_datasets_graph_as_csr_or_edge_list_gives_one_result(dataset, tmp_path):
    """A dataset's CSR graph, each rank reading its own agents' rows, runs as the same
    graph stored as an edge list (read whole), and as the reference on that graph."""
    path, points, offsets = dataset
    spec = "ws:k=4,p=0.3"
    edges = build_network(spec, 12, SEED).edges
    csr, listed = tmp_path / "csr.h5", tmp_path / "listed.h5"
    write_dataset(csr, points, offsets, edges=edges)
    write_dataset(listed, points, offsets)
    with h5py.File(listed, "a") as f:
        f["graph/edges"] = edges
    expected = reference_for(points, offsets, spec)
    for n_ranks in (1, 3):
        for data in (csr, listed):
            out = tmp_path / f"{data.stem}{n_ranks}.h5"
            proc = run_mpi(n_ranks, ["run", data, "-k", 4, "--iters", 40, "--tol", 0, "--monitor-every", 1,
                                     "--seed", SEED, "--out", out])
            assert proc.returncode == 0, proc.stderr
            got = read_result(out)
            assert got["attrs"]["graph"] == "dataset"
            np.testing.assert_allclose(got["centers"], expected.centers, rtol=1e-12, atol=0)
            np.testing.assert_array_equal(got["assignments"], expected.assignments)
            np.testing.assert_array_equal(got["centers"], read_result(tmp_path / "csr1.h5")["centers"])


@pytest.mark.parametrize("u, v", [(0, 6), (6, 0), (3, 5)])
@pytest.mark.parametrize("n_ranks", [1, 3])
def test_a_one_sided_stored_graph_is_refused_by_every_rank(dataset, tmp_path, u, v, n_ranks):
    """A CSR row that lists a neighbour whose own row does not list it back, inside a
    rank's block or across ranks (agents 0 and 6 are on ranks 0 and 1 of 3): status 2 and
    one message naming the entry, before any iteration."""
    path, points, offsets = dataset
    ring = build_network("ring", 12)
    rows = [list(ring.neighbours(a)) for a in range(12)]
    rows[u] = sorted(rows[u] + [v])
    data = tmp_path / "one-sided.h5"
    write_dataset(data, points, offsets)
    with h5py.File(data, "a") as f:
        f["graph/indptr"] = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
        f["graph/indices"] = np.concatenate(rows)
    proc = run_mpi(n_ranks, ["run", data, "-k", 4, "--iters", 5, "--out", tmp_path / "out.h5"])
    assert proc.returncode == 2, proc.stderr
    assert f"lists agent {v} among agent {u}'s neighbours but not {u} among {v}'s" in proc.stderr
    assert proc.stderr.count("nkmpi: error:") == 1 and "Traceback" not in proc.stderr
    assert "iter" not in proc.stdout and not (tmp_path / "out.h5").exists()


# `nkmpi run` whose set-up tries both ways of writing the new centers (kernels.STREAM_BYTES 0:
# choose_stores times each way), and whose loop then streams every update past the caches;
# prints, on rank 0, the ways each rank's updates were written in.
BOTH_WAYS = r"""
import sys
from mpi4py import MPI
from nkmpi import cli, kernels

kernels.STREAM_BYTES = 0
ways, center_update, choose_stores = set(), kernels.center_update, kernels.choose_stores

def recorded(*args, streamed=False, **kwargs):
    ways.add(streamed)
    return center_update(*args, streamed=streamed, **kwargs)

kernels.center_update = recorded
kernels.choose_stores = lambda out_bytes, update: choose_stores(out_bytes, update) or True
status = cli.main(sys.argv[1:])
seen = MPI.COMM_WORLD.gather(sorted(ways))
if MPI.COMM_WORLD.rank == 0:
    print(seen)
sys.exit(status)
"""


def test_centers_streamed_or_written_in_place_give_one_result(dataset, tmp_path):
    """On 2 ranks (ghosts: an update a call), a run whose set-up tries both ways of writing the
    new centers and whose updates then all stream them past the caches gives the result file
    of a run whose updates all write in place, bit for bit."""
    path = dataset[0]
    args = ["run", path, "-k", 4, "--graph", "ring", "--iters", 30, "--tol", 0, "--monitor-every", 4, "--seed", SEED,
            "--inner", 2]
    plain = run_mpi(2, [*args, "--out", tmp_path / "plain.h5"])
    assert plain.returncode == 0, plain.stderr
    tried = run_python(2, ["-c", BOTH_WAYS, *map(str, args), "--out", str(tmp_path / "tried.h5")], MPI_TIMEOUT)
    assert tried.returncode == 0, tried.stderr
    assert tried.stdout.strip().splitlines()[-1] == str([[False, True]] * 2)
    assert_same_file(tmp_path / "tried.h5", tmp_path / "plain.h5")
