"""The communication model of jobs/comm_model.py against the bytes `nkmpi run` measures."""

import importlib.util
from pathlib import Path

import pytest

from conftest import run_mpi
from data_tools.generate import generate
from nkmpi.formats.result import read_result

pytestmark = pytest.mark.mpi

spec = importlib.util.spec_from_file_location("comm_model", Path(__file__).parent.parent / "jobs" / "comm_model.py")
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)


def measured(tmp_path, n_agents, n_ranks, graph, k=3, p=2):
    data = tmp_path / f"d{n_agents}.h5"
    if not data.exists():
        generate(data, 4 * n_agents, 4, p, n_agents, "iid", seed=1)
    out = tmp_path / "r.h5"
    proc = run_mpi(n_ranks, ["run", data, "-k", k, "--graph", graph, "--iters", 2, "--quiet", "--out", out])
    assert proc.returncode == 0, proc.stderr
    return read_result(out)["attrs"]["rank_bytes_sent_per_iteration"]


@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_ring_exact(tmp_path, n_ranks):
    sent = measured(tmp_path, 24, n_ranks, "ring")
    assert (sent == model.ring_bytes(24, n_ranks, 3, 2)).all(), sent


@pytest.mark.parametrize("n_ranks", [2, 4])
def test_torus_exact(tmp_path, n_ranks):
    sent = measured(tmp_path, 64, n_ranks, "torus")          # 8 x 8, blocks of whole rows
    assert (sent == model.torus_bytes(64, n_ranks, 3, 2)).all(), sent


def test_rgg_average_within_a_fifth(tmp_path):
    radius = 0.05
    sent = measured(tmp_path, 4096, 4, f"rgg:radius={radius}")
    predicted = model.rgg_bytes(4096, 4, 3, 2, radius)
    assert abs(sent.mean() / predicted - 1) < 0.2, (sent, predicted)
