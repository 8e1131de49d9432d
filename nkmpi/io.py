"""HDF5 input and output: dataset v1 in, result v1 out (formats in the README, "Files").

A rank opens the dataset, reads the O(M) metadata every rank needs (offsets,
edges) and then only its own rows.  The result is written into one file by
the ranks in turn, each its own slice, under a temporary name that rank 0
renames once every rank has written: no rank ever holds all N assignments, and
the final name never shows a partial file.
"""

import hashlib
import os
import secrets
import socket
from dataclasses import dataclass

import h5py
import numpy as np

from . import __version__
from .errors import InputError
from .monitor import METRICS

DATASET_FORMAT, DATASET_VERSION = "nkmpi-dataset", 1
#: What h5py raises on a damaged or unexpected file (RuntimeError: HDF5's own complaints).
READ_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)
RESULT_FORMAT, CHECKPOINT_FORMAT = "nkmpi-result", "nkmpi-checkpoint"
#: The version of the result and checkpoint formats this nkmpi writes and reads.
STATE_VERSION = 1


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
    except InputError:
        raise
    except READ_ERRORS as exc:
        _fail(path, f"cannot read: {exc}")


def _read_metadata(path, f):
    fmt = plain(f.attrs.get("format"))
    if fmt != DATASET_FORMAT:
        _fail(path, f"format attribute is {fmt!r}, expected {DATASET_FORMAT!r}")
    version = plain(f.attrs.get("version"))
    if version != DATASET_VERSION:
        _fail(path, f"dataset version {version!r} is not supported (expected {DATASET_VERSION})")
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
    if "graph" in f and not isinstance(f["graph"], h5py.Group):
        _fail(path, "'graph' must be a group (holding 'edges')")
    if "graph" in f and "edges" in f["graph"]:
        ds = f["graph/edges"]
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 2 or ds.shape[1] != 2 or ds.dtype.kind not in "iu":
            _fail(path, f"'graph/edges' must be an integer array of shape (E, 2), has "
                        f"{getattr(ds, 'shape', 'a group')} {getattr(ds, 'dtype', '')}")
        edges = ds[()].astype(np.int64)
        n_agents = len(offsets) - 1
        outside = np.flatnonzero(((edges < 0) | (edges >= n_agents)).any(axis=1))
        if outside.size:
            a, b = edges[outside[0]]
            _fail(path, f"'graph/edges' row {outside[0]} is ({a}, {b}): agent ids must be 0..{n_agents - 1}")
    return DatasetInfo(path, n_points, points.shape[1], points.dtype, offsets, has_labels, edges)


def coordinate_limit(dtype, n_features):
    """The largest |coordinate| the kernels take in `dtype`: a squared distance
    between two such points, summed over the features in the data's precision,
    stays finite, and its sums in float64 over up to 10^12 rows (and rho times
    the disagreement) do too.  Beyond it a run would end with an infinite
    objective instead of an error."""
    largest = min(np.finfo(dtype).max, np.finfo(np.float64).max * 1e-12)
    return float(np.sqrt(largest / (8 * n_features)))


def check_rows(rows, where, first_row=0, offsets=None):
    """Fail on a row holding NaN, Inf or a coordinate beyond `coordinate_limit`,
    naming the row (and its agent, given the offsets)."""
    limit = coordinate_limit(rows.dtype, rows.shape[1])
    bad = np.flatnonzero(~(np.abs(rows) <= limit).all(axis=1))
    if bad.size:
        row = first_row + int(bad[0])
        agent = "" if offsets is None else \
            f" (agent {int(np.searchsorted(offsets, row, side='right')) - 1})"
        what = ("contains NaN or Inf" if not np.isfinite(rows[bad[0]]).all()
                else f"has a coordinate beyond +-{limit:.3g}, where squared distances overflow: "
                     "rescale the data")
        raise InputError(f"{where}: points row {row}{agent} {what}")


def read_rows(info, first_agent, stop_agent):
    """The points of agents first_agent..stop_agent-1, checked (`check_rows`)."""
    start, stop = int(info.offsets[first_agent]), int(info.offsets[stop_agent])
    try:
        with h5py.File(info.path, "r") as f:
            rows = f["points"][start:stop]
    except READ_ERRORS as exc:
        _fail(info.path, f"cannot read rows {start}..{stop}: {exc}")
    check_rows(rows, info.path, start, info.offsets)
    return rows


