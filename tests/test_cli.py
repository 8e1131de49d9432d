"""The command line: errors agreed by every rank, info, simulate, summary and status."""

import shutil
import subprocess
import sys

import h5py
import networkx as nx
import numpy as np
import pytest

from conftest import run_mpi, uneven_dataset
from nkmpi.cli import main
from nkmpi.formats.result import read_result


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "uneven.h5"
    uneven_dataset(path)
    return path


def nkmpi(*args):
    return subprocess.run([sys.executable, "-m", "nkmpi", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def copy_with(src, dst, edit):
    with h5py.File(src) as f_in, h5py.File(dst, "w") as f_out:
        for key, value in f_in.attrs.items():
            f_out.attrs[key] = value
        for name in f_in:
            f_in.copy(name, f_out)
        edit(f_out)


def nan_in_last_agent(f):
    points = f["points"][()]
    points[-1, 0] = np.nan              # only the last rank reads this row
    del f["points"]
    f["points"] = points


def garbled_init(folder):
    """--init file:PATH of a .npy whose header's shape tuple is left unclosed."""
    path = folder / "garbled.npy"
    np.save(path, np.ones((3, 3)))
    path.write_bytes(path.read_bytes().replace(b"), }", b"(, }", 1))
    return f"file:{path}"


@pytest.mark.parametrize("make_args,message", [
    (lambda d, t: ["run", t / "missing.h5", "-k", 3], "no such file"),
    (lambda d, t: ["run", d, "-k", 0], "clusters must be an integer in 1.."),
    (lambda d, t: ["run", d, "-k", 3, "--alpha", 1.5], "alpha must be in (0, 1]"),
    (lambda d, t: ["run", d, "-k", 3, "--graph", "er:p=0.01"], "not connected"),
    (lambda d, t: ["run", d, "-k", 3, "--graph", "rgg:radius=0.01"], "graph 'rgg:radius=0.01' over 12 agents is not "
                                                                      "connected"),
    (lambda d, t: ["run", d, "-k", 3, "--graph", "rgg:radius=0.01", "--init", "flood"],     # decided by the ranks
     "graph 'rgg:radius=0.01' over 12 agents is not connected"),
    (lambda d, t: ["run", d, "-k", 3, "--graph", "dataset"], "the dataset has no graph"),
    (lambda d, t: ["run", d, "-k", 3, "--bogus"], "unrecognized arguments"),
    (lambda d, t: ["run", d, "-k", 3, "--init", "file:" + str(t / "none.npy")], "no such file"),
    (lambda d, t: ["run", d, "-k", 3, "--init", garbled_init(t)], "cannot read: TokenError"),
    (lambda d, t: ["run", d, "-k", 500], "distinct points"),
    (lambda d, t: ["run", d, "-k", 3, "--out", t / "nodir" / "r.h5"], "does not exist"),
    (lambda d, t: ["run", d, "-k", 3, "--algorithm", "lloyd", "--init", "local"], "use --init network"),
    (lambda d, t: ["run", d, "-k", 3, "--algorithm", "lloyd", "--inner", 4], "not Lloyd's"),
    (lambda d, t: ["run", d, "-k", 3, "--inner", 0], "must be an integer in 1.."),
    (lambda d, t: ["run", d, "-k", 3, "--iters", 2**70], "must be an integer in 1.."),
    (lambda d, t: ["run", d, "-k", 3, "--seed", 2**64], "seed must be an integer in 0..2**63-1"),
    (lambda d, t: ["run", d, "-k", 3, "--rho", 1e-300], "the coupling must be within"),
    (lambda d, t: ["run", d, "-k", 3, "--coupling", 1e300], "the coupling must be within"),
    (lambda d, t: ["run", d, "-k", 3, "--out", t / ("x" * 300 + ".h5")], "File name too long"),
    (lambda d, t: ["run", d, "-k", 3, "--rho-schedule", "1:x"], "START[:FACTOR[:SETTLED]]"),
    (lambda d, t: ["run", d, "-k", 3, "--rho", 10, "--rho-schedule", "100"], "<= rho=10"),
    (lambda d, t: ["run", d, "-k", 3, "--rho-schedule", "100000"], "<= rho="),
    (lambda d, t: ["run", d, "-k", 3, "--rho", 10, "--coupling", 2], "not allowed with argument"),
    (lambda d, t: ["run", d, "-k", 3, "--coupling", -1], "coupling must be a positive"),
    (lambda d, t: ["run", d, "-k", 3, "--n-init", 0], "n-init must be an integer in 1.."),
    (lambda d, t: ["run", d, "-k", 3, "--threads", 0], "threads must be an integer in 1.."),
    (lambda d, t: ["run", d, "-k", 3, "--checkpoint-every", -1], "checkpoint-every must be an integer in 0.."),
    (lambda d, t: ["run", d, "-k", 3, "--rho-schedule", "1", "--monitor-every", 0],
     "monitor-every must be > 0"),
])
@pytest.mark.mpi
def test_bad_input_stops_every_rank_with_status_2(dataset, tmp_path, make_args, message):
    args = make_args(dataset, tmp_path)
    proc = run_mpi(2, args + ["--out", tmp_path / "out.h5"] if "--out" not in args else args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("nkmpi: error:") == 1 and message in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("out.h5*"))           # no result, no temporary file either


@pytest.mark.mpi
def test_bad_row_seen_by_one_rank_only_stops_all(dataset, tmp_path):
    bad = tmp_path / "nan.h5"
    copy_with(dataset, bad, nan_in_last_agent)
    proc = run_mpi(3, ["run", bad, "-k", 3, "--out", tmp_path / "out.h5"])
    assert proc.returncode == 2
    assert "(agent 11) contains NaN or Inf" in proc.stderr and proc.stderr.count("nkmpi: error:") == 1
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.mpi
def test_init_file_wrong_shape(dataset, tmp_path):
    np.save(tmp_path / "c.npy", np.zeros((3, 5)))
    proc = run_mpi(2, ["run", dataset, "-k", 3, "--init", f"file:{tmp_path / 'c.npy'}",
                       "--out", tmp_path / "out.h5"])
    assert proc.returncode == 2 and "initial centers have 5 features" in proc.stderr


@pytest.mark.mpi
def test_init_file_shared_by_all_agents(dataset, tmp_path):
    start = np.array([[0.0, 0, 0], [5, 5, 5], [-5, -5, 5]])
    with h5py.File(tmp_path / "init.h5", "w") as f:
        f["centers"] = start
    proc = run_mpi(2, ["run", dataset, "-k", 3, "--init", f"file:{tmp_path / 'init.h5'}", "--iters", 3,
                       "--out", tmp_path / "out.h5"])
    assert proc.returncode == 0, proc.stderr
    initial = read_result(tmp_path / "out.h5")["initial_centers"]
    np.testing.assert_array_equal(initial, np.broadcast_to(start, initial.shape))


def test_info_reports_dataset_and_graph(dataset):
    proc = nkmpi("info", dataset, "--graph", "torus")
    assert proc.returncode == 0, proc.stderr
    with h5py.File(dataset) as f:
        sizes = np.diff(f["agent_offsets"][()])
        n, p = f["points"].shape
    torus = nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 4, periodic=True))
    out = proc.stdout
    assert f"N = {n}, p = {p}" in out and "M = 12" in out
    assert f"min {sizes.min()}, median {np.median(sizes):g}, max {sizes.max()}" in out
    assert f"diameter {nx.diameter(torus)}" in out and "degree 4..4" in out and "connected yes" in out
    assert f"lambda_2 {nx.algebraic_connectivity(torus, tol=1e-12):.6g}" in out


