"""Files shared through HDF5's MPI-IO driver (h5py built with MPI: a site's build, Debian's
python3-h5py-mpi) are the files nkmpi writes one rank at a time: results, checkpoints and
labels hold the same datasets, values and attributes bit for bit (but the record of how
the run went), an MPI-IO checkpoint resumes, and a rank that fails while the ranks write
together leaves no file and no rank waiting.  The tests of the MPI-IO path skip where h5py
has no MPI; those of the choice and of failures run on every stack.  (A dataset of virtual
datasets, which HDF5 1.10 does not read through MPI-IO, is read by each rank alone:
tests/test_stitch.py runs one on such a stack.)"""

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import assert_same_file, mpi_command, mpi_env, run_launch, run_mpi, run_python, uneven_dataset
from nkmpi.formats.dataset import read_all, write_dataset
from nkmpi.formats.hdf5 import IO_ATTRIBUTE, IO_SETTING, MPIO, SERIAL
from nkmpi.formats.result import read_result
from nkmpi.graph import build_network

pytestmark = pytest.mark.mpi

SCRIPTS = Path(__file__).parent / "mpi_scripts"
RUN = ["-k", 4, "--iters", 30, "--tol", 0, "--monitor-every", 4, "--quiet"]


def io_driver():
    """How 2 ranks of this environment share files: MPIO or SERIAL."""
    code = ("from mpi4py import MPI; from nkmpi.formats.hdf5 import io_driver; world = MPI.COMM_WORLD; "
            "driver = io_driver(world); world.Get_rank() or print(driver)")
    proc = run_python(2, ["-c", code], timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def mpio():
    """Skips a test where the ranks cannot share files through MPI-IO."""
    if io_driver() != MPIO:
        pytest.skip("h5py has no MPI here (h5py.get_config().mpi is False under mpiexec; docs/clusters.md "
                    f"says how to get it), or {IO_SETTING}=serial")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Uneven agents (one of no rows) with row weights, so that the weights are read too, and
    a graph of their own (CSR), whose rows each rank reads while the file is shared."""
    path = tmp_path_factory.mktemp("parallel_hdf5") / "weighted.h5"
    uneven_dataset(path)
    info, points = read_all(path)
    weights = np.random.default_rng(1).integers(1, 4, len(points)).astype(np.float64)
    write_dataset(path, points, info.offsets, weights=weights, edges=build_network("ws:k=4,p=0.3", 12, 1).edges)
    return path


def nkmpi(n_ranks, args, setting=None):
    """`mpiexec -n R python -m nkmpi ARGS`, with NKMPI_HDF5=setting when given."""
    env = mpi_env() if setting is None else dict(mpi_env(), **{IO_SETTING: setting})
    proc = run_launch(mpi_command(n_ranks, [sys.executable, "-m", "nkmpi", *args]), env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def written_by(path):
    with h5py.File(path, "r") as f:
        return f.attrs[IO_ATTRIBUTE]


@pytest.mark.parametrize("n_ranks", [2, 3])
def test_files_written_through_mpi_io_are_the_serial_ones(mpio, dataset, tmp_path, n_ranks):
    """Result, checkpoint and labels (of each model: by rows, by agents), both ways."""
    for setting in ("auto", SERIAL):
        out, checkpoint = tmp_path / f"{setting}.h5", tmp_path / f"{setting}.checkpoint.h5"
        nkmpi(n_ranks, ["run", dataset, *RUN, "--out", out, "--checkpoint", checkpoint, "--checkpoint-every", 10],
              setting)
        for model in ("consensus", "own", "2"):          # of one result, which the labels name
            nkmpi(n_ranks, ["predict", tmp_path / "auto.h5", dataset, "--model", model, "--quiet",
                            "--out", tmp_path / f"{setting}.{model}.labels.h5"], setting)
    names = ["", ".checkpoint"] + [f".{model}.labels" for model in ("consensus", "own", "2")]
    for name in names:
        ours, theirs = tmp_path / f"auto{name}.h5", tmp_path / f"serial{name}.h5"
        assert (written_by(ours), written_by(theirs)) == (MPIO, SERIAL)
        assert_same_file(ours, theirs)
    assert not list(tmp_path.glob("*.partial*"))


def test_a_checkpoint_written_through_mpi_io_resumes(mpio, dataset, tmp_path):
    args = ["run", dataset, *RUN, "--checkpoint-every", 20]
    nkmpi(3, [*args, "--out", tmp_path / "full.h5", "--checkpoint", tmp_path / "ck.h5"])
    assert written_by(tmp_path / "ck.h5") == MPIO
    for n_ranks, setting in ((2, "auto"), (3, SERIAL), (1, "auto")):
        resumed = tmp_path / f"resumed{n_ranks}.h5"
        nkmpi(n_ranks, [*args, "--out", resumed, "--resume", tmp_path / "ck.h5", "--checkpoint",
                        tmp_path / f"ck{n_ranks}.h5"], setting)
        result = read_result(resumed)
        assert result["attrs"]["resumed_at_iteration"] == 20
        assert_same_file(resumed, tmp_path / "full.h5", ignore={"resumed_from", "resumed_at_iteration"})


@pytest.mark.parametrize("setting", ["auto", SERIAL])
@pytest.mark.parametrize("n_ranks,failing_rank", [(2, 0), (3, 1), (3, 2)])
def test_a_failure_while_writing_raises_on_every_rank_and_leaves_no_file(tmp_path, setting, n_ranks,
                                                                        failing_rank):
    """Called as a library, where no command aborts the job: the failed rank raises its error,
    the others RankFailed, whichever way the ranks write (MPI-IO where h5py has it)."""
    out = tmp_path / "labels.h5"
    command = mpi_command(n_ranks, [sys.executable, SCRIPTS / "fail_in_write.py", failing_rank, out])
    proc = run_launch(command, timeout=60, env=dict(mpi_env(), **{IO_SETTING: setting}))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"rank {rank} raised RuntimeError: injected failure on rank {rank}" if rank == failing_rank
        else f"rank {rank} raised RankFailed: rank {failing_rank} failed: RuntimeError('injected failure on rank "
             f"{failing_rank}')" for rank in range(n_ranks)], proc.stdout
    assert not list(tmp_path.iterdir())


def test_the_setting_is_checked_before_any_work(dataset, tmp_path):
    proc = run_launch(mpi_command(2, [sys.executable, "-m", "nkmpi", "run", dataset, *RUN, "--out",
                                      tmp_path / "out.h5"]), env=dict(mpi_env(), **{IO_SETTING: "mpi"}))
    assert proc.returncode == 2 and proc.stderr.count("nkmpi: error:") == 1, proc.stderr
    assert f"{IO_SETTING}=mpi: expected one of auto, serial" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_the_serial_setting_is_obeyed(dataset, tmp_path):
    nkmpi(2, ["run", dataset, *RUN, "--out", tmp_path / "out.h5"], SERIAL)
    assert written_by(tmp_path / "out.h5") == SERIAL
    proc = run_mpi(1, ["run", dataset, *RUN, "--out", tmp_path / "one.h5"])
    assert proc.returncode == 0, proc.stderr
    assert written_by(tmp_path / "one.h5") == SERIAL          # one rank has no one to share with

