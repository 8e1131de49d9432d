"""Under mpiexec: nkmpi.tree.local_spanning_tree on each rank's rows equals
graph.spanning_tree of the whole graph cut to the rank's agents (depth, parent, the
parent's rank, children in ascending id and their ranks, the height), for 60 connected
graphs of every kind, placed in blocks or scattered over the ranks; rank 0 prints the count."""

import numpy as np
from mpi4py import MPI

from nkmpi.graph import BlockOwners, build_network, spanning_tree
from nkmpi.halo import HaloPlan
from nkmpi.tree import local_spanning_tree

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(11)
specs = ["er:p=0.15", "rgg:radius=0.3", "ws:k=4,p=0.2", "ring", "path", "star", "torus", "complete"]
checked = 0
for case in range(60):
    n_agents = int(rng.integers(max(size, 6), 60))
    seed = case
    network = build_network(specs[case % len(specs)], n_agents, seed=seed, require_connected=False)
    while not network.is_connected():               # a random graph that happened to fall apart
        seed += 1000
        network = build_network(specs[case % len(specs)], n_agents, seed=seed, require_connected=False)
    if case % 2:                                    # scattered: any agent on any rank, each rank some
        owner = np.concatenate([np.arange(size), rng.integers(0, size, n_agents - size)])
        rng.shuffle(owner)
        mine = np.flatnonzero(owner == rank)
    else:                                           # blocks, their owners found from the bounds
        bounds = np.linspace(0, n_agents, size + 1).astype(np.int64)
        owner, mine = BlockOwners(bounds), np.arange(bounds[rank], bounds[rank + 1])
    tree = local_spanning_tree(comm, HaloPlan.build(network.rows(mine), owner, rank))
    whole = spanning_tree(network)
    where = f"case {case} ({specs[case % len(specs)]}, {n_agents} agents)"
    assert tree.root == whole.root and tree.height == whole.height, where
    np.testing.assert_array_equal(tree.depth, whole.depth[mine], err_msg=where)
    np.testing.assert_array_equal(tree.parent, whole.parent[mine], err_msg=where)
    np.testing.assert_array_equal(tree.parent_rank, np.where(whole.parent[mine] >= 0, owner[whole.parent[mine]], -1),
                                  err_msg=where)
    children = [whole.children(a) for a in mine]
    np.testing.assert_array_equal(np.diff(tree.child_ptr), [len(c) for c in children], err_msg=where)
    np.testing.assert_array_equal(tree.child_index, np.concatenate(children + [np.zeros(0, np.int64)]),
                                  err_msg=where)
    np.testing.assert_array_equal(tree.child_rank, owner[tree.child_index], err_msg=where)
    checked += 1
if rank == 0:
    print(f"trees checked: {checked}")
