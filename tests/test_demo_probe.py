"""A probe measures co-run interference only where its load differs enough from the capture's
(issue 10): its slope's standard error (:func:`calibration.corun.slope_se`, from the records'
scatter) above the prior's standard deviation keeps the stated prior, with a warning naming
both loads and the probe that would measure it; a probe at a distinct load recovers a known
coefficient. The demo's ``--probe`` alone records the probe at ``num_workers=0``."""
import numpy as np
import pytest

from stepsim.calibration.corun import INTERFERENCE_PRIOR, PRIOR_SD, _fit, slope_se
from stepsim.calibration.sidecar import Probe, ProduceRecord, Sidecar, StepRecord
from stepsim.calibration.same_thread import probe_rule
from stepsim.calibration.sidecar_fit import interference_from_sidecar

ALONE_US, STEP_US, NOISE = 40_000.0, 60_000.0, 0.02
"""A batch's and a training step's CPU alone (µs), and each record's log sd."""
PERIOD_US, NEXT_US, COMPUTE_END_US, BATCH_US = 100_000.0, 1_000.0, 90_000.0, 99_000.0
"""With workers, each step (period 100 ms) runs on the main thread from 1 to 90 ms, every
worker's batch from 0 to 99 ms: at 1 worker on 2 cores a batch has the other core busy for
89 / 99 of its wall and the step for all of it; at 2 workers, both all of it."""
LOAD = {0: (0.0, 0.0), 1: ((COMPUTE_END_US - NEXT_US) / BATCH_US, 1.0), 2: (1.0, 1.0)}
"""The closed-form co-run load (the other core's busy share) of (a batch, a step) by workers."""


def _setting(nw: int, k: float, n: int, t0: float, rng):
    """``n`` steps at ``nw`` workers on 2 cores, every CPU time ``× (1 + k × its load)`` with
    log-normal noise (sd :data:`NOISE`); every thread runnable throughout its interval (a
    worker's batch without a recorded run-queue wait: with 2 threads on 2 cores none waits,
    and a recorded wait is read as time at every core busy, :func:`calibration.corun.corun_loads`)."""
    ob, os_ = LOAD[nw]
    steps, produce = [], []
    for i in range(n):
        t = t0 + i * PERIOD_US
        b = ALONE_US * (1 + k * ob) * np.exp(NOISE * rng.standard_normal())
        c = STEP_US * (1 + k * os_) * np.exp(NOISE * rng.standard_normal())
        if nw == 0:     # the main thread makes the batch in next(), then steps: each alone
            produce.append(ProduceRecord(worker=-1, pid=1, seq=i, wall_us=b, cpu_us=b,
                                         t_end_us=t + b, run_wait_us=0.0))
            steps.append(StepRecord(t_start_us=t, wall_us=b + c, cpu_us=b + c,
                                    next_wall_us=b, next_cpu_us=b, run_wait_us=0.0))
            continue
        for w in range(nw):
            bw = b if w == 0 else ALONE_US * (1 + k * ob) * np.exp(NOISE * rng.standard_normal())
            produce.append(ProduceRecord(worker=w, pid=2 + w, seq=i, wall_us=BATCH_US, cpu_us=bw,
                                         proc_cpu_us=bw, t_end_us=t + BATCH_US))
        steps.append(StepRecord(t_start_us=t, wall_us=COMPUTE_END_US, cpu_us=NEXT_US + c,
                                next_wall_us=NEXT_US, next_cpu_us=NEXT_US,
                                run_wait_us=COMPUTE_END_US - NEXT_US - c))
    return steps, produce


def _side(probe_workers: int, k: float, seed: int = 0, n: int = 16, n_probe: int = 10):
    """A capture at 1 worker (2 cores) with a probe at ``probe_workers``, interference ``k``."""
    rng = np.random.default_rng(seed)
    cs, cp = _setting(1, k, n, 0.0, rng)
    ps, pp = _setting(probe_workers, k, n_probe, 5e6, rng)
    return Sidecar(stepsim_sidecar=1, host_cores=2, torch_num_threads=1,
                   loader={"num_workers": 1, "batch_size": 32}, produce=cp, steps=cs,
                   probe=Probe(num_workers=probe_workers, produce=pp, steps=ps))


