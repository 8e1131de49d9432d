"""data_tools: generate and convert round trips through nkmpi's own loader, the
generator under a memory limit, the plots, and each bad input a tool once met with a
traceback, a file nkmpi refuses or a replaced input (see also test_fuzz_data_tools)."""

import contextlib
import hashlib
import io
import os
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import MPI_TIMEOUT, mpi_env, run_mpi, run_script
from scipy.spatial import cKDTree
from sklearn.datasets import load_iris

from data_tools.convert import convert
from data_tools.convert import main as convert_main
from data_tools.generate import generate
from data_tools.generate import main as generate_main
from data_tools.plot import main as plot_main
from data_tools.plot import plot_run
from nkmpi.errors import InputError
from nkmpi.formats.dataset import open_dataset, read_all, write_dataset
from nkmpi.graph import Network, build_network

LOAD_BACK = Path(__file__).parent / "mpi_scripts" / "load_back.py"


def load_back(path, n_ranks, tmp_path):
    out = tmp_path / f"back{n_ranks}.npz"
    proc = run_script(n_ranks, LOAD_BACK, path, out)
    assert proc.returncode == 0, proc.stderr
    return np.load(out)


def raw(path):
    """The file's datasets as h5py reads them whole, and the edges of its CSR graph (none
    without one)."""
    with h5py.File(path) as f:
        stored = {name: f[name][()] for name in ("points", "agent_offsets", "labels")}
        no_graph = np.zeros(len(stored["agent_offsets"]), dtype=np.int64), np.zeros(0, dtype=np.int64)
        stored["indptr"], stored["indices"] = (f["graph/indptr"][()], f["graph/indices"][()]) if "graph" in f \
            else no_graph
    stored["edges"] = Network.from_csr(len(stored["agent_offsets"]) - 1, stored["indptr"], stored["indices"]).edges
    return stored


def sorted_rows(points, labels):
    table = np.column_stack([points, labels])
    return table[np.lexsort(table.T[::-1])]


@pytest.mark.mpi
def test_convert_npz_round_trip_on_1_and_3_ranks(tmp_path):
    rng = np.random.default_rng(0)
    points, labels = rng.standard_normal((500, 3)), rng.integers(4, size=500)
    np.savez(tmp_path / "in.npz", X=points, y=labels)
    offsets = convert(str(tmp_path / "in.npz"), tmp_path / "out.h5", 7, "dirichlet:0.5", key="X",
                      labels_key="y", graph="ring")
    stored = raw(tmp_path / "out.h5")
    # Exactly the rows that went in, each with its own label, grouped by agent.
    np.testing.assert_array_equal(sorted_rows(stored["points"], stored["labels"]), sorted_rows(points, labels))
    np.testing.assert_array_equal(stored["agent_offsets"], offsets)
    np.testing.assert_array_equal(stored["edges"], build_network("ring", 7).edges)
    for n_ranks in (1, 3):
        back = load_back(tmp_path / "out.h5", n_ranks, tmp_path)
        for name in ("points", "labels", "indptr", "indices"):
            np.testing.assert_array_equal(back[name], stored[name])
        np.testing.assert_array_equal(back["offsets"], offsets)


def test_convert_csv_with_header_columns_and_labels(tmp_path):
    (tmp_path / "in.csv").write_text("a,b,c,kind\n1,2,3,x\n4,5,6,y\n7,8,9,y\n1.5,1,1,x\n")
    subprocess.run([sys.executable, "-m", "data_tools.convert", tmp_path / "in.csv", tmp_path / "out.h5",
                    "--agents", "2", "--columns", "c,a", "--label-column", "3", "--partition", "by-cluster:1"],
                   check=True, capture_output=True)
    info, points = read_all(tmp_path / "out.h5")
    stored = raw(tmp_path / "out.h5")
    # by-cluster:1 with 2 agents: agent 0 holds class 0 ("x"), agent 1 class 1 ("y").
    np.testing.assert_array_equal(points, [[3, 1], [1, 1.5], [6, 4], [9, 7]])
    np.testing.assert_array_equal(stored["labels"], [0, 0, 1, 1])
    np.testing.assert_array_equal(info.offsets, [0, 2, 4])


