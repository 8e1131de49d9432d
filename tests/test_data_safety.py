"""Nothing is lost: no output replaces an input, an output is whole and one run's, a checkpoint
resumes only the problem it was made for, a stop during start-up ends with status 3, and the
whole result file is the same on any number of ranks."""

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import (EXECUTION_RECORD, MPI_TIMEOUT, assert_same_file, file_contents, mpi_command, mpi_env,
                      run_mpi, stop_signal, uneven_dataset)
from nkmpi.cli import main
from nkmpi.errors import InputError
from nkmpi.formats.checkpoint import earlier_block_fingerprint, earlier_graph_fingerprint, earlier_offsets_fingerprint
from nkmpi.formats.dataset import open_dataset, read_all, write_dataset
from nkmpi.formats.result import read_result
from nkmpi.graph import Network, build_network

SCRIPTS = Path(__file__).parent / "mpi_scripts"

@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Uneven non-IID blobs over 12 agents with a ring stored in the file (so that the
    graph's edges, not only a spec, shape the run)."""
    path = tmp_path_factory.mktemp("safety") / "data.h5"
    points, offsets = uneven_dataset(path)
    ring = np.column_stack([np.arange(12), (np.arange(12) + 1) % 12])
    write_dataset(path, points, offsets, edges=ring)
    return path


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_error(proc, message):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("nkmpi: error:") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# Each case makes its paths in the test's folder t from the dataset d and returns the options.
def _symlink(d, t):
    os.symlink(d, t / "link.h5")
    return ["--out", t / "link.h5"]


def _hard_link(d, t):
    os.link(d, t / "hard.h5")
    return ["--out", t / "hard.h5"]


def _init_file(d, t):
    np.save(t / "centers.npy", read_all(d)[1][:3])
    return ["--init", f"file:{t / 'centers.npy'}", "--out", t / "centers.npy"]


def _edge_file(d, t):
    edges = t / "edges.txt"
    edges.write_text("".join(f"{a} {(a + 1) % 12}\n" for a in range(12)))
    return ["--graph", f"file:{edges}", "--out", edges]


def _resumed(d, t):
    (t / "ck.h5").write_bytes(d.read_bytes())
    return ["--resume", t / "ck.h5", "--out", t / "ck.h5"]


ALIASES = {
    "out is the dataset": (lambda d, t: ["--out", d], "is the dataset"),
    "out reaches it by a relative path": (
        lambda d, t: ["--out", os.path.relpath(d.parent / ".." / d.parent.name / d.name)], "is the dataset"),
    "out is a symlink to it": (_symlink, "is the dataset"),
    "out is a hard link to it": (_hard_link, "is the dataset"),
    "checkpoint is the dataset": (lambda d, t: ["--out", t / "o.h5", "--checkpoint", d], "is the dataset"),
    "checkpoint is the result": (lambda d, t: ["--out", t / "o.h5", "--checkpoint", t / "o.h5"],
                                 "is the result"),
    "out is the init file": (_init_file, "is the --init file"),
    "out is the graph's edge file": (_edge_file, "is the --graph edge file"),
    "out is the resumed checkpoint": (_resumed, "is the --resume checkpoint"),
}


@pytest.mark.mpi
@pytest.mark.parametrize("case", ALIASES)
def test_no_output_replaces_an_input(dataset, tmp_path, case):
    make, message = ALIASES[case]
    options = make(dataset, tmp_path)
    before = {p: digest(p) for p in [dataset, *tmp_path.iterdir()]}
    proc = run_mpi(2, ["run", dataset, "-k", 3, "--iters", 5, *options])
    one_error(proc, message)
    assert {p: digest(p) for p in before} == before
    assert not list(tmp_path.glob("*.partial*")) and not list(dataset.parent.glob("*.partial*"))


def dataset_reading_other_files(folder, kind):
    """A dataset in `folder` whose points are another file's (rows.h5): by a virtual dataset,
    as data_tools.stitch writes, or by an external link.  Returns (dataset, rows file)."""
    rows, path = folder / "rows.h5", folder / "linked.h5"
    points = np.random.default_rng(3).standard_normal((40, 2))
    with h5py.File(rows, "w") as f:
        f["points"] = points
    write_dataset(path, points, np.arange(0, 41, 10))
    with h5py.File(path, "a") as f:
        del f["points"]
        if kind == "virtual":
            layout = h5py.VirtualLayout(points.shape, points.dtype)
            layout[:] = h5py.VirtualSource("rows.h5", "points", points.shape)
            f.create_virtual_dataset("points", layout)
        else:
            f["points"] = h5py.ExternalLink("rows.h5", "/points")
    assert np.array_equal(read_all(path)[1], points)
    return path, rows


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["virtual", "external"])
def test_no_run_output_replaces_a_file_the_dataset_reads(tmp_path, kind):
    data, rows = dataset_reading_other_files(tmp_path, kind)
    before = digest(rows)
    message = "holds data of the dataset (" + str(data)
    one_error(run_mpi(2, ["run", data, "-k", 2, "--iters", 3, "--out", rows]), message)
    one_error(run_mpi(2, ["run", data, "-k", 2, "--iters", 3, "--out", tmp_path / "o.h5", "--checkpoint", rows]),
              message)
    assert digest(rows) == before


