"""Checkpoints: a run's state after some iteration, written by `nkmpi run` (every rank its
own slice) every --checkpoint-every iterations and when stopped by a signal, read back by
`nkmpi run --resume`, each rank its own share.

The layout is a result's (`nkmpi.formats.result`), with the labels of the last
assignment pass in place of the assignments, and the fingerprints of the data it was
made for among its attributes: a resumed run must go on with the same problem.  Its
`interrupted` attribute tells a checkpoint written because a stop request ended the run
from one written while the run went on, so that a job script can decide to requeue from
the file, whatever status the launcher reported (`nkmpi status`).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Iterable

import numpy as np
from numba import njit

from ..errors import InputError
from ..graph import mix64
from .hdf5 import CENTERS, INITIAL_CENTERS, opened, plain, read_metrics, write_state

if TYPE_CHECKING:
    from mpi4py import MPI

FORMAT, VERSION = "nkmpi-checkpoint", 1
LABELS = "labels"
#: 1 in a checkpoint written because a stop request ended the run, 0 in one written while it
#: went on.  Added within version 1: a checkpoint of an nkmpi that did not record it reads as 0.
INTERRUPTED = "interrupted"
#: The parts of a run's input that a checkpoint's fingerprint covers, as named to the user.
FINGERPRINTS = {"fingerprint_points": "the points", "fingerprint_offsets": "the agents' rows (offsets)",
                "fingerprint_graph": "the graph's edges"}
POINTS_FINGERPRINT, OFFSETS_FINGERPRINT, GRAPH_FINGERPRINT = FINGERPRINTS
#: The salts of the points' and the weights' shares of the points' fingerprint, and of the
#: agents' row counts' shares of the offsets'.
POINTS_SALT, WEIGHTS_SALT, OFFSETS_SALT = 0x504F_494E_5453, 0x5745_4947_4854, 0x4F46_4653_4554


def write_checkpoint(path: str | os.PathLike, comm: MPI.Comm | None, *, run_id: str, n_agents: int,
                     n_points: int, agent_start: int, centers: np.ndarray, initial_centers: np.ndarray,
                     row_start: int, labels: np.ndarray, metrics: dict, attrs: dict,
                     interrupted: bool) -> None:
    """A checkpoint: centers x(t) after attrs['iteration'] = t iterations and the labels
    of the last assignment pass, which the next pass counts its changes against;
    interrupted: written because a stop request ends the run (not while it goes on),
    recorded in the same file, so that it appears with the checkpoint or not at all;
    collective over `comm` as `write_state`."""
    write_state(path, comm, run_id, file_format=FORMAT, version=VERSION, rows_name=LABELS,
                rows_dtype=np.int32, n_agents=n_agents, n_points=n_points, agent_start=agent_start,
                centers=centers, initial_centers=initial_centers, row_start=row_start, rows=labels,
                metrics=metrics, attrs=dict(attrs, **{INTERRUPTED: int(interrupted)}))


def read_checkpoint(path: str | os.PathLike, first_agent: int, stop_agent: int, row_start: int,
                    row_stop: int) -> dict:
    """One rank's share of a checkpoint: its agents' centers, their initial centers,
    its rows' labels, and (small, for every rank) the metrics and attributes."""
    where = f"--resume {os.fspath(path)}"
    with opened(path, {FORMAT: (VERSION, "checkpoint")}, where) as f:
        state = {"centers": f[CENTERS][first_agent:stop_agent],
                 "initial_centers": f[INITIAL_CENTERS][first_agent:stop_agent],
                 "labels": f[LABELS][row_start:row_stop],
                 "metrics": read_metrics(f),
                 "attrs": {key: plain(value) for key, value in f.attrs.items()}}
    n_agents, n_rows = stop_agent - first_agent, row_stop - row_start
    if (state["centers"].ndim != 3 or len(state["centers"]) != n_agents
            or state["initial_centers"].shape != state["centers"].shape
            or state["labels"].shape != (n_rows,)):
        raise InputError(f"{where}: the checkpoint's arrays do not have the shapes its "
                         "data needs (a damaged or foreign file)")
    return state


