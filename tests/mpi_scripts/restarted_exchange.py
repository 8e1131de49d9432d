"""Under mpiexec: `nkmpi run` whose neighbour exchanges are built with persistent=False, the
path MPI 3 libraries and mpi4py 3 take (Ineighbor_alltoallv started each exchange), whatever
this MPI library offers.

Usage: restarted_exchange.py nkmpi-run-arguments...
"""

import functools
import sys

from nkmpi import driver
from nkmpi.cli import main
from nkmpi.exchange import NeighbourExchange

driver.NeighbourExchange = functools.partial(NeighbourExchange, persistent=False)
sys.exit(main(sys.argv[1:]))
