"""Result v1: what a run found, written by `nkmpi run` (every rank its own slice) and
`nkmpi simulate`, read by `nkmpi summary`, the plots, the job scripts and the tests
(docs/formats.md gives the schema).

Every agent's final centers and the centers it started from, each row's nearest center
among its own agent's final centers (in dataset row order), the consensus model (the
network-average centers, nkmpi.consensus), the metrics of every monitoring point and,
as root attributes, the run's parameters and how it went (`consensus_cost` among them).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..monitor import METRICS
from .hdf5 import CENTERS, INITIAL_CENTERS, opened, plain, read_metrics, write_state

if TYPE_CHECKING:
    from mpi4py import MPI

FORMAT, VERSION = "nkmpi-result", 1
ASSIGNMENTS = "assignments"
#: (K, p) the network-average centers; its cost over all rows is the attribute CONSENSUS_COST.
#: Results of nkmpi versions before the consensus model have neither.
CONSENSUS_CENTERS, CONSENSUS_COST = "consensus_centers", "consensus_cost"
#: The arrays of a result besides its metrics.
ARRAYS = (CENTERS, INITIAL_CENTERS, ASSIGNMENTS)


def write_result(path: str | os.PathLike, comm: MPI.Comm | None, *, run_id: str, n_agents: int,
                 n_points: int, agent_start: int, centers: np.ndarray, initial_centers: np.ndarray,
                 row_start: int, assignments: np.ndarray, metrics: dict, attrs: dict,
                 consensus: np.ndarray) -> None:
    """Write a result whole; collective over `comm` (None: one process), each rank giving
    its agents' centers from agent_start on and its rows' assignments from row_start on
    (`write_state`), and the (K, p) consensus centers every rank holds."""
    write_state(path, comm, run_id, file_format=FORMAT, version=VERSION, rows_name=ASSIGNMENTS,
                rows_dtype=np.int64, n_agents=n_agents, n_points=n_points, agent_start=agent_start,
                centers=centers, initial_centers=initial_centers, row_start=row_start, rows=assignments,
                metrics=metrics, attrs=attrs, extras={CONSENSUS_CENTERS: consensus})


def read_result(path: str | os.PathLike) -> dict:
    """A result v1 file as a dict: arrays, metrics dict and attributes, checked for
    the shapes the format promises, so that a reader may index them freely."""
    path = os.fspath(path)
    with opened(path, {FORMAT: (VERSION, "result")}) as f:
        out = {name: f[name][()] for name in ARRAYS}
        out[CONSENSUS_CENTERS] = f[CONSENSUS_CENTERS][()] if CONSENSUS_CENTERS in f else None
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
    consensus = out[CONSENSUS_CENTERS]
    if consensus is not None and (not isinstance(consensus, np.ndarray) or consensus.shape != centers.shape[1:]
                                  or consensus.dtype.kind != "f"):
        raise InputError(f"{path}: its {CONSENSUS_CENTERS!r} are not (K, p) numbers (a damaged or foreign file)")
    return out


#: The models `read_model` gives: the consensus centers, or each row's own agent's centers;
#: else an agent's id, whose centers label every row.
CONSENSUS_MODEL, OWN_MODEL = "consensus", "own"


def read_model(path: str | os.PathLike, model: str, first_agent: int, stop_agent: int) -> np.ndarray:
    """The (L, K, p) centers that label the rows of agents first_agent..stop_agent-1 of a
    dataset, by `model` (CONSENSUS_MODEL, OWN_MODEL or an agent id as text) of the result
    at `path`, reading no more of it than that."""
    path = os.fspath(path)
    with opened(path, {FORMAT: (VERSION, "result")}) as f:
        n_agents = plain(f.attrs.get("n_agents"))
        centers = f[CENTERS]
        if centers.ndim != 3 or centers.shape[0] != n_agents or centers.dtype.kind != "f":
            raise InputError(f"{path}: its centers are not (M, K, p) numbers (a damaged or foreign file)")
        if model == CONSENSUS_MODEL:
            if CONSENSUS_CENTERS not in f:
                raise InputError(f"{path}: the result has no consensus model (written by an older nkmpi): "
                                 "name an agent, or own")
            chosen = f[CONSENSUS_CENTERS][()]
        elif model == OWN_MODEL:
            return _finite(path, model, f[CENTERS][first_agent:stop_agent].astype(np.float64))
        else:
            agent = int(model) if model.isdigit() else -1
            if not 0 <= agent < n_agents:
                raise InputError(f"model {model!r}: expected consensus, own or an agent id 0..{n_agents - 1}")
            chosen = f[CENTERS][agent]
    if not isinstance(chosen, np.ndarray) or chosen.shape != centers.shape[1:] or chosen.dtype.kind != "f":
        raise InputError(f"{path}: its {model} centers are not (K, p) numbers (a damaged or foreign file)")
    chosen = _finite(path, model, chosen.astype(np.float64))
    return np.broadcast_to(chosen, (stop_agent - first_agent,) + chosen.shape).copy()


def _finite(path, model, centers):
    """`centers` of the model named `model`, refused where one is NaN or infinite: no row's
    nearest center is defined then (a damaged file, or a run on data that overflowed)."""
    if not np.isfinite(centers).all():
        raise InputError(f"{path}: its {model} centers hold NaN or Inf (a damaged file): no labels from them")
    return centers
