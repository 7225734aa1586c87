"""The host factor's centre on the runs whose spread the interval counts
(models.host_speed.runs_centre; the DDP demo's, demo.ddp_noise): closed forms, and the
P10–P90 of the pooled mean of 3 new runs holding 80 % by simulation where the CPU time's
centre is off the wall runs by a known offset."""
from __future__ import annotations

import math

import numpy as np
import pytest

from stepsim.models.host_speed import (HOST_NOISE_PRIOR, factor_range, from_walls, noise_runs,
                                       runs_centre)
from stepsim.models.param_types import HostParams


def _host(speeds: list[float], walls: list[float]) -> HostParams:
    centre = float(np.exp(np.mean(np.log(speeds))))   # calibration's cpu_scale
    return HostParams(cpu_scale=centre, speed_runs=speeds, wall_runs=walls)


def test_on_the_cpu_speed_runs_the_centre_is_calibrations_own():
    host = _host([1.0, 1.05, 0.97, 1.02], [])
    assert runs_centre(host, host.speed_runs) == pytest.approx(host.cpu_scale, rel=1e-12)


def test_on_the_walls_the_centre_is_the_capture_times_their_geometric_mean():
    """Closed form: the capture's own CPU factor 0.95 (a window against its run) times the
    walls' geometric mean over the capture, (1.1 · 0.9 · 1.21 / 1)^(1/4)."""
    host = _host([0.95, 1.0, 0.96], [1.0, 1.1, 0.9, 1.21])
    want = 0.95 * (1.1 * 0.9 * 1.21) ** 0.25
    assert runs_centre(host, host.wall_runs) == pytest.approx(want, rel=1e-12)
    # paired on the 3 profiled runs measured in both: their mean CPU/wall ratio, not the
    # capture's alone: exp(mean log walls + mean log speeds - mean log walls[:3])
    paired = math.exp(np.mean(np.log([1.0, 1.1, 0.9, 1.21])) + np.mean(np.log([0.95, 1.0, 0.96]))
                      - np.mean(np.log([1.0, 1.1, 0.9])))
    assert runs_centre(host, host.wall_runs, 3) == pytest.approx(paired, rel=1e-12)
    bare = HostParams(cpu_scale=1.3)   # no speed runs: the capture's factor is cpu_scale
    assert runs_centre(bare, [1.0, 1.2]) == pytest.approx(1.3 * math.sqrt(1.2), rel=1e-12)
    assert runs_centre(bare, [1.0]) == 1.3


def _coverage(offset: float, trials: int = 2000, sd: float = 0.15, runs: int = 3
              ) -> tuple[float, float]:
    """Share of experiments whose P10–P90 (``runs`` new runs' pooled mean) holds that mean:
    (centred on the drawn runs, centred on the CPU speed runs). Each: 7 runs of one setting
    (the capture first, then 3 profiled replicates and 3 timed re-runs) with log host factors
    iid N(0, sd²) (sd 0.15: the DDP demo's runs measured 0.12–0.20) and ``runs`` new ones
    alike; walls are their factors over the capture's; the 3 profiled replicates' CPU speed is ``offset`` in log off the capture's, with 0.02 of
    noise (the CPU time of identical work moves less than the wall: the interval draws
    the walls' spread)."""
    rng = np.random.default_rng(12)
    held, walls = np.zeros(2), 0
    for _ in range(trials):
        h = rng.normal(0.0, sd, 7)
        new = float(np.mean(rng.normal(0.0, sd, runs)))
        cpu = np.exp(offset * (np.arange(4) > 0) + rng.normal(0, 0.02, 4))
        cpu[0] = 1.0
        host = _host(list(cpu), list(np.exp(h - h[0])))
        noise = noise_runs(host, HOST_NOISE_PRIOR)
        walls += from_walls(host, noise)
        lo, hi = factor_range(noise, HOST_NOISE_PRIOR, runs)
        truth = math.exp(new - h[0])   # the new runs' pooled factor, in the capture's units
        for i, centre in enumerate((runs_centre(host, noise), host.cpu_scale)):
            held[i] += centre * lo <= truth <= centre * hi
    assert walls >= 0.98 * trials   # the interval draws the walls' spread
    return tuple(held / trials)


def test_centred_on_the_runs_it_counts_the_interval_holds_80_percent():
    """The predictive ``s · sqrt(1/3 + 1/7) · T(6)`` around the 7 runs' own mean: 80 % (the
    stated range's floor can only widen it; 2000 experiments, sd of the share 0.9 %; measured
    80.2 % and 80.2 %), with or without an offset of 0.1 in log on the CPU centre. Centred on
    the 4 profiled runs' CPU time, the same spread held 56.5 % and 53.6 %: the quiet CPU
    runs' centre sits near the capture's own run (one run, not the 7 the ``1/n`` counts) and
    the offset moves it further."""
    new0, old0 = _coverage(0.0)
    new1, old1 = _coverage(0.1)
    assert 0.78 <= new0 <= 0.83 and 0.78 <= new1 <= 0.83
    assert old0 < 0.7 and old1 < 0.7


def _anchored(paired: int, trials: int = 2000, sd: float = 0.1, stretch: float = 0.1,
              runs: int = 3) -> float:
    """Share held when each run's wall carries its own stretch beside the host factor (log
    N(0, ``stretch``²), not in its CPU time: the capture's unprofiled wall slow against its
    CPU time, as 4 of 26 kept demos measured) and the 4 profiled runs' CPU time is exact:
    the new runs' pooled wall factor in the model's units (the capture's CPU) is the truth."""
    rng = np.random.default_rng(7)
    held = 0
    for _ in range(trials):
        h, eta = rng.normal(0.0, sd, 7), rng.normal(0.0, stretch, 7)
        new = float(np.mean(rng.normal(0.0, sd, runs) + rng.normal(0.0, stretch, runs)))
        cpu = np.exp(h[:4] - h[0])
        host = _host(list(cpu), list(np.exp(h + eta - h[0] - eta[0])))
        lo, hi = factor_range(host.wall_runs, HOST_NOISE_PRIOR, runs)
        centre = runs_centre(host, host.wall_runs, paired)
        held += centre * lo <= math.exp(new - h[0]) <= centre * hi
    return held / trials


def test_paired_on_every_profiled_run_the_capture_walls_own_stretch_weighs_a_quarter():
    """Anchored on the capture alone, its wall's own stretch (variance τ²) shifts the centre
    beside the predictive's ``1/n``; on the mean of the 4 profiled runs it weighs τ²/4. Held
    (2000 experiments, seed 7, sd 0.9 %): paired on the capture measured 67.3 %, on the 4
    runs 80.5 % (h-anchor18; the t's 80 % needs the centre's error inside ``1/n``)."""
    one, four = _anchored(1), _anchored(4)
    assert one < 0.72
    assert 0.77 <= four <= 0.83
