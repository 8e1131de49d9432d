"""Failures end every rank; outputs are atomic; signals checkpoint; runs resume exactly;
simulated link failures and dropouts match the reference and stay close to the failure-free run."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import mpi_command, mpi_env, run_mpi, run_script, stop_signal, uneven_dataset
from data_tools.generate import generate
from nkmpi.app import FINISHED, INTERRUPTED, PERIODIC, run_state
from nkmpi.formats.dataset import read_all
from nkmpi.formats.result import read_result
from nkmpi.graph import build_network
from nkmpi.halo import HaloPlan, rank_eccentricity
from nkmpi.options import Options
from nkmpi.reference import centralized_cost, simulate
from nkmpi.stop import StopAgreement

SCRIPTS = Path(__file__).parent / "mpi_scripts"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("robust") / "uneven.h5"
    uneven_dataset(path)
    return path


def same_run(a, b):
    np.testing.assert_array_equal(a["centers"], b["centers"])
    np.testing.assert_array_equal(a["assignments"], b["assignments"])
    assert a["attrs"]["iterations"] == b["attrs"]["iterations"]
    for name, series in a["metrics"].items():
        if name != "seconds":
            np.testing.assert_allclose(b["metrics"][name], series, rtol=1e-12, err_msg=name)


@pytest.mark.mpi
@pytest.mark.parametrize("n_ranks,failing_rank", [(2, 1), (3, 0), (3, 2)])
@pytest.mark.parametrize("where", ["startup", "loop:5", "write"])
def test_failure_on_one_rank_ends_every_rank(dataset, tmp_path, n_ranks, failing_rank, where):
    out = tmp_path / "out.h5"
    # A rank left waiting in a collective would hang until run_script's timeout fails the test.
    proc = run_script(n_ranks, SCRIPTS / "fail_on_one_rank.py", failing_rank, where, "run", dataset, "-k", 3,
                      "--iters", 10**6, "--tol", 0, "--out", out, timeout=60)
    assert proc.returncode != 0
    assert f"rank {failing_rank} failed" in proc.stderr and "injected failure" in proc.stderr
    assert proc.stderr.count("nkmpi: error:") == 1, proc.stderr
    assert not list(tmp_path.iterdir())          # no result, and no temporary file either


@pytest.mark.mpi
def test_sigkill_mid_write_leaves_no_file_under_the_final_name(dataset, tmp_path):
    out = tmp_path / "out.h5"
    command = mpi_command(2, [sys.executable, SCRIPTS / "slow_rename.py", "run", dataset, "-k", 3, "--iters", 5,
                              "--quiet", "--out", out])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=mpi_env(), start_new_session=True)
    try:
        line = proc.stdout.readline()            # printed once every rank has written its slice
        assert "about to rename" in line
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists()
    assert len(list(tmp_path.glob("out.h5.partial-*"))) == 1    # the complete file, never renamed


#: A run signalled once its first checkpoint is written: the signal has the other nine tenths
#: of the run to arrive in, however fast the machine.
LONG_ITERATIONS, CHECKPOINT_EVERY = 10_000, 1_000


def long_run_args(path, out):
    # No monitoring: no early stop, so the run is long enough to be signalled; a line at
    # each checkpoint tells when it iterates.
    return ["run", path, "-k", 4, "--rho", 50, "--iters", LONG_ITERATIONS, "--monitor-every", 0,
            "--checkpoint-every", CHECKPOINT_EVERY, "--out", out]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["path", "ring", "star", "er:p=0.3"]), st.integers(1, 6),
       st.lists(st.one_of(st.none(), st.integers(1, 30)), min_size=6, max_size=6))
def test_stop_agreement_through_neighbours_only(spec, n_ranks, asked_at):
    """Ranks told only by their neighbour ranks, once per iteration, all stop after the
    iteration the earliest request proposed (rank r is asked to stop from iteration
    asked_at[r] on, or never)."""
    network = build_network(spec, 12, seed=1)
    owner = np.repeat(np.arange(n_ranks), np.diff(np.linspace(0, 12, n_ranks + 1).astype(int)))
    neighbours = [HaloPlan.build(network.rows(np.flatnonzero(owner == r)), owner, r).ranks for r in range(n_ranks)]
    hops = max(rank_eccentricity(neighbours, rank) for rank in range(n_ranks))
    iteration = 0
    stops = [StopAgreement(lambda r=r: asked_at[r] is not None and iteration >= asked_at[r], hops)
             for r in range(n_ranks)]
    asked = [t for t in asked_at[:n_ranks] if t is not None]
    for iteration in range(1, 50):
        for stop in stops:
            stop.poll(iteration)
        sent = [stop.deadline for stop in stops]
        for stop, ranks in zip(stops, neighbours):
            for q in ranks:
                stop.hear(sent[q])
        due = {stop.due(iteration) for stop in stops}
        assert len(due) == 1, iteration          # every rank or none
        if due.pop():
            break
    assert iteration == (min(asked) + hops if asked else 49)


@pytest.mark.mpi
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_checkpoints_and_resume_is_exact_on_any_rank_count(dataset, tmp_path, signal_number):
    if signal_number == signal.SIGTERM and stop_signal() != signal.SIGTERM:
        pytest.skip("Open MPI's mpiexec ends the job on SIGTERM instead of passing it on")
    full = run_mpi(2, long_run_args(dataset, tmp_path / "full.h5") + ["--quiet"])
    assert full.returncode == 0, full.stderr
    out = tmp_path / "cut.h5"
    command = mpi_command(3, [sys.executable, "-m", "nkmpi", *long_run_args(dataset, out)])
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    header = proc.stdout.readline()
    assert header.startswith("nkmpi: 12 agents")
    assert f"checkpoint after iteration {CHECKPOINT_EVERY}" in proc.stdout.readline()    # iterating
    proc.send_signal(signal_number)              # mpiexec forwards it to every rank
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr          # documented: stopped by a signal, checkpoint written
    checkpoint = tmp_path / "cut.checkpoint.h5"
    assert checkpoint.exists() and not out.exists()
    assert "resume with --resume" in stdout
    state, stopped_at = run_state(checkpoint)            # marked as a stop's, whatever the launcher says
    assert state == INTERRUPTED and CHECKPOINT_EVERY < stopped_at < LONG_ITERATIONS
    for n_ranks in (3, 2):
        resumed = tmp_path / f"resumed{n_ranks}.h5"
        proc = run_mpi(n_ranks, long_run_args(dataset, resumed) + ["--resume", checkpoint, "--quiet"])
        assert proc.returncode == 0, proc.stderr
        result = read_result(resumed)
        assert result["attrs"]["resumed_at_iteration"] == stopped_at
        same_run(read_result(tmp_path / "full.h5"), result)


@pytest.mark.mpi
def test_periodic_checkpoints_resume_and_mismatch(dataset, tmp_path):
    args = ["run", dataset, "-k", 4, "--iters", 60, "--tol", 0, "--monitor-every", 7, "--quiet"]
    proc = run_mpi(3, args + ["--out", tmp_path / "a.h5", "--checkpoint", tmp_path / "ck.h5",
                              "--checkpoint-every", 25])
    assert proc.returncode == 0, proc.stderr
    assert run_state(tmp_path / "ck.h5") == (PERIODIC, 50) and run_state(tmp_path / "a.h5") == (FINISHED, 60)
    proc = run_mpi(1, args + ["--out", tmp_path / "b.h5", "--resume", tmp_path / "ck.h5"])
    assert proc.returncode == 0, proc.stderr
    assert read_result(tmp_path / "b.h5")["attrs"]["resumed_at_iteration"] == 50
    same_run(read_result(tmp_path / "a.h5"), read_result(tmp_path / "b.h5"))
    proc = run_mpi(2, args + ["--rho", 3, "--out", tmp_path / "c.h5", "--resume", tmp_path / "ck.h5"])
    assert proc.returncode == 2 and re.search(r"rho [0-9.]+ -> 3\.0", proc.stderr)
    proc = run_mpi(2, args + ["--out", tmp_path / "c.h5", "--checkpoint", tmp_path / "no" / "ck.h5"])
    assert proc.returncode == 2 and "does not exist" in proc.stderr and not (tmp_path / "c.h5").exists()


@pytest.mark.mpi
@pytest.mark.parametrize("spec", ["ring", "torus"])
def test_link_failures_and_dropout(tmp_path, spec):
    path = tmp_path / "iid.h5"
    generate(path, 1600, 4, 2, 16, "iid", seed=3)
    info, points = read_all(path)
    network = build_network(spec, 16)
    faulty = dict(rho=100.0, max_iter=2000, tol=0.0, monitor_every=50, link_failure_prob=0.2,
                  dropout_prob=0.1)
    expected = simulate(points, info.offsets, network, Options(4, **faulty))
    proc = run_mpi(3, ["run", path, "-k", 4, "--rho", 100, "--graph", spec, "--iters", 2000, "--tol", 0,
                       "--monitor-every", 50, "--link-failure-prob", 0.2, "--dropout-prob", 0.1,
                       "--out", tmp_path / "f.h5", "--quiet"])
    assert proc.returncode == 0, proc.stderr
    got = read_result(tmp_path / "f.h5")
    np.testing.assert_array_equal(got["centers"], expected.centers)      # faults are rank-count free
    np.testing.assert_array_equal(got["assignments"], expected.assignments)
    # The partition settles (but for the odd border point the jitter of the centers moves),
    # and every agent's centers cost within 1% of the failure-free run's.
    assert expected.metrics["changed"][-10:].max() <= 0.005 * len(points)
    clean = simulate(points, info.offsets, network, Options(4, rho=100.0, max_iter=20000, tol=1e-9))
    assert clean.converged
    for faulty_centers, clean_centers in zip(expected.centers, clean.centers):
        ratio = centralized_cost(points, faulty_centers) / centralized_cost(points, clean_centers)
        assert abs(ratio - 1) < 0.01, ratio
