"""Under mpiexec: `nkmpi run` whose final rename waits a minute, so a test can kill it mid-write."""

import sys
import time

from nkmpi import io
from nkmpi.cli import main


def slow_replace(source, target, replace=io.os.replace):
    print(f"about to rename {source}", flush=True)
    time.sleep(60)
    replace(source, target)


io.os.replace = slow_replace
sys.exit(main(sys.argv[1:]))
