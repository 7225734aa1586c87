"""``whatif --set host.team_stall=G`` re-inverts the step's work at ``G`` as an interval's
draw of ``γ`` does (one code path, :func:`scenarios.transforms.set_path`): where the work was
inverted from a contended capture, the set answers the draws' question, not "this work at
another stall" (issue 10, stall19)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stepsim.calibration.host_step import stalled_team_wall
from stepsim.models.params import StepModel
from stepsim.scenarios.draws import perturb
from stepsim.scenarios.transforms import SetOp, apply_ops
from stepsim.simcore.errors import ModelError
from tests.test_host_physics import region_beside_hogs

WALL_US = 80_000.0
"""The captured step's wall (µs) every model here is inverted from."""


def _inverted(share: float, gamma: float, threads: int = 2, wall_us: float = WALL_US
              ) -> StepModel:
    """A model whose team op's work is ``wall_us`` inverted at ``gamma`` from a capture where
    each of its ``threads`` threads held ``share`` of a core."""
    w, s = stalled_team_wall(np.array([wall_us]), np.array([threads * share * wall_us]),
                             threads, gamma)
    return StepModel.model_validate({
        "loader": {"num_workers": 1, "produce": {"mean_us": 10_000.0}, "host_cores": 2},
        "host": {"team_stall": gamma, "team_stall_range": [0.3, 3.6], "team_stall_share": s,
                 "ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "dur_us": float(w[0]), "threads": threads,
                          "capture_threads": threads, "parallel_fraction": 1.0},
                         {"kind": "cpu", "dur_us": 1_000.0}]}})


def _set(model: StepModel, gamma: float) -> StepModel:
    return apply_ops(model, [SetOp(path="host.team_stall", value=gamma)])


@settings(max_examples=40, deadline=None)
@given(st.floats(0.2, 0.95), st.floats(0.0, 4.0), st.floats(0.0, 4.0), st.integers(2, 8))
def test_the_set_is_the_draw_and_the_calibration_wall_at_any_gamma(share, g0, g, threads):
    """At the capture's share the set work advances at ``s^(1 + G (T − 1))`` to the captured
    wall, whatever ``G``; the set and the draw give one model."""
    m = _inverted(share, g0, threads)
    out = _set(m, g)
    s = m.host.team_stall_share
    assert out.host.team_stall == g
    assert out.host.ops[1].dur_us / s ** (1 + g * (threads - 1)) == pytest.approx(WALL_US,
                                                                                   rel=1e-9)
    assert out.host.ops[2].dur_us == 1_000.0
    assert out.host == perturb(m, {"host.team_stall": g}).host


@pytest.mark.parametrize("hogs", [1, 2])
@pytest.mark.parametrize("gamma", [0.0, 0.3, 1.0, 2.5])
def test_the_calibration_setting_reproduces_itself_when_simulated(hogs, gamma):
    """A 2-thread team beside ``hogs`` always-runnable threads on 2 cores holds a share
    ``s = 2 / (2 + hogs)`` of a core per thread and advances at ``s^(1 + γ)``
    (:class:`models.cpu.CpuPool`). Work inverted at γ 1 from a wall captured there and set to
    any ``γ`` ends at that wall when simulated at ``γ``; the work left as it was (main's set)
    ends at ``wall × s^(1 − γ)``."""
    s, wall = 2 / (2 + hogs), 10 * WALL_US     # long against the pool's 2 ms quanta
    m = _inverted(s, 1.0, wall_us=wall)
    work = _set(m, gamma).host.ops[1].dur_us
    out = region_beside_hogs(2, hogs, work, 100 * wall, stall=gamma)
    assert out["end_us"] == pytest.approx(wall, rel=1e-3)
    kept = region_beside_hogs(2, hogs, m.host.ops[1].dur_us, 100 * wall, stall=gamma)
    assert kept["end_us"] == pytest.approx(wall * s ** (1 - gamma), rel=5e-3)


def test_an_uninverted_model_sets_gamma_alone_and_bad_values_are_one_line():
    m = _inverted(0.5, 1.0)
    plain = m.model_copy(update={"host": m.host.model_copy(update={"team_stall_share": None})})
    out = _set(plain, 3.0)
    assert out.host.team_stall == 3.0 and out.host.ops == plain.host.ops
    for bad in ("fast", -1.0, 21.0, None):
        with pytest.raises(ModelError, match="host.team_stall"):
            _set(m, bad)