def test_info_on_a_bad_file(tmp_path):
    (tmp_path / "text.h5").write_text("not hdf5")
    proc = nkmpi("info", tmp_path / "text.h5")
    assert proc.returncode == 2 and "nkmpi: error:" in proc.stderr and "not an HDF5 file" in proc.stderr


@pytest.mark.mpi
def test_simulate_equals_run_and_summary(dataset, tmp_path):
    common = ["-k", 4, "--graph", "ring", "--iters", 25, "--tol", 0, "--monitor-every", 5]
    sim = nkmpi("simulate", dataset, *common, "--out", tmp_path / "sim.h5")
    assert sim.returncode == 0, sim.stderr
    proc = run_mpi(3, ["run", dataset, *common, "--out", tmp_path / "mpi.h5"])
    assert proc.returncode == 0, proc.stderr
    a, b = read_result(tmp_path / "sim.h5"), read_result(tmp_path / "mpi.h5")
    np.testing.assert_array_equal(a["centers"], b["centers"])
    np.testing.assert_array_equal(a["assignments"], b["assignments"])
    summary = nkmpi("summary", tmp_path / "mpi.h5")
    assert summary.returncode == 0, summary.stderr
    assert "iterations    25 (not converged)" in summary.stdout
    assert "centralized cost / centralized Lloyd" in summary.stdout
    with h5py.File(tmp_path / "sim.h5", "r+") as f:        # a result from a later format
        f.attrs["version"] = 2
    summary = nkmpi("summary", tmp_path / "sim.h5")
    assert summary.returncode == 2 and "result version 2 is not supported" in summary.stderr


