"""Fuzzing the data tools (generate, convert, plot, plot scaling): whatever the options and however
damaged the input files, a command ends with status 0 and outputs nkmpi takes (a dataset its own
loader reads whole, a PNG), or with status 2 and one `nkmpi: error:` line; never with a traceback
or a hang, an input changed or a temporary file left behind.

Each example has at most one kind of fault, so that none hides another: its options (extreme or
malformed numbers, odd specs), its output path (missing folder, too long a name, a directory,
an input or a link to one), or its input files (odd values, types and shapes, HDF5 attributes
and datasets of other types and shapes, damaged bytes).  Each test checks that its examples
ended both ways, so that neither path goes untested."""

import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from conftest import MPI_TIMEOUT, mpi_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_data_tools import make_run, sha256, temporaries, tool

from data_tools.convert import main as convert_main
from data_tools.generate import main as generate_main
from data_tools.plot import main as plot_main
from nkmpi.formats.dataset import read_all

# Reproducible in CI, and no deadline (a slow machine is no failure): hangs are pytest-timeout's.
FUZZ = {"deadline": None, "derandomize": True, "database": None,
        "suppress_health_check": [HealthCheck.too_slow]}
FAULTS = [None, "options", "output", "file"]

MALFORMED = ["", "abc", "1e3", "0x10", "1,5", "--", "nan", "inf", "\u0663"]
EXTREME_INTS = ["0", "-1", "-100", str(2**63), str(10**15), str(10**30)]      # beyond any disk
ODD_REALS = ["0", "-0.0", "5e-324", "1e20", "1e154", "1e200", "1.7976931348623157e308", "nan", "inf", "-inf", "-1",
             "", "x"]
VALUES = st.one_of(st.floats(-100, 100), st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 1e154, 1e30, 5e-324]))
# Specs and names: the sane ones first (see `specs`).
PARTITIONS = ["iid", "by-cluster:1", "by-cluster:2", "dirichlet:0.5", "spatial", "by-cluster:0", "by-cluster:99",
              "by-cluster:x", "dirichlet:1e-300", "dirichlet:0", "dirichlet:nan", "dirichlet:inf", "spatial:3", "", "?"]
GRAPHS = ["ring", "complete", "star", "torus", "er:p=0.9", "ws:k=2,p=0.1", "file:EDGES", "torus:rows=0", "er:p=nan",
          "rgg:radius=2", "file:MISSING", "dataset", "?"]
BAD_OUTPUTS = ["x" * 300, "missing/out", ".", "out/", "sub"]
ODD_ATTRIBUTES = [np.array([b"a", b"b"]), np.array([1, 2]), 1, 1.5, -1, b"nkmpi-result", "nkmpi-dataset",
                  np.zeros((2, 2)), h5py.Empty("f8"), np.array([]), True]
DATA_SETS = ["points", "agent_offsets", "labels"]
RESULT_SETS = ["centers", "initial_centers", "assignments", "metrics", "metrics/iteration", "metrics/objective",
               "metrics/edge_disagreement", "metrics/changed"]


def numbers(clean, low, high, extremes=EXTREME_INTS):
    """An integer option as typed: in low..high, and unless `clean` also extreme or malformed."""
    sane = st.integers(low, high).map(str)
    return sane if clean else st.one_of(sane, st.sampled_from(extremes + MALFORMED))


def reals(clean, low, high):
    """A real option as typed: in low..high, and unless `clean` also extreme or malformed."""
    sane = st.floats(low, high).map(repr)
    return sane if clean else st.one_of(sane, st.sampled_from(ODD_REALS))


def specs(clean, choices, n_sane):
    """One of `choices`; when `clean`, one of its first n_sane."""
    return st.sampled_from(choices[:n_sane] if clean else choices)


def argv_of(options):
    """Options {name: value} as argv; a value None is a flag."""
    return [item for name, value in options.items() for item in ([name] if value is None else [name, value])]


