"""Make one dataset of per-site files without copying their rows.

    python -m data_tools.stitch site-*.h5 --out network.h5 [--graph SPEC]

Each SITE is one agent, in the order given (a shell glob sorts by name: site-10.h5 before
site-2.h5): FILE.h5, whose rows are its 2-D dataset `points`, or FILE.h5:/path, another
dataset of the file.  Ground-truth `labels` and row `weights` are the datasets of those
names in the same group as the points (`/labels` and `/weights` for FILE.h5); each is
stitched when every site has it, and refused when only some do.

The output is a dataset v1 file whose `points` (`labels`, `weights`) are HDF5 virtual
datasets: they map the sites' own datasets, by paths relative to the output's folder, so
the sites must stay where they are relative to it (moving the whole folder is fine).
nkmpi checks that every site file is in its place before it reads a row.
"""

import argparse
import os
import posixpath
import sys
from dataclasses import dataclass

import h5py
import numpy as np

from nkmpi.errors import InputError, Parser
from nkmpi.formats.dataset import (AGENT_OFFSETS, FORMAT, LABELS, POINTS, VERSION, WEIGHTS, open_dataset,
                                   write_graph)
from nkmpi.formats.hdf5 import atomic_file, write_header
from nkmpi.graph import TOPOLOGIES, build_network, edge_file

from .convert import HDF5_SUFFIXES
from .dataset import check_outputs, command, describe, reading

#: The per-row datasets stitched with the points when every site has them, and the dtypes
#: they may have (all sites the same one: a virtual dataset has one dtype).
ROW_DATA = {LABELS: "integer", WEIGHTS: "float32 or float64"}
FLOATS = (np.float32, np.float64)


@dataclass(frozen=True)
class Site:
    """One site's rows: its file, the path of its points, their shape and dtype, and
    {name: (path, dtype)} of the labels and weights beside them."""

    file: str
    points: str
    shape: tuple
    dtype: np.dtype
    row_data: dict


def parse_site(text):
    """(file, dataset path) of a SITE argument: FILE.h5:/path, else the file's /points."""
    path, sep, inner = text.rpartition(":")
    if sep and path.endswith(HDF5_SUFFIXES):
        return path, "/" + inner.lstrip("/")
    return text, "/" + POINTS


def _row_data_fits(name, dataset, n_rows):
    """Whether `dataset` can be the site's `name`: a plain (n_rows,) array of its dtypes."""
    if not isinstance(dataset, h5py.Dataset) or dataset.is_virtual or dataset.shape != (n_rows,):
        return False
    return dataset.dtype.kind in "iu" if name == LABELS else dataset.dtype in FLOATS


def read_site(text):
    """The Site a SITE argument names, its structure checked (not its values: nkmpi checks
    those as it reads them)."""
    file, points = parse_site(text)
    if not os.path.isfile(file):
        raise InputError(f"{file}: no such file")
    # Not h5py.is_hdf5, which drops `link/..` from a name: the system goes up from the link's target.
    with reading(file), h5py.File(file, "r") as f:
        dataset = f.get(points)
        if not isinstance(dataset, h5py.Dataset):
            raise InputError(f"{text}: no dataset {points}")
        if dataset.is_virtual:
            raise InputError(f"{text}: {points} is itself a virtual dataset: stitch the files it maps")
        if dataset.ndim != 2 or dataset.shape[1] < 1 or dataset.dtype not in FLOATS:
            raise InputError(f"{text}: {points} must be a 2-D float32 or float64 array (n, p) with p >= 1, "
                             f"is {dataset.dtype} of shape {dataset.shape}")
        row_data = {}
        for name, kinds in ROW_DATA.items():
            path = posixpath.join(posixpath.dirname(points), name)
            if path in f:
                if not _row_data_fits(name, f[path], dataset.shape[0]):
                    raise InputError(f"{file}: {path} must be a plain {kinds} array of shape "
                                     f"({dataset.shape[0]},), one value per row of {points}")
                row_data[name] = (path, f[path].dtype)
        return Site(file, points, dataset.shape, dataset.dtype, row_data)


