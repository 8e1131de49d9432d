"""Many clusters: K = 4,096 on small p.  No array of a run grows with rows times K (or K
times K): what K adds to a rank's peak memory is its agents' K x p state, whatever the
number of rows.  Here an N x K array of distances would take 400,000 x 4,096 x 8 bytes
= 13 GB; the run must instead stay within the memory target next to a K = 8 run."""

import numpy as np
import pytest

from conftest import run_mpi
from nkmpi.formats.dataset import write_dataset
from nkmpi.formats.result import read_result

pytestmark = pytest.mark.mpi


def peak_and_shard(path, out, k):
    proc = run_mpi(2, ["run", path, "-k", k, "--init", "flood", "--iters", 2, "--quiet", "--out", out],
                   timeout=600)
    assert proc.returncode == 0, proc.stderr
    attrs = read_result(out)["attrs"]
    return int(attrs["rank_peak_memory_bytes"].max()), int(attrs["rank_shard_bytes"].max())


def test_4096_clusters_within_the_memory_target(tmp_path):
    rng = np.random.default_rng(0)
    n_points, n_agents, k, p = 400_000, 8, 4096, 2
    points = rng.standard_normal((n_points, p)) * 10
    path = tmp_path / "many.h5"
    write_dataset(path, points, np.linspace(0, n_points, n_agents + 1).astype(np.int64))
    few, shard = peak_and_shard(path, tmp_path / "few.h5", 8)
    many, _ = peak_and_shard(path, tmp_path / "many.result.h5", k)
    agents_state = (n_agents // 2) * k * p * 8          # one (L, K, p) float64 array of a rank
    assert many - few <= 0.5 * shard + 16 * agents_state, (many, few, shard)
    result = read_result(tmp_path / "many.result.h5")
    assert result["centers"].shape == (n_agents, k, p)
    assert len(np.unique(result["assignments"])) > k // 2     # the clusters are used, not left empty
