"""Every job script in jobs/ under a real (one-node) SLURM: a run, a scaling study, a run
stopped before its time limit that checkpoints, requeues itself and resumes, a run stopped
while it starts, which requeues itself and starts afresh, and the requeue decision under each
launcher: from the checkpoint the run wrote, even when the launcher reports status 1 as Open
MPI's mpiexec does after TERM, and never for a run that failed.

No test races the clock: the tests send the stop signals themselves, on events (a checkpoint
file, a line of the job's log, the job's restart count), and every wait has a generous timeout,
so a slow machine is slow and only a hang fails.

They need a running SLURM: CI starts one (.ci/slurm-up) and runs them; elsewhere
`make test-slurm` runs them on a machine where SLURM is up, and plain `make test` skips them.
"""

import csv
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import mpi_command, mpi_env, mpiexec, run_mpi
from data_tools.generate import generate
from nkmpi.app import INTERRUPTED, run_state
from nkmpi.formats.result import read_result

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "jobs"
VENV = Path(sys.executable).parent.parent
WANTED = os.environ.get("CI") == "true" or os.environ.get("NKMPI_TEST_SLURM") == "1"


def slurm_up():
    if shutil.which("sbatch") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False)
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
                          text=True, env={**os.environ, "NKMPI_VENV": str(VENV), **env}, check=True)
    return proc.stdout.strip().split(";")[0]


def wait_until(predicate, timeout, what, interval=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def finished(job):
    proc = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, check=False)
    return proc.returncode != 0 or not proc.stdout.strip()


def job_info(job):
    """The fields of `scontrol show job` ({} once SLURM has forgotten the job)."""
    proc = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=False)
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout)) if proc.returncode == 0 else {}


def restarts(job):
    return int(job_info(job).get("Restarts", 0))


def signal_batch(job, name):
    """What SLURM sends before a time limit (--signal=B:...): signal `name` to the batch shell only."""
    return subprocess.run(["scancel", f"--signal={name}", "--batch", job], capture_output=True, text=True, check=False)


def job_log(folder, job):
    path = folder / f"nkmeans-{job}.out"
    return path.read_text() if path.exists() else ""


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


#: A run 10 times longer than the wait for its first checkpoint, so that it cannot end before the
#: stop signal lands: 2,500 to 5,000 iterations a second here (2 ranks on 2 cores), so 10 to 20 s;
#: a machine 10 times faster still needs 1 s, against a tenth of a second for the signal to land.
LONG_ITERATIONS, CHECKPOINT_EVERY = 50_000, 5_000


@pytest.mark.timeout(3600)
def test_time_limit_checkpoint_requeue_and_resume(tmp_path, data):
    """The stop before a time limit, end to end.  The job has a 2-minute limit and the signal
    SLURM sends before it; once its first periodic checkpoint exists the test sends that signal
    itself (USR1 to the batch shell): the script passes it on, the ranks agree on an iteration,
    checkpoint and exit with status 3, and the script requeues the job.  After the requeue the
    test lifts the time limit, so that the resumed attempt finishes however slow the machine, and
    the result equals an uninterrupted run's, bit for bit."""
    args = ["--rho", "50", "--iters", str(LONG_ITERATIONS), "--monitor-every", "0",
            "--checkpoint-every", str(CHECKPOINT_EVERY)]
    out, checkpoint = tmp_path / "long.h5", tmp_path / "long.checkpoint.h5"
    job = submit(JOBS / "nkmeans.sbatch", tmp_path, {"NKMPI_DATA": str(data), "NKMPI_K": "4",
                                                     "NKMPI_OUT": str(out), "NKMPI_ARGS": " ".join(args)},
                 "--ntasks=2", "--time=2", "--signal=B:USR1@60")
    direct = None
    try:
        wait_until(lambda: checkpoint.exists() or finished(job), 1200,
                   f"the first checkpoint of job {job}", interval=0.1)
        sent = signal_batch(job, "USR1")
        wait_until(lambda: restarts(job) > 0 or finished(job), 1200, f"job {job} to requeue itself")
        assert restarts(job) > 0, f"{sent.stderr}\n{job_log(tmp_path, job)}"
        lift = subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=UNLIMITED"],
                              capture_output=True, text=True, check=False)
        assert lift.returncode == 0, lift.stderr
        # The uninterrupted run, while the requeued job waits to start again.
        direct = subprocess.Popen(mpi_command(2, [sys.executable, "-m", "nkmpi", "run", str(data), "-k", "4",
                                                  *args, "--quiet", "--out", str(tmp_path / "direct.h5")]),
                                  env=mpi_env())
        wait_until(lambda: finished(job), 3000, f"the result of job {job}")
        assert direct.wait(timeout=3000) == 0
    finally:
        if direct is not None and direct.poll() is None:
            direct.kill()
        subprocess.run(["scancel", job], check=False)
    log = job_log(tmp_path, job)
    assert job_info(job).get("JobState") == "COMPLETED", log
    assert "nkmeans.sbatch: got SIGUSR1: asking the run to stop" in log, log
    assert "nkmpi: stopped by a signal; resume with --resume" in log, log
    assert f"requeueing job {job}, which resumes from the checkpoint {checkpoint}" in log, log
    assert f"nkmeans.sbatch: resuming from {checkpoint}" in log, log
    result = read_result(out)
    assert 0 < result["attrs"]["resumed_at_iteration"] < LONG_ITERATIONS, log
    expected = read_result(tmp_path / "direct.h5")
    np.testing.assert_array_equal(result["centers"], expected["centers"])
    np.testing.assert_array_equal(result["assignments"], expected["assignments"])