def test_convert_sklearn_standardized(tmp_path):
    convert("sklearn:iris", tmp_path / "iris.h5", 3, "by-cluster:1", standardize=True)
    stored = raw(tmp_path / "iris.h5")
    iris = load_iris()
    scaled = (iris.data - iris.data.mean(0)) / iris.data.std(0)
    np.testing.assert_allclose(sorted_rows(stored["points"], stored["labels"]),
                               sorted_rows(scaled, iris.target), rtol=1e-12, atol=1e-12)
    for m in range(3):      # each agent holds exactly one species
        lo, hi = stored["agent_offsets"][m:m + 2]
        assert set(stored["labels"][lo:hi]) == {m}


@pytest.mark.parametrize("source,message", [
    ("sklearn:mnist", "unknown scikit-learn data set"), ("nothere.npy", "no such file"),
    ("data.xyz", "cannot tell the format"),
])
def test_convert_errors(tmp_path, source, message):
    proc = subprocess.run([sys.executable, "-m", "data_tools.convert", source, tmp_path / "o.h5"],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "o.h5").exists()


@pytest.mark.parametrize("partition", ["iid", "by-cluster:2", "dirichlet:0.2", "spatial"])
def test_generate_round_trip_and_partition_shape(tmp_path, partition):
    path = tmp_path / "gen.h5"
    offsets = generate(path, 3000, 5, 3, 6, partition, anisotropy=3, imbalance=4, graph="er:p=0.7",
                       seed=3, chunk_rows=700)       # several chunks
    stored = raw(path)
    for n_ranks in (1, 3):
        back = load_back(path, n_ranks, tmp_path)
        for name in ("points", "labels", "indptr", "indices"):
            np.testing.assert_array_equal(back[name], stored[name])
        np.testing.assert_array_equal(back["offsets"], offsets)
    np.testing.assert_array_equal(stored["edges"], build_network("er:p=0.7", 6, 3).edges)
    labels, points = stored["labels"], stored["points"]
    counts = np.bincount(labels, minlength=5)
    assert counts[-1] > 2 * counts[0]                 # imbalance 4: the last cluster is the largest
    agent_sets = [set(labels[offsets[m]:offsets[m + 1]]) for m in range(len(offsets) - 1)]
    if partition == "by-cluster:2":
        assert all(s <= {(2 * m) % 5, (2 * m + 1) % 5} for m, s in enumerate(agent_sets))
    if partition == "dirichlet:0.2":                  # label skew: most agents see few clusters
        assert np.median([len(s) for s in agent_sets]) < 5
    if partition == "spatial":                        # agents own Voronoi cells of the first 2 features
        agents = np.repeat(np.arange(6), np.diff(offsets))
        centroids = np.array([points[agents == m, :2].mean(0) for m in range(6) if (agents == m).any()])
        assert len(centroids) >= 2
        owners = cKDTree(centroids).query(points[:, :2])[1]
        assert (owners == np.searchsorted(np.unique(agents), agents)).mean() > 0.8


def test_generate_larger_than_its_memory_limit(tmp_path):
    """The generator writes a file larger than the address space it may use."""
    env = mpi_env()
    probe = subprocess.run([sys.executable, "-c", ("import data_tools.generate, resource;"
                            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss);"
                            "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1])")],
                           capture_output=True, text=True, env=env, check=True)
    baseline = int(probe.stdout.split()[1]) * 1024
    limit = baseline + 200 * 2**20
    n_points, n_features = 20_000_000, 4                # 640 MB of float64 points
    path = tmp_path / "big.h5"

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "data_tools.generate", path, "--points", str(n_points),
                           "--features", str(n_features), "--agents", "64", "--partition", "by-cluster:2",
                           "--quiet"], preexec_fn=cap, capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert path.stat().st_size > limit
    info = open_dataset(path)                      # structure valid
    assert info.n_points == n_points and info.offsets[-1] == n_points
    with h5py.File(path) as f:                     # complete: no row left unwritten (all zero)
        for start in range(0, n_points, 4_000_000):
            block = f["points"][start:start + 4_000_000]
            assert np.isfinite(block).all() and (np.abs(block).sum(axis=1) > 0).all()


