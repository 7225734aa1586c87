"""The DDP demo's point on its timed phase (demo.ddp_level, models.host_speed.CentredRuns):
the predictive's closed form when the point is the mean of the last ``m`` runs, and by
simulation the P10–P90 of 3 new timed runs' pooled mean holding 80 % where the profiled runs
sit at an offset of their own, which the centre on every run does not."""
from __future__ import annotations

import math

import numpy as np
import pytest

from stepsim.models.host_speed import (HOST_NOISE_PRIOR, CentredRuns, factor_range,
                                       noise_runs, pooled_scale, predictive, prior_log_sd,
                                       spread_stats, t_ppf)
from stepsim.models.param_types import HostParams


def test_grouped_the_spread_is_pooled_within_the_two_phases_and_n_is_the_centres():
    """Closed form: 4 profiled runs at log 0.1, 0.3, 0.2, 0.2 and 3 timed at −0.1, 0.0, 0.1:
    centre −0 (the timed mean), pooled sd sqrt((0.02 + 0.02) / 5), ``1/n`` = 1/3, 5 dof."""
    logs = [0.1, 0.3, 0.2, 0.2, -0.1, 0.0, 0.1]
    runs = CentredRuns(np.exp(logs), 3, grouped=True)
    c, s, m, dof = spread_stats(runs)
    assert c == pytest.approx(0.0, abs=1e-12)
    assert s == pytest.approx(math.sqrt(0.04 / 5), rel=1e-9) and (m, dof) == (3, 5)
    wide = (1.0, 1.0 + 1e-9)     # a prior far narrower than the runs: their own t
    _, scale, d = predictive(runs, wide, 3)
    assert scale == pytest.approx(s * math.sqrt(1 / 3 + 1 / 3), rel=1e-9) and d == 5
    # a plain list of the same runs: all 7 in the centre, their whole spread, 6 dof
    s7, n7 = float(np.std(logs, ddof=1)), 7
    _, scale7, d7 = predictive(list(np.exp(logs)), wide, 3)
    assert scale7 == pytest.approx(s7 * pooled_scale(n7, 3), rel=1e-9) and d7 == 6
    # pooled with the stated range's s0 at 2 pseudo-dof where that is the wider
    s0 = prior_log_sd(HOST_NOISE_PRIOR)
    sp = math.sqrt((2 * s0 * s0 + 5 * s * s) / 7)
    _, scale_p, dp = predictive(runs, HOST_NOISE_PRIOR, 3)
    own = t_ppf(0.9, 5) * s > t_ppf(0.9, 7) * sp
    want = (s, 5.0) if own else (sp, 7.0)
    assert scale_p == pytest.approx(want[0] * math.sqrt(2 / 3), rel=1e-9) and dp == want[1]


def test_not_grouped_the_runs_spread_stands_for_the_centres_runs():
    """The CPU time's runs drawn (not the walls): their spread, ``n − 1`` dof, ``1/n`` the
    centre's 1/3."""
    runs = CentredRuns([1.0, 1.1, 0.9, 1.05], 3, grouped=False)
    s = float(np.std(np.log(runs), ddof=1))
    assert spread_stats(runs)[1:] == pytest.approx((s, 3, 3), rel=1e-12)


def test_noise_runs_marks_the_walls_centred_where_the_host_says_so():
    host = HostParams(cpu_scale=1.0, speed_runs=[1.0, 1.01, 0.99], wall_runs=[
        1.0, 1.2, 0.8, 1.1, 0.9, 1.05], centre_runs=3)
    runs = noise_runs(host, HOST_NOISE_PRIOR)
    assert isinstance(runs, CentredRuns) and runs.grouped and runs.centre == 3
    assert list(runs) == list(host.wall_runs)
    plain = noise_runs(host.model_copy(update={"centre_runs": 0}), HOST_NOISE_PRIOR)
    assert not isinstance(plain, CentredRuns) and plain == list(host.wall_runs)
    assert "centre_runs" not in host.model_copy(update={"centre_runs": 0}).model_dump()


def _coverage(offset: float, centred: bool, trials: int = 2000, sd: float = 0.12,
              runs: int = 3) -> float:
    """Share of experiments whose P10–P90 holds the pooled mean of ``runs`` new timed runs:
    7 runs of the calibration setting, 4 profiled with log factors N(``offset``, sd²) and 3
    timed N(0, sd²) (sd 0.12: the kept demos' runs measured 0.12–0.20), the new ones as the
    timed. ``centred``: the point on the 3 timed runs, the predictive of
    :class:`CentredRuns`; else the point on all 7 and their plain predictive (before)."""
    rng = np.random.default_rng(19)
    held = 0
    for _ in range(trials):
        h = np.concatenate([rng.normal(offset, sd, 4), rng.normal(0.0, sd, 3)])
        truth = math.exp(float(np.mean(rng.normal(0.0, sd, runs))))
        walls = list(np.exp(h))
        noise = CentredRuns(walls, 3, grouped=True) if centred else walls
        centre = math.exp(h[4:].mean() if centred else h.mean())
        lo, hi = factor_range(noise, HOST_NOISE_PRIOR, runs)
        held += centre * lo <= truth <= centre * hi
    return held / trials