@pytest.mark.parametrize("kind", ["virtual", "external"])
def test_no_output_of_the_other_commands_replaces_a_file_the_dataset_reads(tmp_path, kind, capsys):
    """simulate, predict and the data tools refuse to write over a dataset's rows' file too."""
    data, rows = dataset_reading_other_files(tmp_path, kind)
    before = digest(rows)
    for argv in (["simulate", data, "-k", "2", "--out", rows], ["predict", data, data, "--out", rows]):
        assert main([str(a) for a in argv]) == 2
        assert f"({data} reads it through" in capsys.readouterr().err
    from data_tools.convert import main as convert_main
    assert convert_main([f"{data}:/points", str(rows), "--agents", "2"]) == 2
    assert "holds data of the source" in capsys.readouterr().err
    assert digest(rows) == before


def test_simulate_refuses_to_replace_its_dataset(dataset, capsys):
    before = digest(dataset)
    assert main(["simulate", str(dataset), "-k", "3", "--iters", "5", "--out", str(dataset)]) == 2
    assert "is the dataset" in capsys.readouterr().err
    assert digest(dataset) == before


def hold(phase, n_ranks, args, env=None):
    """`nkmpi run ARGS` under mpiexec, held in `phase` (tests/mpi_scripts/hold_in_phase.py)."""
    command = mpi_command(n_ranks, [sys.executable, SCRIPTS / "hold_in_phase.py", phase, "run", *args])
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(mpi_env(), **(env or {})))


def wait_for(proc, line):
    """Read the process's output up to `line` (an EOF first fails)."""
    seen = []
    while True:
        text = proc.stdout.readline()
        if not text:
            proc.kill()
            pytest.fail(f"no {line!r} in the output: {''.join(seen)}\n{proc.stderr.read()}")
        if line in text:           # ranks may print on one line
            return
        seen.append(text)