def png_size(path):
    with open(path, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.mpi
@pytest.mark.parametrize("n_features", [2, 5])
def test_plots_are_pngs_of_the_expected_size(tmp_path, n_features):
    path = tmp_path / "d.h5"
    generate(path, 2000, 4, n_features, 6, "by-cluster:2", seed=1)
    proc = run_mpi(2, ["run", path, "-k", 4, "--iters", 30, "--quiet", "--out", tmp_path / "r.h5"])
    assert proc.returncode == 0, proc.stderr
    clusters, convergence = plot_run(path, tmp_path / "r.h5", tmp_path / "pic", dpi=50)
    assert png_size(clusters) == (600, 275)        # 12 x 5.5 inches at 50 dpi
    assert png_size(convergence) == (600, 200)     # 12 x 4 inches
    assert Path(clusters).stat().st_size > 5000 and Path(convergence).stat().st_size > 5000


# Bad input: every data tool answers with status 2 and one `nkmpi: error:` line, before any work,
# never a traceback, and never writes a file nkmpi refuses or replaces an input.

def tool(main, *argv):
    """Exit status and stderr of a data tool's main(argv) run in this process (as `python -m` ends)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main([str(a) for a in argv])
        except SystemExit as exc:
            status = exc.code
    return status, err.getvalue()


def assert_refused(status, err, *words):
    """Status 2 and exactly one line on stderr, `nkmpi: error: ...`, holding `words`."""
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("nkmpi: error: "), (status, err)
    assert all(word in lines[0] for word in words), lines[0]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def temporaries(folder):
    """Files left under a temporary name (see nkmpi.formats.hdf5.atomic_file)."""
    return [name for name in os.listdir(folder) if ".partial" in name]


SMALL = ["--points", 200, "--clusters", 3, "--agents", 4, "--quiet"]


@pytest.mark.parametrize("options,words", [
    (["--chunk-rows", -5], ["--chunk-rows"]),              # wrote 0 rows in a file of 200: status 0
    (["--spread", "nan"], ["--spread"]),                    # NaN points, status 0
    (["--spread", "inf"], ["--spread"]),
    (["--separation", -1], ["--separation"]),               # traceback
    (["--separation", "1e308"], ["--separation"]),          # traceback
    (["--separation", "1e200"], ["overflow"]),              # squared distances overflow, status 0
    (["--separation", "1e30", "--dtype", "float32"], ["overflow"]),
    (["--anisotropy", 0], ["--anisotropy"]),                # traceback
    (["--imbalance", -1], ["--imbalance"]),                 # traceback
    (["--imbalance", "nan"], ["--imbalance"]),              # traceback
    (["--seed", -1], ["seed"]),                             # traceback
    (["--partition", "dirichlet:inf"], ["beta"]),           # every row to one agent, status 0
    (["--clusters", 500], ["clusters"]),                    # more clusters than points, status 0
    (["--points", 10**15], ["free"]),                       # 24 PB: a hang
    (["--points", "1e5"], ["--points"]),                    # argparse's usage and error lines
])
def test_generate_refuses_options_before_any_work(tmp_path, options, words):
    out = tmp_path / "out.h5"
    assert_refused(*tool(generate_main, out, *SMALL, *options), *words)
    assert not out.exists() and not temporaries(tmp_path)


def test_generate_takes_any_finite_imbalance(tmp_path):
    """Weights imbalance**(k/(K-1)) once summed to infinity: a traceback."""
    status, err = tool(generate_main, tmp_path / "out.h5", "--points", 20000, "--clusters", 20000,
                       "--imbalance", "1e308", "--quiet")
    assert status == 0, err
    read_all(tmp_path / "out.h5")


@pytest.mark.parametrize("name,words", [
    ("missing/out.h5", ["does not exist"]),                # h5py's traceback, after all the work
    ("x" * 300 + ".h5", ["too long"]),                      # h5py's traceback
    (".", ["directory"]),                                   # the folder itself: a traceback
    ("out.h5/", ["names no file"]),
])
def test_generate_refuses_an_output_it_cannot_write(tmp_path, name, words):
    assert_refused(*tool(generate_main, os.path.join(tmp_path, name), *SMALL), *words)
    assert os.listdir(tmp_path) == []


def test_another_runs_temporary_file_is_left_alone(tmp_path):
    """Every run writes under a name of its own: generate wrote OUT.partial, whoever else did."""
    (tmp_path / "out.h5.partial").write_bytes(b"another run's")
    assert tool(generate_main, tmp_path / "out.h5", *SMALL)[0] == 0
    assert (tmp_path / "out.h5.partial").read_bytes() == b"another run's"
    read_all(tmp_path / "out.h5")


def test_a_dataset_nkmpi_refuses_never_takes_its_name(tmp_path):
    """The last guard: nkmpi's loader checks the written file before it is renamed; refused, it
    is removed (write_dataset wrote any file it was given, whole or not)."""
    with pytest.raises(InputError, match="agent_offsets"):
        write_dataset(tmp_path / "out.h5", np.zeros((3, 2)), [0, 5])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["same", "symlink", "hard link"])
def test_no_output_replaces_an_input(tmp_path, run_pair, kind):
    """convert SOURCE SOURCE replaced its source by the dataset (status 0), generate its edge file."""
    def output(target, name):
        """The path a tool is told to write: `target` itself, or a new link `name` to it."""
        if kind == "same":
            return str(target)
        (os.symlink if kind == "symlink" else os.link)(target, tmp_path / name)
        return str(tmp_path / name)

    edges, source, table = tmp_path / "edges.txt", tmp_path / "in.npy", tmp_path / "in.h5"
    data, result, timings = tmp_path / "d-clusters.png", tmp_path / "r.h5", tmp_path / "t-strong.png"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n")
    np.save(source, np.random.default_rng(0).standard_normal((50, 2)))
    with h5py.File(table, "w") as f:
        f["x"] = np.ones((10, 2))
    shutil.copy(run_pair[0], data)
    shutil.copy(run_pair[1], result)
    timings.write_text("ranks,seconds_per_iteration,oversubscribed\n1,2.0,False\n2,1.1,False\n")
    inputs = [edges, source, table, data, result, timings]
    before = [sha256(path) for path in inputs]
    cases = [(generate_main, [output(edges, "g.h5"), *SMALL, "--graph", f"file:{edges}"]),
             (convert_main, [source, output(source, "c.h5")]),
             (convert_main, [f"{table}:/x", output(table, "c2.h5")]),
             (plot_main, [data, result, "--dpi", 10, "--out",
                          output(data, "p-clusters.png").removesuffix("-clusters.png")]),
             (plot_main, ["scaling", timings, "--out", output(timings, "s-strong.png").removesuffix("-strong.png")])]
    for main, argv in cases:
        assert_refused(*tool(main, *argv), "refusing to overwrite")
    assert [sha256(path) for path in inputs] == before
    assert not temporaries(tmp_path)


def make_run(folder):
    """A dataset of 3 features in `folder` and the result of a short run on it: (data, result)."""
    generate(folder / "data.h5", 300, 3, 3, 4, "by-cluster:2", seed=1)
    proc = subprocess.run([sys.executable, "-m", "nkmpi", "run", folder / "data.h5", "-k", "3", "--iters", "20",
                           "--quiet", "--out", folder / "result.h5"], capture_output=True, text=True,
                          timeout=MPI_TIMEOUT, env=mpi_env(), check=False)
    assert proc.returncode == 0, proc.stderr
    return folder / "data.h5", folder / "result.h5"


@pytest.fixture(scope="module")
def run_pair(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run"))


def _npy(array, **options):
    return lambda path: np.save(path, array, **options)


def _npz(**arrays):
    def make(path):
        with open(path, "wb") as f:          # np.savez would add .npz to any other name
            np.savez(f, **arrays)
    return make


def _h5(**datasets):
    def make(path):
        with h5py.File(path, "w") as f:
            f.update(datasets)
    return make


def _garbled_header(make):
    """The file `make` writes with its .npy header's shape tuple unclosed."""
    def garble(path):
        make(path)
        path.write_bytes(path.read_bytes().replace(b"), }", b"(, }", 1))
    return garble


def _cut(make, size):
    """The file `make` writes, truncated to `size` bytes."""
    def cut(path):
        make(path)
        path.write_bytes(path.read_bytes()[:size])
    return cut


GOOD = np.random.default_rng(0).standard_normal((20, 3))


@pytest.mark.parametrize("name,make,options,words", [
    ("ragged.csv", b"1,2\n3\n", [], ["ragged.csv"]),                      # csv.Error (header sniffer)
    ("binary.csv", b"\x00\xff\xfe,\n", [], ["binary.csv"]),               # UnicodeDecodeError
    ("data.csv", b"1,2\n3,4\n", ["--label-column", 9], ["9"]),             # ValueError (list.remove)
    ("data.csv", b"1,2\n3,4\n", ["--delimiter", ""], ["--delimiter"]),     # TypeError (csv)
    ("one.csv", b"1\n2\n3\n", ["--no-header", "--label-column", 0], ["feature"]),   # labels as points, status 0
    ("objects.npy", _npy(np.array([{}], dtype=object), allow_pickle=True), [], ["objects.npy"]),   # ValueError
    ("text.npy", _npy(np.array(["a", "b"])), [], ["text.npy"]),           # ValueError (astype)
    ("complex.npy", _npy(np.ones((4, 2), complex)), [], ["complex"]),     # imaginary parts dropped, status 0
    ("far.npy", _npy(np.array([[1e200, 0], [-1e200, 0]])), [], ["overflow"]),   # status 0
    ("cut.npy", _cut(_npy(GOOD), 100), [], ["cut.npy"]),                  # ValueError (EOF)
    ("zip.npy", _npz(x=GOOD), [], ["zip.npy"]),                           # ValueError (the archive's names)
    ("garbled.npy", _garbled_header(_npy(GOOD)), [], ["garbled.npy"]),    # tokenize.TokenError
    ("empty.npz", _npz(), [], ["no arrays"]),                             # IndexError
    ("cut.npz", _cut(_npz(x=GOOD), 300), [], ["cut.npz"]),                # BadZipFile
    ("data.npz", _npz(x=GOOD, y=np.arange(20)), ["--labels-key", "nope"], ["nope"]),      # KeyError
    ("wide.npz", _npz(x=GOOD, y=np.ones((20, 2))), ["--labels-key", "y"], ["labels"]),    # IndexError
    ("data.npy", _npy(GOOD), ["--seed", -1], ["seed"]),                   # ValueError (numpy)
    ("data.npy", _npy(GOOD), ["--agents", 10**14], ["free"]),             # MemoryError (728 TiB)
    ("cut.h5", _cut(_h5(x=GOOD), 2000), [], ["cut.h5"]),                  # OSError
    ("compound.h5", _h5(x=np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])), [], ["compound.h5"]),   # TypeError
])
def test_convert_refuses_what_it_cannot_read(tmp_path, name, make, options, words):
    path = tmp_path / name
    path.write_bytes(make) if isinstance(make, bytes) else make(path)
    source = f"{path}:/x" if name.endswith(".h5") else path
    before = sha256(path)
    assert_refused(*tool(convert_main, source, tmp_path / "out.h5", *options), *words)
    assert sorted(os.listdir(tmp_path)) == [name] and sha256(path) == before


