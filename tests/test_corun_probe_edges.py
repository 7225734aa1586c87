"""Co-run interference fitted from a probe at a second num_workers (issue 10 item 3): the
co-runners beside each batch are counted as :func:`calibration.outside_load.busy_spans` counts
them. A probe whose batches ran before its first recorded step (their co-runners unrecorded),
or whose training-step threads waited for a core (run-queue wait), must not inflate the
coefficient; a real slower-per-CPU co-run still fits; a fit above the prior is said, not
clamped."""
import numpy as np
import pytest

from stepsim.calibration.corun import INTERFERENCE_PRIOR
from stepsim.calibration.sidecar import Probe, ProduceRecord, Sidecar, StepRecord
from stepsim.calibration.sidecar_fit import interference_from_sidecar

ALONE_US = 36_000.0     # a batch's CPU alone (µs)
CORES = 2


def _cal(rng, team, n=16):
    """num_workers=0: each step's next() makes the batch on the main thread alone, then the
    step runs 60 ms on ``team`` threads (nothing beside the batch: load 0)."""
    steps, produce = [], []
    for i in range(n):
        t = i * 100_000.0
        b = ALONE_US * rng.uniform(0.99, 1.01)
        produce.append(ProduceRecord(worker=-1, pid=1, seq=i, wall_us=b, cpu_us=b,
                                     proc_cpu_us=b, t_end_us=t + b))
        steps.append(StepRecord(t_start_us=t, wall_us=b + 60_000, cpu_us=b + 60_000,
                                proc_cpu_us=b + team * 60_000, next_wall_us=b, next_cpu_us=b,
                                next_proc_cpu_us=b, vcsw=0, ivcsw=1))
    return steps, produce


def _probe(rng, k, team, t0, n=10, edge=0, run_wait=True):
    """num_workers=1: a worker's batch (90 ms wall) beside each training step (99 ms outside
    next()) whose ``team`` threads stay runnable throughout; on 2 cores beside the worker the
    main thread holds a core for ``min(1, 2 / (team + 1))`` of the time and waits on the run
    queue the rest. The batch's CPU is ``ALONE_US × (1 + k)`` (the other core busy with the
    step throughout). ``edge`` batches ran before the first recorded step."""
    share = min(1.0, CORES / (team + 1))
    cpu = ALONE_US * (1 + k)
    steps, produce = [], []
    for j in range(edge):
        end = t0 - (edge - j - 1) * 45_000.0 - 1_000.0
        c = cpu * rng.uniform(0.99, 1.01)
        produce.append(ProduceRecord(worker=0, pid=2, seq=100 + j, wall_us=c, cpu_us=c,
                                     proc_cpu_us=c, t_end_us=end, run_wait_us=0.0 if run_wait
                                     else None))
    for j in range(n):
        t, w = t0 + j * 100_000.0, 99_000.0
        c = cpu * rng.uniform(0.99, 1.01)
        produce.append(ProduceRecord(worker=0, pid=2, seq=100 + edge + j, wall_us=90_000,
                                     cpu_us=c, proc_cpu_us=c, t_end_us=t + 95_000,
                                     run_wait_us=90_000 - c if run_wait else None))
        # one thread: 60 ms of CPU beside the batch for 90 of its 99 ms (interference as the
        # batch's); on torch's team its CPU holds its spinning and is not fitted
        main = (60_000.0 * (1 + k * 90 / 99) * rng.uniform(0.99, 1.01) if team == 1
                else share * w)
        steps.append(StepRecord(t_start_us=t, wall_us=1_000 + w, cpu_us=1_000 + main,
                                proc_cpu_us=1_000 + team * main, next_wall_us=1_000,
                                next_cpu_us=1_000, next_proc_cpu_us=1_000, vcsw=0, ivcsw=20,
                                run_wait_us=w - main if run_wait else None))
    return steps, produce


def _side(k, team=2, edge=0, run_wait=True, seed=0):
    rng = np.random.default_rng(seed)
    cs, cp = _cal(rng, team)
    ps, pp = _probe(rng, k, team, 2_000_000.0, edge=edge, run_wait=run_wait)
    return Sidecar(stepsim_sidecar=1, host_cores=CORES, torch_num_threads=team,
                   loader={"num_workers": 0, "batch_size": 32}, produce=cp, steps=cs,
                   probe=Probe(num_workers=1, produce=pp, steps=ps))