def finish(proc):
    try:
        stdout, stderr = proc.communicate(timeout=MPI_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run did not end (hang?)")
    return proc.returncode, stdout, stderr


@pytest.mark.mpi
def test_two_runs_on_one_out_leave_one_runs_whole_file(dataset, tmp_path):
    """Both runs reach their final write together (held there until released), then
    write at once, on a file system without HDF5 file locks as on many clusters."""
    out = tmp_path / "shared.h5"
    args = ["--iters", 20, "--quiet", "--out", out]
    runs = {seed: hold("write", 2, [dataset, "-k", 3, "--seed", seed, *args],
                       env={"HDF5_USE_FILE_LOCKING": "FALSE"}) for seed in (1, 2)}
    for proc in runs.values():
        wait_for(proc, "in write")
    for proc in runs.values():
        proc.send_signal(stop_signal())        # the release; after the loop it stops nothing
    for proc in runs.values():
        status, _, stderr = finish(proc)
        assert status == 0, stderr
    got = read_result(out)
    seed = int(got["attrs"]["seed"])
    alone = tmp_path / "alone.h5"
    proc = run_mpi(2, ["run", dataset, "-k", 3, "--seed", seed, *args[:-1], alone])
    assert proc.returncode == 0, proc.stderr
    expected = read_result(alone)
    for agent in range(len(expected["centers"])):
        np.testing.assert_array_equal(got["centers"][agent], expected["centers"][agent])
        np.testing.assert_array_equal(got["initial_centers"][agent], expected["initial_centers"][agent])
    np.testing.assert_array_equal(got["assignments"], expected["assignments"])
    for key, value in expected["attrs"].items():
        if key not in EXECUTION_RECORD and not key.startswith("rank_"):
            np.testing.assert_array_equal(got["attrs"][key], value, err_msg=key)
    assert not list(tmp_path.glob("*.partial*"))


def edit_copy(source, target, edit):
    target.write_bytes(source.read_bytes())
    with h5py.File(target, "r+") as f:
        edit(f)


def _nudge_point(f):
    f["points"][7, 1] += 1e-9


def _move_a_row(f):
    f["agent_offsets"][3] += 1


def _rewire(f):
    edges = Network.from_csr(12, f["graph/indptr"][()], f["graph/indices"][()]).edges
    edges[0] = (0, 6)                    # 0-1 becomes 0-6: still 12 edges, still connected
    rewired = Network.from_edges(12, edges)
    f["graph/indptr"][...], f["graph/indices"][...] = rewired.indptr, rewired.indices


@pytest.mark.parametrize("edit,what", [(_nudge_point, "the points"), (_move_a_row, "offsets"),
                                       (_rewire, "the graph's edges")])
@pytest.mark.mpi
def test_resume_refuses_other_data_of_the_same_shapes(dataset, tmp_path, edit, what):
    args = ["-k", 3, "--iters", 30, "--monitor-every", 5, "--tol", 0, "--quiet"]
    checkpoint = tmp_path / "ck.h5"
    proc = run_mpi(2, ["run", dataset, *args, "--out", tmp_path / "a.h5", "--checkpoint", checkpoint,
                       "--checkpoint-every", 10])
    assert proc.returncode == 0, proc.stderr
    other = tmp_path / "other.h5"
    edit_copy(dataset, other, edit)
    proc = run_mpi(3, ["run", other, *args, "--out", tmp_path / "b.h5", "--resume", checkpoint])
    one_error(proc, "the checkpoint was made for other data")
    assert what in proc.stderr and not (tmp_path / "b.h5").exists()
    proc = run_mpi(3, ["run", dataset, *args, "--out", tmp_path / "c.h5", "--resume", checkpoint])
    assert proc.returncode == 0, proc.stderr          # the same data still resumes


@pytest.mark.mpi
@pytest.mark.parametrize("edit,what", [(_nudge_point, "the points"), (_move_a_row, "offsets"),
                                       (_rewire, "the graph's edges")])
def test_checkpoint_with_the_earlier_fingerprints_resumes(dataset, tmp_path, edit, what):
    """Checkpoints written before the points were hashed number by number carry a BLAKE2b
    digest per agent as the points' fingerprint and, written before each rank read only its
    own offsets and built only its own rows of the graph, digests of every agent's offsets
    and of the whole graph's CSR: they resume on those data and are refused on others."""
    args = ["-k", 3, "--iters", 30, "--monitor-every", 5, "--tol", 0, "--quiet"]
    checkpoint = tmp_path / "ck.h5"
    proc = run_mpi(2, ["run", dataset, *args, "--out", tmp_path / "a.h5", "--checkpoint", checkpoint,
                       "--checkpoint-every", 10])
    assert proc.returncode == 0, proc.stderr
    network = build_network("dataset", 12, dataset_graph=open_dataset(dataset).graph)
    info, points = read_all(dataset)
    earlier = {"fingerprint_points": f"{earlier_block_fingerprint(points, info.offsets, range(12)):016x}",
               "fingerprint_offsets": earlier_offsets_fingerprint(info.offsets),
               "fingerprint_graph": earlier_graph_fingerprint(network.indptr, network.indices)}
    with h5py.File(checkpoint, "r+") as f:
        for key, value in earlier.items():
            assert f.attrs[key] != value
            f.attrs[key] = value
    other = tmp_path / "other.h5"
    edit_copy(dataset, other, edit)
    proc = run_mpi(2, ["run", other, *args, "--out", tmp_path / "b.h5", "--resume", checkpoint])
    one_error(proc, "the checkpoint was made for other data")
    assert what in proc.stderr
    proc = run_mpi(3, ["run", dataset, *args, "--out", tmp_path / "c.h5", "--resume", checkpoint])
    assert proc.returncode == 0, proc.stderr
    resumed, whole = read_result(tmp_path / "c.h5"), read_result(tmp_path / "a.h5")
    np.testing.assert_array_equal(resumed["centers"], whole["centers"])
    np.testing.assert_array_equal(resumed["assignments"], whole["assignments"])


@pytest.mark.mpi
@pytest.mark.parametrize("phase", ["read", "seeding"])
def test_stop_during_startup_ends_with_status_3_and_nothing_written(dataset, tmp_path, phase):
    out = tmp_path / "out.h5"
    proc = hold(phase, 2, [dataset, "-k", 3, "--out", out])
    wait_for(proc, f"in {phase}")
    proc.send_signal(stop_signal())                  # mpiexec passes it to every rank
    status, stdout, stderr = finish(proc)
    assert status == 3, stderr
    assert "before the first iteration: no checkpoint was needed" in stdout
    assert not list(tmp_path.iterdir())              # no result, checkpoint or temporary file


@pytest.mark.mpi
def test_stop_during_startup_of_a_resumed_run_keeps_its_checkpoint(dataset, tmp_path):
    args = [dataset, "-k", 3, "--iters", 30, "--tol", 0, "--quiet"]
    checkpoint = tmp_path / "ck.h5"
    proc = run_mpi(2, ["run", *args, "--out", tmp_path / "a.h5", "--checkpoint", checkpoint,
                       "--checkpoint-every", 10])
    assert proc.returncode == 0, proc.stderr
    before = digest(checkpoint)
    proc = hold("read", 2, [*args, "--out", tmp_path / "b.h5", "--resume", checkpoint,
                            "--checkpoint", checkpoint])
    wait_for(proc, "in read")
    proc.send_signal(signal.SIGUSR1)
    status, stdout, stderr = finish(proc)
    assert status == 3, stderr
    assert f"--resume {checkpoint} still holds" in stdout
    assert digest(checkpoint) == before and not (tmp_path / "b.h5").exists()


@pytest.mark.mpi
def test_stop_after_the_last_iteration_loses_nothing(dataset, tmp_path):
    out = tmp_path / "out.h5"
    proc = hold("write", 2, [dataset, "-k", 3, "--iters", 20, "--quiet", "--out", out])
    wait_for(proc, "in write")
    proc.send_signal(stop_signal())
    status, _, stderr = finish(proc)
    assert status == 0 and read_result(out)["attrs"]["iterations"] == 20, stderr


def test_stop_signals_are_caught_before_anything_heavy_loads():
    """`nkmpi run` takes note of SIGTERM and SIGUSR1 before numpy, numba, h5py or MPI
    load (seconds on a busy node): the handlers see none of them imported."""
    spy = ("import runpy, signal, sys\n"
           "install = signal.signal\n"
           "def spy(number, handler):\n"
           "    heavy = [m for m in ('numpy', 'numba', 'h5py', 'mpi4py') if m in sys.modules]\n"
           "    print('installed', number, heavy, flush=True)\n"
           "    return install(number, handler)\n"
           "signal.signal = spy\n"
           "sys.argv = ['nkmpi', 'run', '--help']\n"
           "runpy.run_module('nkmpi', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", spy], capture_output=True, text=True, env=mpi_env(),
                          timeout=MPI_TIMEOUT)
    first = [line for line in proc.stdout.splitlines() if line.startswith("installed")][:2]
    assert first == [f"installed {int(signal.SIGTERM)} []", f"installed {int(signal.SIGUSR1)} []"], proc
    from importlib.metadata import entry_points
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "nkmpi"]
    assert script.value == "nkmpi.__main__:main"       # the installed command takes the same path


