"""Every kind of bad dataset stops `mpiexec -n 2 nkmpi run` before anything is written."""

import h5py
import numpy as np
import pytest

from conftest import run_mpi, uneven_dataset

pytestmark = pytest.mark.mpi


def rewrite(name, value):
    def edit(f):
        del f[name]
        f[name] = value
    return edit


def set_attr(name, value):
    def edit(f):
        f.attrs[name] = value
    return edit


def delete(name):
    def edit(f):
        del f[name]
    return edit


def value_at(row, value):
    def edit(f):
        points = f["points"][()]
        points[row, 1] = value
        rewrite("points", points)(f)
    return edit


def constant_points(f):
    rewrite("points", np.ones(f["points"].shape))(f)


def offsets_edit(change):
    def edit(f):
        offsets = f["agent_offsets"][()]
        change(offsets)
        rewrite("agent_offsets", offsets)(f)
    return edit


def weights(value):
    def edit(f):
        f.create_dataset("weights", data=np.full(len(f["points"]), value))
    return edit


BAD = {
    "not HDF5": (None, "not an HDF5 file"),
    "format": (set_attr("format", "something-else"), "format attribute is 'something-else'"),
    "version": (set_attr("version", 7), "dataset version 7 is not supported"),
    "no points": (delete("points"), "missing dataset 'points'"),
    "no offsets": (delete("agent_offsets"), "missing dataset 'agent_offsets'"),
    "points 1-D": (rewrite("points", np.zeros(10)), "'points' must be 2-D"),
    "points int": (lambda f: rewrite("points", f["points"][()].astype(np.int32))(f),
                   "'points' must be float32 or float64, is int32"),
    "offsets float": (lambda f: rewrite("agent_offsets", f["agent_offsets"][()].astype(float))(f),
                      "'agent_offsets' must be a 1-D integer array"),
    "offsets decrease": (offsets_edit(lambda o: o.__setitem__(4, o[2] - 1)), "'agent_offsets' decreases at agent 3 ("),
    # In the second rank's slice of the offsets (agents 6..12), as every rank reads only its own.
    "offsets decrease late": (offsets_edit(lambda o: o.__setitem__(9, o[7] - 1)),
                              "'agent_offsets' decreases at agent 8 ("),
    "offsets end": (offsets_edit(lambda o: o.__setitem__(-1, o[-1] - 1)), "'agent_offsets' ends at"),
    "offsets start": (offsets_edit(lambda o: o.__setitem__(0, 1)), "'agent_offsets' must start at 0"),
    "labels shape": (rewrite("labels", np.zeros(3, dtype=np.int64)), "'labels' must be an integer array"),
    "inf in points": (value_at(-2, np.inf), "(agent 11) contains NaN or Inf"),
    "overflowing point": (value_at(30, 1e200), "has a coordinate beyond +-"),
    "weights all 0": (weights(0.0), "every row has weight 0: nothing to cluster"),
    # Finite, but their sums overflow (the seeding's, the kernels'): refused like an overflowing point.
    "weights overflow": (weights(1e306), "the weights add up to inf, more than 1e+12"),
    "weights too heavy": (weights(1e11), "where weighted sums could overflow"),
    "format an array": (set_attr("format", np.array([1, 2])), "format attribute is [1, 2]"),
    "version a string": (set_attr("version", "one"), "dataset version 'one' is not supported"),
    "graph a dataset": (lambda f: f.create_dataset("graph", data=[1, 2]), "'graph' must be a group"),
    "too few distinct": (constant_points, "only 1 distinct points, fewer than K = 3"),
    "unknown agent in edges": (lambda f: f.create_dataset("graph/edges", data=[[0, 1], [1, 12]]),
                               "'graph/edges' row 1 is (1, 12): agent ids must be 0..11"),
    "edges shape": (lambda f: f.create_dataset("graph/edges", data=[[0, 1, 2]]),
                    "'graph/edges' must be an integer array of shape (E, 2)"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("valid") / "good.h5"
    uneven_dataset(path)
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dataset(good, tmp_path, case):
    edit, message = BAD[case]
    bad = tmp_path / "bad.h5"
    if edit is None:
        bad.write_bytes(b"plain text, not HDF5\n" * 10)
    else:
        bad.write_bytes(good.read_bytes())
        with h5py.File(bad, "r+") as f:
            edit(f)
    out = tmp_path / "out.h5"
    proc = run_mpi(2, ["run", bad, "-k", 3, "--graph", "ring", "--out", out], timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("nkmpi: error:") == 1, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not list(tmp_path.glob("out.h5*"))           # no result, no temporary file either
    assert "iter" not in proc.stdout

