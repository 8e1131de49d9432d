"""nkmpi.launch: whose mpiexec it is, the flags each needs, the session directories a killed
Open MPI launcher left, and `python -m nkmpi.launch`, against stand-in launchers that print what
they were given; and, under this environment's own mpiexec, that the ranks are not bound to one
core each and that a leftover session directory does not stop the next launch."""

import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import MPI_TIMEOUT, mpiexec, run_python
from nkmpi import launch

#: What each launcher's `--version` prints first, and the implementation it names.
VERSIONS = [
    ("mpiexec (Open MPI) 5.0.11", "openmpi"),
    ("mpiexec (OpenRTE) 4.1.4", "openmpi"),
    ("HYDRA build details:\n    Version:                                 4.2.0", "mpich"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", "mpich"),
    ("some other launcher 1.0", "other"),
]


def stand_in(folder, version):
    """An executable `mpiexec` that answers --version with `version` and otherwise prints its
    arguments and the environment ranks would get, one per line."""
    path = folder / "mpiexec"
    path.write_text("#!/bin/sh\n"
                    f"if [ \"$1\" = --version ]; then printf '%s\\n' '{version}'; exit 0; fi\n"
                    "printf '%s\\n' \"$@\" \"PATH=$PATH\" \"OMP_NUM_THREADS=$OMP_NUM_THREADS\"\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("version,name", VERSIONS)
def test_implementation_from_the_version(tmp_path, version, name):
    assert launch.implementation(stand_in(tmp_path, version)) == name


@pytest.mark.parametrize("root", [True, False])
@pytest.mark.parametrize("version,name", VERSIONS)
def test_flags_only_open_mpi_needs(tmp_path, monkeypatch, version, name, root):
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setenv("NKMPI_MPIEXEC", stand_in(tmp_path, version))
    command = launch.launch_command(3, ["nkmpi", "run", tmp_path / "d.h5"])
    flags = command[1:command.index("-n")]
    if name == "openmpi":
        assert flags[:3] == ["--oversubscribe", "--bind-to", "none"]
        assert flags[3:] == (["--allow-run-as-root"] if root else [])
    else:
        assert flags == []
    assert command[command.index("-n"):] == ["-n", "3", "nkmpi", "run", str(tmp_path / "d.h5")]


def test_srun_takes_no_mpiexec_flags():
    assert launch.launch_command(2, ["nkmpi"], "srun") == ["srun", "--ntasks=2", "--cpus-per-task=1",
                                                           "--mpi=pmi2", "nkmpi"]


def test_python_m_launch_becomes_the_launch(tmp_path):
    """The real `python -m nkmpi.launch`: the launcher gets the flags, -n and the command, and
    the ranks this environment's executables first on PATH and one thread per pool."""
    env = dict(os.environ, NKMPI_MPIEXEC=stand_in(tmp_path, "mpiexec (Open MPI) 5.0.11"))
    proc = subprocess.run([sys.executable, "-m", "nkmpi.launch", "-n", "4", "--", "nkmpi", "run", "--rho", "5"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["--oversubscribe", "--bind-to", "none"]
    assert lines[-8:] == ["-n", "4", "nkmpi", "run", "--rho", "5",
                          f"PATH={launch.BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS=1"]


@pytest.mark.parametrize("argv,words", [
    ([], "the following arguments are required: -n"),
    (["-n", "2"], "the following arguments are required: -- COMMAND"),
    (["-n", "0", "--", "true"], "-n must be at least 1, got 0"),
    (["-n", "two", "--", "true"], "invalid int value: 'two'"),
    (["-n", "2", "--launcher", "qsub", "--", "true"], "invalid choice: 'qsub'"),
])
def test_bad_input_is_one_error_line(argv, words):
    proc = subprocess.run([sys.executable, "-m", "nkmpi.launch", *argv], capture_output=True, text=True,
                          timeout=60)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("nkmpi: error: "), proc.stderr
    assert words in lines[0]


def test_no_launcher_is_one_error_line(tmp_path):
    env = dict(os.environ, NKMPI_MPIEXEC=str(tmp_path / "none"), PATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "nkmpi.launch", "-n", "2", "--", "true"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("nkmpi: error: no mpiexec"), proc.stderr


@pytest.mark.mpi
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity to read here")
def test_ranks_may_use_every_core():
    """Open MPI binds each rank to one core unless told not to; `--threads N` needs N cores."""
    proc = run_python(2, ["-c", "import os; print(sorted(os.sched_getaffinity(0)))"], MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"\[[\d, ]*\]", proc.stdout) == [str(sorted(os.sched_getaffinity(0)))] * 2   # lines may mix


def leave_session(tmpdir, pid):
    """What an Open MPI 5 launcher with process id `pid` that was killed leaves in `tmpdir`:
    its session directory with its PMIx rendezvous files (one records the pid)."""
    session = tmpdir / f"ompi.{pid}"
    (session / "1" / "0").mkdir(parents=True)
    host = socket.gethostname()
    for name in (f"pmix.{host}.tool", f"pmix.{host}.tool.{pid}", f"pmix.{host}.tool.prterun-{host}-{pid}@0"):
        (session / name).write_text(f"prterun-{host}-{pid}@0.0;tcp4://127.0.0.1:1\n5.0.11\n{pid}\n0:0\n")
    return session


@pytest.mark.parametrize("version,name", VERSIONS)
def test_sessions_of_dead_open_mpi_launchers_are_removed(tmp_path, monkeypatch, version, name):
    """Open MPI 5's launcher cannot start where a dead one of the same process id left its
    session directory (openpmix/openpmix#4022): an Open MPI launch removes those of dead
    processes, and this process's own only when it becomes the launcher (python -m
    nkmpi.launch execs it); no other, and no stray name stops it."""
    sessions = tmp_path / "tmp"
    sessions.mkdir()
    monkeypatch.setenv("TMPDIR", str(sessions))
    monkeypatch.setenv("NKMPI_MPIEXEC", stand_in(tmp_path, version))
    with subprocess.Popen(["true"]) as finished:
        pass                                    # waited for: its process id is free
    with subprocess.Popen(["sleep", "60"]) as running:
        try:
            dead = leave_session(sessions, finished.pid)
            impossible = leave_session(sessions, 10**20)
            own = leave_session(sessions, os.getpid())
            alive = leave_session(sessions, running.pid)
            other = [sessions / "ompi.vm.0", sessions / "ompi.12ab", sessions / "ompi.\u00b2",
                     sessions / "openmpi-sessions-0"]
            for folder in other:
                folder.mkdir()
            launch.launch_command(2, ["nkmpi"])
            removed = name == "openmpi"
            assert dead.exists() != removed and impossible.exists() != removed
            assert own.exists() and alive.exists() and all(folder.exists() for folder in other)
            launch.launch_command(2, ["nkmpi"], becoming_the_launcher=True)
            assert own.exists() != removed and alive.exists()
        finally:
            running.kill()


@pytest.mark.mpi
def test_a_leftover_session_does_not_stop_the_launch(tmp_path):
    """The real launcher, started by `python -m nkmpi.launch` with the process id whose dead
    launcher left its session directory in TMPDIR: Open MPI 5 would exit 213 ("The PMIx
    server's listener thread failed to start"); the launch runs."""
    if launch.implementation(mpiexec()) != "openmpi":
        pytest.skip("only Open MPI's launcher keeps its session directory by process id")
    leftover = ("import os, sys; sys.path.insert(0, sys.argv[1]); from test_launch import leave_session; "
                "from pathlib import Path; leave_session(Path(sys.argv[2]), os.getpid()); "
                "os.execv(sys.executable, [sys.executable, '-m', 'nkmpi.launch', '-n', '2', '--', "
                "sys.executable, '-c', 'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()'])")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", leftover, os.path.dirname(__file__), tmp_path],
                          capture_output=True, text=True, env=env, timeout=MPI_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
