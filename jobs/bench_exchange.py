"""Under mpiexec (target 3 of jobs/bench.py): NK-means iteration overhead against a bare exchange.

Every rank hosts one agent of a ring with tiny data, and an iteration makes one
exchange and one center update (--inner 1: the default's five would be set
against one bare exchange).  Prints, on rank 0, the slowest rank's time per
iteration minus its local pass (the loop's own phase timer), then the slowest
rank's time per bare Neighbor_alltoall of the same payload on the same
neighbours, both measured in this run.
"""

import time

import numpy as np
from mpi4py import MPI

from nkmpi import kernels
from nkmpi.driver import run
from nkmpi.graph import build_network
from nkmpi.options import Options

ITERATIONS = 3000
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
n_clusters, n_features = 8, 8
rng = np.random.default_rng(rank)
points = rng.standard_normal((16, n_features))
offsets = np.array([0, len(points)])
network = build_network("ring", size)
kernels.set_threads(1)
kernels.warm_up(points.dtype)
options = Options(n_clusters=n_clusters, max_iter=ITERATIONS, tol=0.0, monitor_every=0, inner=1,
                  init=np.zeros((n_clusters, n_features)) + np.arange(n_clusters)[:, None]
                  ).resolve(len(points) * size, size)

comm.Barrier()
result = run(comm, points, offsets, [rank], network.rows([rank]), np.arange(size), options, stream=None)
overhead = (result.seconds["loop"] - result.seconds["local"]) / ITERATIONS    # the run's own local-pass time

neighbours = sorted({(rank - 1) % size, (rank + 1) % size} - {rank})
graph = comm.Create_dist_graph_adjacent(neighbours, neighbours, reorder=False)
send = np.ones((len(neighbours), n_clusters * n_features))
receive = np.empty_like(send)
graph.Neighbor_alltoall(send, receive)
comm.Barrier()
start = time.perf_counter()
for _ in range(ITERATIONS):
    graph.Neighbor_alltoall(send, receive)
bare = (time.perf_counter() - start) / ITERATIONS
overhead, bare = comm.allreduce(overhead, op=MPI.MAX), comm.allreduce(bare, op=MPI.MAX)
if rank == 0:
    print(f"{overhead:.6e} {bare:.6e}")
