"""HDF5 input and output: dataset v1 in, result v1 out (formats in DESIGN.md).

A rank opens the dataset, reads the O(M) metadata every rank needs (offsets,
edges) and then only its own rows.  The result is written into one file by
the ranks in turn, each its own slice, under a temporary name that rank 0
renames once every rank has written: no rank ever holds all N assignments, and
the final name never shows a partial file.
"""

import os
from dataclasses import dataclass

import h5py
import numpy as np

from . import __version__
from .errors import InputError

DATASET_FORMAT, DATASET_VERSION = "nkmpi-dataset", 1
RESULT_FORMAT, CHECKPOINT_FORMAT = "nkmpi-result", "nkmpi-checkpoint"


@dataclass(frozen=True)
class DatasetInfo:
    """What every rank knows about a dataset: shapes, offsets and the optional graph."""

    path: str
    n_points: int
    n_features: int
    dtype: np.dtype
    offsets: np.ndarray
    has_labels: bool
    edges: object        # (E, 2) int64 array, or None when the file has no graph

    @property
    def n_agents(self):
        return len(self.offsets) - 1

    @property
    def points_per_agent(self):
        return np.diff(self.offsets)


def _fail(path, what):
    raise InputError(f"{path}: {what}")


def open_dataset(path):
    """Validate the structure of a dataset v1 file and read its metadata."""
    path = os.fspath(path)
    if not os.path.exists(path):
        _fail(path, "no such file")
    if os.path.isdir(path):
        _fail(path, "is a directory, not a dataset file")
    try:
        if not h5py.is_hdf5(path):
            _fail(path, "not an HDF5 file")
        with h5py.File(path, "r") as f:
            return _read_metadata(path, f)
    except OSError as exc:
        _fail(path, f"cannot read: {exc}")


def _read_metadata(path, f):
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != DATASET_FORMAT:
        _fail(path, f"format attribute is {fmt!r}, expected {DATASET_FORMAT!r}")
    version = f.attrs.get("version")
    if version != DATASET_VERSION:
        shown = version.item() if isinstance(version, np.generic) else version
        _fail(path, f"dataset version {shown!r} is not supported (expected {DATASET_VERSION})")
    for name in ("points", "agent_offsets"):
        if not isinstance(f.get(name), h5py.Dataset):
            _fail(path, f"missing dataset {name!r}")
    points = f["points"]
    if points.ndim != 2 or points.shape[1] < 1:
        _fail(path, f"'points' must be 2-D (N, p) with p >= 1, has shape {points.shape}")
    if points.dtype not in (np.float32, np.float64):
        _fail(path, f"'points' must be float32 or float64, is {points.dtype}")
    n_points = points.shape[0]
    offsets_ds = f["agent_offsets"]
    if offsets_ds.ndim != 1 or offsets_ds.shape[0] < 2 or offsets_ds.dtype.kind not in "iu":
        _fail(path, f"'agent_offsets' must be a 1-D integer array of length M+1 >= 2, "
                    f"has shape {offsets_ds.shape} and dtype {offsets_ds.dtype}")
    offsets = offsets_ds[()].astype(np.int64)
    if offsets[0] != 0:
        _fail(path, f"'agent_offsets' must start at 0, starts at {offsets[0]}")
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if drops.size:
        i = drops[0]
        _fail(path, f"'agent_offsets' decreases at agent {i} ({offsets[i]} -> {offsets[i + 1]})")
    if offsets[-1] != n_points:
        _fail(path, f"'agent_offsets' ends at {offsets[-1]}, but 'points' has {n_points} rows")
    has_labels = "labels" in f
    if has_labels:
        labels = f["labels"]
        if not isinstance(labels, h5py.Dataset) or labels.shape != (n_points,) or labels.dtype.kind not in "iu":
            _fail(path, f"'labels' must be an integer array of shape ({n_points},)")
    edges = None
    if "graph" in f and "edges" in f["graph"]:
        ds = f["graph/edges"]
        if ds.ndim != 2 or ds.shape[1] != 2 or ds.dtype.kind not in "iu":
            _fail(path, f"'graph/edges' must be an integer array of shape (E, 2), has {ds.shape} {ds.dtype}")
        edges = ds[()].astype(np.int64)
        n_agents = len(offsets) - 1
        outside = np.flatnonzero(((edges < 0) | (edges >= n_agents)).any(axis=1))
        if outside.size:
            a, b = edges[outside[0]]
            _fail(path, f"'graph/edges' row {outside[0]} is ({a}, {b}): agent ids must be 0..{n_agents - 1}")
    return DatasetInfo(path, n_points, points.shape[1], points.dtype, offsets, has_labels, edges)


