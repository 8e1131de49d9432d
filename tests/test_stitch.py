"""data_tools.stitch: per-site files made one dataset by virtual datasets, read by nkmpi
bit for bit like the same rows written into one file; a site file gone missing or replaced
refused by name (HDF5 would read fill values); sites that cannot make one dataset refused."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
from conftest import MPI_TIMEOUT, file_contents, mpi_env, run_mpi
from test_data_tools import assert_refused, temporaries, tool

from data_tools.plot import main as plot_main
from data_tools.stitch import main as stitch_main
from nkmpi.errors import InputError
from nkmpi.formats.dataset import open_dataset, read_all, write_dataset
from nkmpi.graph import build_network

#: Rows of the five sites of `make_sites`: uneven, one of them tiny.
SIZES = (60, 35, 3, 80, 45)


def make_sites(folder, sizes=SIZES, dataset="points", dtype=np.float64, labels=True, weights=False,
               n_features=3, seed=0):
    """One HDF5 file of blobs per site in `folder` (site-0.h5, ...), the rows at `dataset` with
    `labels`/`weights` beside them; returns the paths and the rows, labels and weights of all."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-8, 8, size=(4, n_features))
    paths, rows, truth, mass = [], [], [], []
    for m, size in enumerate(sizes):
        own = rng.integers(4, size=size)
        rows.append((centers[own] + rng.standard_normal((size, n_features))).astype(dtype))
        truth.append(own)
        mass.append(rng.uniform(0, 2, size=size))
        paths.append(folder / f"site-{m}.h5")
        with h5py.File(paths[-1], "w") as f:
            f[dataset] = rows[-1]
            group = f[dataset].parent
            if labels:
                group["labels"] = own
            if weights:
                group["weights"] = mass[-1]
    return paths, np.concatenate(rows), np.concatenate(truth), np.concatenate(mass)


def stitch(*argv):
    """Run the tool in this process; it must succeed."""
    status, err = tool(stitch_main, *argv, "--quiet")
    assert status == 0, err


def nkmpi(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "nkmpi", *map(str, args)], capture_output=True, text=True,
                          timeout=MPI_TIMEOUT, env=mpi_env(), cwd=cwd, check=False)


def same_result(path, expected):
    """Two results equal bit for bit but for how the run went and the dataset's path."""
    found, wanted = (file_contents(p) for p in (path, expected))
    for contents in (found, wanted):
        del contents["@data"]
    assert set(found) == set(wanted), set(found) ^ set(wanted)
    for name, value in wanted.items():
        assert np.array_equal(found[name], value), name


def stored_edges(info):
    """The edges of a dataset's own graph, as a run reads them."""
    return build_network("dataset", info.n_agents, dataset_graph=info.graph).edges


@pytest.fixture()
def pair(tmp_path):
    """Five site files stitched with a ring graph, and the same rows written into one file by the
    data tools' writer: (stitched, one file, site paths)."""
    paths, points, labels, _ = make_sites(tmp_path)
    stitch(*paths, "--out", tmp_path / "network.h5", "--graph", "ring")
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    write_dataset(tmp_path / "one.h5", points, offsets, labels, build_network("ring", len(SIZES)).edges)
    return tmp_path / "network.h5", tmp_path / "one.h5", paths


def test_stitched_file_reads_as_the_one_file_and_copies_no_row(pair):
    stitched, one, paths = pair
    info, points = read_all(stitched)
    expected_info, expected = read_all(one)
    assert np.array_equal(points, expected) and points.dtype == expected.dtype
    assert np.array_equal(info.offsets, expected_info.offsets) and np.array_equal(stored_edges(info), stored_edges(expected_info))
    with h5py.File(stitched) as f, h5py.File(one) as g:
        assert f["points"].is_virtual and f["labels"].is_virtual and "weights" not in f
        assert np.array_equal(f["labels"][()], g["labels"][()])
        assert [s.file_name for s in f["points"].virtual_sources()] == [p.name for p in paths]   # relative
        assert f["points"].id.get_storage_size() == f["labels"].id.get_storage_size() == 0     # no row copied


def test_simulate_on_the_stitched_file_equals_the_one_file(pair, tmp_path):
    stitched, one, _ = pair
    for data, out in ((stitched, "a.h5"), (one, "b.h5")):
        proc = nkmpi("simulate", data, "-k", 4, "--iters", 40, "--rho", 50, "--quiet", "--out", tmp_path / out)
        assert proc.returncode == 0, proc.stderr
    same_result(tmp_path / "a.h5", tmp_path / "b.h5")


@pytest.mark.mpi
def test_run_on_the_stitched_file_equals_the_one_file(pair, tmp_path):
    stitched, one, _ = pair
    for data, out in ((stitched, "a.h5"), (one, "b.h5")):
        proc = run_mpi(2, ["run", data, "-k", 4, "--iters", 40, "--rho", 50, "--quiet", "--out", tmp_path / out])
        assert proc.returncode == 0, proc.stderr
    same_result(tmp_path / "a.h5", tmp_path / "b.h5")


