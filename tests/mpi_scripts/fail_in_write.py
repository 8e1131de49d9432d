"""Under mpiexec: a labels file written by every rank (`write_slices`) while writing one
chosen rank's slice fails, called as a library (no nkmpi command aborts the job): every
rank must raise, none may wait for the others, and no file may stay.

Usage: fail_in_write.py RANK OUT
Rank 0 prints a line `rank R raised NAME: MESSAGE` for every rank, once all got there.
"""

import sys

import numpy as np
from mpi4py import MPI

from nkmpi.formats import hdf5
from nkmpi.formats.labels import write_labels

failing_rank, out = int(sys.argv[1]), sys.argv[2]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
original = hdf5._write_own


def failing(f, whole, sliced):
    if rank == failing_rank:
        raise RuntimeError(f"injected failure on rank {rank}")
    original(f, whole, sliced)


hdf5._write_own = failing
run_id = comm.bcast(hdf5.new_run_id())
try:
    write_labels(out, comm, run_id=run_id, n_points=10 * size, row_start=10 * rank,
                 labels=np.full(10, rank, dtype=np.int64), attrs={})
    outcome = "nothing"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
for r, text in enumerate(comm.gather(outcome) or []):
    print(f"rank {r} raised {text}")