def check_sites(sites, texts):
    """Refuse sites that cannot make one dataset: the same rows twice, other features or
    dtypes than the first site's, labels or weights in some sites only."""
    first, first_text = sites[0], texts[0]
    named = {}
    for site, text in zip(sites, texts):
        found = os.stat(site.file)                  # one file however named: links, hard links
        key = (found.st_dev, found.st_ino, site.points)
        if key in named:
            raise InputError(f"{text}: the same rows as {named[key]}, named twice")
        named[key] = text
        if (site.shape[1], site.dtype) != (first.shape[1], first.dtype):
            raise InputError(f"{text}: {site.shape[1]} features of {site.dtype}, but {first_text} has "
                             f"{first.shape[1]} of {first.dtype}: all sites need the same features and dtype")
        for name in ROW_DATA:
            if (name in site.row_data) != (name in first.row_data):
                having, lacking = (text, first_text) if name in site.row_data else (first_text, text)
                raise InputError(f"{lacking}: has no {name!r} beside its points, but {having} has: stitch "
                                 f"sites that all have {name} or none")
            if name in site.row_data and site.row_data[name][1] != first.row_data[name][1]:
                raise InputError(f"{text}: {name!r} is {site.row_data[name][1]}, but {first_text}'s is "
                                 f"{first.row_data[name][1]}: all sites need the same dtype")


def hdf5_name(name):
    """`name` as HDF5 stores a virtual source's file or dataset name: a printf-style pattern."""
    return name.replace("%", "%%")


def physical_folder(path):
    """The folder of `path` with its links resolved: where the system goes up from with `..`
    (os.path.abspath would drop `link/..` from the name instead)."""
    return os.path.realpath(os.path.dirname(os.path.join(os.getcwd(), path)))


def relative_to(folder, file):
    """The path of `file` from the physical `folder`, as HDF5 resolves it from a virtual
    dataset's folder; the site's own name kept (a link to a site moves with the folder)."""
    return os.path.relpath(os.path.join(physical_folder(file), os.path.basename(file)), folder)


def map_rows(f, name, sites, paths, shape, dtype, fillvalue=None):
    """Create the virtual dataset `name` of `shape` stacking the sites' datasets at `paths`
    (from the output's folder), in order, one block of rows each."""
    layout = h5py.VirtualLayout(shape, dtype)
    start = 0
    for site, path in zip(sites, paths):
        n_rows = site.shape[0]
        source_name = site.points if name == POINTS else site.row_data[name][0]
        layout[start:start + n_rows] = h5py.VirtualSource(hdf5_name(path), hdf5_name(source_name),
                                                          shape=(n_rows, *shape[1:]), dtype=dtype)
        start += n_rows
    f.create_virtual_dataset(name, layout, fillvalue=fillvalue)


def stitch(texts, out, graph=None, seed=0):
    """Write the dataset v1 file `out` mapping the sites `texts` (one agent each, in order)
    without copying their rows, with the graph `graph` (a spec) if given; returns the offsets."""
    if not texts:
        raise InputError("no site files given: name one per agent")
    if seed < 0:
        raise InputError(f"the seed must be >= 0, got {seed}")
    check_outputs([out], {"the edge file": edge_file(graph)} | {
        f"agent {i}'s site file": parse_site(text)[0] for i, text in enumerate(texts)})
    sites = [read_site(text) for text in texts]
    check_sites(sites, texts)
    offsets = np.concatenate([[0], np.cumsum([site.shape[0] for site in sites])]).astype(np.int64)
    edges = build_network(graph, len(sites), seed).edges if graph else None
    paths = [relative_to(physical_folder(out), site.file) for site in sites]
    first = sites[0]
    with atomic_file(out) as temporary:
        with h5py.File(temporary, "w") as f:
            write_header(f, FORMAT, VERSION)
            # NaN, not 0, where a source goes missing after nkmpi's check: the row check refuses it.
            map_rows(f, POINTS, sites, paths, (int(offsets[-1]), first.shape[1]), first.dtype, np.nan)
            for name, (_, dtype) in first.row_data.items():
                map_rows(f, name, sites, paths, (int(offsets[-1]),), dtype,
                         np.nan if name == WEIGHTS else None)
            f[AGENT_OFFSETS] = offsets
            if edges is not None:
                write_graph(f, out, len(sites), edges)
        open_dataset(temporary)
    return offsets


@command
def main(argv=None):
    parser = Parser(prog="python -m data_tools.stitch", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sites", nargs="*", metavar="SITE", help="FILE.h5 or FILE.h5:/dataset, one per agent")
    parser.add_argument("--out", required=True, help="dataset v1 file to write")
    parser.add_argument("--graph", default=None, metavar="SPEC",
                        help="store this graph in the file (graph/indptr, graph/indices): " + ", ".join(TOPOLOGIES))
    parser.add_argument("--seed", type=int, default=0, help="seed of a random graph")
    parser.add_argument("--quiet", action="store_true", help="print nothing when done")
    args = parser.parse_args(argv)
    offsets = stitch(args.sites, args.out, args.graph, args.seed)
    if not args.quiet:
        describe(args.out, offsets, "one agent per site file")


if __name__ == "__main__":
    sys.exit(main())
