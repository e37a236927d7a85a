"""Keeping freed memory in the process's heap (glibc), for ``train.keep_heap``.

An update allocates and frees the same large tensors (megabytes each) every time. With
glibc's defaults, blocks above a threshold are mapped from the kernel and unmapped when
freed, and free memory at the heap's top above another threshold is handed back; either
way the next update's tensors fault their pages in again, which the kernel zeroes one
at a time: 4,000-11,500 page faults per update of SMAX 5m_vs_6m, against 300-800 with the
heap kept (docs/benchmarks.md, "Freed memory kept in the heap").
"""
from __future__ import annotations

import ctypes
import sys

#: ``mallopt`` parameters (glibc's ``malloc.h``)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: the largest block the heap serves, glibc's maximum for 64-bit processes; larger ones
#: are still mapped
MMAP_THRESHOLD = 32 << 20
#: free memory kept at the heap's top before any is handed back to the kernel
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Serve blocks up to :data:`MMAP_THRESHOLD` from the heap and keep up to
    :data:`TRIM_THRESHOLD` of free memory at its top, for the rest of the process.

    Returns whether the settings were made: ``False`` where the C library is not glibc
    (macOS, musl, Windows), which is left as it is. The process keeps the memory of its
    largest update instead of returning it between updates."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc only; musl has no mallopt
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
