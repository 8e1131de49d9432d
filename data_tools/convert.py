"""Convert data people have into dataset v1 files.

    python -m data_tools.convert SOURCE OUT.h5 --agents 8 [--partition SPEC] [--standardize]

SOURCE is one of
  data.csv            CSV; a header is detected (or --header/--no-header), --columns picks
                      features by name or index, --label-column names the ground truth
  data.npy            a 2-D array;  data.npz: --key names the array (default: the first),
                      --labels-key the labels
  data.h5:/group/ds   an HDF5 dataset by path; --labels-key names a labels dataset in the file
  sklearn:NAME        a data set scikit-learn ships: iris, wine, breast_cancer, digits

The rows are split over agents with the same partitions as data_tools.generate
(label-based ones need labels) and written grouped by agent.  The whole
source is held in memory; use data_tools.generate for synthetic data at scale.
"""

import argparse
import csv
import os
import sys
import warnings

import h5py
import numpy as np

from nkmpi.errors import InputError, Parser
from nkmpi.graph import build_network, edge_file
from nkmpi.formats.dataset import check_rows, write_dataset

from .dataset import check_outputs, check_space, command, describe, group_by_agent, reading
from .partition import PARTITIONS, check_split, parse_partition

SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")
FORMATS = {".csv": "csv", ".txt": "csv", ".npy": "npy", ".npz": "npz"}
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")


def parse_source(source):
    """(format, file, name inside) of a source: format csv, npy, npz, hdf5 or sklearn; the file
    is None for sklearn, whose name is the data set's; only hdf5 has a dataset name."""
    if source.startswith("sklearn:"):
        return "sklearn", None, source[len("sklearn:"):]
    path, sep, inner = source.rpartition(":")
    if sep and path.endswith(HDF5_SUFFIXES):
        return "hdf5", path, "/" + inner.lstrip("/")
    fmt = FORMATS.get(os.path.splitext(source)[1])
    if fmt is None:
        raise InputError(f"cannot tell the format of {source!r}: use .csv, .npy, .npz, FILE.h5:/dataset "
                         "or sklearn:NAME")
    return fmt, source, None


def _column_index(name, header, n_columns):
    """A column given by its header name or its index (negative: from the end), as 0..n-1."""
    if header is not None and name in header:
        return header.index(name)
    try:
        index = int(name)
    except ValueError:
        raise InputError(f"no column {name!r}" + (f" (columns: {', '.join(header)})" if header else "")) from None
    if not -n_columns <= index < n_columns:
        raise InputError(f"no column {index}: the first line has {n_columns} columns")
    return index % n_columns


def _has_header(sample):
    """csv's guess; a sample it cannot make sense of (one column, ragged rows) has none."""
    try:
        return csv.Sniffer().has_header(sample)
    except csv.Error:
        return False


def read_csv(path, columns=None, label_column=None, header=None, delimiter=","):
    """Features (and labels) from a CSV file; `header` None means detect it."""
    if len(delimiter) != 1:
        raise InputError(f"--delimiter must be one character, got {delimiter!r}")
    with reading(path):
        with open(path, newline="") as f:
            sample = f.read(65536)
        lines = [line for line in sample.splitlines() if line.strip()]
        first = next(csv.reader(lines[:1], delimiter=delimiter), [])
        if header is None:
            header = _has_header(sample)
        names = [c.strip() for c in first] if header else None
        use = list(range(len(first))) if columns is None else [_column_index(c, names, len(first)) for c in columns]
        label_index = None if label_column is None else _column_index(label_column, names, len(first))
        if label_index is not None and columns is None:
            use.remove(label_index)
        if not use:
            raise InputError(f"{path}: no feature columns")
        skip = 1 if header else 0
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "loadtxt: input contained no data")     # refused by shape
            try:
                points = np.loadtxt(path, delimiter=delimiter, skiprows=skip, ndmin=2, usecols=use)
            except ValueError as exc:
                raise InputError(f"{path}: cannot read the feature columns as numbers ({exc})") from None
            labels = None
            if label_index is not None:       # labels may be names: kept as text, numbered later
                labels = np.char.strip(np.loadtxt(path, delimiter=delimiter, skiprows=skip, ndmin=1,
                                                  usecols=label_index, dtype=str))
    return points, labels


def read_source(source, key=None, labels_key=None, **csv_options):
    """(points, labels or None) from any supported source, as stored."""
    fmt, path, inner = parse_source(source)
    if fmt == "sklearn":
        if inner not in SKLEARN_SETS:
            raise InputError(f"unknown scikit-learn data set {inner!r}: use one of {', '.join(SKLEARN_SETS)}")
        try:
            from sklearn import datasets
        except ImportError:
            raise InputError("sklearn: sources need scikit-learn (pip install scikit-learn)") from None
        bunch = getattr(datasets, f"load_{inner}")()
        return bunch.data, bunch.target
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    if fmt == "csv":
        return read_csv(path, **csv_options)
    if fmt == "hdf5":
        return _read_hdf5(path, inner, labels_key)
    return _read_numpy(path, fmt, key, labels_key)


def _read_numpy(path, fmt, key, labels_key):
    with reading(path):
        loaded = np.load(path)          # no pickles: object arrays are refused
        if fmt == "npy":
            if not isinstance(loaded, np.ndarray):
                raise InputError(f"{path}: not a .npy array")
            return loaded, None
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise InputError(f"{path}: not an .npz archive")
        with loaded:
            if not loaded.files:
                raise InputError(f"{path}: holds no arrays")
            for name in (key, labels_key):
                if name and name not in loaded.files:
                    raise InputError(f"{path}: no array {name!r} (arrays: {', '.join(loaded.files)})")
            return loaded[key or loaded.files[0]], (loaded[labels_key] if labels_key else None)


