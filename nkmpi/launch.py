"""How nkmpi starts MPI programs — the tests, the job drivers and `make demo` alike: which
launcher, with which flags, with which environment.  Plain subprocess plumbing: this
module loads no MPI.

Every rank gets one thread per BLAS and OpenMP pool, since ranks, not threads, share
the cores, and finds this environment's `nkmpi` and `mpiexec` first on its PATH.

    python -m nkmpi.launch -n 4 -- nkmpi run data.h5 -k 6

runs a command on 4 ranks the same way, whichever MPI this environment has.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from .errors import InputError, Parser

#: What starts the ranks: mpiexec on any machine, srun inside a SLURM allocation.
LAUNCHERS = ("mpiexec", "srun")
#: The folder of this Python's executables: the virtual environment's `nkmpi` and, when
#: `make install` put an MPI wheel there, its `mpiexec`.
BIN = Path(sys.executable).parent
#: Seconds `mpiexec --version` may take.
VERSION_TIMEOUT = 60


def mpiexec_path() -> str:
    """$NKMPI_MPIEXEC when set, else the mpiexec next to this Python (an MPI wheel's), else
    PATH's; FileNotFoundError when there is none."""
    chosen = os.environ.get("NKMPI_MPIEXEC") or str(BIN / "mpiexec")
    if os.path.exists(chosen):
        return chosen
    found = shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError("no mpiexec: run `make install` (it installs the MPICH wheel)")
    return found


@functools.cache
def implementation(mpiexec: str) -> str:
    """Whose launcher `mpiexec` is, from its `--version`: "openmpi" (Open MPI 5 says
    "Open MPI", 4 "OpenRTE"), "mpich" (Hydra: MPICH, and Intel MPI built on it) or "other".
    Asked once per launcher and process."""
    proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    text = proc.stdout + proc.stderr
    if "Open MPI" in text or "OpenRTE" in text:
        return "openmpi"
    if "HYDRA" in text or "Intel(R) MPI" in text:
        return "mpich"
    return "other"


def mpiexec_flags(mpiexec: str) -> list[str]:
    """The flags that make `mpiexec` start nkmpi's ranks as Hydra does by itself: Open MPI
    refuses more ranks than cores (--oversubscribe) and to run as root
    (--allow-run-as-root), and binds each rank to one core, which would leave
    `nkmpi run --threads N` one core for its N threads (--bind-to none)."""
    if implementation(mpiexec) != "openmpi":
        return []
    flags = ["--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return flags


def session_base() -> Path:
    """Where Open MPI's launcher keeps its session directories: PMIx's choice of TMPDIR, TEMP,
    TMP, else /tmp."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        if os.environ.get(name):
            return Path(os.environ[name])
    return Path("/tmp")


def remove_dead_sessions(becoming_the_launcher: bool = False) -> None:
    """Remove the session directories `ompi.PID` of this user's Open MPI launchers that are no
    longer running.  A launcher that was killed leaves its own, and Open MPI 5 refuses to start
    a launcher whose process id finds one ("The PMIx server's listener thread failed to start",
    exit 213; openpmix/openpmix#4022, fixed after the PMIx that Open MPI 5.0 carries).  Where
    process ids wrap around quickly that turns one kill into a failed job later.  With
    `becoming_the_launcher` (this process execs it next) its own id's directory goes too.
    Whether a launcher runs is asked of this node's processes: TMPDIR must be node-local, as
    Open MPI requires of it anyway."""
    try:
        entries = list(session_base().glob("ompi.*"))
    except OSError:
        return
    for entry in entries:
        pid = entry.name.removeprefix("ompi.")
        if not (pid.isascii() and pid.isdigit()):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        dead = not _running(int(pid)) or (becoming_the_launcher and int(pid) == os.getpid())
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and dead:
            shutil.rmtree(entry, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        pass
    return True


def mpi_env() -> dict:
    """This process's environment for MPI ranks: one thread per BLAS and OpenMP pool,
    this environment's executables first on PATH."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    return env


def launch_command(n_ranks: int, args: list, launcher: str = "mpiexec", becoming_the_launcher: bool = False
                   ) -> list[str]:
    """The command that runs `args` on `n_ranks` ranks: `mpiexec [its flags] -n R ARGS`, or
    inside a SLURM allocation `srun` with one CPU per rank, through PMI-2.  Before an Open MPI
    launch, the session directories dead launchers left are removed (remove_dead_sessions;
    `becoming_the_launcher` when this process execs the command next)."""
    if launcher == "srun":
        start = ["srun", f"--ntasks={n_ranks}", "--cpus-per-task=1", "--mpi=pmi2"]
    else:
        mpiexec = mpiexec_path()
        if implementation(mpiexec) == "openmpi":
            remove_dead_sessions(becoming_the_launcher)
        start = [mpiexec, *mpiexec_flags(mpiexec), "-n", str(n_ranks)]
    return start + [str(a) for a in args]


def main(argv: list[str] | None = None) -> int:
    """`python -m nkmpi.launch -n R [--launcher L] -- COMMAND...`: become the launch of
    COMMAND on R ranks (exec, so that signals reach the launcher itself)."""
    parser = Parser(prog="python -m nkmpi.launch",
                    description="Run a command on R ranks with this environment's MPI launcher "
                                "and the flags it needs.")
    parser.add_argument("-n", dest="ranks", type=int, required=True, metavar="R", help="number of ranks")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="mpiexec",
                        help="mpiexec (default) or srun (inside a SLURM allocation)")
    parser.add_argument("command", nargs="+", metavar="-- COMMAND", help="the program and its arguments")
    try:
        args = parser.parse_args(argv)
        if args.ranks < 1:
            raise InputError(f"-n must be at least 1, got {args.ranks}")
        command = launch_command(args.ranks, args.command, args.launcher, becoming_the_launcher=True)
    except (InputError, FileNotFoundError) as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvpe(command[0], command, mpi_env())
    except OSError as exc:
        print(f"nkmpi: error: cannot start {command[0]}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
