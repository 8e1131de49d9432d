"""A rank's memory: letting go of the compiler's code once the kernels are loaded."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_script

from nkmpi import precompile

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="needs Linux's /proc/self/pagemap")

# In a fresh interpreter, so that what it measures is the kernels' loading alone.
RELEASE_THEN_RUN = r"""
import gc
import json
import numpy as np
import numba
from nkmpi import kernels, memory

def library():
    return [(perms, resident, private) for _, perms, resident, private in memory.library_mappings(
        memory.COMPILER_LIBRARIES)]

rng = np.random.default_rng(0)
points, offsets, centers = rng.standard_normal((300, 5)), np.array([0, 100, 300]), rng.standard_normal((2, 4, 5))

def assign():
    labels = np.full(len(points), -1, dtype=np.int32)
    sums, counts, sse, _ = kernels.assign_and_accumulate(points, offsets, centers, labels)
    return [labels.tolist(), sums.tolist(), counts.tolist(), sse.tolist()]

kernels.warm_up(np.float64)
gc.collect()
gc.disable()        # an llvmlite object's finalizer would run LLVM code in the middle
assigned_before = assign()
before = library()
released = memory.release_compiler_code()
after = library()
kernels.warm_up(np.float64)             # the loop's kernels again: no compiler code runs
rerun = library()
assigned_after = assign()
gc.enable()

@numba.njit
def doubled_sum(x):
    return (2.0 * x).sum()

compiled = doubled_sum(np.arange(10.0))  # a new kernel: the compiler faults its pages back in
print(json.dumps(dict(before=before, released=released, after=after, rerun=rerun, compiled=compiled,
                      same=assigned_before == assigned_after)))
"""


def test_the_compilers_code_is_let_go_and_the_kernels_still_run():
    proc = subprocess.run([sys.executable, "-c", RELEASE_THEN_RUN], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    before, after, rerun = seen["before"], seen["after"], seen["rerun"]
    assert before, "numba's compiler library is not mapped"
    read_only = [i for i, (perms, _, private) in enumerate(before) if "w" not in perms and private == 0]
    assert sum(before[i][1] for i in read_only) > 0
    # What was let go is the read-only, unrelocated mappings' resident pages (as counted a moment
    # before: the system may map or reclaim a few of a library's pages in between) ...
    expected = sum(before[i][1] for i in read_only)
    assert abs(seen["released"] - expected) <= 0.1 * expected, (seen["released"], expected)
    for i, (perms, resident, private) in enumerate(after):
        if i in read_only:
            assert resident == 0
        else:           # ... and no private page: relocated data and writable mappings are as they were
            assert (perms, resident, private) == tuple(before[i])
    # Loaded kernels run without the compiler's code, and compute what they did.
    assert [resident for _, resident, _ in rerun] == [resident for _, resident, _ in after]
    assert seen["same"]
    assert seen["compiled"] == 90.0


# A run in this interpreter (one rank of a run): the kernels it called after it measured its memory
# before reading its rows that were not loaded yet (numba dispatchers that gained an overload since),
# in any of nkmpi's modules.
RUN_AFTER_WARM_UP = r"""
import json
import sys
from pathlib import Path

from numba.core.registry import CPUDispatcher

from nkmpi import app, cli

def overloads():
    return {f"{name}.{attr}": len(value.overloads) for name, module in list(sys.modules.items())
            if name.startswith("nkmpi") for attr, value in list(vars(module).items())
            if isinstance(value, CPUDispatcher)}

folder, init = Path(sys.argv[1]), sys.argv[2]
loaded, resident_bytes = {}, app.resident_bytes

def resident_bytes_seen():
    loaded.update(overloads())
    return resident_bytes()

app.resident_bytes = resident_bytes_seen
status = cli.main(["run", str(folder / "data.h5"), "-k", "3", "--init", init, "--graph", "rgg:radius=0.6",
                   "--iters", "3", "--quiet", "--out", str(folder / "result.h5"),
                   "--checkpoint", str(folder / "checkpoint.h5")])
from mpi4py import MPI
(folder / f"seen-{MPI.COMM_WORLD.Get_rank()}.json").write_text(json.dumps(dict(
    status=status, warmed=bool(loaded), later=sorted(k for k, n in overloads().items() if n > loaded.get(k, 0)))))
"""


@pytest.mark.parametrize("dtype, init, weighted, n_ranks", [
    ("float64", "network", "plain", 1), ("float32", "network", "weighted", 1), ("float64", "flood", "weighted", 1),
    ("float32", "local", "plain", 1), ("float64", "network", "weighted", 2), ("float32", "flood", "plain", 3)])
def test_no_kernel_is_loaded_once_the_rows_are_read(tmp_path, dtype, init, weighted, n_ranks):
    """Every kernel a run calls is loaded before the rows are read (driver.warm_up, and the
    graph's with the graph), and the compiler's code let go: a kernel loaded later runs LLVM,
    whose code would then be resident with the rows, at the run's peak.  On one rank and on
    several, whose updates are kernels of their own (kernels.warm_up's `ghosts`)."""
    precompile.small_dataset(tmp_path / "data.h5", np.dtype(dtype), weighted == "weighted")
    script = tmp_path / "run_after_warm_up.py"
    script.write_text(RUN_AFTER_WARM_UP)
    if n_ranks == 1:
        proc = subprocess.run([sys.executable, script, tmp_path, init], capture_output=True, text=True, timeout=300)
    else:
        proc = run_script(n_ranks, script, tmp_path, init)
    assert proc.returncode == 0, proc.stderr
    for rank in range(n_ranks):
        seen = json.loads((tmp_path / f"seen-{rank}.json").read_text())
        assert seen["status"] == 0 and seen["warmed"]
        assert seen["later"] == []


# The compiler's mappings as memory.library_mappings reads them (maps and pagemap), then as
# /proc/self/smaps reports them (the kernel's own Rss and Anonymous of each mapping).
MAPPINGS_TWO_WAYS = r"""
import json
import os
import numpy as np
from nkmpi import kernels, memory

kernels.warm_up(np.float64)
ours = [[list(span), perms, resident, private]
        for span, perms, resident, private in memory.library_mappings(memory.COMPILER_LIBRARIES)]
smaps, current = [], None
with open("/proc/self/smaps") as lines:
    for line in lines:
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            current = None
            if len(fields) > 5 and os.path.basename(fields[5]).startswith(memory.COMPILER_LIBRARIES):
                current = [[int(a, 16) for a in fields[0].split("-")], fields[1], 0, 0]
                smaps.append(current)
        elif current is not None and fields[0] in ("Rss:", "Anonymous:"):
            current[2 if fields[0] == "Rss:" else 3] = int(fields[1]) * 1024
print(json.dumps(dict(ours=ours, smaps=smaps)))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_library_mappings_count_the_pages_smaps_counts():
    """Resident and private (anonymous) bytes of each of the compiler's mappings, as the kernel's
    own accounting gives them: release_compiler_code relies on the private ones to leave
    relocated pages alone."""
    proc = subprocess.run([sys.executable, "-c", MAPPINGS_TWO_WAYS], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["ours"] == seen["smaps"]
    assert any(private for *_, private in seen["ours"]), "no relocated page: the test shows nothing"
