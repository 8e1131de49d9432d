"""nkmpi.launch: whose mpiexec it is, the flags each needs, and `python -m nkmpi.launch`,
against stand-in launchers that print what they were given; and, under this environment's
own mpiexec, that the ranks are not bound to one core each."""

import os
import re
import subprocess
import sys

import pytest

from conftest import MPI_TIMEOUT, run_python
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
