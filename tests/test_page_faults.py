"""The training step's page faults (docs/measurements.md "Page faults of the training step"):
a step's CPU is its fault-free work plus faults × the CPU per fault; whether a run re-faults
is its process's heap's, drawn per run over 0–1 of the most the capture measured."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from stepsim.calibration.host_noise import identical_work_us
from stepsim.calibration.page_faults import (FAULT_GROWTH_EXPONENT, FAULT_GROWTH_POINT, MIN_PAIRS,
                                             refault_fit)
from stepsim.calibration.sidecar import Sidecar, load_sidecar
from tests.conftest import steps_in_turn

C_US, F = 2.0, 12000          # CPU µs per fault, the faults of a re-faulting step


def _side(free_ms, faults, prof_ms=(40.0,) * 4, prof_faults=None, sys=False) -> Sidecar:
    """A start-up step, unprofiled steps of ``free_ms`` fault-free CPU and ``faults`` faults
    each (CPU = free + C_US × faults), then profiled ones; 1 ms of each in next()."""
    def row(ms, flt, profiled):
        cpu = ms * 1e3 + C_US * flt + 1e3
        r = {"wall_us": cpu + 5e3, "cpu_us": cpu, "next_wall_us": 1e3, "next_cpu_us": 1e3,
             "profiled": profiled, "profiler_on": profiled, "minflt": flt, "next_minflt": 1}
        if sys:
            r["sys_cpu_us"] = 1.5 * flt
        return r
    prof_faults = prof_faults or [F] * len(prof_ms)
    steps = ([row(300.0, 3 * F, False)] + [row(v, f, False) for v, f in zip(free_ms, faults)]
             + [row(v, f, True) for v, f in zip(prof_ms, prof_faults)])
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 1},
                                   "steps": steps})


FREE = [30.0, 31.0, 29.5, 30.5, 30.2, 29.8, 30.1, 30.4]
MIXED = [F, 0, F, 27, F // 2, 0, F, 30]


def test_the_fit_recovers_the_cost_per_fault_and_the_fault_free_step():
    rf = refault_fit(_side(FREE, MIXED))
    assert rf.per_fault_us == pytest.approx(C_US, rel=0.02)
    assert rf.fault_free_us == pytest.approx(np.median(FREE) * 1e3, rel=0.01)
    assert rf.max_faults == F            # the start-up step's 3 F do not count
    assert rf.refault_us == pytest.approx(F * C_US, rel=0.02)
    assert rf.unprofiled_us == pytest.approx(
        np.median([v * 1e3 + C_US * f for v, f in zip(FREE, MIXED)]))


def test_the_last_profiled_step_writing_the_trace_does_not_set_the_most():
    rf = refault_fit(_side(FREE, MIXED, prof_faults=[F, F, F, 5 * F]))
    assert rf.max_faults == F


def test_the_profilers_own_cost_in_some_profiled_steps_does_not_set_the_cost_per_fault():
    """Where the unprofiled steps re-fault, they alone measure the cost per fault: the
    profiler's cost per step does not always cancel between profiled steps (the demo's
    capture of 2026-12-05 13:41: 4 of 8 profiled steps held 54-147 ms of system CPU at 8-12k
    faults, and the fit took 2.99 us a fault where its unprofiled steps gave 1.8). Here the
    profiled steps that faulted carry 100 ms more: their pairs' slopes are about 10 us; the
    old fit, pooling them with the unprofiled pairs, took their median, 5x the cost."""
    unprof = [F, F, F, F // 2, F, F, F // 2, F]
    prof_ms = [40.0] * 5 + [140.0] * 4 + [40.0]      # the last writes the trace: left out
    prof_faults = [0] * 5 + [F] * 4 + [F]
    rf = refault_fit(_side(FREE, unprof, prof_ms=prof_ms, prof_faults=prof_faults))
    assert rf.per_fault_us == pytest.approx(C_US, rel=0.05)
    assert rf.refault_us == pytest.approx(F * C_US, rel=0.05)
    # where the unprofiled steps did not re-fault, the profiled pairs still measure it
    rf = refault_fit(_side(FREE, [0] * len(FREE), prof_ms=(40.0,) * 5,
                           prof_faults=[0, F, 0, F, F]))
    assert rf.per_fault_us == pytest.approx(C_US, rel=0.05)


def test_without_spread_in_faults_the_system_time_per_fault_is_taken():
    rf = refault_fit(_side(FREE, [F] * len(FREE), sys=True))
    assert rf.per_fault_us == pytest.approx(1.5) and "kernel" in rf.per_fault_source
    assert refault_fit(_side(FREE, [F] * len(FREE))) is None      # nothing to measure it
    old = Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 1},
                                  "steps": [{"wall_us": 9e3, "cpu_us": 8e3, "next_wall_us": 1e3,
                                             "next_cpu_us": 1e3}] * 6})
    assert refault_fit(old) is None      # a sidecar before the faults were counted


def test_identical_work_leaves_the_faults_out():
    """A replicate whose steps re-fault is not a slower host (it was, before: 1.4x)."""
    quiet = identical_work_us(_side(FREE, MIXED))
    faulting = identical_work_us(_side(FREE, [F] * 4 + [0] * 4))
    assert faulting == pytest.approx(quiet, rel=0.02)


def test_identical_work_of_a_run_whose_every_step_re_faulted_is_less_their_cpu():
    """No step without faults to take: each step less its faults × the measured CPU per fault
    (the 12:17 demo's two such replicates had read as a host 6 and 25 % slower)."""
    none = identical_work_us(_side(FREE, [0] * 8, prof_ms=[40.0] * 5, prof_faults=[0] * 5))
    every = _side(FREE, [F] * 8, prof_ms=[40.0] * 5, prof_faults=[F, 2 * F, F, 2 * F, F])
    assert refault_fit(every).per_fault_us == pytest.approx(C_US)
    assert identical_work_us(every) == pytest.approx(none, rel=1e-9)


def test_the_planned_step_pays_the_share_of_the_refault():
    from stepsim.models.params import HostOp, HostParams, LoaderParams, StepModel, DurationSpec
    from stepsim.models.plans import host_plan
    from stepsim.models.simulate import simulate

    def model(share):
        op = HostOp(kind="cpu", name="training step", dur_us=30_000.0, refault_us=20_000.0,
                    block_fraction=0.1)
        return StepModel(loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=50_000.0)),
                         host=HostParams(ops=[HostOp(kind="next_batch"), op],
                                         refault_share=share))
    for share in (0.0, 0.5, 1.0):
        plan = host_plan(model(share))[1]
        assert plan.dur_us == pytest.approx(30_000.0 + share * 20_000.0)
        # the fault part is CPU work: the blocking keeps its 3 ms
        assert plan.block_fraction * plan.dur_us == pytest.approx(3_000.0)
        step = simulate(model(share), steps=20, warmup=2, seed=0, keep="steps").mean_step_us
        assert step == pytest.approx(50_000.0 + 30_000.0 + share * 20_000.0, rel=1e-6)