def test_a_probe_at_nearly_the_capture_load_keeps_the_prior():
    """At 2 workers the batches' load moves 0.90 → 1.00 (the step's none): with 2 % noise per
    record the slope's standard error is ≈ 0.09, twice the prior's sd, so the prior is kept
    and the warning gives both loads and what each probe can calibrate: on 2 cores no probe
    measures interference alone (a probe at 0 workers, asked for until tidy18, moves the
    batches onto the main thread too); the old rule (any change of load over 0.05) fitted
    it."""
    host, sources, _, warn = interference_from_sidecar(_side(2, 0.1))
    assert sources["host.interference"] == "assumed"
    assert host["interference_range"] == INTERFERENCE_PRIOR
    (line,) = [w for w in warn if w.startswith("co-run interference")]
    assert "\n" not in line and "not calibrated" in line
    assert f"{LOAD[1][0]:.2f} in the capture and 1.00 in the probe" in line
    assert probe_rule(1, 2) in line and "no probe calibrates co-run interference alone" in line


@pytest.mark.parametrize("k", [0.05, 0.1, 0.3])
def test_a_probe_at_a_distinct_load_recovers_the_coefficient(k):
    """At 0 workers the batch's load falls 0.90 → 0 and the step's 1 → 0: the fit gives the
    coefficient the records were made with (at 0 a fit whose bootstrap P90 falls to 0 reads
    as drift and keeps the prior, so 0.05 is the least tried)."""
    host, sources, _, warn = interference_from_sidecar(_side(0, k))
    assert sources["host.interference"] == "inferred", warn
    assert host["interference"] == pytest.approx(k, abs=0.03)
    lo, hi = host["interference_range"]
    assert lo <= k + 0.03 and hi >= k - 0.03


def _records(o: float, k: float, n: int, rng) -> np.ndarray:
    cpu = ALONE_US * (1 + k * o) * np.exp(NOISE * rng.standard_normal(n))
    return np.column_stack([cpu, np.full(n, o)])


@pytest.mark.parametrize("o0,o1", [(0.9, 1.0), (0.5, 0.0)])
def test_slope_se_is_the_spread_of_the_fit(o0, o1):
    """Over 300 independent captures and probes of 15 and 10 records, the fitted coefficient
    spreads by the standard error :func:`slope_se` says (within 20 %: a spread from 300 draws
    is good to about 4 %, the robust sd of 10 records to about 20 %)."""
    rng = np.random.default_rng(5)
    points, ses = [], []
    for _ in range(300):
        a0, a1 = _records(o0, 0.08, 15, rng), _records(o1, 0.08, 10, rng)
        points.append(_fit([(np.median(a0[:, 0]), o0, np.median(a1[:, 0]), o1)]))
        ses.append(slope_se(a0, a1))
    assert np.std(points) == pytest.approx(np.median(ses), rel=0.2)


def test_equal_loads_measure_nothing():
    rng = np.random.default_rng(2)
    a = _records(1.0, 0.1, 10, rng)
    assert slope_se(a, a) == float("inf")
    assert PRIOR_SD == pytest.approx(0.16 / 12 ** 0.5)


def test_the_demo_probe_is_at_zero_workers():
    """``stepsim demo --probe`` alone is :data:`demo.run.PROBE_WORKERS` (0); ``--probe N``
    keeps the user's N."""
    from stepsim.cli_args import parser
    from stepsim.demo.run import PROBE_WORKERS
    assert PROBE_WORKERS == 0
    assert parser().parse_args(["demo", "--probe"]).probe == PROBE_WORKERS
    assert parser().parse_args(["demo", "--probe", "2"]).probe == 2
    assert parser().parse_args(["demo"]).probe is None
