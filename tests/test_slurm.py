"""Every job script in jobs/ under a real (one-node) SLURM: a run, a scaling study, and a
run that hits its time limit, checkpoints, requeues itself and resumes.

They need a running SLURM: CI starts one (.ci/slurm-up) and runs them; elsewhere
`make test-slurm` runs them on a machine where SLURM is up, and plain `make test` skips them.
"""

import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import mpi_env, run_mpi
from data_tools.generate import generate
from nkmpi.io import read_result

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "jobs"
VENV = Path(sys.executable).parent.parent
WANTED = os.environ.get("CI") == "true" or os.environ.get("NKMPI_TEST_SLURM") == "1"


def slurm_up():
    if shutil.which("sbatch") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return proc.returncode == 0 and any(s in proc.stdout for s in ("idle", "mixed", "alloc"))


if not WANTED:
    pytestmark = pytest.mark.skip(reason="SLURM job tests run in CI (.ci/slurm-up starts SLURM) "
                                         "or with `make test-slurm` where SLURM is running")
elif not slurm_up():
    pytestmark = pytest.mark.skip(reason="no SLURM answers here") if os.environ.get("CI") != "true" else []


def submit(script, folder, env, *options):
    """sbatch SCRIPT from `folder` with NKMPI_* variables; returns the job id."""
    assert slurm_up(), "SLURM is not running: start it with .ci/slurm-up"
    proc = subprocess.run(["sbatch", "--parsable", *options, str(script)], cwd=folder, capture_output=True,
                          text=True, env=dict(os.environ, NKMPI_VENV=str(VENV), **env), check=True)
    return proc.stdout.strip().split(";")[0]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def finished(job):
    proc = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True)
    return proc.returncode != 0 or not proc.stdout.strip()


def test_every_job_script_is_tested():
    tested = {"nkmeans.sbatch", "scaling.sbatch"}
    assert {p.name for p in JOBS.glob("*.sbatch")} == tested


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.h5"
    generate(path, 4000, 4, 3, 12, "by-cluster:2", seed=2)
    return path


@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_nkmeans_job(tmp_path, data, launcher):
    args = "--rho 20 --iters 200 --graph torus"
    job = submit(JOBS / "nkmeans.sbatch", tmp_path, {"NKMPI_DATA": str(data), "NKMPI_K": "4",
                                                     "NKMPI_ARGS": args, "NKMPI_LAUNCHER": launcher},
                 "--ntasks=3", "--time=5")
    wait_until(lambda: finished(job), 300, f"job {job}")
    log = (tmp_path / f"nkmeans-{job}.out").read_text()
    result = data.with_name("data.result.h5")
    assert result.exists(), log
    attrs = read_result(result)["attrs"]
    assert attrs["n_ranks"] == 3, log
    # The same run outside SLURM gives the same result (any rank count does).
    proc = run_mpi(2, ["run", data, "-k", 4, *args.split(), "--out", tmp_path / "direct.h5", "--quiet"])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(read_result(result)["centers"], read_result(tmp_path / "direct.h5")["centers"])


def test_scaling_job(tmp_path):
    env = {"NKMPI_SCALING_DIR": str(tmp_path / "out"), "NKMPI_SCALING_RANKS": "1 2",
           "NKMPI_SCALING_ARGS": "--points 20000 --points-per-rank 10000 --agents-per-rank 4 --iters 5"}
    job = submit(JOBS / "scaling.sbatch", REPO, env, "--ntasks=2", "--time=10",
                 f"--output={tmp_path}/scaling-%j.out")
    wait_until(lambda: finished(job), 600, f"job {job}")
    log = next(tmp_path.glob("scaling-*.out")).read_text()
    for mode in ("strong", "weak"):
        path = tmp_path / "out" / f"{mode}.csv"
        assert path.exists(), log
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["ranks"]) for r in rows] == [1, 2]
        assert all(float(r["seconds_per_iteration"]) > 0 for r in rows)
        assert int(rows[0]["bytes_sent_per_rank"]) == 0 < int(rows[1]["bytes_sent_per_rank"])
        assert (tmp_path / "out" / f"scaling-{mode}.png").stat().st_size > 5000


@pytest.mark.timeout(1500)
def test_time_limit_checkpoint_requeue_and_resume(tmp_path, data):
    """A 2-minute job with a minute or two of work: SLURM signals it before its limit, it
    checkpoints and requeues itself, and the requeued job resumes (as often as needed) and
    ends exactly as an uninterrupted run, which runs meanwhile outside SLURM."""
    args = ["--rho", "50", "--iters", "1500000", "--monitor-every", "0"]
    out = tmp_path / "long.h5"
    direct = subprocess.Popen([str(Path(sys.executable).with_name("mpiexec")), "-n", "2", sys.executable,
                               "-m", "nkmpi", "run", str(data), "-k", "4", *args, "--quiet",
                               "--out", str(tmp_path / "direct.h5")], env=mpi_env())
    job = submit(JOBS / "nkmeans.sbatch", tmp_path, {"NKMPI_DATA": str(data), "NKMPI_K": "4",
                                                     "NKMPI_OUT": str(out), "NKMPI_ARGS": " ".join(args)},
                 "--ntasks=2", "--time=2", "--signal=B:USR1@60")
    try:
        wait_until(lambda: out.exists() or finished(job), 1200, f"the result of job {job}")
        assert direct.wait(timeout=1200) == 0
    finally:
        if direct.poll() is None:
            direct.kill()
        subprocess.run(["scancel", job])
    log = (tmp_path / f"nkmeans-{job}.out").read_text()
    assert "stopped by a signal" in log and "requeueing job" in log, log
    assert "resuming from" in log, log
    result = read_result(out)
    assert 0 < result["attrs"]["resumed_at_iteration"] < 1500000
    expected = read_result(tmp_path / "direct.h5")
    np.testing.assert_array_equal(result["centers"], expected["centers"])
    np.testing.assert_array_equal(result["assignments"], expected["assignments"])
