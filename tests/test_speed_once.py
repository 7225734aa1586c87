"""The host's speed is applied once (issue 10, newuser3's question): a capture whose profiled
window ran at ``S``× its run's CPU time, whose unprofiled after-steps took ``a`` µs, with a
replicate at ``r``× the capture's run, predicts ``a · sqrt(r)`` for a host-bound step, the
after-steps at the runs' mean speed (``exp`` of their mean log), in closed form.

The two factors calibration puts on such a step have one reference, the window:
:func:`calibration.step_tail.step_tail` sets the step's work (window µs) to ``a · S`` (the
run's steps at the window's speed, ``× (1 + (a·S − w) / work)``), and
:func:`calibration.host_noise.at_run_speed` makes the runs' speeds ``[1, r]`` factors against
the window, ``[1/S, r/S]``, whose centre is ``host.cpu_scale``: ``a · S · sqrt(r) / S``.
newuser3's ``80.8 × 0.853 × 0.896`` takes the tail's factor on the whole window step; it is on
the work alone, an added ``a·S − w``, and the centre 0.896 holds the ``1/S`` that takes the
window's speed back out. The replay of the window (:func:`models.host_speed.at_capture_speed`)
undoes both and gives the window's own ``w``.
"""
from __future__ import annotations

import math

import pytest

from stepsim.calibration import host_noise
from stepsim.calibration.step_tail import step_tail
from stepsim.models.host_speed import at_capture_speed
from stepsim.models.params import StepModel
from stepsim.scenarios.predict import predict
from tests.test_step_tail import WINDOW, _side

W = sum(WINDOW) / len(WINDOW)          # µs, the window's mean wall (20 ms)
S = 1.128                              # newuser3's window speed against its run
A = W * 65.26 / 80.80                  # µs, the after-steps' mean, newuser3's ratio to W


def _model(factor: float, work_us: float = W) -> StepModel:
    """A 0-worker step that is its training step alone (next() free), of ``work_us`` (window
    µs) times the tail's ``factor``, as calibration leaves it (the factor in
    ``meta.notes['step_profiler_factor']`` for the replay)."""
    notes = {"step_profiler_factor": factor}
    return StepModel.model_validate({
        "loader": {"num_workers": 0, "produce": {"mean_us": 0.0}, "host_cores": 8},
        "host": {"ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "name": "train", "dur_us": work_us * factor}]},
        "meta": {"name": "synthetic", "notes": notes}})


def _mean(model: StepModel) -> float:
    return predict(model, steps=10, warmup=2, seed=0).mean_step_us


@pytest.mark.parametrize("r", [1.0, 0.906 / 0.887, 1.3])
def test_speed_is_applied_once_between_the_window_the_run_and_its_replicates(monkeypatch, r):
    monkeypatch.setattr(host_noise, "window_speed", lambda side: S)
    side = _side([A] * 16)
    tail = step_tail(side, W)             # the step's work is its whole wall here
    assert tail.factor == pytest.approx(1 + (A * S - W) / W, rel=1e-12)
    model = _model(tail.factor)
    assert _mean(model) == pytest.approx(A * S, rel=1e-9)       # the run's steps, window speed
    speeds = [1.0, r] if r != 1.0 else None
    moved = host_noise.at_run_speed(model, side, speeds)
    want = A * math.sqrt(r)               # the after-steps at the runs' mean speed
    assert moved.host.cpu_scale == pytest.approx(math.sqrt(r) / S, rel=1e-9)
    assert _mean(moved) == pytest.approx(want, rel=1e-9)
    # counted twice (the centre on the run's own steps, ``a · c``) is ``S`` = 12.8 % off
    assert abs(_mean(moved) / (A * moved.host.cpu_scale) - 1) > 0.1
    # the replay of the captured window: its own speed and its own (profiled) step
    own = at_capture_speed(moved)
    assert own.host.cpu_scale == pytest.approx(1.0, rel=1e-9)
    assert _mean(own) == pytest.approx(W, rel=1e-9)


def test_a_model_short_of_its_window_carries_that_shortfall_not_a_second_speed(monkeypatch):
    """Where the simulated window is ``δ`` short of the measured ``w`` (newuser3's: 75.3 ms
    replayed against 80.8 ms), the tail's added ``a·S − w`` keeps it: the prediction at the
    capture run's speed is ``a − δ / S``, the replay's shortfall at the run's speed, the
    −6 to −8 % newuser3 saw (not ``a`` × a second speed factor)."""
    monkeypatch.setattr(host_noise, "window_speed", lambda side: S)
    side = _side([A] * 16)
    short = 0.93 * W                      # what the model's step replays: 7 % short
    tail = step_tail(side, short)         # the tail takes the measured wall w, not the replay
    model = _model(tail.factor, short)
    moved = host_noise.at_run_speed(model, side, None)
    assert moved.host.cpu_scale == pytest.approx(1 / S, rel=1e-9)
    assert _mean(moved) == pytest.approx(A - (W - short) / S, rel=1e-9)