@pytest.fixture(scope="module")
def run_files(dataset, tmp_path_factory):
    """The result of a 30-iteration run and its last periodic checkpoint, after iteration 20."""
    folder = tmp_path_factory.mktemp("status")
    proc = run_mpi(2, ["run", dataset, "-k", 3, "--iters", 30, "--tol", 0, "--monitor-every", 0,
                       "--checkpoint-every", 10, "--quiet", "--out", folder / "out.h5",
                       "--checkpoint", folder / "ck.h5"])
    assert proc.returncode == 0, proc.stderr
    return folder / "out.h5", folder / "ck.h5"


def edited(source, path, edit):
    """A copy of `source` at `path`, edited by edit(open HDF5 file)."""
    shutil.copyfile(source, path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def set_attribute(name, value):
    return lambda f: f.attrs.__setitem__(name, value)


def delete_attribute(name):
    return lambda f: f.attrs.__delitem__(name)


@pytest.mark.mpi
def test_status_says_how_the_run_that_wrote_a_file_ended(run_files, tmp_path):
    """One line STATE ITERATION and the state's exit status, through the real command line.
    (A checkpoint written as a signal stops a run: tests/test_robust.py.)"""
    result, periodic = run_files
    stopped = edited(periodic, tmp_path / "stopped.h5", set_attribute("interrupted", 1))
    older = edited(periodic, tmp_path / "older.h5", delete_attribute("interrupted"))
    for path, line, status in [(stopped, "interrupted 20", 0), (periodic, "periodic 20", 4),
                               (older, "periodic 20", 4), (result, "finished 30", 5)]:
        proc = nkmpi("status", path)
        assert (proc.returncode, proc.stdout, proc.stderr) == (status, line + "\n", ""), path


def truncated(path, folder):
    copy = folder / "truncated.h5"
    copy.write_bytes(path.read_bytes()[:2000])
    return copy


#: Files `nkmpi status` refuses: how to make each from a run's result and checkpoint, the
#: dataset and a folder, and what its one error line says.
NOT_A_RUN_STATE = {
    "missing": (lambda r, c, d, t: t / "none.h5", "none.h5: no such file"),
    "a folder": (lambda r, c, d, t: t, "no such file"),
    "not HDF5": (lambda r, c, d, t: shutil.copyfile(__file__, t / "text.h5"), "not an HDF5 file"),
    "truncated": (lambda r, c, d, t: truncated(c, t), "cannot read the file"),
    "a dataset": (lambda r, c, d, t: d, "not an nkmpi checkpoint: its format attribute is 'nkmpi-dataset'"),
    "a later checkpoint": (lambda r, c, d, t: edited(c, t / "v2.h5", set_attribute("version", 2)),
                           "checkpoint version 2 is not supported"),
    "a later result": (lambda r, c, d, t: edited(r, t / "v2.h5", set_attribute("version", 2)),
                       "result version 2 is not supported"),
    "a damaged mark": (lambda r, c, d, t: edited(c, t / "mark.h5", set_attribute("interrupted", "yes")),
                       "its interrupted attribute is 'yes', not 0 or 1"),
    "no iteration": (lambda r, c, d, t: edited(c, t / "it.h5", delete_attribute("iteration")),
                     "holds no valid iteration count"),
    "a result of no iterations": (lambda r, c, d, t: edited(r, t / "its.h5", set_attribute("iterations", 0)),
                                  "holds no valid iteration count"),
}


@pytest.mark.mpi
@pytest.mark.parametrize("case", NOT_A_RUN_STATE)
def test_status_of_a_missing_or_damaged_file_is_bad_input(run_files, dataset, tmp_path, case, capsys):
    make, message = NOT_A_RUN_STATE[case]
    path = make(*run_files, dataset, tmp_path)
    assert main(["status", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("nkmpi: error:") == 1 and message in err, err


def test_bad_outputs_and_checkpoints_are_refused_before_the_kernels_load(dataset, tmp_path, monkeypatch, capsys):
    """Loading the kernels takes minutes on a cold cache: a run refuses an output it cannot
    write, and a checkpoint it cannot resume, before that."""
    from nkmpi import driver
    loads = []
    monkeypatch.setattr(driver, "warm_up", lambda *args: loads.append(args))
    checkpoint = tmp_path / "saved.checkpoint.h5"
    assert main(["run", str(dataset), "-k", "2", "--iters", "2", "--checkpoint", str(checkpoint),
                 "--checkpoint-every", "1", "--out", str(tmp_path / "first.h5")]) == 0
    loads.clear()
    for args in (["--out", str(tmp_path / "missing" / "result.h5")],
                 ["--resume", str(checkpoint), "-k", "3", "--out", str(tmp_path / "second.h5")]):
        assert main(["run", str(dataset), "-k", "2", "--iters", "5", *args]) == 2
        assert "nkmpi: error:" in capsys.readouterr().err
        assert loads == []


def test_kernel_loading_is_timed_apart_from_the_set_up(dataset, tmp_path, monkeypatch, capsys):
    """A run's profile gives loading the kernels (numba's start, the same in every process
    whatever its share of the network) in seconds_kernels and the rest of the set-up in
    seconds_setup: a clock that jumps an hour while the kernels load shows in the first alone,
    and in neither `seconds` nor the set-up."""
    from types import SimpleNamespace

    from nkmpi import app, driver
    hour, jumped, clock, warm_up = 3600.0, [0.0], app.time.perf_counter, driver.warm_up

    def an_hour_long_warm_up(*args):
        warm_up(*args)
        jumped[0] += hour
    monkeypatch.setattr(app, "time", SimpleNamespace(perf_counter=lambda: clock() + jumped[0]))
    monkeypatch.setattr(driver, "warm_up", an_hour_long_warm_up)
    out = tmp_path / "result.h5"
    assert main(["run", str(dataset), "-k", "2", "--iters", "2", "--out", str(out)]) == 0
    attrs = read_result(out)["attrs"]
    assert jumped == [hour]
    assert hour <= attrs["seconds_kernels"] < 2 * hour
    assert 0 < attrs["seconds_setup"] < hour and attrs["seconds"] < hour
    assert f"nkmpi: kernels loaded in {attrs['seconds_kernels']:.2f} s, set-up " in capsys.readouterr().out
