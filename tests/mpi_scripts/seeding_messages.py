"""Under mpiexec: the network-wide seeding sends only means of at least MIN_GROUP rows.

Every summary a rank sends up the spanning tree is checked on its way out;
the seeding must still equal the serial reference's, on a small network and on
one whose joined summaries outgrow the message budget (so that subtrees are
reduced on their way up), weighted rows included.  Exit status 0 means so.
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

sent = []
original = exchange.TreeChannel.send_up


def inspected(self, rows, target):
    sent.append(np.array(rows))
    return original(self, rows, target)


exchange.TreeChannel.send_up = inspected


def check(n_agents, largest, spec, options, weighted, seed):
    """The seeding of agents of up to `largest` rows equals the reference's; returns how
    many summary rows the agents start from, as the reference counts them."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, largest + 1, size=n_agents)          # many agents below MIN_GROUP rows
    sizes[[0, 7]] = 0
    points = rng.standard_normal((sizes.sum(), 2)) + np.repeat(rng.uniform(-6, 6, (n_agents, 2)), sizes, 0)
    # Weights of at least 1 where positive: a mean of MIN_GROUP rows still weighs MIN_GROUP or more.
    weights = rng.choice([0.0, 1.0, 3.0], size=len(points), p=[0.2, 0.4, 0.4]) if weighted else None
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    network = build_network(spec, n_agents, seed=1)
    bounds = block_placement(sizes, comm.Get_size())
    first, stop = bounds[rank], bounds[rank + 1]
    rows = slice(offsets[first], offsets[stop])
    plan = HaloPlan.build(network.rows(np.arange(first, stop)), BlockOwners(bounds), rank)
    centers = driver.network_seeding(comm, points[rows], kernels.UNWEIGHTED if weights is None else weights[rows],
                                     offsets[first:stop + 1] - offsets[first], plan, options)
    per_agent = None if weights is None else [weights[offsets[a]:offsets[a + 1]] for a in range(n_agents)]
    expected = network_seeding(agent_rows(points, offsets), network, options, per_agent)
    np.testing.assert_array_equal(centers, expected)
    positive = [sizes[a] if weights is None else np.count_nonzero(weights[offsets[a]:offsets[a + 1]])
                for a in range(n_agents)]
    return int(seeding.local_capacity(np.array(positive), options.n_clusters).sum())


check(30, 24, "ws:k=4,p=0.3", Options(n_clusters=3, n_init=4, seed=2), weighted=False, seed=3)
k = 2
summary_rows = check(300, 40, "rgg:radius=0.15", Options(n_clusters=k, seed=5), weighted=True, seed=4)
assert summary_rows > 3 * seeding.message_rows(k), summary_rows      # subtrees are reduced on the way up
smallest = min((rows[:, -1].min() for rows in sent if len(rows)), default=np.inf)
smallest = comm.allreduce(smallest, op=MPI.MIN)
messages = comm.allreduce(len(sent))
assert messages > 0 and smallest >= seeding.MIN_GROUP, (messages, smallest)
if rank == 0:
    print(f"{messages} messages; every message held groups of at least {seeding.MIN_GROUP} rows")
