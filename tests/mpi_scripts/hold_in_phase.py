"""Under mpiexec: `nkmpi run` held in one phase of its start-up until a stop signal arrives,
so that a test can signal it exactly there, whatever the machine's speed.

Usage: hold_in_phase.py PHASE nkmpi-run-arguments...
PHASE is `read` (dataset.read_rows), `seeding` (driver.network_seeding) or `write` (a rank opening
the laid-out result to write its slice into it, or through MPI-IO the ranks creating it
together, once the run is over).  Each rank prints
`in PHASE` when it gets there, waits (at most a minute) until a stop signal has arrived, then
goes on.
"""

import sys
import time

import h5py

from nkmpi import driver, stop
from nkmpi.cli import main
from nkmpi.formats import dataset

PHASES = {"read": (dataset, "read_rows"), "seeding": (driver, "network_seeding"), "write": (h5py, "File")}
module, name = PHASES[sys.argv[1]]
original = getattr(module, name)


def held(*args, **kwargs):
    if name != "File" or args[1:2] == ("r+",) or kwargs.get("driver") == "mpio" and args[1:2] == ("w",):
        print(f"in {sys.argv[1]}", flush=True)
        deadline = time.monotonic() + 60
        while not stop.requested() and time.monotonic() < deadline:
            time.sleep(0.01)
    return original(*args, **kwargs)


setattr(module, name, held)
stop.catch_stop_signals()
sys.exit(main(sys.argv[2:]))
