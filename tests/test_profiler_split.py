"""The profiler's cost shared by the phases' events (calibration.profiler_events) in a real
2-rank gloo job: the checked-in one, deterministically, and the closed form that the live
job of tests/test_gloo.py is held to."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stepsim.calibration.profiler_events import MIN_PHASE_FACTOR
from stepsim.fit import calibrate

JOB = Path(__file__).parent / "data" / "gloo_loader_job"
"""A real job (ddpload12, 2026-12-06 14:07; tests/test_gloo_cpu_price.py)."""


def cpu_steps(unprof_us: float, prof_us: float):
    """A sidecar edit: 5 unprofiled steps of ``unprof_us`` CPU (wall alike) and 4 profiled ones
    of ``prof_us``, so each rank's profiler factor is their ratio."""
    def edit(side):
        row = lambda cpu, prof: {"wall_us": cpu, "cpu_us": cpu, "next_wall_us": 0.0,
                                 "next_cpu_us": 0.0, "profiled": prof, "profiler_on": prof}
        side["steps"] = [row(unprof_us, False)] * 5 + [row(prof_us, True)] * 4
    return edit


def closed_form_split(f: float, dur_us: dict, events: dict) -> dict[str, float]:
    """The phases' factors from the step's ``f`` below 1, each phase's profiled duration (µs)
    and events: ``1 - N_p c / D_p`` with ``c = (1 - f) ΣD / ΣN`` µs an event, which weighted by
    the durations keep ``f`` and so straddle it; ``f`` for every phase where one would fall
    below ``MIN_PHASE_FACTOR``. Which phase records the most events per µs, and whether it is
    dense enough to fall below at ``f = 0.5`` (over 1.5 times the step's density), is the live
    run's: a rank fell below in 20 of 20 test-job captures beside a CPU hog and in 2 of 20
    test runs without one (2026-12-06), where the live test held a split on every rank."""
    c = (1 - f) * sum(dur_us.values()) / sum(events.values())
    split = {p: 1 - events[p] * c / d for p, d in dur_us.items()}
    if min(split.values()) < MIN_PHASE_FACTOR:
        return {p: f for p in dur_us}
    assert sum(split[p] * d for p, d in dur_us.items()) == pytest.approx(f * sum(dur_us.values()))
    assert MIN_PHASE_FACTOR <= min(split.values()) < f < max(split.values()) < 1.0
    return split


def spied_phase_factors(monkeypatch) -> list[tuple[float, dict, dict]]:
    """The arguments of every ``phase_factors`` call gloo calibration makes from now on (one per
    rank, in rank order): the step's factor and the phases' durations (µs) and events."""
    import stepsim.calibration.gloo as gloo

    calls = []
    real = gloo.phase_factors

    def spy(f, dur_us, events):
        calls.append((f, dur_us, events))
        return real(f, dur_us, events)

    monkeypatch.setattr(gloo, "phase_factors", spy)
    return calls


def _job_with(tmp: Path, edit) -> Path:
    dst = tmp / "job"
    shutil.copytree(JOB, dst)
    for f in dst.glob("rank*/sidecar.json"):
        side = json.loads(f.read_text())
        edit(side)
        f.write_text(json.dumps(side))
    return dst


def test_the_checked_in_jobs_phases_split_half_its_steps_cpu(tmp_path, monkeypatch):
    """The checked-in job with its unprofiled steps at half its profiled steps' CPU: each
    rank's phases split the 0.5 by their events (backward, the densest, below it; forward and
    the optimizer above), as the closed form gives from the rank's phase durations and events,
    and no rank falls back to 0.5 for every phase."""
    calls = spied_phase_factors(monkeypatch)
    model = calibrate(_job_with(tmp_path, cpu_steps(10e3, 20e3)))
    assert model.meta.notes["profiler_factor"] == "0:0.5000,1:0.5000"
    got = {int(r): dict((k, float(v)) for k, v in (x.split("=") for x in kv.split(",")))
           for r, kv in (p.split(":") for p in model.meta.notes["profiler_phase_factor"].split(";"))}
    assert len(calls) == 2
    for r, (f, dur, ev) in enumerate(calls):
        want = closed_form_split(f, dur, ev)
        assert got[r] == pytest.approx(want, abs=1e-6)
        assert want["backward"] < 0.5 < min(want["forward"], want["optimizer"])
