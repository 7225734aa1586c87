"""The main thread's context switches inside next() (2026-12-05, docs/measurements.md
"next()'s wait for a core"): at 1-4 workers next() waited 3-4 ms for a core in 2 of 3 steps,
after its index put woke a worker that took its core; the sidecar counted switches only after
next(), so the preemptions there could not be counted. Each step row now has next_vcsw /
next_ivcsw, the switches between its start and its batch in hand, besides vcsw / ivcsw after."""
from __future__ import annotations

import json
import types

from stepsim.calibration import window
from stepsim.calibration.sidecar import load_sidecar


class _Kernel:
    def __init__(self):
        self.t = self.cpu = 0.0
        self.nv = self.niv = 0

    def getrusage(self, who):
        return types.SimpleNamespace(ru_nvcsw=self.nv, ru_nivcsw=self.niv)


def test_switches_inside_next_are_counted_apart_from_those_after(monkeypatch):
    k = _Kernel()
    monkeypatch.setattr(window, "time", types.SimpleNamespace(
        monotonic=lambda: k.t, thread_time=lambda: k.cpu, process_time=lambda: k.cpu))
    monkeypatch.setattr(window.resource, "getrusage", k.getrusage)
    monkeypatch.setattr(window, "run_wait_us", lambda: 0.0)
    t0 = window.clocks()
    k.t += 0.004; k.nv += 1; k.niv += 3          # next(): slept once, preempted 3 times
    t1 = window.clocks()
    k.t += 0.010; k.niv += 2                      # the step's work: preempted twice
    t2 = window.clocks()
    r = window.step_row(t0, t1, t2, True)
    assert (r["next_vcsw"], r["next_ivcsw"], r["vcsw"], r["ivcsw"]) == (1, 3, 0, 2)


def test_a_sidecar_keeps_them_and_an_old_one_has_none(tmp_path):
    def load(extra):
        steps = [dict({"t_start_us": 100.0 * i, "wall_us": 100.0, "cpu_us": 50.0,
                       "next_wall_us": 5.0, "next_cpu_us": 1.0, "profiled": True}, **extra)
                 for i in range(2)]
        p = tmp_path / "sidecar.json"
        p.write_text(json.dumps({"stepsim_sidecar": 1, "host_cores": 2, "produce": [],
                                 "loader": {"num_workers": 1}, "steps": steps}))
        return load_sidecar(p).steps
    assert [(s.next_vcsw, s.next_ivcsw) for s in load({"next_vcsw": 1, "next_ivcsw": 3})] \
        == [(1, 3)] * 2
    assert [(s.next_vcsw, s.next_ivcsw) for s in load({})] == [(None, None)] * 2


def test_page_faults_and_system_time_are_counted_inside_and_after_next(monkeypatch):
    """The main thread's minor page faults and system CPU per step (docs/measurements.md
    "Page faults of the training step"): the allocator's re-faulting of the step's memory."""
    k = _Kernel()
    k.flt, k.sys = 100, 0.5

    def ru(who):
        return types.SimpleNamespace(ru_nvcsw=k.nv, ru_nivcsw=k.niv, ru_minflt=k.flt,
                                     ru_stime=k.sys)
    monkeypatch.setattr(window, "time", types.SimpleNamespace(
        monotonic=lambda: k.t, thread_time=lambda: k.cpu, process_time=lambda: k.cpu))
    monkeypatch.setattr(window.resource, "getrusage", ru)
    monkeypatch.setattr(window, "run_wait_us", lambda: 0.0)
    t0 = window.clocks()
    k.flt += 3
    t1 = window.clocks()
    k.flt += 5000; k.sys += 0.008                 # the step re-faulted 5000 pages, 8 ms sys
    t2 = window.clocks()
    r = window.step_row(t0, t1, t2, False)
    assert (r["next_minflt"], r["minflt"]) == (3, 5000)
    assert abs(r["sys_cpu_us"] - 8000.0) < 1e-6
    # a kernel that does not say: None, not 0
    monkeypatch.setattr(window.resource, "getrusage", k.getrusage)
    t = window.clocks()
    r = window.step_row(t, t, t, False)
    assert (r["minflt"], r["next_minflt"], r["sys_cpu_us"]) == (None, None, None)
