"""Partitions: which agent gets each row.

Every partition is a rule applied row by row, so the same code splits a
dataset held in memory (convert) and a stream of chunks far larger than
memory (generate):

* ``iid``: each row goes to a uniformly random agent;
* ``by-cluster:c``: agent m sees only clusters m*c .. m*c+c-1 (mod K); a row
  of cluster k goes to a random agent among those that see k;
* ``dirichlet:beta``: label skew (Hsu et al. 2019): for each cluster k a
  share vector over agents is drawn from Dirichlet(beta); a row of cluster k
  goes to an agent drawn from it (small beta: few agents per cluster);
* ``spatial``: agents sit at M points of the data (the first 2 features),
  like the nodes of a random geometric graph, and each row goes to the
  nearest agent.
"""

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from nkmpi.errors import InputError

PARTITIONS = ("iid", "by-cluster:c", "dirichlet:beta", "spatial")


@dataclass
class Partition:
    """A parsed partition spec with whatever it drew up front (shares, agent sites)."""

    name: str
    n_agents: int
    per_agent: int = 0
    shares: object = None         # dirichlet: (K, M) cumulative shares over agents
    seen_by: object = None        # by-cluster: list over k of agent arrays
    sites: object = None          # spatial: cKDTree of agent positions

    def agents_of(self, labels, points, rng):
        """Agent of each row of a chunk, drawing from `rng`."""
        if self.name == "iid":
            return rng.integers(self.n_agents, size=len(labels))
        if self.name == "by-cluster":
            agent = np.empty(len(labels), dtype=np.int64)
            for k, agents in enumerate(self.seen_by):
                rows = np.flatnonzero(labels == k)
                agent[rows] = agents[rng.integers(len(agents), size=len(rows))]
            return agent
        if self.name == "dirichlet":
            draws = rng.random(len(labels))
            agent = np.empty(len(labels), dtype=np.int64)
            for k in range(len(self.shares)):
                rows = np.flatnonzero(labels == k)
                agent[rows] = np.searchsorted(self.shares[k], draws[rows], side="right")
            return np.minimum(agent, self.n_agents - 1)
        return self.sites.query(points[:, :2])[1].astype(np.int64)


def check_split(n_agents, seed):
    """Refuse, before any work, what no partition can use: no agent, or a negative seed
    (numpy's random streams take none)."""
    if n_agents < 1:
        raise InputError(f"need at least one agent, got {n_agents}")
    if seed < 0:
        raise InputError(f"the seed must be >= 0, got {seed}")


def parse_partition(spec, n_agents, n_clusters, rng, site_sampler=None):
    """Parse a spec and draw its fixed parts (`check_split` has passed).  `site_sampler(M)`
    gives agent sites for spatial."""
    name, _, arg = spec.partition(":")
    if name == "iid" and not arg:
        return Partition("iid", n_agents)
    if name == "by-cluster":
        try:
            per_agent = int(arg)
        except ValueError:
            raise InputError(f"partition {spec!r}: expected by-cluster:c with an integer c") from None
        if not 1 <= per_agent <= n_clusters:
            raise InputError(f"partition {spec!r}: c must be in 1..{n_clusters}")
        seen_by = [[] for _ in range(n_clusters)]
        for m in range(n_agents):
            for j in range(per_agent):
                seen_by[(m * per_agent + j) % n_clusters].append(m)
        if any(not agents for agents in seen_by):
            raise InputError(f"partition {spec!r}: with {n_agents} agents seeing {per_agent} clusters "
                             f"each, some of the {n_clusters} clusters are seen by no agent")
        return Partition("by-cluster", n_agents, per_agent, seen_by=[np.array(a) for a in seen_by])
    if name == "dirichlet":
        try:
            beta = float(arg)
        except ValueError:
            raise InputError(f"partition {spec!r}: expected dirichlet:beta with a number beta") from None
        if not 0 < beta < np.inf:
            raise InputError(f"partition {spec!r}: beta must be a finite number > 0")
        shares = np.cumsum(rng.dirichlet(np.full(n_agents, beta), size=n_clusters), axis=1)
        return Partition("dirichlet", n_agents, shares=shares)
    if name == "spatial" and not arg:
        sites = site_sampler(n_agents)
        if sites.shape[1] < 2:
            raise InputError("partition spatial needs at least 2 features (agents sit in the first two)")
        return Partition("spatial", n_agents, sites=cKDTree(sites[:, :2]))
    raise InputError(f"unknown partition {spec!r}: use one of {', '.join(PARTITIONS)}")