def test_the_share_is_drawn_per_run():
    """The pooled mean of 2 runs draws the mean of 2 uniform shares (variance 1/24)."""
    from stepsim.scenarios.draws import draw_plan
    from stepsim.models.params import HostOp, HostParams, LoaderParams, StepModel, DurationSpec

    m = StepModel(loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=5e4)),
                  host=HostParams(ops=[HostOp(kind="next_batch"),
                                       HostOp(kind="cpu", dur_us=3e4, refault_us=2e4)],
                                  refault_share_range=(0.0, 1.0)))
    for runs, var in ((1, 1 / 12), (2, 1 / 24)):
        shares = np.array([f["host.refault_share"] for f, _ in draw_plan(m, 4000, 0, runs=runs)])
        assert shares.min() >= 0 and shares.max() <= 1
        assert shares.mean() == pytest.approx(0.5, abs=0.02)
        assert shares.var() == pytest.approx(var, rel=0.1)


def test_calibration_takes_the_fault_free_step_plus_half_the_most(cpu_run_nw1, tmp_path):
    """A real capture whose steps re-fault every third step (edited): the model's step is the
    fault-free work (the old code: the unprofiled steps' CPU, faults and all) and the
    re-faulting's measured most is held apart, half of it in the point."""
    from stepsim.fit import calibrate
    from stepsim.models.host_speed import at_capture_speed

    BIG = 60_000       # 120 ms a step

    def copy(name, faults: bool):
        d = tmp_path / name
        shutil.copytree(cpu_run_nw1, d)
        data = json.loads((d / "sidecar.json").read_text())
        last = max(i for i, s in enumerate(data["steps"]) if s["profiled"])
        for i, s in enumerate(data["steps"][1:], 1):
            # every third step, of both kinds: under half of each kind, so the profiler
            # factor's medians (unprofiled ÷ profiled) are of steps without the edit's faults
            # (every other step put one median on a re-faulting step now and then: a factor
            # past MAX_STEP_FACTOR, the step left unscaled)
            flt = BIG if i % 3 == 1 and i != last else 0
            if flt:
                s["cpu_us"] += C_US * flt
                s["wall_us"] += C_US * flt
                if s.get("proc_cpu_us") is not None:
                    s["proc_cpu_us"] += C_US * flt
            for f in ("minflt", "next_minflt", "sys_cpu_us"):
                s.pop(f, None)
            if faults:
                s["minflt"] = flt
        steps_in_turn(data["steps"])   # the longer walls move the later steps' starts
        for f in ("minflt", "next_minflt", "sys_cpu_us"):
            data["steps"][0].pop(f, None)
        if faults:
            data["steps"][0]["minflt"] = 3 * BIG
        (d / "sidecar.json").write_text(json.dumps(data))
        return calibrate(d / "trace.json.gz", sidecar=d / "sidecar.json"), load_sidecar(
            d / "sidecar.json")

    old, _ = copy("old", False)
    new, side = copy("new", True)
    rf = refault_fit(side)
    # the edit's faults are 0 or BIG, so a pair of one kind whose faults differ has the slope
    # C_US + (its two steps' own real work apart) / BIG: the fit's median is within C_US ±
    # the range of real work of the group it used over BIG. The unprofiled steps measure it
    # where they hold MIN_PAIRS such pairs, else the profiled ones (whose profiler cost
    # spreads their work more); the trace's last profiled step and the next are left out.
    orig = load_sidecar(cpu_run_nw1 / "sidecar.json").steps
    last = max(i for i, s in enumerate(orig) if s.profiled)
    kept = [i for i in range(1, len(orig)) if i not in (last, last + 1)]
    unprof = [i for i in kept if orig[i].profiler_on is False and not orig[i].profiled]
    prof = [i for i in kept if orig[i].profiled]
    hit = sum(i % 3 == 1 for i in unprof)
    group = unprof if hit * (len(unprof) - hit) >= MIN_PAIRS else prof
    real = [orig[i].cpu_us - orig[i].next_cpu_us for i in group]
    assert abs(rf.per_fault_us - C_US) <= (max(real) - min(real)) / BIG + 1e-9
    assert rf.max_faults == BIG
    o, n = old.host.ops[1], new.host.ops[1]
    assert o.refault_us == 0
    assert n.dur_us == pytest.approx(o.dur_us * rf.fault_free_us / rf.unprofiled_us, rel=1e-6)
    assert n.refault_us == pytest.approx(n.dur_us * rf.refault_us / rf.fault_free_us, rel=1e-6)
    assert new.host.refault_share == 0.5 and new.host.refault_share_range == (0.0, 1.0)
    assert new.meta.sources["host.refault_share"] == "assumed"
    # no batch-size probe: the faults' growth with the batch is the prior, linear the point
    assert new.host.refault_growth_range == FAULT_GROWTH_EXPONENT
    assert new.host.refault_growth == FAULT_GROWTH_POINT == 1.0
    assert new.meta.sources["host.refault_growth"] == "assumed"
    assert old.host.refault_growth == 1.0 and old.host.refault_growth_range is None
    assert new.meta.sources["host.ops[1].refault_us"] == "measured"
    # the replay of the capture gets the profiled window back, its faults included
    r = at_capture_speed(new).host.ops[1]
    assert r.refault_us == 0
    assert r.dur_us == pytest.approx(at_capture_speed(old).host.ops[1].dur_us, rel=1e-6)
