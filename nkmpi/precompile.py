"""Compile every kernel into numba's disk cache once, before the first job: `make install`
runs `python -m nkmpi.precompile` on one rank.

numba compiles a kernel the first time a process calls it for a dtype and caches it on disk
(docs/performance.md); after an upgrade it first drops the kernels compiled from the old
sources (`drop_stale_kernels`).  Without this step the first job after an install or an upgrade
compiles them all on every rank at once: `make demo`'s 4 ranks spent 234 s of set-up doing
it on 2 cores, and a 1,000-rank job would spend its allocation the same way.  Small runs of
each command, on float64 and on float32 data, call every kernel the commands have; a later
process only loads them (about 2 s).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .cli import main as nkmpi_main
from .errors import InputError, Parser
from .formats.dataset import write_dataset

#: Agents, points per agent, features and clusters of the small datasets.
N_AGENTS, POINTS_PER_AGENT, N_FEATURES, K = 8, 30, 3, 3

#: `nkmpi run` options of the runs, one per line; together they reach every kernel: each
#: initialization and kind of graph (the default: the dataset's), both algorithms, threads,
#: faults, a rho schedule.  {centers} and {edges} name files compile_all writes.
RUN_OPTIONS = (
    [],
    ["--init", "flood", "--graph", "rgg:radius=0.6"],
    ["--init", "local", "--graph", "torus"],
    ["--init", "file:{centers}", "--graph", "ws:k=2,p=0.3"],
    ["--algorithm", "lloyd", "--graph", "er:p=0.4"],
    ["--threads", "2", "--graph", "complete"],
    ["--link-failure-prob", "0.2", "--dropout-prob", "0.2", "--graph", "star"],
    ["--rho-schedule", "1", "--inner", "1", "--graph", "path"],
    ["--graph", "ring"],
    ["--graph", "file:{edges}"],
)


#: The ring of N_AGENTS agents, stored in the datasets and written as an edge file.
RING = np.stack([np.arange(N_AGENTS), (np.arange(N_AGENTS) + 1) % N_AGENTS], axis=1)


def small_dataset(path: Path, dtype: type, weighted: bool) -> None:
    """Three blobs spread over N_AGENTS agents, with a graph stored (RING)."""
    rng = np.random.default_rng(0)
    n_points = N_AGENTS * POINTS_PER_AGENT
    points = rng.normal(size=(n_points, N_FEATURES)) + 4.0 * rng.integers(0, K, size=(n_points, 1))
    offsets = np.arange(0, n_points + 1, POINTS_PER_AGENT)
    weights = rng.uniform(0.5, 2.0, size=n_points) if weighted else None
    write_dataset(path, points.astype(dtype), offsets, edges=RING, weights=weights)


def nkmpi(*argv: object) -> None:
    """One `nkmpi` command in this process, its output dropped; any failure is a bug here."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        status = nkmpi_main([str(a) for a in argv])
    if status != 0:
        raise RuntimeError(f"nkmpi {' '.join(map(str, argv))} exited with {status}:\n{err.getvalue()}")


def compile_all(folder: Path) -> None:
    """Every command and option of RUN_OPTIONS, on each dtype, plain and weighted data; the
    loop's kernels of runs on more ranks than this one too (kernels.warm_up's both ways)."""
    from . import kernels
    for dtype in (np.float64, np.float32):
        kernels.warm_up(dtype)
    files = {"centers": folder / "centers.npy", "edges": folder / "edges.txt"}
    np.save(files["centers"], np.eye(K, N_FEATURES))
    np.savetxt(files["edges"], RING, fmt="%d")
    for dtype in (np.float64, np.float32):
        for weighted in (False, True):
            data = folder / f"data-{np.dtype(dtype).name}-{int(weighted)}.h5"
            small_dataset(data, dtype, weighted)
            result = folder / "result.h5"
            for options in RUN_OPTIONS:
                options = [o.format(**files) for o in options]
                nkmpi("run", data, "-k", K, "--iters", 12, "--monitor-every", 3, *options, "--out", result)
            checkpoint = folder / "checkpoint.h5"
            nkmpi("run", data, "-k", K, "--iters", 4, "--checkpoint-every", 2, "--checkpoint", checkpoint,
                  "--out", result)
            nkmpi("run", data, "-k", K, "--iters", 8, "--resume", checkpoint, "--out", result)
            nkmpi("predict", result, data, "--out", folder / "labels.h5")
            nkmpi("simulate", data, "-k", K, "--iters", 12, "--out", result)
            nkmpi("simulate", data, "-k", K, "--iters", 12, "--algorithm", "lloyd", "--out", result)
            nkmpi("info", data)
            nkmpi("summary", result)


#: The digest of the sources whose kernels a cache folder holds, kept in that folder.
SOURCES_STAMP = "nkmpi-sources.sha256"


def _kernel_cache_folders() -> set[Path]:
    """The folders where numba caches the kernels of nkmpi's modules (each module's own
    __pycache__, or under NUMBA_CACHE_DIR), as numba's own cache locators find them for a
    function of each module's file: no module is imported (some start MPI)."""
    from numba.core.caching import CompileResultCacheImpl
    import nkmpi
    folders = set()
    for source in Path(nkmpi.__file__).parent.rglob("*.py"):
        if "njit" not in source.read_text():
            continue
        namespace = {}
        exec(compile("def kernel():\n    pass\n", str(source), "exec"), namespace)
        folders.add(Path(CompileResultCacheImpl(namespace["kernel"]).locator.get_cache_path()))
    return folders


def drop_stale_kernels() -> None:
    """Empty numba's cache of nkmpi's kernels when any nkmpi source changed since it was
    filled.  numba keys a cached kernel on its own file's time stamp, not on the modules
    whose code it inlines (row_sums' intrinsics, kernels' helpers in local_pass): after an
    upgrade that changed only those, an unchanged module's kernels would load code built
    from the old ones.  Run by one process (make install, the test session), never by a
    job's ranks."""
    import nkmpi
    package = Path(nkmpi.__file__).parent
    digest = hashlib.sha256()
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0" + source.read_bytes())
    stamp = digest.hexdigest()
    for folder in _kernel_cache_folders():
        kept = folder / SOURCES_STAMP
        if kept.exists() and kept.read_text() == stamp:
            continue
        for cached in [*folder.glob("*.nbi"), *folder.glob("*.nbc")]:
            cached.unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        kept.write_text(stamp)


def main(argv: list[str] | None = None) -> int:
    """`python -m nkmpi.precompile`: compile_all in a folder of its own, removed after."""
    parser = Parser(prog="python -m nkmpi.precompile",
                    description="Compile every nkmpi kernel into numba's disk cache (make install "
                                "runs this), so that a job's ranks only load them.")
    try:
        parser.parse_args(argv)
    except InputError as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    drop_stale_kernels()
    print("nkmpi: compiling the kernels into numba's cache (minutes when it is empty)", flush=True)
    with tempfile.TemporaryDirectory(prefix="nkmpi-precompile-") as temporary:
        compile_all(Path(temporary))
    print(f"nkmpi: every kernel in numba's cache after {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
