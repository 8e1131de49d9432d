"""A rank's memory: how much it holds, and handing back what set-up freed.

A rank's peak resident memory is what a cluster's per-core memory must hold, and
what every result records (`rank_peak_resident_bytes`).  Set-up builds large
temporaries (the graph's rows, the exchange plan) and frees them; arrays below
glibc malloc's mmap threshold (up to 32 MB, raised as large arrays come and go)
are freed into the heap and stay resident, so the loop's arrays would stack on
them.  `release_freed_memory` hands them back between set-up's steps.
"""

import ctypes
import os
import resource


def release_freed_memory() -> None:
    """Return the heap's free memory to the system (glibc's malloc_trim; nothing elsewhere)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def resident_bytes() -> int:
    """This process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return peak_resident_bytes()


def peak_resident_bytes() -> int:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
