"""Under mpiexec: read a dataset through nkmpi's own loader, rank by rank, and save what came back.

Usage: load_back.py DATA.h5 OUT.npz.  Each rank reads its placement block as a run does (place_blocks); rank 0
gathers the blocks (a test-sized file) and saves rows, offsets, labels, and the graph's
CSR as the ranks read it, each its own agents' rows (indptr, indices; no edges without one).
"""

import sys

import numpy as np
from mpi4py import MPI

from nkmpi.formats.dataset import open_dataset, place_blocks, read_labels, read_rows

comm = MPI.COMM_WORLD
info = open_dataset(sys.argv[1], whole_offsets=False)
_, placed = place_blocks(info, comm)
first, stop = placed.first, placed.stop
rows = info.graph.rows(np.arange(first, stop)) if info.graph is not None else (np.zeros(stop - first + 1), [])
block = (read_rows(info, placed, comm=comm), read_labels(info, placed), rows, placed.offsets)
blocks = comm.gather(block, root=0)
if comm.Get_rank() == 0:
    labels = [b[1] for b in blocks]
    degrees = np.concatenate([np.diff(b[2][0]) for b in blocks])
    np.savez(sys.argv[2], points=np.concatenate([b[0] for b in blocks]),
             offsets=np.concatenate([blocks[0][3][:1]] + [b[3][1:] for b in blocks]),
             labels=np.concatenate(labels) if labels[0] is not None else np.zeros(0),
             indptr=np.concatenate([[0], np.cumsum(degrees)]), indices=np.concatenate([b[2][1] for b in blocks]))
