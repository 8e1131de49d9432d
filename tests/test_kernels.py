"""The block kernels against the plain per-agent reference formulas."""

import numpy as np
import pytest

from nkmpi import kernels
from nkmpi.reference import nearest


def reference_block(points, offsets, centers):
    """Per agent, plainly: labels, sums, counts, sse."""
    n_agents, k, p = centers.shape
    labels, sums, counts, sse = [], np.zeros((n_agents, k, p)), np.zeros((n_agents, k), int), np.zeros(n_agents)
    for m in range(n_agents):
        rows = points[offsets[m]:offsets[m + 1]]
        dist, lab = nearest(rows, centers[m])
        labels.append(lab)
        np.add.at(sums[m], lab, rows)
        counts[m] = np.bincount(lab, minlength=k)
        sse[m] = dist[np.arange(len(lab)), lab].sum()
    return np.concatenate(labels), sums, counts, sse


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k,p", [(1, 1), (3, 1), (1, 4), (5, 3), (8, 17)])
def test_assign_and_accumulate_matches_reference(dtype, k, p):
    rng = np.random.default_rng(k * 100 + p)
    sizes = np.array([0, 7, 300, 1, 0, 45])          # empty agents and a block over chunk size
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    points = rng.standard_normal((offsets[-1], p)).astype(dtype)
    centers = rng.standard_normal((len(sizes), k, p))
    labels = np.full(len(points), -1, dtype=np.int64)
    sums, counts, sse, changed = kernels.assign_and_accumulate(
        points, kernels.row_agents(offsets), centers, labels)
    ref_labels, ref_sums, ref_counts, ref_sse = reference_block(points, offsets, centers)
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_array_equal(sums, ref_sums)        # same reduction order: bitwise
    np.testing.assert_array_equal(counts, ref_counts)
    np.testing.assert_allclose(sse, ref_sse, rtol=1e-12)
    assert changed == len(points)


def test_ties_go_to_lowest_cluster_and_changed_counts():
    points = np.array([[0.0], [1.0], [2.0]])
    centers = np.array([[[1.0], [1.0], [3.0]]])       # clusters 0 and 1 coincide
    labels = np.array([1, 1, 2])
    sums, counts, sse, changed = kernels.assign_and_accumulate(points, np.zeros(3, int), centers, labels)
    np.testing.assert_array_equal(labels, [0, 0, 0])   # 2.0 is 1 from both 1.0 and 3.0: lowest k
    assert changed == 3
    np.testing.assert_array_equal(counts, [[3, 0, 0]])  # clusters 1 and 2 empty
    assert sse[0] == pytest.approx(1 + 0 + 1)


def test_center_update_fixed_point_and_isolated_agent():
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((2, 3, 2))
    sums = rng.standard_normal((2, 3, 2))
    counts = np.array([[2, 0, 1], [0, 0, 0]])
    degree = np.array([2, 0])
    nbr_total = rng.standard_normal((2, 3, 2))
    nbr_total[1] = 0
    rho, alpha = 4.0, 0.7
    new = kernels.center_update(centers, sums, counts, nbr_total, degree, rho, alpha)
    mu = (sums[0] / rho + nbr_total[0]) / (counts[0] / rho + 2)[:, None]
    np.testing.assert_allclose(new[0], centers[0] + alpha * (mu - centers[0]), rtol=1e-14)
    np.testing.assert_array_equal(new[1], centers[1])   # no points, no neighbours: keeps its centers


def test_neighbour_sum_in_ascending_order():
    ext = np.arange(5 * 2 * 1, dtype=float).reshape(5, 2, 1) ** 1.5
    ptr = np.array([0, 3, 3, 4])
    idx = np.array([1, 3, 4, 0])
    total = kernels.neighbour_sum(ext, ptr, idx)
    np.testing.assert_array_equal(total[0], (0.0 + ext[1]) + ext[3] + ext[4])
    np.testing.assert_array_equal(total[1], 0.0)
    np.testing.assert_array_equal(total[2], ext[0])
