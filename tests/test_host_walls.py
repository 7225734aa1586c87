"""A multi-rank CPU job's run-to-run wall noise (calibration.calibrate.job_wall_factors,
models.host_speed.noise_runs): closed forms."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from stepsim.calibration.calibrate import job_wall_factors
from stepsim.models.host_speed import factor_range, noise_runs
from stepsim.models.params import HostParams
from stepsim.scenarios.draws import draw_plan
from tests.test_ddp_ranks import cpu_ddp

PRIOR = (0.94, 1.06)


def _side(unprofiled: list[float], profiled: list[float] = (99_000.0,)):
    steps = [SimpleNamespace(profiler_on=False, wall_us=w) for w in unprofiled]
    steps += [SimpleNamespace(profiler_on=True, wall_us=w) for w in profiled]
    return SimpleNamespace(steps=steps)


def test_a_runs_wall_factor_is_the_geometric_mean_over_ranks_of_unprofiled_means():
    """Capture: ranks at 20 and 22 ms (unprofiled means); a replicate at 22 and 22: factors
    1.1 and 1.0, geometric mean sqrt(1.1); the profiled steps (99 ms) never count."""
    cap = [_side([19_000.0, 21_000.0]), _side([22_000.0])]
    rep = [_side([22_000.0, 22_000.0]), _side([21_000.0, 23_000.0])]
    assert job_wall_factors([cap, rep]) == [1.0, pytest.approx(math.sqrt(1.1))]
    assert job_wall_factors([cap, [_side([]), _side([1.0])]]) != []   # all steps then
    assert job_wall_factors([cap, [SimpleNamespace(steps=[]), _side([1.0])]]) == []
    assert job_wall_factors([]) == []


def test_the_interval_draws_from_the_wider_of_cpu_and_wall_time():
    """CPU runs 1.00/0.99/1.01 against walls 1.00/0.90/1.10: the walls' spread is drawn (their
    P10–P90 is wider); walls tighter than the CPU runs, or fewer than 2, leave the CPU's."""
    cpu, wide, tight = [1.0, 0.99, 1.01], [1.0, 0.90, 1.10], [1.0, 1.0, 1.001]
    assert noise_runs(HostParams(speed_runs=cpu, wall_runs=wide), PRIOR) == wide
    assert noise_runs(HostParams(speed_runs=[1.0, 0.8, 1.2], wall_runs=wide), PRIOR) == \
        [1.0, 0.8, 1.2]
    assert noise_runs(HostParams(speed_runs=cpu, wall_runs=tight), PRIOR) == cpu
    assert noise_runs(HostParams(speed_runs=cpu), PRIOR) == cpu
    lo, hi = factor_range(wide, PRIOR, 1)
    lo_c, hi_c = factor_range(cpu, PRIOR, 1)
    assert hi / lo > hi_c / lo_c
    # the draws of a model with the wide walls spread as the walls' predictive does
    m = cpu_ddp(2)
    m = m.model_copy(update={
        "host": m.host.model_copy(update={"speed_runs": cpu, "wall_runs": wide}),
        "meta": m.meta.model_copy(update={"ranges": {**m.meta.ranges,
                                                      "host.cpu_scale": PRIOR}})})
    f = sorted(d["host.cpu_scale"] for d, _ in draw_plan(m, 9, 0))
    assert f[0] < lo_c and f[-1] > hi_c


def test_a_model_without_walls_writes_no_field():
    m = cpu_ddp(2)
    assert "wall_runs" not in m.model_dump_json()
    withw = m.model_copy(update={"host": m.host.model_copy(update={"wall_runs": [1.0, 0.9]})})
    assert '"wall_runs":[1.0,0.9]' in withw.model_dump_json()
    assert type(m).model_validate_json(withw.model_dump_json()).host.wall_runs == [1.0, 0.9]


def _walled(speeds, walls):
    m = cpu_ddp(2)
    return m.model_copy(update={
        "host": m.host.model_copy(update={"speed_runs": speeds, "wall_runs": walls}),
        "meta": m.meta.model_copy(update={"ranges": {**m.meta.ranges,
                                                      "host.cpu_scale": PRIOR}})})


def test_the_noise_line_and_the_drift_cap_read_the_walls_where_the_interval_does():
    """CPU runs 1.00/0.99/1.01 against walls 1.00/0.90/1.10: the interval draws the walls'
    spread, so the whatif noise line (two_run_noise) and the drift cap are the walls' own
    closed forms, and say so; walls tighter than the CPU runs leave both on the CPU runs."""
    from stepsim.models.host_drift import drift_cap, two_run_noise
    from stepsim.models.host_speed import coverage_at_width

    cpu, wide, tight = [1.0, 0.99, 1.01], [1.0, 0.90, 1.10], [1.0, 1.0, 1.001]
    m = _walled(cpu, wide)
    half, source = two_run_noise(m)
    assert half == pytest.approx(two_run_noise(_walled(wide, []))[0], rel=1e-12)
    assert half > two_run_noise(_walled(cpu, []))[0]
    assert source.startswith("3 measured runs (their wall time, host.wall_runs")
    text, nums = drift_cap(m, 1)
    assert nums["from"] == "host.wall_runs" and "wall time" in text
    assert nums["needed_width_pct"] == pytest.approx(100 * coverage_at_width(wide, PRIOR, 1,
                                                                             0.2)[0])
    tight_text, tight_nums = drift_cap(_walled(cpu, tight), 1)
    assert tight_nums["from"] == "host.speed_runs" and "CPU time of identical work" in tight_text
    assert tight_nums["needed_width_pct"] == pytest.approx(
        100 * coverage_at_width(cpu, PRIOR, 1, 0.2)[0])
    assert "wall time" not in two_run_noise(_walled(cpu, tight))[1]
