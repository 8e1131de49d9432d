"""Under mpiexec: read a dataset through nkmpi's own loader, rank by rank, and save what came back.

Usage: load_back.py DATA.h5 OUT.npz.  Each rank reads its placement block; rank 0
gathers the blocks (a test-sized file) and saves rows, offsets, labels, and the graph's
CSR as the ranks read it, each its own agents' rows (indptr, indices; no edges without one).
"""

import sys

import numpy as np
from mpi4py import MPI

from nkmpi.graph import block_placement
from nkmpi.formats.dataset import open_dataset, read_labels, read_rows

comm = MPI.COMM_WORLD
info = open_dataset(sys.argv[1])
bounds = block_placement(info.points_per_agent, comm.Get_size())
first, stop = bounds[comm.Get_rank()], bounds[comm.Get_rank() + 1]
rows = info.graph.rows(np.arange(first, stop)) if info.graph is not None else (np.zeros(stop - first + 1), [])
block = (read_rows(info, first, stop), read_labels(info, first, stop), rows)
blocks = comm.gather(block, root=0)
if comm.Get_rank() == 0:
    labels = [b[1] for b in blocks]
    degrees = np.concatenate([np.diff(b[2][0]) for b in blocks])
    np.savez(sys.argv[2], points=np.concatenate([b[0] for b in blocks]), offsets=info.offsets,
             labels=np.concatenate(labels) if labels[0] is not None else np.zeros(0),
             indptr=np.concatenate([[0], np.cumsum(degrees)]), indices=np.concatenate([b[2][1] for b in blocks]))
