"""The slowdown past the cores fitted from a capture sidecar (calibration.oversub) takes no
page-fault cost: it reads the workers' batches' CPU (whose records hold no faults) and the
steps only as co-runners, so steps that re-fault thousands of pages at a measured cost per
fault leave the fit where the closed form puts it."""
import pytest

from stepsim.calibration.oversub import oversub_from_sidecar
from stepsim.calibration.page_faults import refault_fit
from stepsim.calibration.sidecar import Probe, ProduceRecord, Sidecar, StepRecord

WALL_US, BATCH_US, N = 100_000.0, 60_000.0, 12


def _setting(workers: int, a: float, t0: float, faults: bool):
    """``workers`` lanes of back-to-back 100 ms batches beside one-thread steps of the same
    span (next() 0 µs): ``workers + 1`` runnable on 2 cores, ``f = 1 − 2 / (workers + 1)``;
    each batch costs ``BATCH_US × (1 + a f)``; a step's CPU is 30 ms plus 2 µs for each of its
    2,000–5,000 faults (``faults``), else 30 ms and none."""
    f = max(1 - 2 / (workers + 1), 0.0)
    c = BATCH_US * (1 + a * f)
    produce = [ProduceRecord(worker=w, pid=10 + w, seq=i, wall_us=WALL_US, cpu_us=c,
                             proc_cpu_us=c, t_end_us=t0 + (i + 1) * WALL_US)
               for w in range(workers) for i in range(N)]
    steps = []
    for i in range(N):
        flt = 2_000 + 1_000 * (i % 4) if faults else 0
        cpu = 30_000.0 + 2.0 * flt
        steps.append(StepRecord(t_start_us=t0 + i * WALL_US, wall_us=WALL_US, cpu_us=cpu,
                                next_wall_us=0.0, next_cpu_us=0.0, vcsw=0, ivcsw=1,
                                minflt=flt, sys_cpu_us=1.0 * flt, profiler_on=False))
    return produce, steps


def _side(a: float, faults: bool) -> Sidecar:
    cp, cs = _setting(1, a, 0.0, faults)
    pp, ps = _setting(4, a, 5e6, faults)
    return Sidecar(stepsim_sidecar=1, host_cores=2, torch_num_threads=1,
                   loader={"num_workers": 1, "batch_size": 32}, produce=cp, steps=cs,
                   probe=Probe(num_workers=4, produce=pp, steps=ps))


@pytest.mark.parametrize("a", [0.05, 0.2])
def test_the_fit_is_the_closed_form_whatever_the_steps_faults(a):
    """Capture at ``f`` 0, probe at 0.6, both with the other core busy (the interference
    cancels): ``(1 + 0.6 a) − 1) / 0.6 = a`` with and without the faults."""
    got = {}
    for faults in (False, True):
        host, src, _ = oversub_from_sidecar(_side(a, faults), interference=0.1)
        assert src["host.oversub"] == "inferred"
        got[faults] = (host["oversub"], host["oversub_range"], host["oversub_ref"])
        assert host["oversub"] == pytest.approx(a, abs=1e-9)
        assert host["oversub_ref"] == 0.0
    assert got[True] == got[False]
    # the steps' cost per fault is measured (2 µs), and the fit has no use for it
    assert refault_fit(_side(a, True)).per_fault_us == pytest.approx(2.0)


def test_the_fitted_note_states_the_range_drawn_and_ranks_as_noted():
    """The fit's text says the range the what-ifs draw (cut at 0: a fit's P10 below 0 read as
    a negative slowdown to a new user, 2026-12-06) and, a parameter's source, is noted."""
    from stepsim.warning_order import rank_one
    host, _, (text,) = oversub_from_sidecar(_side(0.05, False), interference=0.1)
    lo, hi = host["oversub_range"]
    assert f"draw it over {lo:.3f}–{hi:.3f}" in text
    r = rank_one(text)
    assert r.noted and r.effect_us is None
    assert r.summary == (f"slowdown past the cores (host.oversub) fitted from the probe at "
                         f"num_workers=4: {host['oversub']:.3f}, what-ifs draw {lo:.3f}–{hi:.3f}")