def interrupted(attrs: dict, where: str) -> bool:
    """Whether a checkpoint's attributes (plain values) say that a stop request ended its run."""
    value = attrs.get(INTERRUPTED, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
        raise InputError(f"{where}: its {INTERRUPTED} attribute is {value!r}, not 0 or 1 (a damaged file)")
    return bool(value)


def block_fingerprint(rows: np.ndarray, offsets: np.ndarray, agents: Iterable[int],
                      salt: int = POINTS_SALT) -> int:
    """This block's share of the points' fingerprint: the sum, modulo 2**64, of a
    64-bit hash of each number of each agent's rows, keyed by the agent's id and the
    number's place among its agent's (graph.mix64, SplitMix64's mix).

    A sum does not care how the agents are split among ranks, so the shares of
    any number of ranks add up to the same value (`combine_fingerprints`); the
    key makes it care which agent holds which rows.  rows : (n, w) float32 or
    float64, hashed as their bits; salt : tells one array's share from another's
    (the weights' from the points').
    """
    unsigned = np.uint64 if rows.dtype.itemsize == 8 else np.uint32
    bits = np.ascontiguousarray(rows).view(unsigned)
    return int(_block_share(bits, np.asarray(offsets, dtype=np.int64),
                            np.asarray(agents, dtype=np.int64), np.uint64(salt)))


@njit(cache=True, nogil=True)
def _block_share(bits, offsets, agents, salt):
    """The wrapping sum of mix64(mix64(mix64(agent ^ salt) + place) ^ number) over the
    block's numbers, in one pass (no array of the keys)."""
    total = np.uint64(0)
    width = bits.shape[1]
    for a in range(len(agents)):
        key = mix64(np.uint64(agents[a]) ^ salt)
        first = offsets[a]
        for row in range(first, offsets[a + 1]):
            place = key + np.uint64((row - first) * width)
            for j in range(width):
                total += mix64(mix64(place + np.uint64(j)) ^ np.uint64(bits[row, j]))
    return total


def earlier_block_fingerprint(rows: np.ndarray, offsets: np.ndarray, agents: Iterable[int]) -> int:
    """`block_fingerprint` of checkpoints written before the points were hashed number by
    number: the sum, modulo 2**64, of a 64-bit BLAKE2b digest of each agent's rows keyed
    by its id (four times slower: 1 s a rank at bench target 6).  Such a checkpoint still
    resumes."""
    total = 0
    for agent, start, stop in zip(agents, offsets[:-1], offsets[1:]):
        digest = hashlib.blake2b(rows[start:stop], digest_size=8,
                                 key=int(agent).to_bytes(8, "little"))
        total += int.from_bytes(digest.digest(), "little")
    return total % 2**64


def offsets_share(agents: Iterable[int], rows_per_agent: np.ndarray) -> int:
    """This block's share of the offsets' fingerprint: each agent's row count hashed as
    `block_fingerprint` hashes a row of one number, keyed by the agent.  The row counts give
    the offsets, and the shares of any placement add up alike, so no rank needs every
    agent's offsets to fingerprint them."""
    bits = np.ascontiguousarray(rows_per_agent, dtype=np.int64).view(np.uint64).reshape(-1, 1)
    return int(_block_share(bits, np.arange(len(bits) + 1, dtype=np.int64), np.asarray(agents, dtype=np.int64),
                            np.uint64(OFFSETS_SALT)))


def combine_fingerprints(point_shares: Iterable[int], offsets_shares: Iterable[int],
                         graph_shares: Iterable[int]) -> dict:
    """The fingerprint attributes of a run, as hex strings, from the ranks' shares of each:
    the points' (`block_fingerprint`), the agent offsets' (`offsets_share`) and the graph's
    (LocalGraph.fingerprint_share)."""
    return {POINTS_FINGERPRINT: added_shares(point_shares),
            OFFSETS_FINGERPRINT: added_shares(offsets_shares),
            GRAPH_FINGERPRINT: added_shares(graph_shares)}


def added_shares(shares: Iterable[int]) -> str:
    """A fingerprint from the ranks' shares: their sum modulo 2**64, as hex."""
    return f"{sum(shares) % 2**64:016x}"


def earlier_offsets_fingerprint(offsets: np.ndarray) -> str:
    """The offsets fingerprint of checkpoints written before ranks read only their own
    offsets: a 64-bit BLAKE2b digest of every agent's.  Such a checkpoint still resumes."""
    return _digest(offsets)


def earlier_graph_fingerprint(indptr: np.ndarray, indices: np.ndarray) -> str:
    """The graph fingerprint of checkpoints written before ranks built their own rows: a
    64-bit BLAKE2b digest of the whole graph's CSR.  Such a checkpoint still resumes."""
    return _digest(indptr, indices)


def _digest(*arrays: np.ndarray) -> str:
    """A 64-bit BLAKE2b digest of int64 arrays, as hex."""
    h = hashlib.blake2b(digest_size=8)
    for array in arrays:
        h.update(np.ascontiguousarray(array, dtype="<i8"))
    return h.hexdigest()