def damage(how):
    """Do `how` to site-2.h5 of a stitched folder."""
    def apply(path):
        if how == "missing":
            os.remove(path)
        elif how == "not HDF5":
            path.write_text("rows\n")
        else:
            with h5py.File(path, "r+") as f:
                rows = f["points"][()]
                del f["points"]
                f["points"] = {"fewer rows": rows[:-1], "other dtype": rows.astype(np.float32),
                               "wider": np.hstack([rows, rows])}.get(how, rows)
                if how == "renamed":
                    f.move("points", "rows")
    return apply


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    """A result of the rows of `pair` (written into one file), for the plot."""
    folder = tmp_path_factory.mktemp("result")
    _, points, labels, _ = make_sites(folder)
    write_dataset(folder / "one.h5", points, np.concatenate([[0], np.cumsum(SIZES)]), labels)
    proc = nkmpi("simulate", folder / "one.h5", "-k", 4, "--iters", 5, "--quiet", "--out", folder / "r.h5")
    assert proc.returncode == 0, proc.stderr
    return folder / "r.h5"


@pytest.mark.mpi
@pytest.mark.parametrize("how,words", [
    ("missing", ["site-2.h5", "there is no"]), ("not HDF5", ["site-2.h5", "cannot be read"]),
    ("fewer rows", ["site-2.h5", "shape (2, 3)"]), ("other dtype", ["site-2.h5", "float32"]),
    ("wider", ["site-2.h5", "shape (3, 6)"]), ("renamed", ["site-2.h5", "no dataset"]),
])
def test_a_missing_or_replaced_site_is_refused_by_name(pair, result, tmp_path, how, words):
    """HDF5 reads fill values for what it cannot find (NaN, here); nkmpi refuses the file first,
    even when the working directory holds a copy of it, which HDF5 would read instead."""
    stitched, _, paths = pair
    decoy = tmp_path / "elsewhere"
    decoy.mkdir()
    shutil.copy(paths[2], decoy / "site-2.h5")
    damage(how)(paths[2])
    for args in (["info", stitched], ["simulate", stitched, "-k", 4, "--out", tmp_path / "s.h5"]):
        proc = nkmpi(*args, cwd=decoy)
        assert_refused(proc.returncode, proc.stderr, *words)
    proc = run_mpi(2, ["run", stitched, "-k", 4, "--out", tmp_path / "r2.h5"])
    errors = [line for line in proc.stderr.splitlines() if line.startswith("nkmpi: error:")]   # Open MPI adds a banner
    assert proc.returncode == 2 and len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr
    assert_refused(*tool(plot_main, stitched, result, "--dpi", 10, "--out", tmp_path / "pic"), *words)
    assert not any(p.exists() for p in (tmp_path / "s.h5", tmp_path / "r2.h5", tmp_path / "pic-clusters.png"))


def test_moving_the_whole_folder_keeps_it_working(tmp_path, monkeypatch):
    """Sources are stored relative to the stitched file's folder (here ../sites/site-0.h5), which
    is where HDF5 looks for them wherever the folder went, whatever the working directory; both
    found as the system finds them through links (link/.. is the folder above the link's target)."""
    (tmp_path / "a" / "sites").mkdir(parents=True)
    (tmp_path / "a" / "out").mkdir()
    paths, points, _, _ = make_sites(tmp_path / "a" / "sites")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "a" / "out")
    stitch(*[link / ".." / "sites" / p.name for p in paths], "--out", link / "network.h5")
    shutil.move(tmp_path / "a", tmp_path / "b")
    with h5py.File(tmp_path / "b" / "out" / "network.h5") as f:
        assert f["points"].virtual_sources()[0].file_name == "../sites/site-0.h5"
    monkeypatch.chdir(tmp_path / "b" / "sites")
    assert np.array_equal(read_all(os.path.join("..", "out", "network.h5"))[1], points)
    proc = nkmpi("info", tmp_path / "b" / "out" / "network.h5", cwd="/")
    assert proc.returncode == 0 and "N = 223" in proc.stdout, proc.stderr


def test_a_dataset_path_with_labels_and_weights_beside_it(tmp_path):
    """FILE.h5:/path: the labels and weights of its group are stitched with it, in order; a site of
    no rows is an agent of no rows; HDF5's printf-style names take a '%' in a file name."""
    paths, points, labels, weights = make_sites(tmp_path, (20, 0, 15), dataset="exp/rows", weights=True)
    odd = tmp_path / "site%1.h5"
    paths[1].rename(odd)
    sites = [f"{p}:/exp/rows" for p in (paths[0], odd, paths[2])]
    stitch(*sites, "--out", tmp_path / "network.h5")
    info, rows = read_all(tmp_path / "network.h5")
    assert np.array_equal(rows, points) and np.array_equal(info.offsets, [0, 20, 20, 35]) and info.graph is None
    with h5py.File(tmp_path / "network.h5") as f:
        assert np.array_equal(f["labels"][()], labels) and np.array_equal(f["weights"][()], weights)
        assert f["weights"].is_virtual and "graph" not in f


