"""The probe's interference fit against what is not interference (issue 10 item 3): a probe
step's one-off kernel burst (a demo's probe, 2026-12-05 14:41: one of its 8 steps took 148 ms
of CPU, 116 ms of it system time at the usual 6,141 page faults, against 42–54 ms) and page
faults that differ between the calibration's steps and the probe's (each process's heap;
:mod:`calibration.page_faults` prices them apart). Synthetic sidecars of
``test_corun_probe_edges`` (calibration at 0 workers, probe at 1, true coefficient 0.1)."""
import pytest

from stepsim.calibration.sidecar_fit import interference_from_sidecar
from stepsim.tests.test_corun_probe_edges import _side

PER_FAULT_US = 1.5


def _fit(side):
    host, sources, _, _ = interference_from_sidecar(side)
    assert sources["host.interference"] == "inferred"
    return host["interference"]


def _bumped(step, cpu_us: float, faults: int = 0, **more):
    return step.model_copy(update={"cpu_us": step.cpu_us + cpu_us,
                                   "proc_cpu_us": step.proc_cpu_us + cpu_us,
                                   "minflt": faults, **more})


def test_one_probe_steps_kernel_burst_is_not_interference():
    """One of the probe's 10 steps takes 100 ms more CPU (system time): the mean step moved
    10 ms on 60 (+17 %), which the old fit read as interference (0.26 for a true 0.1); the
    median step does not move."""
    side = _side(0.1, team=1)
    steps = list(side.probe.steps)
    steps[3] = _bumped(steps[3], 100_000.0, sys_cpu_us=100_000.0)
    side = side.model_copy(update={"probe": side.probe.model_copy(update={"steps": steps})})
    assert _fit(side) == pytest.approx(0.1, abs=0.02)


def test_page_faults_the_probe_paid_more_of_are_not_interference():
    """The calibration's steps re-fault 0 or 6,000 pages in turn (1.5 µs each, measured from
    their own slope), the probe's 6,000 each: its steps cost 4.5 ms more on average for the
    heap, not the co-runners. Taken less their faults the fit stays at 0.1; counted, it read
    0.17."""
    side = _side(0.1, team=1)
    cal = [_bumped(s, PER_FAULT_US * f, f, profiler_on=False)
           for s, f in zip(side.steps, [0, 6000] * (len(side.steps) // 2))]
    probe = [_bumped(s, PER_FAULT_US * 6000, 6000) for s in side.probe.steps]
    side = side.model_copy(update={
        "steps": cal, "probe": side.probe.model_copy(update={"steps": probe})})
    assert _fit(side) == pytest.approx(0.1, abs=0.02)