def read_rows(info, first_agent, stop_agent):
    """The points of agents first_agent..stop_agent-1, checked for NaN and Inf."""
    start, stop = int(info.offsets[first_agent]), int(info.offsets[stop_agent])
    try:
        with h5py.File(info.path, "r") as f:
            rows = f["points"][start:stop]
    except OSError as exc:
        _fail(info.path, f"cannot read rows {start}..{stop}: {exc}")
    bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
    if bad.size:
        row = start + int(bad[0])
        agent = int(np.searchsorted(info.offsets, row, side="right")) - 1
        _fail(info.path, f"points row {row} (agent {agent}) contains NaN or Inf")
    return rows


def read_labels(info, first_agent, stop_agent):
    """Ground-truth labels of agents first_agent..stop_agent-1 (None when the file has none)."""
    if not info.has_labels:
        return None
    with h5py.File(info.path, "r") as f:
        return f["labels"][int(info.offsets[first_agent]):int(info.offsets[stop_agent])]


def read_all(path):
    """Every row of a dataset, for serial tools and the reference."""
    info = open_dataset(path)
    return info, read_rows(info, 0, info.n_agents)


def check_output(path):
    """Fail early when the result cannot be written where asked."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(f"output {path} is a directory")
    if not os.path.isdir(folder):
        raise InputError(f"output folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise InputError(f"output folder {folder} is not writable")


def partial_name(path):
    """Where a result is written before it is renamed to its final name."""
    return os.fspath(path) + ".partial"


def write_state(path, comm, *, file_format, rows_name, rows_dtype, n_agents, n_points, agent_start,
                centers, initial_centers, row_start, rows, metrics, attrs):
    """Write a result or checkpoint atomically; collective over `comm` (None: serial).

    Rank 0 lays the file out under a temporary name (every dataset sized,
    attributes and metrics set), the ranks write their own slices in rank
    order (a token passed rank to rank keeps one writer at a time, which a
    serial HDF5 build requires), and rank 0 renames the file once all wrote.
    """
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()
    temporary = partial_name(path)
    if rank == 0:
        _, n_clusters, n_features = centers.shape
        with h5py.File(temporary, "w") as f:
            f.attrs["format"] = file_format
            f.attrs["version"] = 1
            f.attrs["nkmpi_version"] = __version__
            for key, value in attrs.items():
                f.attrs[key] = value
            for name in ("centers", "initial_centers"):
                f.create_dataset(name, (n_agents, n_clusters, n_features), dtype=np.float64)
            f.create_dataset(rows_name, (n_points,), dtype=rows_dtype)
            group = f.create_group("metrics")
            for name, series in metrics.items():
                group.create_dataset(name, data=series)
    if rank > 0:
        comm.recv(source=rank - 1, tag=7)
    with h5py.File(temporary, "r+") as f:
        f["centers"][agent_start:agent_start + len(centers)] = centers
        f["initial_centers"][agent_start:agent_start + len(centers)] = initial_centers
        f[rows_name][row_start:row_start + len(rows)] = rows
    if rank < size - 1:
        comm.send(True, dest=rank + 1, tag=7)
    elif size > 1:
        comm.send(True, dest=0, tag=8)
    if rank == 0:
        if size > 1:
            comm.recv(source=size - 1, tag=8)
        os.replace(temporary, path)
    if comm is not None:
        comm.Barrier()


def write_result(path, comm, *, assignments, **state):
    """Result v1: final centers, and each row's nearest center among its agent's final centers."""
    write_state(path, comm, file_format=RESULT_FORMAT, rows_name="assignments", rows_dtype=np.int64,
                rows=assignments, **state)


def write_checkpoint(path, comm, *, labels, **state):
    """A checkpoint: centers x(t) after attrs['iteration'] = t iterations and the labels
    of the last assignment pass, which the next pass counts its changes against."""
    write_state(path, comm, file_format=CHECKPOINT_FORMAT, rows_name="labels", rows_dtype=np.int32,
                rows=labels, **state)


def read_checkpoint(path, first_agent, stop_agent, row_start, row_stop):
    """One rank's share of a checkpoint: its agents' centers, their initial centers,
    its rows' labels, and (small, for every rank) the metrics and attributes."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"--resume {path}: no such file")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != CHECKPOINT_FORMAT:
                raise InputError(f"--resume {path}: not an nkmpi checkpoint")
            return {"centers": f["centers"][first_agent:stop_agent],
                    "initial_centers": f["initial_centers"][first_agent:stop_agent],
                    "labels": f["labels"][row_start:row_stop],
                    "metrics": {name: ds[()] for name, ds in f["metrics"].items()},
                    "attrs": dict(f.attrs)}
    except OSError as exc:
        raise InputError(f"--resume {path}: cannot read: {exc}") from None


def read_result(path):
    """A result v1 file as a dict: arrays, metrics dict and attributes."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != RESULT_FORMAT:
            raise InputError(f"{path}: not an nkmpi result file")
        out = {name: f[name][()] for name in ("centers", "initial_centers", "assignments")}
        out["metrics"] = {name: ds[()] for name, ds in f["metrics"].items()}
        out["attrs"] = dict(f.attrs)
    return out
