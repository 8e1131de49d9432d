"""Graph specs, their cleaning, connectivity, statistics and placement on ranks."""

import warnings
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from scipy.spatial import cKDTree
from scipy.stats import chisquare, kstest

from conftest import run_script
from nkmpi import graph
from nkmpi.errors import InputError
from nkmpi.graph import (ER_TILE, RGG_MAX_LEVEL, RGG_TILE_AGENTS, BlockOwners, Network, _er_tile_edges,
                         _ws_tile_rewirings, block_placement, build_network, concat_ranges, graph_stats, local_graph,
                         rgg_level, rgg_positions, rgg_tile_level)

SCRIPTS = Path(__file__).parent / "mpi_scripts"


@pytest.mark.parametrize("spec,expected", [
    ("ring", nx.cycle_graph(12)), ("path", nx.path_graph(12)), ("complete", nx.complete_graph(12)),
    ("star", nx.star_graph(11)),
    ("torus", nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 4, periodic=True), ordering="sorted")),
    ("ws:k=4,p=0", nx.watts_strogatz_graph(12, 4, 0, seed=3)), ("ws:k=6,p=0", nx.watts_strogatz_graph(12, 6, 0, seed=3)),
])
def test_specs_build_the_networkx_graphs(spec, expected):
    network = build_network(spec, 12, seed=3)
    expected_edges = sorted(tuple(sorted(e)) for e in expected.edges())
    assert [tuple(e) for e in network.edges.tolist()] == expected_edges
    for m in range(12):                          # CSR lists each agent's neighbours ascending
        assert list(network.neighbours(m)) == sorted(expected.neighbors(m))


def test_rgg_is_the_networkx_graph_of_its_positions_numbered_along_a_curve():
    network = build_network("rgg:radius=0.2", 300, seed=5)
    positions = rgg_positions(300, seed=5)[0]
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
    ("torus:rows=5", "does not divide"), ("dataset", "the dataset has no graph"), ("file:/nonexistent", "cannot read"),
    ("ring:x=1", "takes no parameters"), ("er:p=2", r"p must be a probability"),
    ("er:p=nan", "p must be a probability"), ("rgg:radius=-1", "radius must be a positive"),
    ("ws:k=2,p=5", "p must be a probability"), ("ws:k=12", r"k must be in 0\.\.11"),
    ("ws:k=3", "k must be even"), ("ws:k=2,p=0.5,k=4", "k given twice"),
])
def test_bad_specs_are_input_errors(spec, message):
    with pytest.raises(InputError, match=message):
        build_network(spec, 12, seed=0)


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_edge_file_without_edges_is_refused_without_a_warning(tmp_path, text):
    edges = tmp_path / "edges.txt"
    edges.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # numpy's "input contained no data" would fail here
        with pytest.raises(InputError, match="lists no edges, and 12 agents need some"):
            build_network(f"file:{edges}", 12)
        assert len(build_network(f"file:{edges}", 1).edges) == 0


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


