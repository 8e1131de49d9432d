"""A rank's memory: how much it holds, and handing back what set-up freed.

A rank's peak resident memory is what a cluster's per-core memory must hold, and
what every result records (`rank_peak_resident_bytes`).  Set-up builds large
temporaries (the graph's rows, the exchange plan) and frees them; arrays below
glibc malloc's mmap threshold (up to 32 MB, raised as large arrays come and go)
are freed into the heap and stay resident, so the loop's arrays would stack on
them.  `release_freed_memory` hands them back between set-up's steps, and
`release_compiler_code` the compiler's code pages once the kernels are loaded.
"""

import ctypes
import os
import resource

import numpy as np


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


#: The shared libraries of numba's compiler, by the start of their file names: llvmlite's, with
#: LLVM linked in (the wheels), or beside it (builds that link a system or conda libLLVM).
COMPILER_LIBRARIES = ("libllvmlite", "libLLVM")
_MADV_DONTNEED = 4          # Linux's value (asm-generic/mman-common.h)
# Linux's /proc/self/pagemap (Documentation/admin-guide/mm/pagemap.rst): 8 bytes a page, bit 63
# set when the page is in memory, bit 61 when it is a file's page (not a private, anonymous one).
_PAGEMAP_ENTRY = 8
_PAGE_PRESENT = np.uint64(1 << 63)
_PAGE_FILE = np.uint64(1 << 61)


def release_compiler_code() -> int:
    """Unmap the compiler's code pages from this process once its kernels are loaded; returns
    the resident bytes let go.

    Loading numba's kernels runs LLVM's start-up code, and the kernel maps the pages around
    every page it touches: about 68 MB of LLVM's text and read-only data stay resident
    in each rank, counted in its resident memory (what SLURM's accounting and
    `rank_peak_resident_bytes` report) though all ranks of a node share them through the page
    cache and the loop never runs LLVM.  madvise(MADV_DONTNEED) drops this process's mapping
    of them: the file's pages stay in the page cache, and code that runs later (a kernel
    compiled for new types) faults its pages back in.  Only mappings that cannot be written and
    hold no private (relocated) page are touched, so nothing but the file's own contents is let
    go.  Linux only; elsewhere, or on any failure, nothing happens.
    """
    try:
        mappings = library_mappings(COMPILER_LIBRARIES)
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, ValueError, IndexError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for (start, stop), perms, resident, private in mappings:
        if "w" not in perms and private == 0 and resident and madvise(start, stop - start, _MADV_DONTNEED) == 0:
            released += resident
    return released


def library_mappings(libraries: str | tuple[str, ...]) -> list:
    """This process's mappings of the shared libraries whose file names start with
    `libraries` (one, or a tuple): ((start, stop), perms, resident bytes, anonymous bytes)
    each.  The mappings from /proc/self/maps, their pages' flags from /proc/self/pagemap
    (a page in memory, and whether it is the file's or a private copy): 3 ms, where
    /proc/self/smaps, which measures every mapping of the process, took 9."""
    page = os.sysconf("SC_PAGE_SIZE")
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) > 5 and os.path.basename(fields[5]).startswith(libraries):
                start, stop = (int(address, 16) for address in fields[0].split("-"))
                found.append(((start, stop), fields[1]))
    mappings = []
    pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for (start, stop), perms in found:
            size = (stop - start) // page * _PAGEMAP_ENTRY
            entries = os.pread(pagemap, size, start // page * _PAGEMAP_ENTRY)
            if len(entries) != size:
                raise OSError(f"/proc/self/pagemap gave {len(entries)} of {size} bytes")
            flags = np.frombuffer(entries, dtype=np.uint64)
            present = (flags & _PAGE_PRESENT) != 0
            copied = present & ((flags & _PAGE_FILE) == 0)
            mappings.append(((start, stop), perms, int(present.sum()) * page, int(copied.sum()) * page))
    finally:
        os.close(pagemap)
    return mappings