def test_convert_reads_a_csv_of_one_column(tmp_path):
    """The header sniffer cannot find a delimiter in one column: a traceback."""
    (tmp_path / "one.csv").write_text("1\n2\n3\n")
    assert tool(convert_main, tmp_path / "one.csv", tmp_path / "out.h5", "--agents", 2)[0] == 0
    assert sorted(read_all(tmp_path / "out.h5")[1].ravel()) == [1, 2, 3]


def test_convert_standardizes_values_whose_squares_overflow(tmp_path):
    """The standard deviation of +-1e200 overflowed to infinity and the feature became 0."""
    (tmp_path / "far.csv").write_text("1e200,2\n-1e200,4\n")
    assert tool(convert_main, tmp_path / "far.csv", tmp_path / "out.h5", "--standardize")[0] == 0
    np.testing.assert_array_equal(np.abs(read_all(tmp_path / "out.h5")[1]), np.ones((2, 2)))


def _edit(which, **arrays):
    """Replace datasets of the run's "data" or "result" file: each by an array, or by what a
    function makes of the old one."""
    def edit(data, result):
        with h5py.File(data if which == "data" else result, "r+") as f:
            for name, value in arrays.items():
                new = value(f[name][()]) if callable(value) else value
                del f[name]
                f[name] = new
    return edit


