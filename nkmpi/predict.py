"""`nkmpi predict`: label the rows of a dataset with a finished run's model; under MPI,
each rank its share of the rows (its block of agents' for `own`), the labels file written by
every rank (`write_slices`).

The model is the run's consensus model (the default), each row's own agent's centers
(`own`: for data with the run's agents, such as its own, where it gives the run's
assignments exactly) or one agent's centers.  Rows are compared in the data's precision
with features added in order, ties to the lowest index, as in the run, so that the same
rows get the same labels.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InputError, agree
from .formats import labels as labels_format
from .formats import result as result_format
from .formats.dataset import open_dataset, place_blocks, read_row_range, read_rows, read_slice
from .formats.hdf5 import check_output, new_run_id, read_attributes, refuse_overwriting


def output_path(result, data, out):
    """Where the labels go (default: DATA's name with .labels.h5), refused when it would
    replace the result or the data."""
    out = out or os.path.splitext(os.fspath(data))[0] + ".labels.h5"
    refuse_overwriting("--out", out, {"the result": result, "the dataset": data})
    return out


def check_compatible(result_path, info, model):
    """The data must have the run's features, in its precision (and its agents, for `own`)."""
    attrs = read_attributes(result_path, {result_format.FORMAT: (result_format.VERSION, "result")})
    if model == result_format.OWN_MODEL and attrs.get("n_agents") != info.n_agents:
        raise InputError(f"model own labels each row with its own agent's centers: {info.path} has "
                         f"{info.n_agents} agents, the run of {result_path} {attrs.get('n_agents')}")
    if attrs.get("n_features") != info.n_features:
        raise InputError(f"{info.path} has {info.n_features} features, the model of {result_path} "
                         f"{attrs.get('n_features')}")
    if "dtype" in attrs and attrs["dtype"] != info.dtype.name:
        raise InputError(f"{info.path} holds {info.dtype.name} rows, the run of {result_path} clustered "
                         f"{attrs['dtype']} rows: convert them (distances in another precision can label otherwise)")


def predict(comm, result, data, out=None, model=result_format.CONSENSUS_MODEL, report=None) -> str:
    """Label every row of `data` with `model` of the result `result`; collective.  Returns
    the labels file's path."""
    from . import kernels
    rank, size = comm.Get_rank(), comm.Get_size()
    out = agree(comm, output_path, result, data, out)
    info = agree(comm, open_dataset, data, whole_offsets=False)
    agree(comm, check_compatible, result, info, str(model))
    run_id = comm.bcast(new_run_id() if rank == 0 else None, root=0)
    attrs = {"model": str(model), "result": os.path.abspath(result), "data": os.path.abspath(data)}
    agree(comm, check_output if rank == 0 else (lambda *_: None), out, run_id, attrs)
    if str(model) == result_format.OWN_MODEL:        # by agents: each row needs its agent's centers
        _, block = place_blocks(info, comm)
        first, stop, start = block.first, block.stop, block.row_start
        rows = agree(comm, read_rows, info, block, comm=comm)
        offsets = block.local_offsets
    else:                                             # one model for every row: by rows
        read_slice(info, comm)                        # (the offsets are checked all the same)
        start, end = rank * info.n_points // size, (rank + 1) * info.n_points // size
        first, stop = 0, 1
        rows = agree(comm, read_row_range, info, start, end, comm=comm)
        offsets = np.array([0, end - start])
    centers = agree(comm, result_format.read_model, result, str(model), first, stop)
    kernels.set_threads(1)
    labels = kernels.nearest_labels(rows, offsets, centers)
    labels_format.write_labels(out, comm, run_id=run_id, n_points=info.n_points, row_start=start, labels=labels,
                               attrs=attrs)
    if report is not None and rank == 0:
        which = {result_format.CONSENSUS_MODEL: "the consensus model",
                 result_format.OWN_MODEL: "each row's own agent's centers"}.get(str(model), f"agent {model}'s centers")
        report(f"nkmpi: labelled {info.n_points} rows of {data} with {which} of {result}; wrote {out}")
    return out
