"""The DDP demo's per-phase breakdown (demo.ddp_phases): closed forms on hand-made instants."""
from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.demo.ddp_phases import PHASES, format_breakdown, measured_phases, simulated_phases
from stepsim.simcore.record import Span


def _run(steps: int, period: float, rank: int = 0) -> dict:
    """A rank's RunResult dict: each step fwd 4 ms, barrier 1, bwd 8 (CPU 7), wait 3, opt 2,
    then 0.5 ms to the next start (µs)."""
    starts = [k * period for k in range(steps + 1)]
    phases = []
    for t0 in starts[:steps]:
        t1, t2 = t0 + 4000, t0 + 5000
        tg, t3, t4 = t2 + 8000, t2 + 11000, t2 + 13000
        c0 = t0 / 2
        phases.append([t1, t2, tg, t3, t4, c0, c0 + 3900, c0 + 3950, c0 + 3950 + 7000,
                       c0 + 11000, c0 + 12800])
    return {"rank": rank, "step_starts_us": starts, "phases": phases}


def test_measured_phases_are_the_instants_differences():
    m = measured_phases([_run(5, 18500.0), _run(3, 18500.0)])
    assert m == pytest.approx({"fwd": 4.0, "barrier": 1.0, "bwd": 8.0, "bwd_cpu": 7.0,
                               "wait": 3.0, "opt": 2.0, "tail": 0.5, "post": 5.5,
                               "step": 18.5})


def test_measured_phases_without_steps_are_nan():
    m = measured_phases([{"rank": 0, "step_starts_us": [0.0], "phases": []}])
    assert all(np.isnan(m[c]) for c in PHASES)


def _span(name, kind, start, dur, step, category="", rank=0):
    return Span(lane=f"rank{rank}.host", name=name, kind=kind, start_us=start, dur_us=dur,
                step=step, rank=rank, cause="", category=category)


def test_simulated_phases_read_the_host_spans():
    """Warm-up step 0 is left out; step 1: forward 4 ms, barrier wait 1, backward 6 busy +
    1 waiting for a core + launch 0.2 at 11 ms, wait 4, optimizer 3, next start at 19 ms."""
    spans = []
    for step in (0, 1):
        t = step * 19000.0
        spans += [_span("forward", "busy", t, 4000, step, "forward"),
                  _span("wait for the barrier", "wait", t + 4000, 1000, step),
                  _span("backward", "busy", t + 5000, 6000, step, "backward"),
                  _span("backward", "wait", t + 11000, 1000, step, "backward"),
                  _span("c10d::all_reduce enqueue", "busy", t + 12000, 200, step, "launch"),
                  _span("backward", "busy", t + 12200, 10, step, "backward"),
                  _span("wait for gloo:all_reduce (untraced)", "wait", t + 12210, 3790, step),
                  _span("optimizer", "busy", t + 16000, 3000, step, "optimizer")]
    sim = SimpleNamespace(every_span=lambda: spans, warmup=1, ranks=[0],
                          step_us=np.zeros((1, 1)), step_starts_us=[[0.0, 19000.0, 38000.0]])
    p = simulated_phases(sim)[0]
    assert p == pytest.approx({"fwd": 4.0, "barrier": 1.0, "bwd": 7.0, "bwd_cpu": 6.0,
                               "wait": 4.0, "opt": 3.0, "tail": 0.0, "post": 7.0,
                               "step": 19.0})
    assert "bwd 7.00/" in format_breakdown([{"setting": "s", "rank": 0, "predicted": p,
                                             "measured": p}])[1]
