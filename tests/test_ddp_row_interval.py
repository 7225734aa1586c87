"""The DDP demo's row interval (demo.ddp.row_prediction): of the pooled mean of the row's
re-measured runs, as ``stepsim demo``'s rows, and the straggler's wall-clock spin held under
the interval's host draws. Closed forms on a CPU DDP step without sampled durations, whose
step is (F + B + O) · cpu_scale · f + C (+ S with a straggler) for a host factor f."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.demo.ddp import row_prediction
from stepsim.models.host_speed import factor_range
from stepsim.scenarios.draws import draw_means, draw_plan
from stepsim.scenarios.op_text import parse_fix
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp

PRIOR = (0.94, 1.06)
SPEEDS = [1.0, 0.9, 1.1, 1.05]     # four runs: the runs' own t (3 dof)
DRAWS = 19     # ranks p (n + 1) = 2 and 18 exactly: P10 and P90 are two draws' own means
STRAGGLER = [parse_fix(f"straggler:rank=1,phase=forward,ms={S / 1e3:g}")]


def _model(cpu_scale: float = 1.2):
    """Two ranks with a core each (nothing shared: the straggler's S adds whole), host
    speed runs ``SPEEDS``, centre ``cpu_scale``."""
    m = cpu_ddp(2)
    return m.model_copy(update={
        "host": m.host.model_copy(update={"speed_runs": SPEEDS, "cpu_scale": cpu_scale}),
        "meta": m.meta.model_copy(update={"ranges": {**m.meta.ranges,
                                                      "host.cpu_scale": PRIOR}})})


def _runs(k: int, steps: int = 20) -> list[np.ndarray]:
    return [np.full(steps, 60_000.0) for _ in range(k)]


@pytest.mark.parametrize("ops", [[], STRAGGLER], ids=["defaults", "straggler"])
def test_the_row_interval_is_of_the_pooled_mean_of_its_runs(ops):
    """P10–P90 = (F + B + O) · cpu_scale · [q10, q90] + C (+ S): q the host factor's P10/P90
    for the pooled mean of the row's runs (models.host_speed.factor_range with runs = 3,
    a t scaled by sqrt(1/3 + 1/4) against one run's sqrt(1 + 1/4)); the point does not move."""
    m, cpu = _model(), 1.2
    wall = C + (S if ops else 0.0)
    one = row_prediction(m, ops, _runs(1), draws=DRAWS)
    three = row_prediction(m, ops, _runs(3), draws=DRAWS)
    assert three.mean_step_us == one.mean_step_us == pytest.approx((F + B + O) * cpu + wall)
    assert (three.runs, three.measured_steps) == (3, 60)
    for p, k in ((one, 1), (three, 3)):
        lo, hi = factor_range(SPEEDS, PRIOR, k)
        assert p.p10_step_us == pytest.approx((F + B + O) * cpu * lo + wall, rel=1e-6)
        assert p.p90_step_us == pytest.approx((F + B + O) * cpu * hi + wall, rel=1e-6)
    ratio = (three.p90_step_us - three.p10_step_us) / (one.p90_step_us - one.p10_step_us)
    lo1, hi1 = factor_range(SPEEDS, PRIOR, 1)
    lo3, hi3 = factor_range(SPEEDS, PRIOR, 3)
    assert ratio == pytest.approx((hi3 - lo3) / (hi1 - lo1), rel=1e-6) and ratio < 0.75


def test_the_straggler_spin_is_held_whatever_each_draw_makes_the_host():
    """Under every host draw f of the interval, the straggler's step is (F + B + O) · cpu_scale
    · f + C + S: its S of wall-clock time does not scale with f, the rest of the step does;
    the draw's spread in µs is the defaults' own, so in % of the step it is narrower."""
    m, cpu = _model(), 1.2
    plan = draw_plan(m, DRAWS, 0, runs=3, ops=STRAGGLER)
    means, _ = draw_means(m, STRAGGLER, plan, steps=8, warmup=3, seed=0)
    f = np.array([factors["host.cpu_scale"] for factors, _ in plan])
    assert f.min() < 0.95 and f.max() > 1.05
    np.testing.assert_allclose(means, (F + B + O) * cpu * f + C + S, rtol=1e-9)
    base, _ = draw_means(m, [], draw_plan(m, DRAWS, 0, runs=3, ops=[]), steps=8,
                         warmup=3, seed=0)
    np.testing.assert_allclose(means - base, S, rtol=1e-9)
