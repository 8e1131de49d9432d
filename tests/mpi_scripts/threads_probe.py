"""Under mpiexec: `nkmpi run` that reports, from inside its first local pass, the
BLAS/OpenMP thread pools (threadpoolctl) and the kernels' thread count.

Usage: threads_probe.py nkmpi-run-arguments...   Rank 0 prints one JSON line.
"""

import json
import sys

import numba
from mpi4py import MPI
from threadpoolctl import threadpool_info

from nkmpi.local_pass import LocalPass
from nkmpi.cli import main

original = LocalPass.run
seen = {}


def probing(*args, **kwargs):
    if not seen:
        seen["pools"] = [(pool["internal_api"], pool["num_threads"]) for pool in threadpool_info()]
        seen["kernel_threads"] = numba.get_num_threads()
    return original(*args, **kwargs)


LocalPass.run = probing
status = main(sys.argv[1:])
everything = MPI.COMM_WORLD.gather(seen, root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(everything))
sys.exit(status)
