"""How nkmpi's tests and job scripts start MPI programs: which launcher, with which
environment.  Plain subprocess plumbing: this module loads no MPI.

Every rank gets one thread per BLAS and OpenMP pool, since ranks, not threads, share
the cores, and finds this environment's `nkmpi` and `mpiexec` first on its PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: What starts the ranks: mpiexec on any machine, srun inside a SLURM allocation.
LAUNCHERS = ("mpiexec", "srun")
#: The folder of this Python's executables: the virtual environment's `nkmpi` and, when
#: `make install` put the MPICH wheel there, its `mpiexec`.
BIN = Path(sys.executable).parent


def mpiexec_path() -> str:
    """$NKMPI_MPIEXEC when set, else the mpiexec next to this Python (the MPICH wheel), else
    PATH's; FileNotFoundError when there is none."""
    chosen = os.environ.get("NKMPI_MPIEXEC") or str(BIN / "mpiexec")
    if os.path.exists(chosen):
        return chosen
    found = shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError("no mpiexec: run `make install` (it installs the MPICH wheel)")
    return found


def mpi_env() -> dict:
    """This process's environment for MPI ranks: one thread per BLAS and OpenMP pool,
    this environment's executables first on PATH."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    return env


def launch_command(n_ranks: int, args: list, launcher: str = "mpiexec") -> list[str]:
    """The command that runs `args` on `n_ranks` ranks: `mpiexec -n R ARGS`, or inside a
    SLURM allocation `srun` with one CPU per rank, through PMI-2."""
    if launcher == "srun":
        start = ["srun", f"--ntasks={n_ranks}", "--cpus-per-task=1", "--mpi=pmi2"]
    else:
        start = [mpiexec_path(), "-n", str(n_ranks)]
    return start + [str(a) for a in args]
