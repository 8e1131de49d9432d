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

import h5py
import numpy as np

from nkmpi.errors import InputError
from nkmpi.graph import build_network

from .dataset import finish_command, group_by_agent, write_dataset
from .partition import PARTITIONS, parse_partition

SKLEARN_SETS = ("iris", "wine", "breast_cancer", "digits")


def _column_index(name, header):
    if header is not None and name in header:
        return header.index(name)
    try:
        return int(name)
    except ValueError:
        raise InputError(f"no column {name!r}" + (f" (columns: {', '.join(header)})" if header else "")) from None


def read_csv(path, columns=None, label_column=None, header=None, delimiter=","):
    """Features (and labels) from a CSV file; `header` None means detect it."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with open(path, newline="") as f:
        sample = f.read(65536)
        first = next(csv.reader([sample.splitlines()[0]], delimiter=delimiter)) if sample else []
    if header is None:
        header = csv.Sniffer().has_header(sample) if sample else False
    names = [c.strip() for c in first] if header else None
    use = list(range(len(first))) if columns is None else [_column_index(c, names) for c in columns]
    label_index = None if label_column is None else _column_index(label_column, names)
    if label_index is not None and columns is None:
        use.remove(label_index)
    skip = 1 if header else 0
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
    """(points, labels or None) from any supported source."""
    if source.startswith("sklearn:"):
        name = source[len("sklearn:"):]
        if name not in SKLEARN_SETS:
            raise InputError(f"unknown scikit-learn data set {name!r}: use one of {', '.join(SKLEARN_SETS)}")
        try:
            from sklearn import datasets
        except ImportError:
            raise InputError("sklearn: sources need scikit-learn (pip install scikit-learn)") from None
        bunch = getattr(datasets, f"load_{name}")()
        return bunch.data, bunch.target
    path, sep, inner = source.rpartition(":")
    if sep and path.endswith((".h5", ".hdf5", ".hdf")):
        return _read_hdf5(path, "/" + inner.lstrip("/"), labels_key)
    path = source
    if path.endswith(".csv") or path.endswith(".txt"):
        return read_csv(path, **csv_options)
    if path.endswith(".npy") or path.endswith(".npz"):
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        loaded = np.load(path)
        if path.endswith(".npy"):
            return loaded, None
        name = key or loaded.files[0]
        if name not in loaded.files:
            raise InputError(f"{path}: no array {name!r} (arrays: {', '.join(loaded.files)})")
        return loaded[name], (loaded[labels_key] if labels_key else None)
    raise InputError(f"cannot tell the format of {source!r}: use .csv, .npy, .npz, FILE.h5:/dataset "
                     "or sklearn:NAME")


def _read_hdf5(path, name, labels_key):
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with h5py.File(path, "r") as f:
        if not isinstance(f.get(name), h5py.Dataset):
            raise InputError(f"{path}: no dataset {name}")
        labels = None
        if labels_key:
            if not isinstance(f.get(labels_key), h5py.Dataset):
                raise InputError(f"{path}: no dataset {labels_key}")
            labels = f[labels_key][()]
        return f[name][()], labels


def convert(source, out, n_agents, partition="iid", standardize=False, graph=None, seed=0,
            dtype=None, key=None, labels_key=None, **csv_options):
    """Read `source`, split it over agents and write dataset v1 to `out`; returns the offsets."""
    points, labels = read_source(source, key, labels_key, **csv_options)
    points = np.asarray(points)
    if points.ndim == 1:
        points = points[:, None]
    if points.ndim != 2 or len(points) == 0:
        raise InputError(f"{source}: expected a non-empty 2-D array of points, got shape {points.shape}")
    points = points.astype(dtype or (points.dtype if points.dtype in (np.float32, np.float64) else np.float64))
    if not np.isfinite(points).all():
        row = int(np.flatnonzero(~np.isfinite(points).all(axis=1))[0])
        raise InputError(f"{source}: row {row} contains NaN or Inf")
    if standardize:
        scale = points.std(axis=0)
        points = (points - points.mean(axis=0)) / np.where(scale > 0, scale, 1)
    if labels is not None:
        if len(labels) != len(points):
            raise InputError(f"{source}: {len(labels)} labels for {len(points)} points")
        _, labels = np.unique(labels, return_inverse=True)      # ground truth as 0..K-1
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m data_tools.convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("out", help="dataset v1 file to write")
    parser.add_argument("--agents", type=int, default=8, help="M (default 8)")
    parser.add_argument("--partition", default="iid", help=f"{', '.join(PARTITIONS)} (default iid)")
    parser.add_argument("--standardize", action="store_true", help="zero mean, unit variance per feature")
    parser.add_argument("--graph", default=None, metavar="SPEC", help="store this graph in graph/edges")
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
    if args.source.endswith((".csv", ".txt")):
        csv_options = dict(columns=args.columns.split(",") if args.columns else None,
                           label_column=args.label_column, header=args.header, delimiter=args.delimiter)
    return finish_command(lambda: convert(args.source, args.out, args.agents, args.partition,
                                          args.standardize, args.graph, args.seed, args.dtype, args.key,
                                          args.labels_key, **csv_options),
                          args.out, args.partition)


if __name__ == "__main__":
    sys.exit(main())
