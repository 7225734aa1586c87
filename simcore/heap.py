"""Keep a worker process's freed heap for its next simulation (glibc's ``mallopt``).

A simulation and its summary allocate some megabytes (spans, task runs, numpy columns) and
free them when the call returns. glibc's allocator gives the top of its heap back to the
kernel once more than ``M_TRIM_THRESHOLD`` of it is free, and serves blocks above its
``M_MMAP_THRESHOLD`` (a few hundred kB: a column of 80,000 floats) from fresh ``mmap`` pages
that go back on ``free``; so a process that runs one simulation after another touches fresh
pages each time, and every first touch is a page fault the kernel zero-fills. Measured on a
sweep point of ResNet-50 (200 steps, 2026-12-07, speed23): about 4,000 minor faults and
2-11 ms of system time a point (of some 35 ms), 30 faults and ~0 ms with the thresholds
below. :func:`keep_freed_heap` raises both thresholds in the calling process, so what a
point freed serves the next point. Only the executor's forked workers call it: short-lived
processes that run many simulations; the memory a worker keeps is at most its own peak.

Values are the same either way (the allocator decides where a block lives, not what it
holds). Where the C library has no ``mallopt`` (not glibc: macOS, musl's stub returns 0) it
does nothing.
"""
from __future__ import annotations

__all__ = ["keep_freed_heap", "MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES"]

_M_TRIM_THRESHOLD = -1   # glibc's <malloc.h> parameter numbers
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
"""Blocks up to this come from the heap, not from fresh pages (glibc's largest allowed
value on 64-bit systems)."""
TRIM_THRESHOLD_BYTES = 64 << 20
"""Free memory at the heap's top kept up to this before any goes back to the kernel."""


def keep_freed_heap() -> bool:
    """Raise this process's allocator's mmap and trim thresholds (see the module docstring);
    True where the C library took both. Never raises."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError):   # no C library with mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