#: The parts of a run's input that a checkpoint's fingerprint covers, as named to the user.
FINGERPRINTS = {"fingerprint_points": "the points", "fingerprint_offsets": "the agents' rows (offsets)",
                "fingerprint_graph": "the graph's edges"}


def block_fingerprint(rows, offsets, agents):
    """This block's share of the points' fingerprint: the sum, modulo 2**64, of a
    64-bit BLAKE2b digest of each agent's rows keyed by the agent's id.

    A sum does not care how the agents are split among ranks, so the shares of
    any number of ranks add up to the same value (`combine_fingerprints`); the
    key makes it care which agent holds which rows.
    """
    total = 0
    for agent, start, stop in zip(agents, offsets[:-1], offsets[1:]):
        digest = hashlib.blake2b(rows[start:stop], digest_size=8,
                                 key=int(agent).to_bytes(8, "little"))
        total += int.from_bytes(digest.digest(), "little")
    return total % 2**64


def combine_fingerprints(shares, offsets, network):
    """The fingerprint attributes of a run: the points (the ranks' `block_fingerprint`
    shares added), the agent offsets and the graph's edges, as hex strings."""
    def digest(*arrays):
        h = hashlib.blake2b(digest_size=8)
        for array in arrays:
            h.update(np.ascontiguousarray(array, dtype="<i8"))
        return h.hexdigest()

    return {"fingerprint_points": f"{sum(shares) % 2**64:016x}",
            "fingerprint_offsets": digest(offsets),
            "fingerprint_graph": digest(network.indptr, network.indices)}


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


def new_run_id():
    """A name part no other run picks: host, process and random bits.

    Rank 0 draws it and every rank uses it, so a run's temporary files are its
    own and two runs given one output name never write into the same file.
    """
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def partial_name(path, run_id):
    """Where run `run_id` writes a result or checkpoint before renaming it to `path`."""
    return f"{os.fspath(path)}.partial-{run_id}"


