"""What every data tool shares: dataset v1 files written whole (the reader is nkmpi.io),
outputs checked before any work, and the command-line frame that turns bad input into one
`nkmpi: error: ...` line and exit status 2."""

import contextlib
import csv
import functools
import os
import shutil
import sys
import tokenize
import zipfile
import zlib

import h5py
import numpy as np

from nkmpi.errors import InputError
from nkmpi.io import (
    DATASET_FORMAT,
    DATASET_VERSION,
    READ_ERRORS,
    check_output,
    new_run_id,
    open_dataset,
    partial_name,
    refuse_overwriting,
)


def command(main):
    """Wrap a data tool's main(argv): status 0 when it returns, else one `nkmpi: error:` line
    and status 2 for bad input, including options too large for this machine's memory."""
    @functools.wraps(main)
    def run(argv=None):
        try:
            main(argv)
            return 0
        except InputError as exc:
            message = str(exc)
        except MemoryError:
            message = "not enough memory for these options"
        print("nkmpi: error: " + " ".join(message.split()), file=sys.stderr)
        return 2
    return run


@contextlib.contextmanager
def reading(path):
    """Turn what h5py, numpy, csv and zipfile raise on a damaged or unexpected file into an
    InputError naming it.  Only around reading code: elsewhere a bug must show its traceback."""
    try:
        yield
    except InputError:
        raise
    except (*READ_ERRORS, LookupError, EOFError, SyntaxError, tokenize.TokenError,
            csv.Error, zipfile.BadZipFile, zlib.error) as exc:    # SyntaxError...: a garbled .npy header
        raise InputError(f"{path}: cannot read: {exc}") from None


def check_outputs(paths, inputs):
    """Before any work: every output can be written (nkmpi.io.check_output probes a temporary
    name like whole_output's) and replaces none of `inputs` ({what: path or None}), not through
    a link either."""
    for path in map(os.fspath, paths):
        if not os.path.basename(path):
            raise InputError(f"output {path!r} names no file")
        refuse_overwriting("output", path, inputs)
        check_output(path, new_run_id(), {})


def check_space(path, n_points, n_features, itemsize, n_agents):
    """Refuse a dataset larger than the free space of its folder, before writing any of it."""
    needed = n_points * (n_features * itemsize + 8) + (n_agents + 1) * 8      # points, labels, offsets
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    if needed > free:
        raise InputError(f"output {path}: {n_points} points of {n_features} features over {n_agents} agents "
                         f"need {needed / 1e9:.3g} GB, its folder has {free / 1e9:.3g} GB free")


@contextlib.contextmanager
def whole_output(path, check=None):
    """Write `path` whole: the body writes the temporary file this yields (this run's own, in the
    same folder), which takes `path`'s place once written and accepted by `check`; on any
    failure it is removed and `path` stays as it was."""
    temporary = partial_name(path, new_run_id())
    try:
        yield temporary
        if check is not None:
            check(temporary)
        os.replace(temporary, path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)


def dataset_file(temporary):
    """A new dataset v1 file open for writing, its format attributes set."""
    f = h5py.File(temporary, "w")
    f.attrs["format"], f.attrs["version"] = DATASET_FORMAT, DATASET_VERSION
    return f


def write_dataset(path, points, agent_offsets, labels=None, edges=None):
    """Write a dataset v1 file whole; nkmpi's own loader checks it before it takes its name.

    points (N, p) float32/float64 grouped by agent; agent_offsets (M+1,);
    labels (N,) optional ground truth; edges (E, 2) optional agent graph.
    """
    with whole_output(path, check=open_dataset) as temporary, dataset_file(temporary) as f:
        f.create_dataset("points", data=points)
        f.create_dataset("agent_offsets", data=np.asarray(agent_offsets, dtype=np.int64))
        if labels is not None:
            f.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
        if edges is not None:
            f.create_dataset("graph/edges", data=np.asarray(edges, dtype=np.int64).reshape(-1, 2))


def group_by_agent(agent_of_row, n_agents, *arrays):
    """Reorder rows so each agent's rows are contiguous (stable); returns offsets and the arrays."""
    order = np.argsort(agent_of_row, kind="stable")
    offsets = np.zeros(n_agents + 1, dtype=np.int64)
    np.cumsum(np.bincount(agent_of_row, minlength=n_agents), out=offsets[1:])
    return (offsets,) + tuple(a[order] for a in arrays)


def describe(out, offsets, partition, detail=""):
    """The line a data tool prints for the dataset it wrote (`detail` follows the point count)."""
    sizes = np.diff(offsets)
    print(f"wrote {out}: {offsets[-1]} points{detail}, {len(sizes)} agents ({partition}; "
          f"{sizes.min()}..{sizes.max()} points per agent)")