def _read_hdf5(path, name, labels_key):
    with reading(path), h5py.File(path, "r") as f:
        for wanted in (name, labels_key):
            if wanted and not isinstance(f.get(wanted), h5py.Dataset):
                raise InputError(f"{path}: no dataset {wanted}")
        return f[name][()], (f[labels_key][()] if labels_key else None)


def as_points(array, source, dtype=None):
    """A source's array as (N, p) float points: `dtype`, else its own float type, else float64."""
    points = np.asarray(array)
    if points.dtype.kind not in "biuf":
        raise InputError(f"{source}: points must be real numbers, not {points.dtype}")
    if points.ndim == 1:
        points = points[:, None]
    if points.ndim != 2 or 0 in points.shape:
        raise InputError(f"{source}: expected a non-empty 2-D array of points, got shape {points.shape}")
    with np.errstate(over="ignore"):            # beyond float32's range: Inf, refused with its row
        return points.astype(dtype or (points.dtype if points.dtype in (np.float32, np.float64) else np.float64))


def ground_truth(labels, n_points, source):
    """Labels (numbers or text, one per point) as cluster ids 0..K-1; None stays None."""
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.dtype.kind == "O":                # how h5py reads text
        labels = labels.astype(str)
    if labels.ndim != 1 or len(labels) != n_points or labels.dtype.kind not in "biufSU":
        raise InputError(f"{source}: expected {n_points} labels (numbers or text, one per point), "
                         f"got {labels.dtype} labels of shape {labels.shape}")
    return np.unique(labels, return_inverse=True)[1]


def standardized(points):
    """Zero mean and unit variance per feature, computed on the points scaled into [-1, 1] so that
    no square overflows whatever their magnitude."""
    scale = np.abs(points).max(axis=0)
    points = points / np.where(scale > 0, scale, 1)
    spread = points.std(axis=0)
    return (points - points.mean(axis=0)) / np.where(spread > 0, spread, 1)


def convert(source, out, n_agents, partition="iid", standardize=False, graph=None, seed=0,
            dtype=None, key=None, labels_key=None, **csv_options):
    """Read `source`, split it over agents and write dataset v1 to `out`; returns the offsets."""
    check_outputs([out], {"the source": parse_source(source)[1], "the edge file": edge_file(graph)})
    check_split(n_agents, seed)
    points, labels = read_source(source, key, labels_key, **csv_options)
    points = as_points(points, source, dtype)
    check_space(out, *points.shape, points.itemsize, n_agents)
    if not np.isfinite(points).all():                 # named before standardizing spreads it over a column
        row = int(np.flatnonzero(~np.isfinite(points).all(axis=1))[0])
        raise InputError(f"{source}: row {row} contains NaN or Inf")
    if standardize:
        points = standardized(points)
    check_rows(points, source)                  # squared distances must not overflow
    labels = ground_truth(labels, len(points), source)
    rng = np.random.default_rng(seed)
    name = partition.partition(":")[0]
    if name in ("by-cluster", "dirichlet") and labels is None:
        raise InputError(f"partition {partition!r} needs labels: pass --label-column / --labels-key")
    n_classes = int(labels.max()) + 1 if labels is not None else 1
    sites = rng.choice(len(points), size=n_agents, replace=len(points) < n_agents)
    rules = parse_partition(partition, n_agents, n_classes, rng, site_sampler=lambda m: points[sites])
    agents = rules.agents_of(labels if labels is not None else np.zeros(len(points), int), points, rng)
    offsets, *grouped = group_by_agent(agents, n_agents, points, *([labels] if labels is not None else []))
    edges = build_network(graph, n_agents, seed).edges if graph else None
    write_dataset(out, grouped[0], offsets, grouped[1] if labels is not None else None, edges)
    return offsets


@command
def main(argv=None):
    parser = Parser(prog="python -m data_tools.convert", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("out", help="dataset v1 file to write")
    parser.add_argument("--agents", type=int, default=8, help="M (default 8)")
    parser.add_argument("--partition", default="iid", help=f"{', '.join(PARTITIONS)} (default iid)")
    parser.add_argument("--standardize", action="store_true", help="zero mean, unit variance per feature")
    parser.add_argument("--graph", default=None, metavar="SPEC", help="store this graph in the file (CSR)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float64", "float32"), default=None,
                        help="default: the source's float type, else float64")
    csv_group = parser.add_argument_group("CSV")
    csv_group.add_argument("--columns", default=None, help="comma-separated feature columns (names or indices)")
    csv_group.add_argument("--label-column", default=None, help="ground-truth column (name or index)")
    csv_group.add_argument("--delimiter", default=",")
    header = csv_group.add_mutually_exclusive_group()
    header.add_argument("--header", dest="header", action="store_true", default=None)
    header.add_argument("--no-header", dest="header", action="store_false")
    arrays = parser.add_argument_group("NumPy and HDF5")
    arrays.add_argument("--key", default=None, help="array name in an .npz")
    arrays.add_argument("--labels-key", default=None, help="labels array (.npz) or dataset (HDF5)")
    args = parser.parse_args(argv)
    csv_options = {}
    if parse_source(args.source)[0] == "csv":
        csv_options = {"columns": args.columns.split(",") if args.columns else None,
                       "label_column": args.label_column, "header": args.header, "delimiter": args.delimiter}
    offsets = convert(args.source, args.out, args.agents, args.partition, args.standardize, args.graph, args.seed,
                      args.dtype, args.key, args.labels_key, **csv_options)
    describe(args.out, offsets, args.partition)


if __name__ == "__main__":
    sys.exit(main())
