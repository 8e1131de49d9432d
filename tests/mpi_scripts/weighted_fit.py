"""Under mpiexec: NKMeans(...).fit(X, sample_weight=w) on a rank's block of a weighted dataset
equals `nkmpi run` on the file (RESULT, same settings as tests/test_predict.py), and
predict(model='consensus') labels rows with the run's consensus model.  Exit status 0: equal."""

import sys

import numpy as np
from mpi4py import MPI

from nkmpi import NKMeans
from nkmpi.formats.dataset import open_dataset, read_rows, read_weights
from nkmpi.formats.result import read_result
from nkmpi.graph import block_placement
from nkmpi.reference import nearest

comm = MPI.COMM_WORLD
info = open_dataset(sys.argv[1])
expected = read_result(sys.argv[2])
bounds = block_placement(info.points_per_agent, comm.Get_size())
first, stop = bounds[comm.Get_rank()], bounds[comm.Get_rank() + 1]
block = info.block(first, stop)
rows, weights = read_rows(info, block), read_weights(info, block)
offsets = block.local_offsets
model = NKMeans(n_clusters=4, graph="ring", max_iter=30, tol=0.0, monitor_every=1).fit(
    rows, agent_offsets=offsets, agents=np.arange(first, stop), sample_weight=weights)
np.testing.assert_allclose(model.cluster_centers_, expected["centers"][first:stop], rtol=1e-12, atol=0)
assert model.consensus_centers_.tobytes() == expected["consensus_centers"].tobytes()
assert model.consensus_cost_ == expected["attrs"]["consensus_cost"]
labels = model.predict(rows, offsets, model="consensus")
np.testing.assert_array_equal(labels, nearest(rows, expected["consensus_centers"])[0])
np.testing.assert_array_equal(model.predict(rows, offsets), model.labels_)