#: A run whose start-up (reading, and seeding 16 centers per agent) takes 10 to 20 s here, so that a
#: stop sent as the job starts reaches the ranks long before their first iteration.
SLOW_START = {"points": 5_000_000, "k": 16, "args": ["--iters", "4", "--monitor-every", "0"]}
HEADER = re.compile(r"^nkmpi: \d+ agents, ", re.MULTILINE)
STOPPED_IN_START_UP = "nkmpi: stopped by a signal before the first iteration: no checkpoint was needed"


@pytest.fixture(scope="module")
def slow_start(tmp_path_factory):
    """A dataset that takes seconds to read and seed, and the result of its uninterrupted run."""
    folder = tmp_path_factory.mktemp("slow-start")
    data = folder / "data.h5"
    generate(data, SLOW_START["points"], 4, 3, 12, "by-cluster:2", seed=3)
    proc = run_mpi(2, ["run", data, "-k", SLOW_START["k"], *SLOW_START["args"], "--out",
                       folder / "direct.h5", "--quiet"], timeout=900)
    assert proc.returncode == 0, proc.stderr
    return data, read_result(folder / "direct.h5")


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", ["USR1", "TERM"])
def test_stop_during_start_up_requeues_and_starts_afresh(tmp_path, slow_start, name):
    """A stop (USR1 as before a time limit, TERM as on preemption) that comes while the job starts.
    The test signals the batch shell as soon as the script has printed its first line (its traps
    are set; a signal before that kills the shell itself), long before the ranks have read and
    seeded the data: the script notes the stop, passes it on once the run is up, nkmpi stops
    before its first iteration with status 3 and no checkpoint, and the script requeues the job
    without claiming one.  The next attempt starts afresh and ends as an uninterrupted run."""
    data, expected = slow_start
    out, checkpoint = tmp_path / "result.h5", tmp_path / "result.checkpoint.h5"
    job = submit(JOBS / "nkmeans.sbatch", tmp_path,
                 {"NKMPI_DATA": str(data), "NKMPI_K": str(SLOW_START["k"]), "NKMPI_OUT": str(out),
                  "NKMPI_ARGS": " ".join(SLOW_START["args"])}, "--ntasks=2", "--time=60")
    try:
        wait_until(lambda: f"job {job} starts, attempt 1" in job_log(tmp_path, job) or finished(job), 1200,
                   f"job {job} to start", interval=0.1)
        header_first = HEADER.search(job_log(tmp_path, job)) is not None
        sent = signal_batch(job, name)
        assert sent.returncode == 0, f"{sent.stderr}\n{job_log(tmp_path, job)}"
        wait_until(lambda: finished(job), 1500, f"the end of job {job}")
    finally:
        subprocess.run(["scancel", job], check=False)
    log = job_log(tmp_path, job)
    assert job_info(job).get("JobState") == "COMPLETED", log
    assert f"nkmeans.sbatch: got SIG{name}" in log, log
    assert f"job {job} starts, attempt 2" in log, log
    first_attempt = log.split(f"job {job} starts, attempt 2")[0]
    stopped_in_start_up = STOPPED_IN_START_UP in first_attempt
    if header_first and not stopped_in_start_up:
        # The header came before the signal (the data's size makes that impossible in practice)
        # and the run reached its first iteration: it checkpointed, as in the test above.
        assert "nkmpi: stopped by a signal; resume with --resume" in first_attempt, log
        assert f"requeueing job {job}, which resumes from the checkpoint {checkpoint}" in first_attempt, log
        assert f"nkmeans.sbatch: resuming from {checkpoint}" in log, log
    else:
        # Signalled before the ranks had even read the data: they stop in their start-up.
        assert stopped_in_start_up, log
        assert (f"the run stopped on request (status 3); requeueing job {job}, which starts afresh: "
                "there is no checkpoint") in first_attempt, log
        assert "resuming from" not in log and "resumes from" not in log, log
        assert not checkpoint.exists(), log
        assert "resumed_at_iteration" not in read_result(out)["attrs"], log
    result = read_result(out)
    np.testing.assert_array_equal(result["centers"], expected["centers"])
    np.testing.assert_array_equal(result["assignments"], expected["assignments"])


