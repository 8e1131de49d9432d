"""The halo plans of all ranks of a run, built in one process, fit together."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkmpi import kernels
from nkmpi.graph import BlockOwners, Network, build_network
from nkmpi.halo import CONTROL, HaloPlan, rank_eccentricity
from nkmpi.init import adopt_from_neighbours

from conftest import agent_edge_sum


def all_plans(network, owner):
    """Every rank's plan; owner : graph.BlockOwners or an (M,) array of ranks."""
    if isinstance(owner, BlockOwners):
        blocks = [np.arange(a, b) for a, b in zip(owner.bounds[:-1], owner.bounds[1:])]
    else:
        blocks = [np.flatnonzero(owner == r) for r in range(int(owner.max()) + 1 if len(owner) else 1)]
    return [HaloPlan.build(network.rows(agents), owner, r) for r, agents in enumerate(blocks)]


def ext_ids(plan):
    """The global id of each row of `ext`: the block's agents, then the rows received (what
    the plan's ext_ids must hold)."""
    return np.concatenate([plan.agents, plan.recv_ids])


def message(plan, ids, counts, displs, other):
    """The part of `ids` (laid out by counts and displs) exchanged with rank `other`."""
    i = int(np.searchsorted(plan.ranks, other))
    assert plan.ranks[i] == other
    return ids[displs[i]:displs[i] + counts[i]]


def check_plans(network, owner):
    plans = all_plans(network, owner)
    centers = np.random.default_rng(network.n_agents).standard_normal((network.n_agents, 3, 2)) * 1e3
    partials = []
    for plan in plans:
        r = plan.rank
        agents = plan.agents
        np.testing.assert_array_equal(owner[agents], r)
        for counts, displs, laid_out in ((plan.send_counts, plan.send_displs, plan.send_index),
                                         (plan.recv_counts, plan.recv_displs, plan.recv_ids)):
            assert len(counts) == len(displs) == len(plan.ranks)
            np.testing.assert_array_equal(displs, np.cumsum(counts) - counts)
            assert counts.sum() == len(laid_out)
        assert r not in plan.ranks and (np.diff(plan.ranks) > 0).all()
        # Each message ends with its one control row.
        last = plan.send_displs + plan.send_counts - 1
        np.testing.assert_array_equal(np.flatnonzero(plan.send_index == CONTROL), last)
        last = plan.recv_displs + plan.recv_counts - 1
        np.testing.assert_array_equal(np.flatnonzero(plan.recv_ids == CONTROL), last)
        np.testing.assert_array_equal(plan.control_rows, len(agents) + last)
        assert plan.n_ext == len(ext_ids(plan))
        np.testing.assert_array_equal(plan.boundary(), [i for i, a in enumerate(agents)
                                                        if (owner[network.neighbours(a)] != r).any()])

        for q in plan.ranks:
            other = plans[q]
            # What r sends q is what q expects from r, in the same order.
            index = message(plan, plan.send_index, plan.send_counts, plan.send_displs, q)
            sent = np.where(index == CONTROL, CONTROL, agents[index])
            expected = message(other, other.recv_ids, other.recv_counts, other.recv_displs, r)
            np.testing.assert_array_equal(sent, expected)
            # Exactly the agents with a neighbour on q, ascending.
            wanted = [a for a in agents if (owner[network.neighbours(a)] == q).any()]
            np.testing.assert_array_equal(sent[:-1], wanted)

        # Every neighbour of every block agent sits at the right row of ext, in ascending id.
        ids = ext_ids(plan)
        np.testing.assert_array_equal(plan.ext_ids, ids)
        assert len(plan.nbr_ptr) == len(agents) + 1 and plan.nbr_ptr[0] == 0
        for i, a in enumerate(agents):
            entries = slice(plan.nbr_ptr[i], plan.nbr_ptr[i + 1])
            np.testing.assert_array_equal(ids[plan.nbr_idx[entries]], network.neighbours(a))
        assert plan.nbr_idx.dtype == np.int32 and (plan.nbr_idx < plan.n_ext).all()
        # The disagreement of this rank's edges, its centers and ghosts laid out as the exchange does.
        ext = np.where((ids >= 0)[:, None, None], centers[np.maximum(ids, 0)], np.nan)
        partials.append(kernels.edge_disagreement(ext, agents, plan.nbr_ptr, plan.nbr_idx, plan.ext_ids))

    # Each edge counted once network-wide, by its lower end, which sums its edges as
    # agent_edge_sum does whatever rank it is on.
    expected = math.fsum(agent_edge_sum(centers, a, [b for b in network.neighbours(a) if b > a])
                         for a in range(network.n_agents))
    assert math.fsum(np.concatenate(partials + [np.zeros(0)])) == expected
    return plans


@pytest.mark.parametrize("spec", ["ring", "path", "star", "complete", "torus", "er:p=0.3", "ws:k=4,p=0.3"])
@pytest.mark.parametrize("n_ranks", [1, 2, 3, 5])
def test_contiguous_blocks(spec, n_ranks):
    network = build_network(spec, 12, seed=1)
    bounds = np.linspace(0, 12, n_ranks + 1).astype(np.int64)
    check_plans(network, BlockOwners(bounds))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 20), st.integers(1, 5), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_any_placement_of_any_graph(n_agents, n_ranks, p, seed):
    """Agents scattered over ranks at random, some ranks empty, graphs not always connected."""
    rng = np.random.default_rng(seed)
    pairs = np.argwhere(np.triu(rng.random((n_agents, n_agents)) < p, 1))
    network = Network.from_edges(n_agents, pairs)
    owner = rng.integers(0, n_ranks, size=n_agents)
    owner[0] = n_ranks - 1                     # so that every rank up to n_ranks - 1 has a plan
    check_plans(network, owner)


