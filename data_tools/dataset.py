"""What every data tool shares: outputs checked before any work, and the command-line frame
that turns bad input into one `nkmpi: error: ...` line and exit status 2.  The files they
write and read are nkmpi's own formats (nkmpi.formats)."""

import csv
import functools
import os
import shutil
import sys
import tokenize
import zipfile
import zlib

import numpy as np

from nkmpi.errors import InputError
from nkmpi.formats import hdf5
from nkmpi.formats.hdf5 import READ_ERRORS, check_output, new_run_id, refuse_overwriting


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


#: What reading a damaged or unexpected source raises: h5py's (READ_ERRORS), and numpy's,
#: csv's and zipfile's (SyntaxError and TokenError: a garbled .npy header).
SOURCE_ERRORS = (*READ_ERRORS, LookupError, EOFError, SyntaxError, tokenize.TokenError, csv.Error,
                 zipfile.BadZipFile, zlib.error)


def reading(path):
    """Turn what reading `path` raises (SOURCE_ERRORS) into an InputError naming it.  Only
    around reading code: elsewhere a bug must show its traceback."""
    return hdf5.reading(f"{path}: cannot read", SOURCE_ERRORS)


def check_outputs(paths, inputs):
    """Before any work: every output can be written (check_output probes a temporary name like
    the one atomic_file writes) and replaces none of `inputs` ({what: path or None}), not
    through a link either."""
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