def corrupted(data, path):
    """Damage the file at `path` as `data` draws: truncate it, flip bytes, append junk, or not."""
    content = bytearray(Path(path).read_bytes())
    how = data.draw(st.sampled_from(["none", "truncate", "flip", "append"]), label="damage")
    if how == "truncate":
        del content[data.draw(st.integers(0, len(content)), label="cut at"):]
    elif how == "flip" and content:
        for at, bits in data.draw(st.lists(st.tuples(st.integers(0, len(content) - 1), st.integers(1, 255)),
                                           min_size=1, max_size=8), label="flips"):
            content[at] ^= bits
    elif how == "append":
        content += data.draw(st.binary(min_size=1, max_size=64), label="junk")
    Path(path).write_bytes(bytes(content))


def odd_array(data, like=None):
    """An array of drawn dtype and shape (often `like`'s shape, or one column more), values sane
    or extreme."""
    shapes = [(), (0,), (3,), (2, 2, 2), (5, 1)]
    if like is not None and like.ndim:
        shapes += [like.shape, like.shape[:-1] + (like.shape[-1] + 1,)]
    values = data.draw(hnp.arrays("f8", data.draw(st.sampled_from(shapes), label="shape"), elements=VALUES))
    dtype = data.draw(st.sampled_from(["f8", "f4", "i8", "u1", "?", "S3", "c16"]), label="dtype")
    with np.errstate(all="ignore"):
        return values.astype(str).astype(dtype) if dtype == "S3" else values.astype(dtype)


def edit_h5(data, path, names):
    """Give the HDF5 file at `path` an attribute of another type or shape, or replace, drop or
    turn into a group one of its datasets `names`, as `data` draws (or leave it)."""
    how = data.draw(st.sampled_from(["none", "attribute", "replace", "drop", "group"]), label="edit")
    if how == "none":
        return
    with h5py.File(path, "r+") as f:
        if how == "attribute":
            f.attrs[data.draw(st.sampled_from(["format", "version"]))] = data.draw(st.sampled_from(ODD_ATTRIBUTES))
            return
        name = data.draw(st.sampled_from(names), label="dataset")
        old = f[name][()] if isinstance(f.get(name), h5py.Dataset) else None
        if name in f:
            del f[name]
        if how == "replace":
            f[name] = odd_array(data, old)
        elif how == "group":
            f.create_group(name)


def output_path(data, folder, fault, name, inputs):
    """Where a tool is told to write: `name` in `folder`, or with fault "output" a path it cannot
    write or must not (an input, or a link to one)."""
    if fault != "output":
        return str(folder / name)
    (folder / "sub").mkdir()
    for number, target in enumerate(inputs):
        os.symlink(target, folder / f"link{number}-{name}")
        os.link(target, folder / f"hard{number}-{name}")
    links = [f"{kind}{number}-{name}" for kind in ("link", "hard") for number in range(len(inputs))]
    return str(folder / data.draw(st.sampled_from(BAD_OUTPUTS + links + [os.path.basename(p) for p in inputs])))


def edge_file(folder, options):
    """An edge file (a ring of 4 agents) in `folder`, named in options' --graph file:EDGES."""
    edges = folder / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n")
    if "--graph" in options:
        options["--graph"] = options["--graph"].replace("EDGES", str(edges)).replace("MISSING", str(folder / "no"))
    return edges


def run_tool(main, argv, outputs, valid, folder, inputs):
    """Run a tool and check the contract: status 0 and `valid` outputs, or status 2, one
    `nkmpi: error:` line and no new output; either way no traceback, the inputs unchanged and no
    temporary file left.  Returns the status."""
    before = {str(path): sha256(path) for path in inputs}
    existed = {str(path): os.path.lexists(path) for path in outputs}
    status, err = tool(main, *argv)
    assert "Traceback" not in err, err
    if status == 0:
        for path in outputs:
            valid(path)
    else:
        lines = err.splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("nkmpi: error: "), (status, err)
        assert not [path for path in outputs if os.path.lexists(path) and not existed[str(path)]]
    assert {path: sha256(path) for path in before} == before
    assert not temporaries(folder)
    return status