#: Launchers the job script may use: srun, the environment's mpiexec, and a stand-in for Open MPI's
#: mpiexec, which exits with status 1 when it gets TERM, whatever the ranks did.
LAUNCHERS = ["srun", "mpiexec", "mpiexec exiting 1"]
#: The stand-in: the real mpiexec, USR1 and TERM passed on to it, any failure reported as status 1.
EXITING_1 = """#!/bin/bash
child=""
trap '[ -n "$child" ] && kill -USR1 "$child"' USR1
trap '[ -n "$child" ] && kill -TERM "$child"' TERM
"{mpiexec}" "$@" &
child=$!
while kill -0 "$child" 2>/dev/null; do
    wait "$child"
done
wait "$child" || exit 1
"""


def launcher_env(launcher, folder):
    """The job's variables for `launcher`; the stand-in comes first on PATH through an environment
    to activate that activates this one, then puts the stand-in's folder before it."""
    if launcher != "mpiexec exiting 1":
        return {"NKMPI_LAUNCHER": launcher}
    wrapper = folder / "wrapper"
    (wrapper / "bin").mkdir(parents=True)
    stand_in = wrapper / "bin" / "mpiexec"
    stand_in.write_text(EXITING_1.format(mpiexec=VENV / "bin" / "mpiexec"))
    stand_in.chmod(0o755)
    # The job script launches through nkmpi.launch, which takes $NKMPI_MPIEXEC before the venv's.
    (wrapper / "bin" / "activate").write_text(f"source {VENV}/bin/activate\nPATH={wrapper}/bin:$PATH\n"
                                              f"export NKMPI_MPIEXEC={stand_in}\n")
    return {"NKMPI_LAUNCHER": "mpiexec", "NKMPI_VENV": str(wrapper)}


