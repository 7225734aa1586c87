"""The gloo transfer fit in closed form: only all-reduces that ran after backward's compute."""
from __future__ import annotations

import pytest

from stepsim.calibration.gloo_transfer import CLEAN_BUSY, transfer_fit

MIB = 2 ** 20


def test_two_clean_sizes_give_the_exact_line_and_the_busy_one_is_left_out():
    """Clean 1 and 3 MiB at 100 µs + 1 ms/MiB (world 2: ring bus bytes = bytes); a busy
    2 MiB one that took 50 ms (waits for a core) changes nothing."""
    w: list[str] = []
    a, gbps = transfer_fit([MIB, 2 * MIB, 3 * MIB], [1100.0, 50000.0, 3100.0],
                           [0.0, 0.9, CLEAN_BUSY - 0.01], 2, w)
    assert a == pytest.approx(100.0) and gbps == pytest.approx(MIB / 1000.0 / 1e3)
    assert any("fitted to 2 of 3" in x for x in w)


def test_one_clean_size_goes_through_the_origin():
    w: list[str] = []
    a, gbps = transfer_fit([MIB, 7 * MIB], [5600.0, 7000.0], [0.95, 0.01], 2, w)
    assert a == 0.0 and gbps == pytest.approx(7 * MIB / 7000.0 / 1e3)


def test_none_clean_uses_all_and_says_so():
    w: list[str] = []
    a, gbps = transfer_fit([MIB, 2 * MIB], [1100.0, 2100.0], [0.9, 0.8], 2, w)
    assert a == pytest.approx(100.0) and gbps == pytest.approx(MIB / 1000.0 / 1e3)
    assert any("every all-reduce overlapped" in x for x in w)
    # a line with a negative slope falls back to the ratio through the origin
    a, gbps = transfer_fit([MIB, 2 * MIB], [3000.0, 1000.0], [0.0, 0.0], 2, [])
    assert a == 0.0 and gbps == pytest.approx(3 * MIB / 4000.0 / 1e3)


def test_one_clean_size_goes_through_the_measured_per_collective_cpu():
    """With one clean size and a per-collective CPU ``floor_us`` below its span, the line goes
    through (0, floor_us): a smaller bucket keeps that work instead of shrinking it with the
    bytes; a floor at or above the span is ignored (through the origin)."""
    a, gbps = transfer_fit([7 * MIB], [7300.0], [0.01], 2, [], floor_us=300.0)
    assert a == pytest.approx(300.0)
    assert a + 2 * (2 - 1) / 2 * MIB / (gbps * 1e3) == pytest.approx(300.0 + 7000.0 / 7)
    a, _ = transfer_fit([7 * MIB], [7300.0], [0.01], 2, [], floor_us=8000.0)
    assert a == 0.0