def valid_dataset(path):
    """nkmpi's own loader reads it whole: its structure, and every row finite and in range."""
    info, points = read_all(path)
    assert points.shape == (info.n_points, info.n_features)


def valid_png(path):
    content = Path(path).read_bytes()
    assert content.startswith(b"\x89PNG\r\n\x1a\n") and len(content) > 100


@pytest.fixture(scope="module")
def run_pair(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run"))


@pytest.mark.timeout(240)
def test_generate_fuzz():
    statuses = collections.Counter()

    @settings(max_examples=300, **FUZZ)
    @given(data=st.data(), fault=st.sampled_from(FAULTS[:3]))
    def example(data, fault):
        clean = fault != "options"
        options = data.draw(st.fixed_dictionaries({"--points": numbers(clean, 1, 300)}, optional={
            "--clusters": numbers(clean, 1, 6), "--features": numbers(clean, 1, 4), "--agents": numbers(clean, 1, 6),
            "--partition": specs(clean, PARTITIONS, 5), "--spread": reals(clean, 0, 5),
            "--separation": reals(clean, 0, 20), "--imbalance": reals(clean, 0.1, 10),
            "--anisotropy": reals(clean, 1, 10), "--dtype": specs(clean, ["float64", "float32", "float16"], 2),
            "--graph": specs(clean, GRAPHS, 7), "--seed": numbers(clean, 0, 5, ["-1", str(2**70)]),
            "--chunk-rows": numbers(clean, 1, 100, ["0", "-5", str(10**12)])}), label="options")
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            edges = edge_file(folder, options)
            inputs = [edges] if options.get("--graph") == f"file:{edges}" else []
            out = output_path(data, folder, fault, "out.h5", [edges])
            statuses[run_tool(generate_main, [out, *argv_of(options), "--quiet"], [out], valid_dataset, folder,
                              inputs)] += 1

    example()
    assert statuses[0] and statuses[2], statuses


def write_source(folder, fmt, points, labels, data):
    """Write points (and labels) as a `fmt` file in `folder`, with odd parts as `data` draws
    (None: none); returns its path and the source."""
    path = folder / f"src.{fmt}"
    if fmt == "csv":
        rows = len(points) if points.ndim else 1
        table = points.reshape(rows, points.size // max(rows, 1))
        if labels is not None and labels.ndim == 1 and len(labels) == len(table):
            table = np.column_stack([table.astype(str), labels.astype(str)])
        lines = [",".join(map(str, row)) for row in table]
        if data is None or data.draw(st.booleans(), label="header"):
            lines.insert(0, ",".join("abcdefghij"[:table.shape[1]]))
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "npy":
        np.save(path, points)
    elif fmt == "npz":
        np.savez(path, x=points, **({} if labels is None else {"y": labels}))
    else:
        with h5py.File(path, "w") as f:
            for name, array in (("x", points), ("y", labels)):
                if array is not None:
                    f[name] = array.astype("S") if array.dtype.kind == "U" else array
        if data is not None:
            edit_h5(data, path, ["x", "y"])
    return path, f"{path}:/x" if fmt == "h5" else str(path)


def source_arrays(data, odd):
    """Points and labels (or None) for a source: sane, or if `odd` of odd values, types, shapes."""
    shapes = st.tuples(st.integers(1, 12), st.integers(1, 3))
    if odd:
        shapes = st.one_of(shapes, st.sampled_from([(0, 2), (3, 0), (4,), ()]))
    values = data.draw(hnp.arrays("f8", data.draw(shapes, label="shape"),
                                  elements=VALUES if odd else st.floats(-100, 100)), label="points")
    dtype = data.draw(specs(not odd, ["f8", "f4", "i8", "f2", "?", "c16", "U4"], 3), label="dtype")
    with np.errstate(all="ignore"):
        points = values.astype(dtype)
    n = len(points) if points.ndim else 1
    labels = [st.none(), hnp.arrays("i8", n, elements=st.integers(0, 3))]
    if odd:
        labels.append(st.sampled_from([np.arange(n + 1), np.zeros((n, 2)), np.array(["a", "b"] * n)[:n],
                                       np.full(n, np.nan)]))
    return points, data.draw(st.one_of(labels), label="labels")


@pytest.mark.timeout(240)
def test_convert_fuzz():
    statuses = collections.Counter()

    @settings(max_examples=500, **FUZZ)
    @given(data=st.data(), fault=st.sampled_from(FAULTS), fmt=st.sampled_from(["csv", "npy", "npz", "h5"]))
    def example(data, fault, fmt):
        clean = fault != "options"
        points, labels = source_arrays(data, fault == "file")
        options = data.draw(st.fixed_dictionaries({}, optional={
            "--agents": numbers(clean, 1, 6), "--partition": specs(clean, PARTITIONS, 5), "--standardize": st.none(),
            "--graph": specs(clean, GRAPHS, 7), "--seed": numbers(clean, 0, 5, ["-1", str(2**70)]),
            "--dtype": specs(clean, ["float32", "float64", "int8"], 2)}), label="options")
        if fmt == "csv":
            options |= data.draw(st.fixed_dictionaries({}, optional={
                "--columns": specs(clean, ["0", "0,1", "a,b", "-1", "9", "x", ""], 2),
                "--label-column": specs(clean, ["-1", "b", "0", "9"], 1),
                "--delimiter": specs(clean, [",", ";", "", "ab"], 1),
                "--header": st.none(), "--no-header": st.none()}), label="CSV options")
        elif labels is not None or fmt == "npz":
            options |= data.draw(st.fixed_dictionaries({}, optional={
                "--labels-key": specs(clean, ["y", "nope", "x"], 1), "--key": specs(clean, ["x", "nope"], 1)}),
                label="array options")
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            path, source = write_source(folder, fmt, points, labels, data if fault == "file" else None)
            if fault == "file":
                corrupted(data, path)
            edges = edge_file(folder, options)
            inputs = [path] + ([edges] if options.get("--graph") == f"file:{edges}" else [])
            out = output_path(data, folder, fault, "out.h5", [path, edges])
            statuses[run_tool(convert_main, [source, out, *argv_of(options)], [out], valid_dataset, folder,
                              inputs)] += 1

    example()
    assert statuses[0] and statuses[2], statuses


@pytest.mark.timeout(240)
def test_plot_fuzz(run_pair):
    statuses = collections.Counter()

    @settings(max_examples=60, **FUZZ)
    @given(data=st.data(), fault=st.sampled_from(FAULTS))
    def example(data, fault):
        clean = fault != "options"
        options = data.draw(st.fixed_dictionaries({
            "--dpi": numbers(clean, 10, 15, ["0", "-1", "5", "1001", "1000000"])}, optional={
            "--max-points": numbers(clean, 1, 500, ["0", "-1", str(10**30)])}), label="options")
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            paths = [Path(shutil.copy(run_pair[0], folder)), Path(shutil.copy(run_pair[1], folder))]
            if fault == "file":
                which = data.draw(st.sampled_from([0, 1]), label="file")
                edit_h5(data, paths[which], [DATA_SETS, RESULT_SETS][which])
                corrupted(data, paths[which])
            # The outputs PREFIX-clusters.png and PREFIX-convergence.png: prefix "link0-x" makes the
            # first a link to the dataset.
            prefix = output_path(data, folder, fault, "x", paths)
            outputs = [f"{prefix}-clusters.png", f"{prefix}-convergence.png"]
            if fault == "output":
                os.rename(folder / "link0-x", folder / "link0-x-clusters.png")
                os.rename(folder / "hard1-x", folder / "hard1-x-convergence.png")
            statuses[run_tool(plot_main, [*paths, "--out", prefix, *argv_of(options)], outputs, valid_png, folder,
                              paths)] += 1

    example()
    assert statuses[0] and statuses[2], statuses


def timings_table(data, clean):
    """A jobs/scaling.py CSV as `data` draws it: header and rows right, and unless `clean` also
    odd or missing."""
    header = data.draw(specs(clean, ["ranks,seconds_per_iteration,oversubscribed", "ranks,seconds", ""], 1))
    rows = data.draw(st.lists(st.tuples(numbers(clean, 1, 64, ["0", "-1", str(2**31)]), reals(clean, 0.01, 100),
                                        specs(clean, ["True", "False", ""], 2)), min_size=int(clean), max_size=6))
    return "\n".join([header] + [",".join(row) for row in rows]) + "\n"


@pytest.mark.timeout(240)
def test_plot_scaling_fuzz():
    statuses = collections.Counter()

    @settings(max_examples=100, **FUZZ)
    @given(data=st.data(), fault=st.sampled_from(FAULTS), weak=st.booleans(), skip_strong=st.booleans())
    def example(data, fault, weak, skip_strong):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            tables = [folder / "strong.csv", folder / "weak.csv"]
            for path in tables:
                path.write_text(timings_table(data, fault != "file"))
                if fault == "file":
                    corrupted(data, path)
            prefix = output_path(data, folder, fault, "x", tables)
            if fault == "output":
                os.rename(folder / "link0-x", folder / "link0-x-strong.png")
                os.rename(folder / "hard1-x", folder / "hard1-x-weak.png")
            argv = ["scaling", "-" if skip_strong else tables[0]] + [tables[1]] * weak
            outputs = [f"{prefix}-strong.png"] * (not skip_strong) + [f"{prefix}-weak.png"] * weak
            dpi = data.draw(numbers(fault != "options", 10, 15, ["0", "5", "1001"]), label="dpi")
            statuses[run_tool(plot_main, [*argv, "--out", prefix, "--dpi", dpi], outputs, valid_png, folder,
                              tables)] += 1

    example()
    assert statuses[0] and statuses[2], statuses


def _generate_nan(folder, run):
    return ["data_tools.generate", folder / "out.h5", "--points", "100", "--spread", "nan"]


def _convert_cut_into_its_link(folder, run):
    with h5py.File(folder / "in.h5", "w") as f:
        f["x"] = np.ones((50, 2))
    (folder / "in.h5").write_bytes((folder / "in.h5").read_bytes()[:1500])
    os.symlink(folder / "in.h5", folder / "link.h5")
    return ["data_tools.convert", f"{folder / 'in.h5'}:/x", folder / "link.h5"]


def _plot_foreign_attribute(folder, run):
    data, result = shutil.copy(run[0], folder), shutil.copy(run[1], folder)
    with h5py.File(result, "r+") as f:
        f.attrs["format"] = np.array([b"nkmpi-result", b"x"])
    return ["data_tools.plot", data, result, "--dpi", "10"]


def _plot_scaling_garbage(folder, run):
    (folder / "strong.csv").write_bytes(bytes(range(256)))
    return ["data_tools.plot", "scaling", folder / "strong.csv"]


@pytest.mark.parametrize("case", [_generate_nan, _convert_cut_into_its_link, _plot_foreign_attribute,
                                  _plot_scaling_garbage])
def test_python_m_answers_bad_input_with_one_line(tmp_path, run_pair, case):
    """The real `python -m data_tools...` run: status 2, one line, inputs unchanged."""
    args = case(tmp_path, run_pair)
    inputs = {str(path): sha256(path) for path in tmp_path.iterdir() if path.is_file()}
    proc = subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True,
                          timeout=MPI_TIMEOUT, env=mpi_env(), cwd=tmp_path, check=False)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("nkmpi: error: "), proc.stderr
    assert {path: sha256(path) for path in inputs} == inputs and not temporaries(tmp_path)
