"""Under mpiexec: the network-wide seeding sends only means of at least MIN_GROUP rows.

Every summary a rank sends up the spanning tree is checked on its way out;
the seeding must still equal the serial reference's.  Exit status 0 means so.
"""

import numpy as np
from mpi4py import MPI

from nkmpi import driver, exchange, kernels, seeding
from nkmpi.graph import BlockOwners, block_placement, build_network
from nkmpi.halo import HaloPlan
from nkmpi.options import Options
from nkmpi.reference import agent_rows, network_seeding

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rng = np.random.default_rng(3)
n_agents = 30
sizes = rng.integers(0, 25, size=n_agents)          # many agents below MIN_GROUP rows
sizes[[0, 7]] = 0
points = rng.standard_normal((sizes.sum(), 2)) + np.repeat(rng.uniform(-6, 6, (n_agents, 2)), sizes, 0)
offsets = np.concatenate([[0], np.cumsum(sizes)])
network = build_network("ws:k=4,p=0.3", n_agents, seed=1)
options = Options(n_clusters=3, n_init=4, seed=2)

sent = []
original = exchange.TreeChannel.send_up


def inspected(self, rows, target):
    sent.append(np.array(rows))
    return original(self, rows, target)


exchange.TreeChannel.send_up = inspected
bounds = block_placement(sizes, comm.Get_size())
first, stop = bounds[rank], bounds[rank + 1]
mine = points[offsets[first]:offsets[stop]]
plan = HaloPlan.build(network.rows(np.arange(first, stop)), BlockOwners(bounds), rank)
centers = driver.network_seeding(comm, mine, kernels.UNWEIGHTED, offsets[first:stop + 1] - offsets[first], plan,
                                 options)
smallest = min((rows[:, -1].min() for rows in sent if len(rows)), default=np.inf)
smallest = comm.allreduce(smallest, op=MPI.MIN)
messages = comm.allreduce(len(sent))
expected = network_seeding(agent_rows(points, offsets), network, options)
np.testing.assert_array_equal(centers, expected)
assert messages > 0 and smallest >= seeding.MIN_GROUP, (messages, smallest)
if rank == 0:
    print(f"{messages} messages; every message held groups of at least {seeding.MIN_GROUP} rows")