def test_the_stored_graph_is_the_specs(tmp_path):
    paths = make_sites(tmp_path)[0]
    stitch(*paths, "--out", tmp_path / "network.h5", "--graph", "er:p=0.8", "--seed", 3)
    assert np.array_equal(stored_edges(open_dataset(tmp_path / "network.h5")), build_network("er:p=0.8", 5, 3).edges)


def refusal_cases():
    """(name, make the sites in a folder and return the tool's arguments, words of the error)."""
    def sites(**options):
        return lambda folder: [*make_sites(folder, **options)[0], "--out", folder / "out.h5"]

    def edit(site, change, **options):
        def make(folder):
            argv = sites(**options)(folder)
            with h5py.File(argv[site], "r+") as f:
                change(f)
            return argv
        return make

    def replace(name, value):
        def change(f):
            del f[name]
            if value is not None:
                f[name] = value
        return change

    def output(target):
        def make(folder):
            argv = sites()(folder)
            return [*argv[:-1], target(folder, argv)]
        return make

    def linked(folder, argv):
        os.symlink(argv[0], folder / "link.h5")
        return folder / "link.h5"

    def garbled(folder):
        argv = sites()(folder)
        argv[0].write_bytes(b"not HDF5")
        return argv

    def stitched_site(folder):
        argv = sites()(folder)
        assert tool(stitch_main, *argv[:2], "--out", folder / "net.h5", "--quiet")[0] == 0
        return [folder / "net.h5", *argv]

    return [
        ("features", edit(3, replace("points", np.ones((80, 2)))), ["site-3.h5", "2 features"]),
        ("dtypes", edit(1, replace("points", np.ones((35, 3), np.float32))), ["site-1.h5", "float32"]),
        ("1-D points", edit(2, replace("points", np.ones(3))), ["site-2.h5", "2-D"]),
        ("integer points", edit(2, replace("points", np.ones((3, 3), int))), ["site-2.h5", "float"]),
        ("no points", edit(4, replace("points", None)), ["site-4.h5", "no dataset /points"]),
        ("points a group", edit(4, lambda f: (replace("points", None)(f), f.create_group("points"))),
         ["site-4.h5", "no dataset"]),
        ("labels in some", edit(2, replace("labels", None)), ["site-2.h5", "'labels'"]),
        ("weights in some", edit(0, lambda f: f.create_dataset("weights", data=np.ones(60))),
         ["site-1.h5", "'weights'"]),
        ("labels a group", edit(1, lambda f: (replace("labels", None)(f), f.create_group("labels"))),
         ["site-1.h5", "labels"]),
        ("labels of floats", edit(1, replace("labels", np.ones(35))), ["site-1.h5", "labels"]),
        ("labels too few", edit(1, replace("labels", np.ones(34, int))), ["site-1.h5", "(35,)"]),
        ("labels' dtypes", edit(1, replace("labels", np.ones(35, np.int32))), ["site-1.h5", "int32"]),
        ("weights of integers", edit(1, replace("weights", np.ones(35, int)), weights=True),
         ["site-1.h5", "weights"]),
        ("no sites", lambda folder: ["--out", folder / "out.h5"], ["no site files"]),
        ("missing site", lambda folder: [*sites()(folder)[:-2], folder / "site-9.h5", "--out", folder / "o.h5"],
         ["site-9.h5", "no such file"]),
        ("not HDF5", garbled, ["site-0.h5", "cannot read"]),
        ("same site twice", lambda folder: [*sites()(folder)[:-2], folder / "site-0.h5", "--out", folder / "o.h5"],
         ["site-0.h5", "twice"]),
        ("a stitched site", stitched_site, ["net.h5", "virtual"]),
        ("output is a site", output(lambda folder, argv: argv[2]), ["site-2.h5", "refusing to overwrite"]),
        ("output links to a site", output(linked), ["site-0.h5", "refusing to overwrite"]),
        ("bad graph", lambda folder: [*sites()(folder), "--graph", "er:p=0"], ["not connected"]),
        ("negative seed", lambda folder: [*sites()(folder), "--graph", "rgg", "--seed", -1], ["seed"]),
    ]


@pytest.mark.parametrize("make,words", [case[1:] for case in refusal_cases()],
                         ids=[case[0] for case in refusal_cases()])
def test_sites_that_make_no_dataset_are_refused_by_name(tmp_path, make, words):
    argv = make(tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    assert_refused(*tool(stitch_main, *argv), *words)
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before
    assert not temporaries(tmp_path)


def test_a_file_only_written_in_whole(tmp_path, monkeypatch):
    """The stitched file is checked by nkmpi's reader before it takes its name: refused, it is
    removed and nothing stays behind."""
    paths = make_sites(tmp_path)[0]

    def refuse(path):
        raise InputError(f"{path}: refused")

    monkeypatch.setattr("data_tools.stitch.open_dataset", refuse)
    assert_refused(*tool(stitch_main, *paths, "--out", tmp_path / "out.h5"), "refused")
    assert not (tmp_path / "out.h5").exists() and not temporaries(tmp_path)