@pytest.mark.parametrize("edit,options,words", [
    (_edit("result", centers=np.zeros((4, 3, 5)), initial_centers=np.zeros((4, 3, 5)),
           consensus_centers=np.zeros((3, 5))), [], ["belong"]),
    (_edit("result", assignments=lambda old: old + 7), [], ["assignments"]),        # status 0
    (_edit("data", points=lambda old: old * np.nan), [], ["NaN"]),                  # LinAlgError
    (None, ["--max-points", 0], ["--max-points"]),                             # ZeroDivisionError
    (None, ["--dpi", 0], ["--dpi"]),                                           # ValueError (matplotlib)
    (None, ["--dpi", 5], ["--dpi"]),                                           # RuntimeError (FreeType)
    (None, ["--dpi", 100000], ["--dpi"]),                                      # MemoryError
])
def test_plot_refuses_what_it_cannot_draw(tmp_path, run_pair, edit, options, words):
    data, result = shutil.copy(run_pair[0], tmp_path), shutil.copy(run_pair[1], tmp_path)
    if edit:
        edit(data, result)
    assert_refused(*tool(plot_main, data, result, "--dpi", 10, *options), *words)
    assert sorted(os.listdir(tmp_path)) == ["data.h5", "result.h5"]


@pytest.mark.parametrize("table,words", [
    ("ranks,seconds_per_iteration,oversubscribed\n1,0,False\n2,1,False\n", ["seconds"]),    # status 0
    ("ranks,seconds_per_iteration,oversubscribed\nx,1,False\n", ["strong.csv", "ranks"]),  # unnamed file
    ("ranks,x\n1,0\n", ["strong.csv", "seconds_per_iteration"]),                            # "'seconds...'"
])
def test_plot_scaling_refuses_timings_it_cannot_draw(tmp_path, table, words):
    (tmp_path / "strong.csv").write_text(table)
    assert_refused(*tool(plot_main, "scaling", tmp_path / "strong.csv"), *words)
    assert os.listdir(tmp_path) == ["strong.csv"]


