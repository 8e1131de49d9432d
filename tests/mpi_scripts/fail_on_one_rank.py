"""Under mpiexec: `nkmpi run` whose local pass raises on one chosen rank at one iteration.

Usage: fail_on_one_rank.py RANK ITERATION nkmpi-run-arguments...
"""

import sys

from mpi4py import MPI

from nkmpi import kernels
from nkmpi.cli import main

failing_rank, failing_call = int(sys.argv[1]), int(sys.argv[2])
original = kernels.assign_and_accumulate
calls = 0


def failing(*args, **kwargs):
    global calls
    calls += 1
    if MPI.COMM_WORLD.Get_rank() == failing_rank and calls == failing_call:
        raise RuntimeError(f"injected failure on rank {failing_rank}")
    return original(*args, **kwargs)


kernels.assign_and_accumulate = failing
sys.exit(main(sys.argv[3:]))
