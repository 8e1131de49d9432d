"""Graph specs, their cleaning, connectivity, statistics and placement on ranks."""

import networkx as nx
import numpy as np
import pytest

from nkmpi.errors import InputError
from nkmpi.graph import (Network, block_placement, build_network, concat_ranges, graph_stats,
                         random_geometric_edges)


@pytest.mark.parametrize("spec,expected", [
    ("ring", nx.cycle_graph(12)), ("path", nx.path_graph(12)), ("complete", nx.complete_graph(12)),
    ("star", nx.star_graph(11)),
    ("torus", nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 4, periodic=True), ordering="sorted")),
    ("er:p=0.5", nx.gnp_random_graph(12, 0.5, seed=3)),
    ("ws:k=4,p=0.1", nx.watts_strogatz_graph(12, 4, 0.1, seed=3)),
])
def test_specs_build_the_networkx_graphs(spec, expected):
    network = build_network(spec, 12, seed=3)
    expected_edges = sorted(tuple(sorted(e)) for e in expected.edges())
    assert [tuple(e) for e in network.edges.tolist()] == expected_edges
    for m in range(12):                          # CSR lists each agent's neighbours ascending
        assert list(network.neighbours(m)) == sorted(expected.neighbors(m))


def test_rgg_is_the_networkx_graph_of_its_positions_numbered_along_a_curve():
    network = build_network("rgg:radius=0.2", 300, seed=5)
    edges, positions = random_geometric_edges(300, 0.2, seed=5)
    expected = nx.random_geometric_graph(300, 0.2, pos=dict(enumerate(positions)))
    assert sorted(map(tuple, network.edges.tolist())) == sorted(tuple(sorted(e)) for e in expected.edges())
    # Locality: the first and second halves of the agents are compact regions,
    # so far fewer edges cross between them than for a random numbering.
    crossing = ((network.edges[:, 0] < 150) != (network.edges[:, 1] < 150)).mean()
    assert crossing < 0.25


def test_self_loops_and_duplicates_dropped(tmp_path):
    edge_file = tmp_path / "edges.txt"
    edge_file.write_text("# a b\n0 1\n1 0\n1 1\n1 2\n2 3\n0 1\n")
    network = build_network(f"file:{edge_file}", 4)
    np.testing.assert_array_equal(network.edges, [[0, 1], [1, 2], [2, 3]])
    np.testing.assert_array_equal(network.degree, [1, 2, 2, 1])


@pytest.mark.parametrize("spec,message", [
    ("er:p=0.01", "not connected"), ("bogus", "unknown graph spec"), ("er:q=1", "expected p=..."),
    ("torus:rows=5", "does not divide"), ("dataset", "no graph/edges"), ("file:/nonexistent", "cannot read"),
    ("ring:x=1", "takes no parameters"), ("er:p=2", r"p must be a probability"),
    ("er:p=nan", "p must be a probability"), ("rgg:radius=-1", "radius must be a positive"),
    ("ws:k=2,p=5", "p must be a probability"), ("ws:k=12", r"k must be in 0\.\.11"),
])
def test_bad_specs_are_input_errors(spec, message):
    with pytest.raises(InputError, match=message):
        build_network(spec, 12, seed=0)


@pytest.mark.parametrize("seed", range(6))
def test_adjacency_and_tree_against_scipy(seed):
    """The CSR and the breadth-first tree equal scipy's: the sorted unique pairs (self loops
    and repeats in any orientation dropped), and breadth_first_order's predecessors and
    shortest_path's hop counts (-1 where unreached, and the graph then not connected)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, shortest_path

    from nkmpi.graph import spanning_tree
    rng = np.random.default_rng(seed)
    n_agents = int(rng.integers(2, 60))
    pairs = rng.integers(0, n_agents, size=(int(rng.integers(n_agents - 1, 3 * n_agents)), 2))
    network = Network.from_edges(n_agents, np.concatenate([pairs, pairs[::3, ::-1], pairs[:2]]))
    low, high = pairs.min(axis=1), pairs.max(axis=1)
    expected = sorted(set(zip(low[low != high].tolist(), high[low != high].tolist())))
    assert [tuple(e) for e in network.edges.tolist()] == expected
    both = np.array(expected + [(b, a) for a, b in expected]).reshape(-1, 2)
    adjacency = csr_matrix((np.ones(len(both)), (both[:, 0], both[:, 1])), shape=(n_agents, n_agents))
    adjacency.sort_indices()
    np.testing.assert_array_equal(network.indptr, adjacency.indptr)
    np.testing.assert_array_equal(network.indices, adjacency.indices)
    _, parent = breadth_first_order(adjacency, 0, directed=True, return_predecessors=True)
    hops = shortest_path(adjacency, unweighted=True, indices=0)
    connected = bool(np.isfinite(hops).all())
    assert network.is_connected() == connected
    if not connected:
        with pytest.raises(InputError, match="not connected"):
            spanning_tree(network)
        return
    tree = spanning_tree(network)
    np.testing.assert_array_equal(tree.parent, np.where(parent < 0, -1, parent))
    np.testing.assert_array_equal(tree.depth, hops.astype(np.int64))


def test_edges_outside_the_agents_are_rejected():
    with pytest.raises(InputError, match="outside"):
        Network.from_edges(3, [[0, 1], [1, 3]])


def test_stats_against_networkx():
    network = build_network("torus", 16)
    stats = graph_stats(network)
    graph = nx.grid_2d_graph(4, 4, periodic=True)
    assert stats["diameter"] == nx.diameter(graph) == 4
    assert stats["lambda_2"] == pytest.approx(nx.algebraic_connectivity(graph, tol=1e-12), rel=1e-8)
    assert (stats["degree_min"], stats["degree_max"], stats["connected"]) == (4, 4, True)


@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4, 12])
def test_placement_contiguous_nonempty_and_balanced(n_ranks):
    counts = np.array([50, 0, 3, 40, 40, 0, 7, 90, 1, 1, 30, 30])
    bounds = block_placement(counts, n_ranks)
    assert bounds[0] == 0 and bounds[-1] == 12 and (np.diff(bounds) >= 1).all()
    work = np.add.reduceat(counts + 1, bounds[:-1])
    # No block exceeds the ideal share by more than the heaviest single agent.
    assert work.max() <= (counts + 1).sum() / n_ranks + (counts + 1).max()


def test_more_ranks_than_agents_is_an_error():
    with pytest.raises(InputError, match="at most one rank per agent"):
        block_placement(np.ones(3), 4)


def test_concat_ranges():
    starts, stops = np.array([5, 0, 2, 9]), np.array([7, 0, 5, 10])
    np.testing.assert_array_equal(concat_ranges(starts, stops), [5, 6, 2, 3, 4, 9])
