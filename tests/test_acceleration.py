"""--inner and --rho-schedule: the objective still never increases (within each
constant-rho stretch), the runs end at generalized Lloyd minima, and the MPI
program follows the serial reference exactly, through checkpoints too."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from conftest import run_mpi, uneven_dataset
from nkmpi.errors import InputError
from nkmpi.formats.result import read_result
from nkmpi.graph import build_network
from nkmpi.options import Options
from nkmpi.reference import simulate
from test_reference import blob_agents, fixed_point_residual, problems


def stretches(metrics):
    """The objective series cut where rho changes."""
    cuts = np.flatnonzero(np.diff(metrics["rho"])) + 1
    return np.split(metrics["objective"], cuts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(accelerated=True))
def test_objective_never_increases_within_a_stretch(problem):
    points, offsets, network, options = problem
    try:
        result = simulate(points, offsets, network, options)
    except InputError:
        assume(False)
    rhos = result.metrics["rho"]
    assert (np.diff(rhos) >= 0).all() and set(rhos) <= set(options.rho_stages())
    for objective in stretches(result.metrics):
        scale = max(1.0, float(np.abs(objective).max()))
        assert (np.diff(objective) <= 1e-12 * scale).all(), objective
    if result.converged:
        assert rhos[-1] == options.rho          # only the last stretch may end the run
        assert result.metrics["changed"][-1] == 0
    if options.rho_schedule is not None:        # a stretch ends once its partition settled
        allowed = int(options.rho_schedule[2] * len(points))
        ends = np.flatnonzero(np.diff(rhos))
        assert (result.metrics["changed"][ends] <= allowed).all()


@pytest.mark.parametrize("inner,schedule", [(4, None), (1, (0.5, 4.0)), (8, (0.1, 10.0))])
def test_accelerated_runs_end_at_generalized_lloyd_minima(inner, schedule):
    points, offsets = blob_agents(seed=4, n_agents=8, non_iid=True)
    network = build_network("ring", 8)
    options = Options(n_clusters=3, rho=20.0, max_iter=20000, tol=1e-11, monitor_every=5,
                      inner=inner, rho_schedule=schedule)
    result = simulate(points, offsets, network, options)
    assert result.converged and result.metrics["rho"][-1] == 20.0
    residual, voronoi = fixed_point_residual(points, offsets, network, result.centers, options.rho)
    assert residual < 1e-9                                        # x = mu at the target rho
    np.testing.assert_array_equal(result.assignments, voronoi)     # partitions Voronoi


def test_inner_updates_save_passes_over_the_data():
    points, offsets = blob_agents(seed=4, n_agents=8, non_iid=True)
    network = build_network("ring", 8)
    passes = {q: simulate(points, offsets, network,
                          Options(n_clusters=3, rho=100.0, max_iter=20000, tol=1e-8, monitor_every=1,
                                  inner=q)).iterations for q in (1, 10)}
    assert passes[10] * 4 < passes[1], passes


def test_schedule_stages():
    options = Options(n_clusters=2, rho=1000.0, rho_schedule=(1.0, 10.0))
    assert options.rho_stages() == [1.0, 10.0, 100.0, 1000.0]
    assert options.rho_schedule == (1.0, 10.0, 1e-3)                 # the default settled fraction
    assert options.stage_rest(0, 5000) == (np.inf, 5) and options.stage_rest(3, 5000) == (1e-6, 0)
    assert Options(n_clusters=2, rho=50.0, rho_schedule=(2.0, 4.0)).rho_stages() == [2.0, 8.0, 32.0, 50.0]
    assert Options(n_clusters=2, rho=5.0).rho_stages() == [5.0]
    for bad in [dict(rho_schedule=(0.0, 10.0)), dict(rho_schedule=(1.0, 1.0)),
                dict(rho_schedule=(2000.0, 10.0)), dict(rho_schedule=(1.0, 10.0), monitor_every=0),
                dict(rho_schedule=(1.0, 10.0, 1.5)), dict(rho_schedule="fast"), dict(inner=0),
                dict(algorithm="lloyd", inner=2)]:
        with pytest.raises(InputError):
            Options(n_clusters=2, rho=1000.0, **bad)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("accel") / "uneven.h5"
    points, offsets = uneven_dataset(path)
    return path, points, offsets


@pytest.mark.parametrize("extra,settings", [
    (["--inner", "3"], dict(inner=3)),
    (["--rho-schedule", "0.5:4", "--inner", "2"], dict(rho_schedule=(0.5, 4.0), inner=2)),
    (["--inner", "3", "--link-failure-prob", "0.2", "--dropout-prob", "0.1"],
     dict(inner=3, link_failure_prob=0.2, dropout_prob=0.1)),
])
@pytest.mark.mpi
def test_mpi_equals_reference(dataset, tmp_path, extra, settings):
    path, points, offsets = dataset
    expected = simulate(points, offsets, build_network("ring", 12),
                        Options(n_clusters=4, rho=20.0, max_iter=400, tol=1e-7, monitor_every=2,
                                **settings))
    assert len(set(expected.metrics["rho"])) == len(Options(n_clusters=4, rho=20.0, **settings)
                                                    .rho_stages())      # every stretch is reached
    for n_ranks in (1, 3):
        out = tmp_path / f"r{n_ranks}.h5"
        proc = run_mpi(n_ranks, ["run", path, "-k", 4, "--rho", 20, "--iters", 400, "--tol", 1e-7,
                                 "--monitor-every", 2, "--out", out, "--quiet", *extra])
        assert proc.returncode == 0, proc.stderr
        got = read_result(out)
        np.testing.assert_array_equal(got["centers"], expected.centers)
        np.testing.assert_array_equal(got["assignments"], expected.assignments)
        for name in ("objective", "rho", "changed"):
            np.testing.assert_allclose(got["metrics"][name], expected.metrics[name], rtol=1e-12)
        assert got["attrs"]["iterations"] == expected.iterations
        assert got["attrs"]["inner"] == settings["inner"]


@pytest.mark.mpi
def test_resume_in_the_middle_of_a_schedule(dataset, tmp_path):
    path = dataset[0]
    args = ["run", path, "-k", 4, "--rho", 20, "--rho-schedule", "0.5:4", "--iters", 400,
            "--tol", 1e-7, "--monitor-every", 2, "--inner", 2, "--quiet"]
    proc = run_mpi(3, args + ["--out", tmp_path / "a.h5", "--checkpoint", tmp_path / "ck.h5",
                              "--checkpoint-every", 60])
    assert proc.returncode == 0, proc.stderr
    full = read_result(tmp_path / "a.h5")
    at = 60 * ((full["attrs"]["iterations"] - 1) // 60)
    rhos = dict(zip(full["metrics"]["iteration"], full["metrics"]["rho"]))
    assert rhos[at] > 0.5                                   # checkpointed past the first stretch
    proc = run_mpi(2, args + ["--out", tmp_path / "b.h5", "--resume", tmp_path / "ck.h5"])
    assert proc.returncode == 0, proc.stderr
    resumed = read_result(tmp_path / "b.h5")
    assert resumed["attrs"]["resumed_at_iteration"] == at
    np.testing.assert_array_equal(resumed["centers"], full["centers"])
    np.testing.assert_array_equal(resumed["metrics"]["rho"], full["metrics"]["rho"])
    proc = run_mpi(2, args[:-1] + ["--inner", 3, "--quiet", "--out", tmp_path / "c.h5",
                                   "--resume", tmp_path / "ck.h5"])
    assert proc.returncode == 2 and "inner 2 -> 3" in proc.stderr
