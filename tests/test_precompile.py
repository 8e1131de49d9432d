"""`python -m nkmpi.precompile` (the last step of `make install`) reaches every kind of run,
so that no first job compiles a kernel on each of its ranks.  That it runs at all is
checked by every `make install`."""

import subprocess
import sys
from pathlib import Path

import h5py
from conftest import MPI_TIMEOUT

from nkmpi import precompile
from nkmpi.graph import LOCAL_SPECS
from nkmpi.init import INIT_METHODS
from nkmpi.options import ALGORITHMS, Options


def values_of(flag):
    """The method names RUN_OPTIONS give `flag` (`file:PATH` counts as `file`)."""
    return {options[options.index(flag) + 1].split(":")[0]
            for options in precompile.RUN_OPTIONS if flag in options}


def test_the_runs_take_every_initialization_graph_and_algorithm(tmp_path):
    default = Options(n_clusters=precompile.K)
    assert values_of("--init") | {default.init} == set(INIT_METHODS) | {"file"}
    assert values_of("--algorithm") | {default.algorithm} == set(ALGORITHMS)
    data = tmp_path / "data.h5"
    precompile.small_dataset(data, float, weighted=False)
    with h5py.File(data, "r") as f:       # so that a run with no --graph reads the dataset's
        assert "graph" in f
    assert values_of("--graph") | {"dataset"} == set(LOCAL_SPECS) | {"file", "dataset"}
    assert any("--threads" in options for options in precompile.RUN_OPTIONS)


def test_arguments_are_refused_with_one_error_line():
    proc = subprocess.run([sys.executable, "-m", "nkmpi.precompile", "--clusters", "3"], capture_output=True,
                          text=True, timeout=MPI_TIMEOUT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("nkmpi: error: unrecognized arguments: --clusters 3"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_kernels_compiled_from_other_sources_are_dropped(tmp_path, monkeypatch):
    """A cache filled from other sources (the digest it keeps differs, or it keeps none) is
    emptied; one filled from these sources is left alone."""
    monkeypatch.setattr(precompile, "_kernel_cache_folders", lambda: {tmp_path})

    def cached(*names):
        for name in names:
            (tmp_path / name).write_bytes(b"compiled")
        return sorted(p.name for p in tmp_path.glob("*.nb?"))

    cached("kernels._update-1.py311.nbi", "kernels._update-1.py311.1.nbc")
    precompile.drop_stale_kernels()                         # no digest kept: of unknown sources
    assert cached() == []
    assert cached("local_pass._pass-1.py311.nbi") == ["local_pass._pass-1.py311.nbi"]
    precompile.drop_stale_kernels()                         # compiled from these sources: kept
    assert cached() == ["local_pass._pass-1.py311.nbi"]
    (tmp_path / precompile.SOURCES_STAMP).write_text("the digest of older sources")
    precompile.drop_stale_kernels()
    assert cached() == []


def test_the_kernel_cache_folders_are_numbas():
    from nkmpi import kernels, local_pass
    folders = precompile._kernel_cache_folders()
    assert {Path(f._cache._cache_path) for f in (kernels._update, local_pass._pass)} <= folders
