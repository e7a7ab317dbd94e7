"""The C allocator of a long-running worker (glibc only).

glibc serves a request of 128 KiB or more with a mapping of its own, returned to the system when it
is freed, but it raises that threshold to the size of every such block freed (up to 32 MiB): once
the worker has freed one large fetch response or produce buffer, later ones of that size come from
the heap, where they leave holes the heap keeps after the backlog that needed them has drained.
Under a fleet's load that grew the worker's peak RSS by about a tenth (docs/PERFORMANCE.md, "Worker
memory"). :func:`keep_large_blocks_mapped` fixes the threshold at 64 KiB, which also stops it from
moving: every fetch response, produce buffer and compression buffer of that size or more is mapped
on its own and given back whole when freed.

A threshold the user gives glibc (``MALLOC_MMAP_THRESHOLD_`` in the environment) is left as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

#: ``mallopt``'s parameter number for the threshold (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
#: a block of this size or larger gets a mapping of its own (glibc starts at 128 KiB; in alternating
#: runs of the pipeline part 64 KiB gave the lower peak, with no cost in throughput)
MMAP_THRESHOLD_BYTES = 64 * 1024
#: the environment variable by which a user sets the threshold for glibc themselves
USER_SETTING = "MALLOC_MMAP_THRESHOLD_"


def glibc_version() -> str | None:
    """glibc's version when this process runs on glibc ("2.36"), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None
    if not found or not found.startswith("glibc "):
        return None
    return found.split(" ", 1)[1]


def keep_large_blocks_mapped(
    threshold: int = MMAP_THRESHOLD_BYTES, environ: Mapping[str, str] | None = None
) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; whether it was set (not
    on another C library, nor when the user set it in ``MALLOC_MMAP_THRESHOLD_``)."""
    env = os.environ if environ is None else environ
    if USER_SETTING in env or glibc_version() is None:
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
