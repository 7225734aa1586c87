"""The intra-op team stall ``γ`` where the calibration setting was itself contended (issue 10,
fresh6 and fresh7): the step's work is inverted at ``γ`` and re-inverted at each drawn ``γ``;
a probe at a second ``num_workers`` pins ``γ`` with the work in closed form."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stepsim.calibration.host_step import stalled_team_wall
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import team_stall_from_sidecar
from stepsim.calibration.team_stall import CONTENDED_PRIOR, fit_joint_stall, joint_gamma
from stepsim.models.params import StepModel
from stepsim.models.team_inversion import reinverted
from stepsim.scenarios.draws import perturb


@pytest.mark.parametrize("gamma,threads,sa,sb", [(1.0, 2, 0.6, 0.5), (0.5, 2, 0.6, 1.0),
                                                 (2.5, 4, 0.5, 0.4)])
def test_joint_gamma_inverts_one_work_at_two_settings(gamma, threads, sa, sb):
    """Both walls from one work: ``w = W s^(1 + γ(T − 1))`` at each setting."""
    work, e = 50_000.0, 1 + gamma * (threads - 1)
    wa, wb = work / sa ** e, work / sb ** e
    assert joint_gamma(wa, sa, wb, sb, threads) == pytest.approx(gamma)
    assert joint_gamma(wa, sa, wb, sa * 0.99, threads) is None     # shares too alike
    # a team faster beside more co-runners than its shares allow: below the family, not cut
    assert joint_gamma(wa, sa, wa, sb, threads) == pytest.approx(-1 / (threads - 1))


class _Step:
    def __init__(self, wall_us, cpu_us):
        self.wall_us, self.next_wall_us, self.compute_cpu_us = wall_us, 0.0, cpu_us


def test_fit_joint_stall_recovers_gamma_from_noisy_steps():
    """A probe at 2 workers (share 0.5) beside a capture at 1 (share 0.6), one work at γ 0.5;
    a 1.3× slower probe (the host's speed, not in the fit) reads as a larger γ."""
    rng = np.random.default_rng(5)
    work, e = 60_000.0, 1.5
    cal = [_Step(work / 0.6 ** e * (1 + 0.01 * rng.standard_normal()), 0) for _ in range(20)]
    for s in cal:
        s.compute_cpu_us = 2 * 0.6 * s.wall_us
    probe = [_Step(work / 0.5 ** e * (1 + 0.01 * rng.standard_normal()), 0) for _ in range(8)]
    for s in probe:
        s.compute_cpu_us = 2 * 0.5 * s.wall_us
    fit = fit_joint_stall(cal, probe, 2, False)
    assert fit[0] == pytest.approx(0.5, abs=0.05) and fit[1][0] < fit[0] < fit[1][1]
    slow = [_Step(1.3 * s.wall_us, 1.3 * s.compute_cpu_us) for s in probe]
    assert fit_joint_stall(cal, slow, 2, False)[0] > 1.5


def _side(nw: int, probe_nw: int | None, wall_probe: float, share_probe: float) -> Sidecar:
    steps = [{"wall_us": 100_000.0 + 100 * i, "cpu_us": 2 * 0.6 * (100_000.0 + 100 * i),
              "next_wall_us": 0.0, "next_cpu_us": 0.0, "profiled": i in (4, 5)}
             for i in range(12)]
    doc = {"stepsim_sidecar": 1, "host_cores": 2, "torch_num_threads": 2,
           "loader": {"num_workers": nw}, "produce": [], "steps": steps}
    if probe_nw is not None:
        doc["probe"] = {"num_workers": probe_nw, "produce": [], "steps": [
            {"wall_us": wall_probe + 50 * i, "cpu_us": 2 * share_probe * wall_probe,
             "next_wall_us": 0.0, "next_cpu_us": 0.0} for i in range(6)]}
    return Sidecar.model_validate(doc)


def test_contended_capture_draws_gamma_from_the_prior_or_the_joint_fit():
    host, src, warn = team_stall_from_sidecar(_side(1, None, 0, 0))
    assert host == {"team_stall": 1.0, "team_stall_range": CONTENDED_PRIOR}
    assert src == {"host.team_stall": "assumed"}
    assert warn[0].record.kind == "prior:host.team_stall" and warn[0].record.noted
    # a 0-worker probe (its team with a core per thread): the work is its wall, 100 × 0.6^1.7
    host, src, warn = team_stall_from_sidecar(_side(1, 0, 100_000.0 * 0.6 ** 1.7, 0.98))
    assert host["team_stall"] == pytest.approx(0.7, abs=0.01)
    lo, hi = host["team_stall_range"]
    assert lo - 0.01 < host["team_stall"] < hi + 0.01 and 0.6 < lo <= hi < 0.8
    assert src == {"host.team_stall": "inferred"}
    assert warn[0].record.kind == "team_stall_joint"
    # a 2-worker probe faster than its lower share allows: the family fails, the prior is
    # stretched to 0 and the warning says why
    host, src, warn = team_stall_from_sidecar(_side(1, 2, 95_000.0, 0.5))
    assert host["team_stall"] == 1.0 and host["team_stall_range"] == (0.0, CONTENDED_PRIOR[1])
    assert "fails the closed form's test" in warn[0] and src == {"host.team_stall": "assumed"}


def _model(share: float | None, gamma: float = 1.0) -> StepModel:
    return StepModel.model_validate({
        "loader": {"num_workers": 1, "produce": {"mean_us": 10_000.0}, "host_cores": 2},
        "host": {"team_stall": gamma, "team_stall_range": [0.3, 3.6],
                 "team_stall_share": share, "ops": [
                     {"kind": "next_batch"},
                     {"kind": "cpu", "dur_us": 30_000.0, "samples_us": [29_000.0, 31_000.0],
                      "threads": 2, "capture_threads": 2, "parallel_fraction": 1.0},
                     {"kind": "cpu", "dur_us": 1_000.0}]}})


@settings(max_examples=40, deadline=None)
@given(st.floats(0.2, 0.95), st.floats(0.0, 4.0), st.floats(0.0, 4.0), st.integers(2, 8))
def test_reinverted_work_is_the_closed_form_at_the_drawn_gamma(share, g0, g1, threads):
    """Work inverted at ``g0`` and re-inverted at ``g1`` equals the inversion at ``g1``
    (one step's share), and back again is the identity; the one-thread op is untouched."""
    wall, cpu = np.array([80_000.0]), np.array([threads * share * 80_000.0])
    w0, s = stalled_team_wall(wall, cpu, threads, g0)
    w1, _ = stalled_team_wall(wall, cpu, threads, g1)
    m = _model(s, g0)
    m = m.model_copy(update={"host": m.host.model_copy(update={"ops": [
        m.host.ops[0], m.host.ops[1].model_copy(update={
            "dur_us": float(w0[0]), "samples_us": None, "threads": threads,
            "capture_threads": threads}), m.host.ops[2]]})})
    out = reinverted(m, g1)
    assert out.host.team_stall == g1
    assert out.host.ops[1].dur_us == pytest.approx(float(w1[0]), rel=1e-9)
    assert out.host.ops[2].dur_us == 1_000.0
    assert reinverted(out, g0).host.ops[1].dur_us == pytest.approx(float(w0[0]), rel=1e-9)


def test_an_interval_draw_moves_the_work_with_gamma():
    m = _model(0.5)
    drawn = perturb(m, {"host.team_stall": 3.0})
    assert drawn.host.team_stall == 3.0
    assert drawn.host.ops[1].dur_us == pytest.approx(30_000.0 * 0.5 ** 2)
    assert drawn.host.ops[1].samples_us == pytest.approx([29_000.0 / 4, 31_000.0 / 4])
    plain = perturb(_model(None), {"host.team_stall": 3.0})     # not inverted: γ alone
    assert plain.host.ops[1].dur_us == 30_000.0 and plain.host.team_stall == 3.0


def test_a_model_without_the_share_writes_what_it_wrote():
    assert "team_stall_share" not in _model(None).model_dump_json()
    assert '"team_stall_share":0.5' in _model(0.5).model_dump_json()
