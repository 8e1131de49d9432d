"""Under mpiexec: NKMeans inside a user's own mpi4py program equals the serial reference.

Every rank makes the same data, keeps an uneven block of agents, fits, and
rank 0 checks the gathered centers and labels.  Exit status 0 means equal.
"""

import os
import signal
import sys
import tempfile

import networkx as nx
import numpy as np
from mpi4py import MPI

from nkmpi import NKMeans, Stopped
from nkmpi.app import INTERRUPTED, PERIODIC, run_state
from nkmpi.graph import Network
from nkmpi.local_pass import LocalPass
from nkmpi.options import Options
from nkmpi.reference import simulate

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(7)
n_agents = 10
sizes = rng.integers(0, 30, size=n_agents)
points = rng.standard_normal((sizes.sum(), 3)) + np.repeat(rng.uniform(-5, 5, (n_agents, 3)), sizes, axis=0)
offsets = np.concatenate([[0], np.cumsum(sizes)])
graph = nx.connected_watts_strogatz_graph(n_agents, 4, 0.3, seed=2)

# Rank r hosts every size-th agent starting at r: a placement that is not contiguous.
mine = np.arange(rank, n_agents, size)
rows = np.concatenate([points[offsets[a]:offsets[a + 1]] for a in mine])
local_offsets = np.concatenate([[0], np.cumsum(sizes[mine])])
model = NKMeans(n_clusters=3, rho=4.0, alpha=0.8, max_iter=60, tol=0.0, init="local",
                random_state=5, monitor_every=7, graph=graph).fit(rows, agent_offsets=local_offsets,
                                                                  agents=mine)
assert model.n_iter_ == 60 and not model.converged_
np.testing.assert_array_equal(model.predict(rows, local_offsets), model.labels_)

centers = comm.gather((mine, model.cluster_centers_, model.labels_), root=0)
if rank == 0:
    options = Options(n_clusters=3, rho=4.0, alpha=0.8, max_iter=60, tol=0.0, init="local", seed=5,
                      monitor_every=7)
    expected = simulate(points, offsets, Network.from_edges(n_agents, list(graph.edges())), options)
    for agents, got, labels in centers:
        np.testing.assert_allclose(got, expected.centers[agents], rtol=1e-12, atol=0)
        want = np.concatenate([expected.assignments[offsets[a]:offsets[a + 1]] for a in agents])
        np.testing.assert_array_equal(labels, want)
    np.testing.assert_allclose(model.metrics_["objective"], expected.metrics["objective"], rtol=1e-12)
    assert model.inertia_ == expected.metrics["sse"][-1] or \
        abs(model.inertia_ - expected.metrics["sse"][-1]) <= 1e-12 * expected.metrics["sse"][-1]

# The accelerated variant, simulated faults and Lloyd's baseline through the same estimator.
for settings in (dict(inner=3, rho_schedule=(0.5, 2.0), init="local", tol=1e-6),
                 dict(link_failure_prob=0.3, dropout_prob=0.2, init="local", tol=1e-6),
                 dict(algorithm="lloyd", tol=0.0)):
    model = NKMeans(n_clusters=3, rho=4.0, alpha=0.8, max_iter=300, random_state=5, monitor_every=1,
                    graph=graph, **settings).fit(rows, agent_offsets=local_offsets, agents=mine)
    centers = comm.gather((mine, model.cluster_centers_), root=0)
    if rank == 0:
        init = settings.pop("init", "network")
        options = Options(n_clusters=3, rho=4.0, alpha=0.8, max_iter=300, init=init, seed=5,
                          monitor_every=1, **settings)
        expected = simulate(points, offsets, Network.from_edges(n_agents, list(graph.edges())), options)
        assert model.n_iter_ == expected.iterations and model.converged_ == expected.converged
        assert model.converged_ or "link_failure_prob" in settings
        for agents, got in centers:
            np.testing.assert_allclose(got, expected.centers[agents], rtol=1e-12, atol=1e-12)
# Checkpoint and resume: consecutive agents in rank order (what a file stores), a fit of 30
# iterations that checkpoints at 20, resumed to 50, equals one fit of 50 bit for bit.
folder = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
bounds = np.linspace(0, n_agents, size + 1).astype(int)
block = np.arange(bounds[rank], bounds[rank + 1])
block_rows = points[offsets[bounds[rank]]:offsets[bounds[rank + 1]]]
block_offsets = offsets[bounds[rank]:bounds[rank + 1] + 1] - offsets[bounds[rank]]
common = dict(n_clusters=3, rho=4.0, alpha=0.8, tol=0.0, random_state=5, monitor_every=5, graph=graph,
              link_failure_prob=0.1)
whole = NKMeans(max_iter=50, **common).fit(block_rows, block_offsets, block)
checkpoint = os.path.join(folder, "fit.checkpoint.h5")
NKMeans(max_iter=30, checkpoint=checkpoint, checkpoint_every=20, **common).fit(block_rows, block_offsets, block)
assert run_state(checkpoint) == (PERIODIC, 20)
resumed = NKMeans(max_iter=50, resume=checkpoint, **common).fit(block_rows, block_offsets, block)
assert resumed.cluster_centers_.tobytes() == whole.cluster_centers_.tobytes()
assert np.array_equal(resumed.labels_, whole.labels_) and resumed.n_iter_ == 50
try:        # the ranks' agents are not consecutive: no checkpoint can hold them
    NKMeans(max_iter=5, checkpoint=checkpoint, **common).fit(rows, local_offsets, mine)
    assert size == 1, "a checkpoint of a scattered placement was accepted"
except ValueError as exc:
    assert "consecutive agents" in str(exc), exc
# A stop signal during a fit with a checkpoint: rank 0 signals itself in its 12th local pass;
# every rank stops, the checkpoint is written, Stopped is raised, the program's own handler is
# back afterwards, and resuming gives the uninterrupted fit bit for bit.
original_run, passes = LocalPass.run, []


def signalling_run(self, *args, **kwargs):
    passes.append(1)
    if rank == 0 and len(passes) == 12:
        os.kill(os.getpid(), signal.SIGUSR1)
    return original_run(self, *args, **kwargs)


LocalPass.run = signalling_run
stopped = os.path.join(folder, "stopped.checkpoint.h5")
try:
    NKMeans(max_iter=50, checkpoint=stopped, **common).fit(block_rows, block_offsets, block)
    raise AssertionError("a stop signal did not stop the fit")
except Stopped as exc:
    assert "written" in str(exc), exc
assert run_state(stopped)[0] == INTERRUPTED
LocalPass.run = original_run
assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
resumed = NKMeans(max_iter=50, resume=stopped, **common).fit(block_rows, block_offsets, block)
assert resumed.cluster_centers_.tobytes() == whole.cluster_centers_.tobytes()
assert np.array_equal(resumed.labels_, whole.labels_)
if rank == 0:
    print("estimator matches the reference")
sys.exit(0)