@pytest.mark.parametrize("offset", [0.0, 0.075, 0.15])
def test_on_the_timed_phase_the_interval_holds_80_percent_whatever_the_offset(offset):
    """Centred on the timed runs (``s_w · sqrt(1/3 + 1/3) · T(5)``), 80 % held whatever the
    profiled runs' offset (0; 0.075, the kept demos' mean of their unprofiled steps against
    the timed runs; 0.15); 2000 experiments, seed 19, sd of the share 0.9 %. Measured
    80.35 % at each offset (the centre and the within-phase spread do not see it)."""
    got = _coverage(offset, True)
    assert 0.77 <= got <= 0.84


def test_on_every_run_an_offset_of_the_profiled_runs_is_not_held():
    """Before: the point on all 7 runs, the spread of all 7 (the offset counted as noise).
    At 0.15 the centre is 4/7 of it off the timed runs' level. Measured 81.9 / 77.3 / 69.1 %
    at 0 / 0.075 / 0.15."""
    assert _coverage(0.15, False) < 0.72


def _demo_model():
    from pathlib import Path

    from stepsim.models.params import load_model

    return load_model(Path(__file__).parent / "data" / "ddp_demo_model.json")


def test_on_timed_level_puts_the_replays_point_on_its_timed_runs_mean():
    """A kept demo's model, its timed runs measured 10 % slower than its point and no CPU
    recorded: the CPU level stays the profiled runs' and the search moves the transfer level
    (``comm.transfer_scale``, h-ddp23) until the point is their pooled mean (to 0.2 %), sets
    ``centre_runs`` and says so; the transfer is a part of the step, so its factor moves more
    than 10 %."""
    from stepsim.demo.ddp_level import TOLERANCE, _point_us, on_timed_level

    model = _demo_model()
    p0 = _point_us(model, 0)
    runs = [np.full(20, 1.08 * p0), np.full(20, 1.10 * p0), np.full(20, 1.12 * p0)]
    out, got = on_timed_level(model, runs, 0)
    assert got is not None and out.host.centre_runs == 3
    assert _point_us(out, 0) == pytest.approx(1.10 * p0, rel=TOLERANCE)
    assert out.host.cpu_scale == model.host.cpu_scale and out.comm.transfer_scale > 1.10
    assert "timed phase" in out.meta.warnings[-1]
    assert on_timed_level(model, runs[:1], 0) == (model, None)


def test_the_transfer_level_moves_the_point_along_a_line():
    """Why the level's search over ``comm.transfer_scale`` meets no jump (h-level24): on the
    kept demo's model the replay's point (40 steps, seed 0) is a line in the factor over the
    search's whole bound (0.25–4×), whose slope is the per-byte non-CPU time (µs) of the last
    all-reduce alone (the 7 MiB bucket after backward, :func:`models.plans.
    transfer_per_byte_us` × its bytes): the first bucket's transfer hides behind backward,
    and the added time is a wait on the comm stream that no thread contends for, so the
    events keep their order. In ``host.cpu_scale`` the same point jumps where the contention
    for the two cores changes order (strag22's 0.43 ms at the 10 % target on its code; on
    main 3 jumps of 0.15–0.33 ms off the line between ``cpu_scale`` 1.10 and 1.20 on this
    model, h-level24): not asserted, a property of the simulator's event order rather than
    of the model."""
    from stepsim.demo.ddp_level import _point_us, _with_transfer
    from stepsim.models.plans import transfer_per_byte_us

    model = _demo_model()
    comm = model.comm
    assert comm.transfer_scale == 1.0 and not comm.line_bytes
    last = [t for t in model.device.streams[comm.comm_stream]
            if t.kind == "collective" and t.bytes][-1]
    slope = transfer_per_byte_us(comm) * last.bytes
    xs = [0.25, 0.5, 1.0, 2.0, 4.0]
    ps = [_point_us(_with_transfer(model, k), 0) for k in xs]
    for (x0, p0), (x1, p1) in zip(zip(xs, ps), zip(xs[1:], ps[1:])):
        assert (p1 - p0) / (x1 - x0) == pytest.approx(slope, rel=1e-6)
