"""Under mpiexec: `nkmpi run` that raises on one chosen rank, at start-up or in the loop.

Usage: fail_on_one_rank.py RANK WHERE nkmpi-run-arguments...
WHERE is `startup` (while checking the rows it read), `loop:N` (in its N-th local pass) or
`write` (writing its slice of the result).
"""

import sys

from mpi4py import MPI

from nkmpi.cli import main
from nkmpi.formats import dataset, hdf5
from nkmpi.local_pass import LocalPass

failing_rank, where = int(sys.argv[1]), sys.argv[2]
calls = 0


def wrap(module, name, should_fail):
    original = getattr(module, name)

    def failing(*args, **kwargs):
        global calls
        calls += 1
        if MPI.COMM_WORLD.Get_rank() == failing_rank and should_fail(calls):
            raise RuntimeError(f"injected failure on rank {failing_rank}")
        return original(*args, **kwargs)

    setattr(module, name, failing)


if where == "startup":
    wrap(dataset, "check_rows", lambda call: True)
elif where == "write":
    wrap(hdf5, "_write_own", lambda call: True)
else:
    wrap(LocalPass, "run", lambda call, n=int(where.split(":")[1]): call == n)
sys.exit(main(sys.argv[3:]))
