"""Labels v1: what `nkmpi predict` writes, each rank its own slice (docs/formats.md gives the
schema): one label per row of a dataset, in its row order, and as root attributes the model
that gave them (`model`: consensus, own or an agent id), the result it came from and the
dataset.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from .hdf5 import Slice, opened, write_slices

if TYPE_CHECKING:
    from mpi4py import MPI

FORMAT, VERSION = "nkmpi-labels", 1
#: (N,) int64: each row's nearest center of the model, ties to the lowest index.
LABELS = "labels"


def write_labels(path: str | os.PathLike, comm: MPI.Comm | None, *, run_id: str, n_points: int, row_start: int,
                 labels: np.ndarray, attrs: dict) -> None:
    """Write a labels file whole; collective over `comm`, each rank its rows from row_start on."""
    write_slices(path, comm, run_id, file_format=FORMAT, version=VERSION, attrs=attrs, whole={},
                 sliced={LABELS: Slice((n_points,), np.int64, row_start, labels)})


def read_labels(path: str | os.PathLike) -> dict:
    """A labels v1 file as {'labels': (N,) int64, 'attrs': dict}."""
    path = os.fspath(path)
    with opened(path, {FORMAT: (VERSION, "labels")}) as f:
        labels = f[LABELS][()]
        attrs = dict(f.attrs)
    if not isinstance(labels, np.ndarray) or labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise InputError(f"{path}: its labels are not a 1-D integer array (a damaged or foreign file)")
    return {"labels": labels, "attrs": attrs}
