"""Under mpiexec: `nkmpi run` whose final rename waits a minute, so a test can kill it mid-write."""

import os
import sys
import time

from nkmpi.cli import main


def slow_replace(source, target, replace=os.replace):
    print(f"about to rename {source}", flush=True)
    time.sleep(60)
    replace(source, target)


os.replace = slow_replace
sys.exit(main(sys.argv[1:]))
