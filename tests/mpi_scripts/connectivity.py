"""Under mpiexec: nkmpi.connectivity.is_connected on each rank's rows of a graph equals
Network.is_connected of the whole graph, for 120 graphs (random, connected or not, and
unions of pieces) placed in blocks or scattered over the ranks; rank 0 prints the count."""

import numpy as np
from mpi4py import MPI

from nkmpi.connectivity import is_connected
from nkmpi.graph import BlockOwners, Network, build_network

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(7)
checked = disconnected = 0
for case in range(120):
    n_agents = int(rng.integers(size, 40))
    kind = case % 4
    if kind == 0:
        network = build_network(f"er:p={rng.uniform(0.02, 0.2):.3f}", n_agents, seed=case, require_connected=False)
    elif kind == 1:
        network = build_network(f"rgg:radius={rng.uniform(0.1, 0.4):.3f}", n_agents, seed=case,
                                require_connected=False)
    elif kind == 2:                                 # pieces: paths over a shuffled numbering
        cuts = np.sort(rng.choice(np.arange(1, n_agents), int(rng.integers(0, 3)), replace=False))
        order = rng.permutation(n_agents)
        edges = [(order[i], order[i + 1]) for i in range(n_agents - 1) if i + 1 not in cuts]
        network = Network.from_edges(n_agents, np.array(edges, dtype=np.int64).reshape(-1, 2))
    else:
        network = build_network("ring", n_agents)
    if case % 3 == 0:                               # scattered: any agent on any rank, each rank some
        owner = np.concatenate([np.arange(size), rng.integers(0, size, n_agents - size)])
        rng.shuffle(owner)
        mine = np.flatnonzero(owner == rank)
    else:                                           # blocks, their owners found from the bounds
        bounds = np.linspace(0, n_agents, size + 1).astype(np.int64)
        owner, mine = BlockOwners(bounds), np.arange(bounds[rank], bounds[rank + 1])
    got = is_connected(comm, network.rows(mine), owner)
    if got != network.is_connected():
        raise AssertionError(f"case {case}: ranks say connected={got}, the whole graph {network.is_connected()}")
    checked += 1
    disconnected += not got
if rank == 0:
    assert 20 <= disconnected <= 100, disconnected       # both answers are exercised
    print(f"graphs checked: {checked} ({disconnected} not connected)")