@pytest.mark.mpi
def test_whole_result_file_is_the_same_on_any_rank_count(dataset, tmp_path):
    files = {}
    for n_ranks in (1, 2, 3):
        files[n_ranks] = tmp_path / f"r{n_ranks}.h5"
        proc = run_mpi(n_ranks, ["run", dataset, "-k", 4, "--iters", 60, "--monitor-every", 3, "--tol", 0,
                                 "--quiet", "--out", files[n_ranks]])
        assert proc.returncode == 0, proc.stderr
    assert {"metrics/objective", "metrics/sse", "metrics/edge_disagreement", "centers", "@seed"} <= \
        set(file_contents(files[1]))
    for n_ranks in (2, 3):
        assert_same_file(files[n_ranks], files[1])


def _record_flushes(monkeypatch):
    """Record, in order, each file descriptor's fsync (as the path it was opened on) and each
    rename, made through the formats' module."""
    from nkmpi.formats import hdf5
    events, opened = [], {}
    real_open, real_fsync, real_replace = os.open, os.fsync, os.replace

    def spy_open(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        opened[fd] = os.fspath(path)
        return fd

    def spy_fsync(fd):
        events.append(("fsync", opened.get(fd)))
        return real_fsync(fd)

    def spy_replace(source, target):
        events.append(("replace", os.fspath(source), os.fspath(target)))
        return real_replace(source, target)

    monkeypatch.setattr(hdf5.os, "open", spy_open)
    monkeypatch.setattr(hdf5.os, "fsync", spy_fsync)
    monkeypatch.setattr(hdf5.os, "replace", spy_replace)
    return events


def _flushed_before_renamed(events, path):
    """The file that became `path` was fsynced before its rename, and its folder after."""
    renames = [e for e in events if e[0] == "replace" and e[2] == os.fspath(path)]
    assert len(renames) == 1, events
    at = events.index(renames[0])
    assert ("fsync", renames[0][1]) in events[:at], events
    assert ("fsync", os.path.dirname(os.fspath(path))) in events[at:], events


def test_a_dataset_reaches_the_disk_before_it_takes_its_name(tmp_path, monkeypatch):
    """A crash after a file is renamed must not leave the name pointing at data still in
    the page cache: the temporary file is flushed (fsync) before the rename, and the
    folder, which holds the rename, after it."""
    events = _record_flushes(monkeypatch)
    path = tmp_path / "data.h5"
    write_dataset(path, np.zeros((6, 2)), np.array([0, 3, 6]))
    _flushed_before_renamed(events, path)


def test_a_result_reaches_the_disk_before_it_takes_its_name(dataset, tmp_path, monkeypatch):
    """The same for a file the ranks write in slices (a run's result), here in one process."""
    events = _record_flushes(monkeypatch)
    out = tmp_path / "result.h5"
    assert main(["run", str(dataset), "-k", "2", "--iters", "2", "--quiet", "--out", str(out)]) == 0
    _flushed_before_renamed(events, out)


def test_a_checkpoint_without_a_fingerprint_is_refused_with_a_message():
    """A damaged or foreign checkpoint that lacks one of the fingerprints is other data, said
    so in one error, not a KeyError; the earlier kinds are not tried for the missing one."""
    from nkmpi.app import check_same_data
    attrs = {"fingerprint_points": "1", "fingerprint_offsets": "2", "fingerprint_graph": "3"}
    for missing in attrs:
        saved = {key: value for key, value in attrs.items() if key != missing}
        with pytest.raises(InputError, match="the checkpoint was made for other data"):
            check_same_data("ck.h5", saved, attrs, None, lambda: "x", lambda: "y")