def test_plot_scaling_needs_a_table():
    assert_refused(*tool(plot_main, "scaling", "-"), "CSV")                   # TypeError


def test_plot_draws_a_single_point(tmp_path, run_pair):
    """--max-points 1 left one point of 3 features, which has one principal axis: an IndexError."""
    status, err = tool(plot_main, *run_pair, "--out", tmp_path / "pic", "--max-points", 1, "--dpi", 10)
    assert status == 0, err
    assert png_size(tmp_path / "pic-clusters.png") == (120, 55)


def test_core_and_data_tools_run_without_the_extras(tmp_path):
    """nkmpi and `generate` need neither matplotlib nor tqdm; `plot` without matplotlib
    says which extra to install, in one error line (status 2)."""
    script = ("import sys\n"
              "sys.modules['matplotlib'] = sys.modules['tqdm'] = None     # as if not installed\n"
              "import nkmpi.cli, nkmpi.driver\n"
              "from data_tools import generate, plot\n"
              f"assert generate.main([{str(tmp_path / 'd.h5')!r}, '--points', '200', '--agents', '4']) == 0\n"
              f"sys.exit(plot.main([{str(tmp_path / 'd.h5')!r}, {str(tmp_path / 'd.h5')!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "nkmpi: error: plots need matplotlib: pip install 'nkmpi[plot]'"
