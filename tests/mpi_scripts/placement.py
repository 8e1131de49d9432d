"""Under mpiexec: the ranks place a dataset's agents (formats.dataset.place_blocks) as
graph.block_placement does on every agent's offsets, each rank reading only a slice of them.

Usage: placement.py DIR.  Rank 0 writes datasets of varied shapes into DIR: agents without
rows, at the ends too, one agent holding most rows, as many agents as ranks.  Every rank
checks its bounds and its block against block_placement's and that no offsets it read (and
checked) were longer than its reading slice or its block.  Exit status 0 means so.
"""

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from nkmpi.formats import dataset
from nkmpi.graph import block_placement

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
folder = Path(sys.argv[1])

read_lengths = []
check_offsets = dataset.check_offsets


def recorded(path, offsets, first, n_agents, n_points):
    read_lengths.append(len(offsets))
    return check_offsets(path, offsets, first, n_agents, n_points)


dataset.check_offsets = recorded

rng = np.random.default_rng(7)
shapes = {
    "uneven": rng.integers(0, 9, size=37),
    "empty ends": np.array([0, 0, 5, 1, 0, 8, 3, 0, 0, 0]),
    "one heavy agent": np.array([1, 2, 400, 1, 0, 3, 1, 2, 1]),
    "one agent a rank": rng.integers(1, 5, size=size),
    "no rows but one": np.array([0] * 20 + [1]),
    "many agents": rng.integers(0, 3, size=5000),
}
checked = 0
for name, sizes in shapes.items():
    path = folder / f"{name.replace(' ', '_')}.h5"
    if rank == 0:
        points = rng.standard_normal((int(sizes.sum()), 2))
        dataset.write_dataset(path, points, np.concatenate([[0], np.cumsum(sizes)]))
    comm.Barrier()
    read_lengths.clear()
    info = dataset.open_dataset(path, whole_offsets=False)
    assert info.offsets is None
    bounds, block = dataset.place_blocks(info, comm)
    expected = block_placement(sizes, size)
    np.testing.assert_array_equal(bounds, expected, err_msg=name)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    assert (block.first, block.stop) == (expected[rank], expected[rank + 1]), name
    np.testing.assert_array_equal(block.offsets, offsets[block.first:block.stop + 1], err_msg=name)
    reading_slice = (rank + 1) * len(sizes) // size - rank * len(sizes) // size
    assert max(read_lengths) <= max(reading_slice, block.stop - block.first) + 1, (name, read_lengths)
    checked += 1
if rank == 0:
    print(f"placements checked: {checked}")