def reported_status(launcher):
    """The status the launcher reports for a run that stopped on request (nkmpi's 3)."""
    return 1 if launcher == "mpiexec exiting 1" else 3


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_requeue_decided_from_the_checkpoint_whatever_the_launcher_reports(tmp_path, data, launcher):
    """A stop after the run's first checkpoint (signalled on that event, as the test above does):
    the ranks write the checkpoint marked interrupted, and the script requeues the job from what
    `nkmpi status` reads there, also when the launcher reports status 1.  The requeued attempt
    is not waited for (the test above resumes one to the end)."""
    args = ["--rho", "50", "--iters", str(LONG_ITERATIONS), "--monitor-every", "0",
            "--checkpoint-every", str(CHECKPOINT_EVERY)]
    out, checkpoint = tmp_path / "long.h5", tmp_path / "long.checkpoint.h5"
    job = submit(JOBS / "nkmeans.sbatch", tmp_path, {"NKMPI_DATA": str(data), "NKMPI_K": "4", "NKMPI_OUT": str(out),
                                                     "NKMPI_ARGS": " ".join(args), **launcher_env(launcher, tmp_path)},
                 "--ntasks=2", "--time=30")
    try:
        wait_until(lambda: checkpoint.exists() or finished(job), 1200,
                   f"the first checkpoint of job {job}", interval=0.1)
        sent = signal_batch(job, "USR1")
        wait_until(lambda: restarts(job) > 0 or finished(job), 1200, f"job {job} to requeue itself")
        log = job_log(tmp_path, job)
        assert restarts(job) > 0, f"{sent.stderr}\n{log}"
    finally:
        subprocess.run(["scancel", job], check=False)
    assert "nkmpi: stopped by a signal; resume with --resume" in log, log
    decision = re.search(rf"nkmeans.sbatch: the run stopped on request after iteration (\d+) "
                         rf"\(status {reported_status(launcher)}\); requeueing job {job}, which resumes "
                         rf"from the checkpoint {re.escape(str(checkpoint))}", log)
    assert decision and int(decision[1]) > CHECKPOINT_EVERY, log


@pytest.fixture(scope="module")
def interrupted_checkpoint(tmp_path_factory):
    """A dataset, and the checkpoint of a run on it stopped by a signal (outside SLURM) after its
    first periodic checkpoint, with the run's options."""
    folder = tmp_path_factory.mktemp("interrupted")
    data = folder / "data.h5"
    generate(data, 4000, 4, 3, 12, "by-cluster:2", seed=2)
    args = ["--rho", "50", "--iters", str(LONG_ITERATIONS), "--monitor-every", "0", "--checkpoint-every", "1000"]
    command = [mpiexec(), "-n", "2", sys.executable, "-m", "nkmpi", "run", str(data), "-k", "4", *args,
               "--out", str(folder / "run.h5")]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        while "checkpoint after iteration" not in proc.stdout.readline():      # iterating
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGUSR1)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    checkpoint = folder / "run.checkpoint.h5"
    assert proc.returncode == 3 and run_state(checkpoint)[0] == INTERRUPTED, stderr
    return data, checkpoint, args


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_no_requeue_for_a_run_that_fails_beside_an_interrupted_checkpoint(tmp_path, interrupted_checkpoint,
                                                                           launcher):
    """A job resumes from a checkpoint marked interrupted (a previous attempt's) and fails: here,
    bad input (the settings differ from the checkpoint's), status 2, or 1 from the stand-in.  The
    checkpoint still says interrupted, but not this attempt's: the script does not requeue."""
    data, original, args = interrupted_checkpoint
    checkpoint = tmp_path / "ck.h5"
    checkpoint.write_bytes(original.read_bytes())
    before = digest(checkpoint)
    job = submit(JOBS / "nkmeans.sbatch", tmp_path,
                 {"NKMPI_DATA": str(data), "NKMPI_K": "4", "NKMPI_OUT": str(tmp_path / "out.h5"),
                  "NKMPI_CHECKPOINT": str(checkpoint), "NKMPI_ARGS": " ".join(args + ["--alpha", "0.9"]),
                  **launcher_env(launcher, tmp_path)}, "--ntasks=2", "--time=10")
    try:
        wait_until(lambda: finished(job) or restarts(job) > 0, 600, f"the end of job {job}")
    finally:
        subprocess.run(["scancel", job], check=False)
    log = job_log(tmp_path, job)
    status = 1 if launcher == "mpiexec exiting 1" else 2
    assert "the checkpoint was made with other settings" in log, log
    assert (f"nkmeans.sbatch: the run ended with status {status}, without a result or a stop on request: "
            "not requeued") in log, log
    assert restarts(job) == 0 and job_info(job).get("JobState") == "FAILED", log
    assert digest(checkpoint) == before and not (tmp_path / "out.h5").exists()