def _fit(side):
    """``(point, range drawn)`` of the fitted coefficient, as calibration takes it."""
    host, sources, _, _ = interference_from_sidecar(side)
    assert sources["host.interference"] == "inferred"
    return host["interference"], host["interference_range"]


def test_batches_before_the_probes_first_step_do_not_inflate_it():
    # 4 prefetched batches ran before the first recorded probe step: counted as alone, they
    # pulled the probe's mean load down and the fit to 0.118 (true 0.1)
    point, _ = _fit(_side(0.1, team=1, edge=4))
    assert point == pytest.approx(0.1, abs=0.012)


def test_a_team_waiting_for_a_core_still_counts_as_its_threads():
    # 2 team threads beside a worker on 2 cores: each holds a core 2/3 of the time and waits
    # on the run queue the rest; counted by CPU / wall they read as 1.33 threads (0.67 per
    # core, not 1.0) and the fit as 0.148 (true 0.1)
    point, _ = _fit(_side(0.1, team=2))
    assert point == pytest.approx(0.1, abs=0.012)
    # without the run-queue wait recorded: the team stays runnable unless it blocked
    point, _ = _fit(_side(0.1, team=2, run_wait=False))
    assert point == pytest.approx(0.1, abs=0.012)


@pytest.mark.parametrize("k", [0.0, 0.1])
def test_a_real_slower_per_cpu_corun_still_fits(k):
    # with both faults the old count fitted 0.213 for a true 0.1
    point, (lo, hi) = _fit(_side(k, team=2, edge=4))
    assert point == pytest.approx(k, abs=0.012)
    assert lo <= point <= hi
    if k > 0:
        assert lo > 0.05


def test_a_fit_above_the_prior_is_said_and_widened_not_clamped():
    # the old count fitted 0.805 for a true 0.4, with no word about the prior
    host, sources, _, warn = interference_from_sidecar(_side(0.4, team=2, edge=4))
    lo, top = INTERFERENCE_PRIOR
    assert sources["host.interference"] == "inferred"
    assert host["interference"] == pytest.approx(0.4, abs=0.03)           # not clamped
    assert host["interference_range"][0] == pytest.approx(top)            # carries the prior's top
    assert host["interference_range"][1] > 0.4
    far = [w for w in warn if "outside its prior" in w]
    assert len(far) == 1 and "\n" not in far[0] and f"{lo:g}–{top:g}" in far[0]
    # inside the prior: no such line, the fit's own range
    host, _, _, warn = interference_from_sidecar(_side(0.1, team=2))
    assert not any("outside its prior" in w for w in warn)
    assert host["interference_range"][0] < 0.1


def test_a_probe_that_ran_faster_keeps_the_prior():
    """A probe whose CPU per work fell as its load rose (the host sped up between the two
    settings' steps): the fit's whole P10–P90 is below 0, which no interference can be;
    calibration keeps the prior's range, saying why (the grid cut at 0 gave 0.000, P10–P90
    0.000–0.000, and the interval drew no interference at all)."""
    host, sources, _, warn = interference_from_sidecar(_side(-0.1, team=1))
    assert sources["host.interference"] == "assumed"
    assert host["interference_range"] == INTERFERENCE_PRIOR
    assert "fell as its load rose" in warn[0]


def test_a_fit_straddling_zero_draws_from_zero_up():
    """A fit at no interference whose bootstrap spreads both sides of 0 is kept, its point
    and drawn range cut at 0 (never a negative coefficient drawn)."""
    point, (lo, hi) = _fit(_side(0.0, team=1))
    assert point >= 0 and lo == 0 and hi > 0


def test_the_fitted_line_is_noted_and_a_fit_past_the_prior_is_not():
    """The fit is a parameter's source (noted, as its 'not calibrated' prior is); a fit
    outside the prior stays a warning of its own, unsized."""
    from stepsim.warning_order import rank_one
    for k in (0.1, 0.4):
        host, _, _, warn = interference_from_sidecar(_side(k, team=2, edge=4))
        fitted = rank_one(warn[0])
        assert fitted.noted and fitted.effect_us is None
        assert fitted.summary.startswith("co-run interference (host.interference) fitted from "
                                         f"the probe at num_workers=1: {host['interference']:.3f}")
        far = [w for w in warn if "outside its prior" in w]
        assert len(far) == (k > 0.16) and not any(rank_one(w).noted for w in far)
