"""Writing dataset v1 files (the reader is nkmpi.io)."""

import os
import sys

import h5py
import numpy as np

from nkmpi.errors import InputError
from nkmpi.io import DATASET_FORMAT, DATASET_VERSION


def write_dataset(path, points, agent_offsets, labels=None, edges=None):
    """Write a dataset v1 file atomically (temporary name, then rename).

    points (N, p) float32/float64 grouped by agent; agent_offsets (M+1,);
    labels (N,) optional ground truth; edges (E, 2) optional agent graph.
    """
    path = os.fspath(path)
    temporary = path + ".partial"
    with h5py.File(temporary, "w") as f:
        f.attrs["format"] = DATASET_FORMAT
        f.attrs["version"] = DATASET_VERSION
        f.create_dataset("points", data=points)
        f.create_dataset("agent_offsets", data=np.asarray(agent_offsets, dtype=np.int64))
        if labels is not None:
            f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
        if edges is not None:
            f.create_dataset("graph/edges", data=np.asarray(edges, dtype=np.int64).reshape(-1, 2))
    os.replace(temporary, path)


def group_by_agent(agent_of_row, n_agents, *arrays):
    """Reorder rows so each agent's rows are contiguous (stable); returns offsets and the arrays."""
    order = np.argsort(agent_of_row, kind="stable")
    offsets = np.zeros(n_agents + 1, dtype=np.int64)
    np.cumsum(np.bincount(agent_of_row, minlength=n_agents), out=offsets[1:])
    return (offsets,) + tuple(a[order] for a in arrays)


def finish_command(write, out, partition, detail=""):
    """The end of a data tool's command line: run `write()`, which returns the agent
    offsets, and print what was written (`detail` follows the point count); bad input
    prints `nkmpi: error: ...` and gives exit status 2."""
    try:
        offsets = write()
    except InputError as exc:
        print(f"nkmpi: error: {exc}", file=sys.stderr)
        return 2
    sizes = np.diff(offsets)
    print(f"wrote {out}: {offsets[-1]} points{detail}, {len(sizes)} agents ({partition}; "
          f"{sizes.min()}..{sizes.max()} points per agent)")
    return 0
