"""Result v1: what a run found, written by `nkmpi run` (every rank its own slice) and
`nkmpi simulate`, read by `nkmpi summary`, the plots, the job scripts and the tests
(docs/formats.md gives the schema).

Every agent's final centers and the centers it started from, each row's nearest center
among its own agent's final centers (in dataset row order), the metrics of every
monitoring point and, as root attributes, the run's parameters and how it went.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import h5py
import numpy as np

from ..errors import InputError
from ..monitor import METRICS
from .hdf5 import CENTERS, INITIAL_CENTERS, check_header, read_metrics, reading, write_state

if TYPE_CHECKING:
    from mpi4py import MPI

FORMAT, VERSION = "nkmpi-result", 1
ASSIGNMENTS = "assignments"
#: The arrays of a result besides its metrics.
ARRAYS = (CENTERS, INITIAL_CENTERS, ASSIGNMENTS)


def write_result(path: str | os.PathLike, comm: MPI.Comm | None, *, run_id: str, n_agents: int,
                 n_points: int, agent_start: int, centers: np.ndarray, initial_centers: np.ndarray,
                 row_start: int, assignments: np.ndarray, metrics: dict, attrs: dict) -> None:
    """Write a result whole; collective over `comm` (None: one process), each rank giving
    its agents' centers from agent_start on and its rows' assignments from row_start on
    (`write_state`)."""
    write_state(path, comm, run_id, file_format=FORMAT, version=VERSION, rows_name=ASSIGNMENTS,
                rows_dtype=np.int64, n_agents=n_agents, n_points=n_points, agent_start=agent_start,
                centers=centers, initial_centers=initial_centers, row_start=row_start, rows=assignments,
                metrics=metrics, attrs=attrs)


def read_result(path: str | os.PathLike) -> dict:
    """A result v1 file as a dict: arrays, metrics dict and attributes, checked for
    the shapes the format promises, so that a reader may index them freely."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with reading(f"{path}: cannot read the result"):
        if not h5py.is_hdf5(path):
            raise InputError(f"{path}: not an HDF5 file")
        with h5py.File(path, "r") as f:
            check_header(f, path, FORMAT, VERSION, "result")
            out = {name: f[name][()] for name in ARRAYS}
            out["metrics"] = read_metrics(f)
            out["attrs"] = dict(f.attrs)
    centers, metrics = out[CENTERS], out["metrics"]
    arrays = [out[name] for name in ARRAYS] + list(metrics.values())
    if not all(isinstance(a, np.ndarray) and a.dtype.kind in "iuf" for a in arrays):
        raise InputError(f"{path}: the result's arrays are not all numeric arrays (a damaged or foreign file)")
    if (centers.ndim != 3 or out[INITIAL_CENTERS].shape != centers.shape
            or out[ASSIGNMENTS].ndim != 1
            or any(np.ndim(metrics.get(name)) != 1 for name in METRICS)
            or len({len(metrics[name]) for name in METRICS}) != 1 or not len(metrics["iteration"])):
        raise InputError(f"{path}: the result's arrays do not have the shapes of result v1 "
                         "(a damaged or foreign file)")
    return out
