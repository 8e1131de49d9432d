"""Communication and memory model: bytes a rank sends per NK-means iteration, and a
rank's peak resident memory.

A rank sends each neighbour rank the K x p float64 centers of every one of its
agents with a neighbour there, plus one control row:

    bytes = 8 K p (boundary agents + neighbour ranks)

For M agents in contiguous blocks of L = M / R agents:

* ring:  2 neighbour ranks, one boundary agent towards each (R >= 3);
         R = 2: one neighbour rank, both ends of the block.
* torus (rows x cols, row-major, cols >= rows): a block of h = L / cols >= 1
         whole rows sends its first row up and its last row down (h = 1: the
         same row both ways); R = 2 ranks share both boundaries.
* rgg (unit square, radius r, agents numbered along a Morton curve): a block is
         a square region of area a = L / M; the agents within r of the borders it
         shares, r M 4 sqrt(a) (1 - 1 / sqrt(R)) on average, with up to 8
         neighbour ranks.

    python jobs/comm_model.py --agents 1048576 --ranks 1024 -k 8 -p 8

prints the prediction for each graph; tests/test_comm_model.py checks the model
against the byte counts that `nkmpi run` measures.

A rank's peak resident memory (rgg, --init flood, 4 points x p = 4 an agent, K = 4)
follows  fixed + per_network x M + per_rank x M / R : the interpreter, MPI, numba and the
compiled kernels; what every rank holds of every agent (the agents' offsets and ranks, the
rgg positions each rank draws); and its own agents (rows, graph rows, exchange plan,
centers).  RANK_MEMORY holds the constants `make bench` (target 10) fitted on this
project's machine;

    python jobs/comm_model.py --agents 100000000 --ranks 1024 16384

adds the predictions for those sizes.
"""

import argparse
import math


def ring_bytes(n_agents, n_ranks, k, p):
    if n_ranks == 1:
        return 0
    boundary, neighbours = (2, 1) if n_ranks == 2 else (2, 2)
    return 8 * k * p * (boundary + neighbours)


def torus_bytes(n_agents, n_ranks, k, p):
    """Blocks of whole rows of the as-square-as-possible torus (what `--graph torus` builds)."""
    if n_ranks == 1:
        return 0
    rows = max(d for d in range(1, int(math.isqrt(n_agents)) + 1) if n_agents % d == 0)
    cols = n_agents // rows
    per_rank = n_agents // n_ranks
    if per_rank % cols:
        raise ValueError("the torus model needs blocks of whole rows (agents / ranks a multiple of columns)")
    neighbours = 1 if n_ranks == 2 else 2
    return 8 * k * p * (2 * cols + neighbours)


def rgg_bytes(n_agents, n_ranks, k, p, radius):
    """Average over ranks for square Morton blocks (R a power of 4)."""
    if n_ranks == 1:
        return 0
    side = math.sqrt(1 / n_ranks)                  # the side of a block: its area is 1 / R
    boundary = radius * n_agents * 4 * side * (1 - 1 / math.sqrt(n_ranks))
    neighbours = min(8, n_ranks - 1)
    return 8 * k * p * (boundary + neighbours)


#: The per-rank memory model's constants in bytes: fixed, per agent of the network, per agent
#: of the rank; fitted by `python jobs/bench.py` (target 10) on 2026-12-01, on the project's
#: 2-core machine (MPICH, Python 3.11), from 7 runs of 1 to 64 ranks.
RANK_MEMORY = (221.9e6, 13.2, 1859.0)


def rank_memory_bytes(n_agents, n_ranks):
    """A rank's peak resident bytes with M / R agents of an M-agent network (RANK_MEMORY)."""
    fixed, per_network, per_rank = RANK_MEMORY
    return fixed + per_network * n_agents + per_rank * n_agents / n_ranks


def connectivity_radius(n_agents, factor=2.0):
    """A radius that keeps a random geometric graph connected: sqrt(factor ln M / (pi M))."""
    return math.sqrt(factor * math.log(n_agents) / (math.pi * n_agents))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1 << 20)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1024])
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("-p", type=int, default=8)
    parser.add_argument("--radius", type=float, default=None, help="rgg radius (default: connectivity radius)")
    args = parser.parse_args(argv)
    radius = args.radius or connectivity_radius(args.agents)
    for n_ranks in args.ranks:
        print(f"{args.agents} agents on {n_ranks} ranks, K={args.k}, p={args.p}: bytes sent per rank per iteration")
        print(f"  ring   {ring_bytes(args.agents, n_ranks, args.k, args.p):>12,.0f}")
        try:
            print(f"  torus  {torus_bytes(args.agents, n_ranks, args.k, args.p):>12,.0f}")
        except ValueError as exc:
            print(f"  torus  ({exc})")
        print(f"  rgg    {rgg_bytes(args.agents, n_ranks, args.k, args.p, radius):>12,.0f}  (radius {radius:.4g})")
        print(f"  peak resident memory of a rank (rgg, --init flood, 4 points x p = 4 an agent, K = 4): "
              f"{rank_memory_bytes(args.agents, n_ranks) / 2**30:,.2f} GiB")


if __name__ == "__main__":
    main()