def same_file(a, b):
    """Whether two paths name one file: equal once links are resolved, or one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:                 # one of them does not exist (yet)
        return False


def refuse_overwriting(option, path, inputs):
    """Fail when output `path` names one of `inputs` ({what: path or None}), through
    links included: no output ever replaces an input."""
    for what, other in inputs.items():
        if other is not None and same_file(path, other):
            raise InputError(f"{option} {path} is {what} ({other}): refusing to overwrite it; "
                             "choose another name")


def check_output(path, run_id, attrs):
    """Fail early when a file cannot be written at `path`: the folder must exist and
    be writable, and the run's temporary name take an HDF5 file holding the
    run's attributes, which a probe under that very name proves (long names,
    read-only and full file systems, values HDF5 cannot store)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(f"output {path} is a directory")
    if not os.path.isdir(folder):
        raise InputError(f"output folder {folder} does not exist")
    probe = partial_name(path, run_id)
    try:
        with open(probe, "x"):          # the name and the folder, in the system's own words
            pass
        with h5py.File(probe, "w") as f:
            f.attrs.update(attrs)
    except OSError as exc:
        raise InputError(f"cannot write {probe}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"cannot store the run's parameters in {path}: {exc}") from None
    finally:
        if os.path.exists(probe):
            os.remove(probe)


def write_state(path, comm, run_id, **state):
    """Write a result or checkpoint atomically; collective over `comm` (None: serial).

    Rank 0 lays the file out under the run's own temporary name (every dataset
    sized, attributes and metrics set), the ranks write their own slices in
    rank order (a token passed rank to rank keeps one writer at a time, which a
    serial HDF5 build requires), and rank 0 renames the file once all wrote.
    A rank that fails removes the temporary file: nothing half-written stays.
    """
    temporary = partial_name(path, run_id)
    try:
        _write_slices(temporary, comm, **state)
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise
    if comm is None or comm.Get_rank() == 0:
        os.replace(temporary, path)
    if comm is not None:
        comm.Barrier()


def _write_slices(temporary, comm, *, file_format, rows_name, rows_dtype, n_agents, n_points,
                  agent_start, centers, initial_centers, row_start, rows, metrics, attrs):
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()
    if rank == 0:
        _, n_clusters, n_features = centers.shape
        with h5py.File(temporary, "w") as f:
            f.attrs["format"] = file_format
            f.attrs["version"] = STATE_VERSION
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
    if rank == 0 and size > 1:
        comm.recv(source=size - 1, tag=8)


def write_result(path, comm, *, assignments, **state):
    """Result v1: final centers, and each row's nearest center among its agent's final centers."""
    write_state(path, comm, file_format=RESULT_FORMAT, rows_name="assignments", rows_dtype=np.int64,
                rows=assignments, **state)


def write_checkpoint(path, comm, *, labels, **state):
    """A checkpoint: centers x(t) after attrs['iteration'] = t iterations and the labels
    of the last assignment pass, which the next pass counts its changes against."""
    write_state(path, comm, file_format=CHECKPOINT_FORMAT, rows_name="labels", rows_dtype=np.int32,
                rows=labels, **state)


def plain(value):
    """An HDF5 attribute as a plain Python value (str, number, bool or list), so that
    comparing it never fails whatever type a damaged or foreign file holds."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_version(what, f):
    version = plain(f.attrs.get("version"))
    if version != STATE_VERSION:
        raise InputError(f"{what} version {version!r} is not supported (this nkmpi reads version "
                         f"{STATE_VERSION})")


def read_checkpoint(path, first_agent, stop_agent, row_start, row_stop):
    """One rank's share of a checkpoint: its agents' centers, their initial centers,
    its rows' labels, and (small, for every rank) the metrics and attributes."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"--resume {path}: no such file")
    try:
        with h5py.File(path, "r") as f:
            if plain(f.attrs.get("format")) != CHECKPOINT_FORMAT:
                raise InputError(f"--resume {path}: not an nkmpi checkpoint")
            _check_version(f"--resume {path}: checkpoint", f)
            state = {"centers": f["centers"][first_agent:stop_agent],
                     "initial_centers": f["initial_centers"][first_agent:stop_agent],
                     "labels": f["labels"][row_start:row_stop],
                     "metrics": {name: f["metrics"][name][()] for name in f["metrics"]},
                     "attrs": {key: plain(value) for key, value in f.attrs.items()}}
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"--resume {path}: cannot read the checkpoint: {exc}") from None
    n_agents, n_rows = stop_agent - first_agent, row_stop - row_start
    if (state["centers"].ndim != 3 or len(state["centers"]) != n_agents
            or state["initial_centers"].shape != state["centers"].shape
            or state["labels"].shape != (n_rows,)):
        raise InputError(f"--resume {path}: the checkpoint's arrays do not have the shapes its "
                         "data needs (a damaged or foreign file)")
    return state


def read_result(path):
    """A result v1 file as a dict: arrays, metrics dict and attributes, checked for
    the shapes the format promises."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    try:
        if not h5py.is_hdf5(path):
            raise InputError(f"{path}: not an HDF5 file")
        with h5py.File(path, "r") as f:
            if plain(f.attrs.get("format")) != RESULT_FORMAT:
                raise InputError(f"{path}: not an nkmpi result file")
            _check_version(f"{path}: result", f)
            out = {name: f[name][()] for name in ("centers", "initial_centers", "assignments")}
            out["metrics"] = {name: f["metrics"][name][()] for name in f["metrics"]}
            out["attrs"] = dict(f.attrs)
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise InputError(f"{path}: cannot read the result: {exc}") from None
    centers, metrics = out["centers"], out["metrics"]
    arrays = [out[name] for name in ("centers", "initial_centers", "assignments")] + list(metrics.values())
    if not all(isinstance(a, np.ndarray) and a.dtype.kind in "iuf" for a in arrays):
        raise InputError(f"{path}: the result's arrays are not all numeric arrays (a damaged or foreign file)")
    if (centers.ndim != 3 or out["initial_centers"].shape != centers.shape
            or out["assignments"].ndim != 1
            or any(np.ndim(metrics.get(name)) != 1 for name in METRICS)
            or len({len(metrics[name]) for name in METRICS}) != 1 or not len(metrics["iteration"])):
        raise InputError(f"{path}: the result's arrays do not have the shapes of result v1 "
                         "(a damaged or foreign file)")
    return out