def independent_network(spec, n_agents, seed):
    """The whole graph of `spec` built another way: by networkx, for rgg by scipy's k-d
    tree over the agents' positions, for er from every pair of tiles, for ws edge by edge
    from every tile's rewirings; None when torus rows do not divide the agents."""
    name, _, arg = spec.partition(":")
    value = float(arg.partition("=")[2]) if arg and name != "ws" else None
    if name == "rgg":
        edges = cKDTree(rgg_positions(n_agents, seed)[0]).query_pairs(value, output_type="ndarray")
    elif name == "torus":
        rows = int(value) if arg else max(d for d in range(1, int(np.sqrt(n_agents)) + 1) if n_agents % d == 0)
        if n_agents % rows:
            return None
        cols = n_agents // rows
        edges = [(a * cols + b, c * cols + d) for (a, b), (c, d) in
                 nx.grid_2d_graph(rows, cols, periodic=True).edges()]
    elif name == "ws":                  # the lattice, less the rewired edges, plus their new ends
        half, p = int(arg.split(",")[0].partition("=")[2]) // 2, float(arg.split(",")[1].partition("=")[2])
        edges = {(u, (u + j) % n_agents) for u in range(n_agents) for j in range(1, half + 1)}
        shortcuts = set()
        for tile in range(-(-n_agents // graph.ER_TILE) if half else 0):    # (ER_TILE as a test sets it)
            numbers, sources, targets = _ws_tile_rewirings(n_agents, half, p, seed, tile)
            for number, u, w in zip(numbers.tolist(), sources.tolist(), targets.tolist()):
                edges.discard((u, (u + number % half + 1) % n_agents))
                shortcuts.add((u, w))       # kept even where it lands on a lattice edge rewired away
        edges = sorted(edges | shortcuts)
    elif name == "er":                  # every tile pair drawn, as no rank of a run does
        n_tiles = -(-n_agents // ER_TILE)
        edges = np.concatenate([_er_tile_edges(n_agents, value, seed, t, u)
                                for t in range(n_tiles) for u in range(t, n_tiles)] or [np.zeros((0, 2), int)])
    else:
        built = {"ring": nx.cycle_graph, "path": nx.path_graph, "complete": nx.complete_graph,
                 "star": lambda m: nx.star_graph(m - 1) if m > 1 else nx.empty_graph(m)}[name](n_agents)
        edges = list(built.edges())
    return Network.from_edges(n_agents, np.array(edges, dtype=np.int64).reshape(-1, 2))


@pytest.mark.parametrize("spec", ["ring", "path", "star", "complete", "torus", "torus:rows=2", "torus:rows=1",
                                  "rgg:radius=0.3", "rgg:radius=0.05", "rgg:radius=0.7", "rgg:radius=3", "er:p=0.4",
                                  "ws:k=2,p=0.5", "ws:k=0,p=0.5"])
@pytest.mark.parametrize("n_agents", [1, 2, 3, 5, 12, 30, 257])
def test_local_rows_are_the_whole_graphs_rows(spec, n_agents):
    """A rank's rows, built without the rest of the graph, are the rows of the whole graph
    built another way (networkx, or a k-d tree for rgg), for blocks, scattered agents and no
    agents; and so is the whole Network."""
    if spec.startswith("ws:k=2") and n_agents <= 2:    # k below the agents, or no ws
        with pytest.raises(InputError, match="k must be in"):
            local_graph(spec, n_agents, np.arange(n_agents), seed=4)
        return
    whole = independent_network(spec, n_agents, seed=4)
    if whole is None:                              # torus rows that do not divide the agents
        with pytest.raises(InputError, match="does not divide"):
            local_graph(spec, n_agents, np.arange(n_agents), seed=4)
        return
    if whole.is_connected():
        np.testing.assert_array_equal(build_network(spec, n_agents, seed=4).edges, whole.edges)
    rng = np.random.default_rng(n_agents)
    for agents in (np.arange(n_agents), np.arange(n_agents // 3, n_agents // 2), np.zeros(0, np.int64),
                   np.sort(rng.choice(n_agents, (n_agents + 1) // 2, replace=False))):
        try:
            rows, connected = local_graph(spec, n_agents, agents, seed=4)
        except InputError as exc:                  # a source built whole refuses a disconnected graph
            assert not whole.is_connected() and "not connected" in str(exc)
            continue
        expected = whole.rows(agents)
        np.testing.assert_array_equal(rows.agents, agents)
        np.testing.assert_array_equal(rows.indptr, expected.indptr)
        np.testing.assert_array_equal(rows.indices, expected.indices)
        assert whole.is_connected() or not connected


@pytest.mark.parametrize("n_agents, radius, tile_agents", [
    (20_000, 0.013, RGG_TILE_AGENTS), (5_000, 0.0004, RGG_TILE_AGENTS), (3_000, 0.5, RGG_TILE_AGENTS),
    (4_500, 0.55, RGG_TILE_AGENTS), (3_000, 0.2, 64), (3_000, 0.03, 16)])
def test_local_rgg_rows_are_the_k_d_trees_at_scale(monkeypatch, n_agents, radius, tile_agents):
    """Many cells of the search grid (64 x 64 here) and 16 tiles, rows cut anywhere; a
    radius far below the cells' width; one that puts every agent in the 3 x 3 cells around any
    one; search cells of 2 x 2 tiles (4,500 agents: one cell, the square; 3,000 agents in 64
    tiles: 4 x 4 cells); and 256 tiles of 2 x 2 search cells each: a block of agents, and
    agents scattered over the square."""
    monkeypatch.setattr(graph, "RGG_TILE_AGENTS", tile_agents)
    whole = independent_network(f"rgg:radius={radius}", n_agents, seed=2)
    rng = np.random.default_rng(n_agents)
    for agents in (np.arange(n_agents // 5, 3 * n_agents // 4), np.sort(rng.choice(n_agents, 300, replace=False))):
        rows, connected = local_graph(f"rgg:radius={radius}", n_agents, agents, seed=2)
        expected = whole.rows(agents)
        assert not connected                       # random: the ranks check it (nkmpi.connectivity)
        np.testing.assert_array_equal(rows.indptr, expected.indptr)
        np.testing.assert_array_equal(rows.indices, expected.indices)


def test_rgg_positions_are_uniform_and_numbered_along_the_curve():
    """Drawn tile by tile (64 tiles of about 1,560 agents here), the positions are uniform in
    the square (in x, in y, and over an 8 x 8 grid of tiles' size) and their Morton codes
    ascend with the agents' ids; a graph of up to RGG_TILE_AGENTS agents is one tile."""
    n_agents = 100_000
    assert rgg_tile_level(n_agents) == 3 and rgg_tile_level(RGG_TILE_AGENTS) == 0
    positions, codes = rgg_positions(n_agents, seed=7)
    assert positions.shape == (n_agents, 2) and (np.diff(codes.astype(np.int64)) >= 0).all()
    assert ((positions >= 0) & (positions < 1)).all()
    for axis in (0, 1):
        assert kstest(positions[:, axis], "uniform").pvalue > 1e-3
    cells = np.bincount((positions * 8).astype(int) @ [1, 8], minlength=64)
    assert chisquare(cells).pvalue > 1e-3


def test_a_ranks_rgg_rows_draw_only_the_tiles_around_its_agents(monkeypatch):
    """10^6 agents in 256 tiles: a sixteenth of them, a compact block along the curve, draws
    its tiles and their neighbours', not all 256, and its rows are the k-d tree's over the
    whole square's positions."""
    n_agents, radius = 10**6, 0.003
    drawn, tile = [], graph._rgg_tile

    def counted(level, t, n, seed):
        drawn.append(t)
        return tile(level, t, n, seed)

    monkeypatch.setattr(graph, "_rgg_tile", counted)
    agents = np.arange(5 * n_agents // 16, 6 * n_agents // 16)
    rows, _ = local_graph(f"rgg:radius={radius}", n_agents, agents, seed=1)
    assert rgg_tile_level(n_agents) == 4 and len(set(drawn)) == len(drawn) <= 48, sorted(drawn)
    monkeypatch.undo()
    positions = rgg_positions(n_agents, seed=1)[0]
    near = cKDTree(positions).query_ball_point(positions[agents], radius, return_sorted=True)
    expected = [[b for b in found if b != a] for a, found in zip(agents.tolist(), near)]
    np.testing.assert_array_equal(np.diff(rows.indptr), list(map(len, expected)))
    np.testing.assert_array_equal(rows.indices, np.concatenate(expected))


@pytest.mark.parametrize("n_agents", [0, 1, 2, 5, 10**3, 10**8])
def test_rgg_cells_are_never_narrower_than_the_radius(n_agents):
    """Every neighbour lies in the 3 x 3 cells around an agent's own only if a cell is at
    least the radius wide (or one cell is the whole square): also for radii a rounding away
    from a power of two, where log2 rounds to the next level.  The finest such level, unless
    it would give more cells than 4 x the agents or pass RGG_MAX_LEVEL."""
    fewest = 0
    while 4**fewest < n_agents:                     # the fewest levels with a cell for each agent
        fewest += 1
    for k in range(RGG_MAX_LEVEL + 2):
        for radius in (2.0**-k, 2.0**-k * (1 + 2**-52), 2.0**-k * (1 - 2**-53), 0.75 * 2.0**-k):
            widest = 0
            while 2.0**-(widest + 1) >= radius:
                widest += 1
            level = rgg_level(n_agents, radius)
            assert level == 0 or 2.0**-level >= radius
            assert level == min(widest, fewest, RGG_MAX_LEVEL), (radius, level)


def test_fingerprint_share_counts_every_edge_and_its_ends():
    """Shares of any split add up to the whole's; another graph of as many edges differs."""
    ring, path = build_network("ring", 9), build_network("path", 10)
    whole = ring.rows(np.arange(9)).fingerprint_share()
    assert sum(ring.rows(np.arange(a, b)).fingerprint_share() for a, b in ((0, 2), (2, 7), (7, 9))) % 2**64 == whole
    assert path.rows(np.arange(10)).fingerprint_share() != whole
    moved = Network.from_edges(9, np.vstack([ring.edges[1:], [[0, 2]]]))
    assert moved.rows(np.arange(9)).fingerprint_share() != whole


@pytest.mark.mpi
@pytest.mark.parametrize("n_ranks", [1, 2, 3])
def test_ranks_decide_connectivity_as_the_whole_graph_does(n_ranks):
    """nkmpi.connectivity on each rank's rows against Network.is_connected, over graphs
    connected or not and placements in blocks or scattered (tests/mpi_scripts/connectivity.py)."""
    proc = run_script(n_ranks, SCRIPTS / "connectivity.py")
    assert proc.returncode == 0, proc.stderr
    assert "graphs checked: 120" in proc.stdout, proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("n_ranks", [1, 2, 3])
def test_ranks_grow_the_whole_graphs_spanning_tree(n_ranks):
    """nkmpi.tree.local_spanning_tree from each rank's rows against graph.spanning_tree of the
    whole graph, over graphs of every kind in blocks or scattered (tests/mpi_scripts/spanning_tree.py)."""
    proc = run_script(n_ranks, SCRIPTS / "spanning_tree.py")
    assert proc.returncode == 0, proc.stderr
    assert "trees checked: 60" in proc.stdout, proc.stdout


@pytest.mark.parametrize("seed", range(5))
def test_block_owners_answer_as_the_array_of_owners(seed):
    """BlockOwners[ids] equals the (M,) array of each agent's rank, empty blocks included, for
    arrays of ids in any order and for one id."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, size=int(rng.integers(1, 9)))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    if bounds[-1] == 0:
        bounds[-1] = 1
    array = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    owners = BlockOwners(bounds)
    assert len(owners) == len(array)
    ids = rng.integers(0, len(array), size=20)
    np.testing.assert_array_equal(owners[ids], array[ids])
    assert [int(owners[i]) for i in range(len(array))] == array.tolist()


@pytest.mark.parametrize("n_agents, p", [(12, 0.3), (300, 0.05), (3000, 0.01), (40000, 0.0005), (50, 1.0),
                                         (50, 0.0)])
def test_er_draws_each_pair_once_with_probability_p(n_agents, p):
    """er:p has about p M (M-1) / 2 edges (within 5 standard deviations), each pair at most
    once, a < b; as many within each tile and between tiles as their pairs say (40,000
    agents are three tiles); and no rank's rows depend on which other agents it holds."""
    edges = build_network(f"er:p={p}", n_agents, seed=5, require_connected=False).edges
    pairs = n_agents * (n_agents - 1) / 2
    assert abs(len(edges) - p * pairs) <= 5 * np.sqrt(pairs * p * (1 - p)) + 1e-9
    assert (edges[:, 0] < edges[:, 1]).all() and len(np.unique(edges, axis=0)) == len(edges)
    tile = edges // ER_TILE
    for t in range(-(-n_agents // ER_TILE)):
        for u in range(t, -(-n_agents // ER_TILE)):
            sizes = [min(ER_TILE, n_agents - x * ER_TILE) for x in (t, u)]
            tile_pairs = sizes[0] * (sizes[0] - 1) / 2 if t == u else sizes[0] * sizes[1]
            found = ((tile[:, 0] == t) & (tile[:, 1] == u)).sum()
            assert abs(found - p * tile_pairs) <= 5 * np.sqrt(tile_pairs * p * (1 - p)) + 1e-9, (t, u)
    assert not np.array_equal(edges, build_network(f"er:p={p}", n_agents, seed=6, require_connected=False).edges) \
        or p in (0.0, 1.0)


def test_er_rows_across_tiles_are_the_whole_graphs_rows():
    """A block across tile boundaries, and scattered agents, of er over three tiles: each
    rank's rows, from the tile pairs it holds an agent of, are the whole graph's."""
    n_agents, spec = 40000, "er:p=0.0003"
    whole = build_network(spec, n_agents, seed=2, require_connected=False)
    rng = np.random.default_rng(0)
    for agents in (np.arange(10000, 35000), np.sort(rng.choice(n_agents, 500, replace=False)), np.arange(5)):
        rows, connected = local_graph(spec, n_agents, agents, seed=2)
        expected = whole.rows(agents)
        assert not connected
        np.testing.assert_array_equal(rows.indptr, expected.indptr)
        np.testing.assert_array_equal(rows.indices, expected.indices)


@pytest.mark.parametrize("n_agents, k, p, tile", [(1000, 4, 0.3, 64), (1000, 6, 1.0, 64), (4097, 2, 0.05, 256),
                                                 (300, 8, 0.5, 16), (130, 4, 0.2, 64)])
def test_ws_of_many_tiles_local_rows_are_the_whole_graphs_rows(monkeypatch, n_agents, k, p, tile):
    """A ws graph of many tiles: a rank's rows, whose rewirings that land on its agents come
    from the permutations run backwards (WsDraws.landing_in), are the rows of the whole
    graph built edge by edge from every tile's rewirings, run forwards; for blocks, scattered
    agents, one agent and the first and last (whose lattice edges wrap around)."""
    monkeypatch.setattr(graph, "ER_TILE", tile)
    spec = f"ws:k={k},p={p}"
    whole = independent_network(spec, n_agents, seed=5)
    rng = np.random.default_rng(n_agents)
    for agents in (np.arange(n_agents), np.arange(n_agents // 3, n_agents // 2), np.array([n_agents // 2]),
                   np.array([0, n_agents - 1]), np.sort(rng.choice(n_agents, n_agents // 7, replace=False))):
        rows, connected = local_graph(spec, n_agents, agents, seed=5)
        expected = whole.rows(agents)
        assert not connected
        np.testing.assert_array_equal(rows.indptr, expected.indptr)
        np.testing.assert_array_equal(rows.indices, expected.indices)


@pytest.mark.parametrize("size", [2, 3, 6, 16, 100])
def test_the_rewirings_permutations_are_uniform_on_small_ranges(size):
    """graph._permuted over 40,000 keys, for ranges as small as a last tile of a few agents
    gives: the first `size // 2` places (a tile's rewired edges) hold each edge with
    frequency 1/2 and any two edges independently, within 5 standard deviations."""
    keys = 40_000
    chosen = size // 2
    images = graph._permuted(np.tile(np.arange(chosen), keys), np.full(keys * chosen, size),
                             np.repeat(np.arange(keys), chosen), 9, False).reshape(keys, chosen)
    held = np.zeros((keys, size), dtype=bool)
    np.put_along_axis(held, images, True, axis=1)
    rate = chosen / size
    sd = np.sqrt(rate * (1 - rate) / keys)
    assert np.abs(held.mean(0) - rate).max() <= 5 * sd
    both = held[:, :, None] & held[:, None, :]
    pair = chosen * (chosen - 1) / (size * (size - 1))              # two given edges both held
    off_diagonal = both.mean(0)[~np.eye(size, dtype=bool)]
    assert np.abs(off_diagonal - pair).max() <= 5 * np.sqrt(pair * (1 - pair) / keys) + 1e-12


def test_ws_rewirings_of_many_tiles_are_independent_and_uniform(monkeypatch):
    """Drawn by WsDraws (79 tiles): each lattice edge is rewired at most once, their number
    is Binomial(M k/2, p) and spread over the tiles as their edges are, each residue j alike,
    and the new ends are uniform over the agents (KS and chi-squared) and never the source."""
    monkeypatch.setattr(graph, "ER_TILE", 256)
    n_agents, half, p = 20_000, 2, 0.3
    draws = graph.WsDraws.draw(n_agents, half, p, seed=11)
    numbers, sources, targets = map(np.concatenate, zip(*(draws.of_tile(t) for t in range(-(-n_agents // 256)))))
    trials = n_agents * half
    assert len(np.unique(numbers)) == len(numbers)
    assert abs(len(numbers) - trials * p) <= 5 * np.sqrt(trials * p * (1 - p))
    assert (targets != sources).all() and targets.min() >= 0 and targets.max() < n_agents
    np.testing.assert_array_equal(sources, numbers // half)
    per_tile = np.bincount(sources // 256)
    assert chisquare(per_tile, np.minimum(256, n_agents - np.arange(len(per_tile)) * 256) * half * p
                     * len(numbers) / (trials * p)).pvalue > 1e-3
    assert chisquare(np.bincount(numbers % half)).pvalue > 1e-3
    assert kstest(targets / n_agents, "uniform").pvalue > 1e-3
    assert chisquare(np.bincount(targets * 50 // n_agents, minlength=50)).pvalue > 1e-3
    # From the other end: the rewirings landing in every tile are the same rewirings.
    landing_sources, landing_targets = draws.landing_in(np.arange(-(-(n_agents - 1) // 256)))
    np.testing.assert_array_equal(np.sort(landing_sources * n_agents + landing_targets),
                                  np.sort(sources * n_agents + targets))


def test_ws_rows_of_a_block_draw_only_its_tiles_rewirings(monkeypatch):
    """A rank's rows of a ws graph of 10^6 agents (62 tiles) draw the rewirings of the two
    tiles that hold its agents and those landing there (about as many), not all 200,000."""
    tiles, landing = [], []
    of_tile, landing_in = graph.WsDraws.of_tile, graph.WsDraws.landing_in

    def counted_landing_in(self, target_tiles):
        found = landing_in(self, target_tiles)
        landing.append(len(found[0]))
        return found
    monkeypatch.setattr(graph.WsDraws, "of_tile", lambda self, tile: tiles.append(tile) or of_tile(self, tile))
    monkeypatch.setattr(graph.WsDraws, "landing_in", counted_landing_in)
    local_graph("ws:k=4,p=0.1", 1_000_000, np.arange(500_000, 520_000), seed=3)
    assert tiles == [500_000 // ER_TILE, 519_999 // ER_TILE]
    assert sum(landing) < 2 * 2 * ER_TILE * 2 * 0.1        # two tiles' worth, not 200,000


@pytest.mark.parametrize("n_agents, k, p", [(12, 4, 0.3), (3000, 4, 0.1), (40000, 6, 0.2), (50, 4, 1.0)])
def test_ws_rewires_each_lattice_edge_with_probability_p(n_agents, k, p):
    """ws:k,p keeps about (1 - p) of the ring lattice's M k/2 edges (within 5 standard
    deviations, plus the rewired edges that land back on the lattice, about k/M of them),
    has about M k/2 edges in all (rewired ones merge only where they land on an edge
    already there), and gives each rank's agents, across tiles and scattered, the whole
    graph's rows (40,000 agents are three tiles)."""
    spec = f"ws:k={k},p={p}"
    network = build_network(spec, n_agents, seed=2, require_connected=False)
    edges = set(map(tuple, network.edges.tolist()))
    half = k // 2
    lattice = {tuple(sorted((u, (u + j) % n_agents))) for u in range(n_agents) for j in range(1, half + 1)}
    trials = len(lattice)
    landing_back = p * 2 * half / (n_agents - 1)
    kept = len(edges & lattice)
    assert abs(kept - trials * (1 - p + landing_back)) <= 5 * np.sqrt(trials * p * (1 - p)) + 1 + trials * landing_back
    assert trials * (1 - 2 * half / n_agents) - 5 <= len(edges) <= trials
    rng = np.random.default_rng(1)
    for agents in (np.arange(n_agents // 3, 2 * n_agents // 3), np.sort(rng.choice(n_agents, n_agents // 5))):
        agents = np.unique(agents)
        rows, connected = local_graph(spec, n_agents, agents, seed=2)
        expected = network.rows(agents)
        assert not connected
        np.testing.assert_array_equal(rows.indptr, expected.indptr)
        np.testing.assert_array_equal(rows.indices, expected.indices)
