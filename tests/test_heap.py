"""A forked worker keeps the heap a simulation freed for its next one
(:mod:`simcore.heap`, speed23): after :func:`keep_freed_heap`, memory freed and allocated
again is served from pages already touched, not from fresh ones the kernel must fault in.
Counted in minor page faults (``getrusage``), never in seconds: 48 blocks of 1 MiB are
written, freed and written again; the second round's faults against its 12,288 pages."""
from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from stepsim.scenarios.parallel import run_many

PAGES = 48 * (1 << 20) // 4096   # the second round's pages


def _second_round_faults(_item=None) -> int:
    """Minor faults while 48 blocks of 1 MiB (numpy, so malloc'd) are written a second time,
    after the first round's were freed."""
    import numpy as np

    def round_() -> None:
        blocks = [np.ones(1 << 17) for _ in range(48)]   # 1 MiB each, every page written
        del blocks

    round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    round_()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _in_fresh_python(keep: bool) -> int:
    code = ("import sys\n"
            "from stepsim.simcore.heap import keep_freed_heap\n"
            f"took = keep_freed_heap() if {keep} else True\n"
            "from tests.test_heap import _second_round_faults\n"
            "print(took, _second_round_faults())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    took, faults = p.stdout.split()
    assert took == "True"
    return int(faults)


def _glibc() -> bool:
    import platform

    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not _glibc(), reason="mallopt's thresholds are glibc's")
def test_a_freed_heap_is_kept_for_the_next_allocations():
    # glibc alone gives the freed 48 MiB back (above its trim threshold), so the second
    # round faults its pages in again; with the thresholds raised it reuses them
    assert _in_fresh_python(keep=False) > PAGES // 2
    assert _in_fresh_python(keep=True) < PAGES // 20


@pytest.mark.skipif(not _glibc(), reason="mallopt's thresholds are glibc's")
def test_the_pools_forked_workers_keep_their_freed_heap(monkeypatch):
    monkeypatch.delenv("STEPSIM_EXECUTOR", raising=False)
    faults = run_many(_second_round_faults, [0, 1, 2, 3], jobs=2)
    assert all(f < PAGES // 20 for f in faults), faults


def test_keep_freed_heap_never_raises():
    from stepsim.simcore.heap import keep_freed_heap

    assert keep_freed_heap() in (True, False)