def test_one_rank_has_no_remote_neighbours():
    network = build_network("ring", 6)
    (plan,) = check_plans(network, np.zeros(6, dtype=np.int64))
    assert len(plan.ranks) == len(plan.send_index) == len(plan.recv_ids) == len(plan.control_rows) == 0
    assert plan.n_ext == 6
    assert rank_eccentricity([plan.ranks], 0) == 0


def test_components_on_their_own_ranks_talk_to_no_one():
    network = Network.from_edges(6, [[0, 1], [1, 2], [3, 4], [4, 5]])
    plans = check_plans(network, np.array([0, 0, 0, 1, 1, 1]))
    for plan in plans:
        assert len(plan.ranks) == 0 and plan.n_ext == 3


def test_empty_block():
    network = build_network("ring", 6)
    plans = check_plans(network, np.array([0, 0, 0, 2, 2, 2]))
    empty = plans[1]
    assert len(empty.agents) == len(empty.ranks) == len(empty.nbr_idx) == 0
    np.testing.assert_array_equal(empty.nbr_ptr, [0])
    assert 1 not in plans[0].ranks and 1 not in plans[2].ranks


@pytest.mark.parametrize("spec,n_ranks,diameter", [("ring", 4, 2), ("ring", 2, 1), ("path", 5, 4),
                                                   ("star", 4, 2), ("complete", 3, 1)])
def test_rank_graph_diameter(spec, n_ranks, diameter):
    network = build_network(spec, 12)
    bounds = np.linspace(0, 12, n_ranks + 1).astype(np.int64)
    plans = all_plans(network, BlockOwners(bounds))
    neighbours = [plan.ranks for plan in plans]
    assert max(rank_eccentricity(neighbours, rank) for rank in range(n_ranks)) == diameter


@pytest.mark.parametrize("n_ranks", [3, 17, 64])
def test_rank_eccentricity_is_networkx_eccentricity(n_ranks):
    """Each rank's breadth-first search gives networkx's eccentricity of that rank in the rank
    graph of blocks of a geometric graph (a patchwork of regions: an irregular rank graph)."""
    network = build_network("rgg:radius=0.12", 400, seed=3)
    plans = all_plans(network, BlockOwners(np.linspace(0, 400, n_ranks + 1).astype(np.int64)))
    ranks = nx.Graph()
    ranks.add_nodes_from(range(n_ranks))
    ranks.add_edges_from((rank, other) for rank, plan in enumerate(plans) for other in plan.ranks)
    expected = nx.eccentricity(ranks)
    assert [rank_eccentricity([plan.ranks for plan in plans], rank) for rank in range(n_ranks)] == \
        [expected[rank] for rank in range(n_ranks)]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 30), st.integers(1, 4), st.floats(0.0, 0.4), st.integers(0, 2**32 - 1))
def test_flood_rounds_take_what_every_agent_would_take(n_agents, n_ranks, p, seed):
    """adopt_from_neighbours, which looks only at agents next to a change, against the rule
    it implements applied to every agent: each agent without centers takes those of its
    lowest-numbered neighbour that had them at the start of the round.  Every rank's
    block goes through its plan and an exchange of its ghosts, round by round."""
    rng = np.random.default_rng(seed)
    pairs = np.argwhere(np.triu(rng.random((n_agents, n_agents)) < p, 1))
    network = Network.from_edges(n_agents, pairs)
    owner = rng.integers(0, n_ranks, size=n_agents)
    owner[0] = n_ranks - 1
    plans = all_plans(network, owner)
    expected = np.full((n_agents, 2, 3), np.nan)
    seeded = rng.random(n_agents) < 0.15
    seeded[rng.integers(n_agents)] = True
    expected[seeded] = rng.standard_normal((int(seeded.sum()), 2, 3))
    exts = [np.full((plan.n_ext, 2, 3), 7.0) for plan in plans]     # control rows: never a source
    changed = []
    for plan, ext in zip(plans, exts):
        ext[:plan.n_local] = expected[plan.agents]
        changed.append(np.flatnonzero(seeded[plan.agents]))
    boundaries = [plan.boundary() for plan in plans]
    queued = [np.zeros(plan.n_local, dtype=bool) for plan in plans]
    for _ in range(n_agents + 1):
        before = expected.copy()
        for m in range(n_agents):
            if np.isnan(before[m, 0, 0]):
                for neighbour in network.neighbours(m):             # ascending: lowest id wins
                    if not np.isnan(before[neighbour, 0, 0]):
                        expected[m] = before[neighbour]
                        break
        for plan, ext in zip(plans, exts):                          # the exchange
            ghosts = plan.recv_ids != CONTROL
            ext[plan.n_local:][ghosts] = before[plan.recv_ids[ghosts]]
        for r, (plan, ext) in enumerate(zip(plans, exts)):
            taken = adopt_from_neighbours(ext[:plan.n_local], ext, plan.nbr_ptr, plan.nbr_idx, changed[r],
                                          boundaries[r], queued[r])
            was_lacking = np.isnan(before[plan.agents, 0, 0])
            np.testing.assert_array_equal(np.sort(taken), np.flatnonzero(was_lacking & ~np.isnan(
                expected[plan.agents, 0, 0])))
            np.testing.assert_array_equal(ext[:plan.n_local], expected[plan.agents])
            assert not queued[r].any()
            changed[r] = taken
        if np.array_equal(before, expected, equal_nan=True):
            break
    reached = np.zeros(n_agents, dtype=bool)                        # every agent connected to a seed
    for component in nx.connected_components(network.to_networkx()):
        reached[list(component)] = seeded[list(component)].any()
    np.testing.assert_array_equal(~np.isnan(expected[:, 0, 0]), reached)
