"""Co-run interference is a slowdown per unit of CPU work, so the load a record's CPU met is
the busy share of the other cores while it *ran*, not over its wall interval: while a thread
waits on a run queue every core is busy by definition and its CPU does not advance (issue 10,
fresh13 2026-12-07: a worker batch of 345 ms wall held 84 ms of run-queue wait; read over the
wall, its load 0.84 in the capture against 1.00 in a 2-worker probe squeezed the change of
load and the fit ran to the grid's top, 1.000, P10–P90 1.000–1.000). A fit at the top of
:data:`calibration.corun.FIT_GRID` is a bound of the search, not a measurement: it is refused
and the prior kept."""
import gzip
from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.corun import (FIT_GRID, INTERFERENCE_PRIOR, Activity, corun_loads,
                                       fit_interference, probe_activities)
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_fit import interference_from_sidecar

DATA = Path(__file__).parent / "data"


def _side(tmp_path, name):
    p = tmp_path / "sidecar.json"
    p.write_text(gzip.open(DATA / name, "rt").read())
    return load_sidecar(p)


@pytest.mark.parametrize("wait_us", [0.0, 20.0, 50.0])
def test_load_is_taken_over_the_running_time(wait_us):
    """A record over 0–100 µs beside a 2-thread co-runner over 0–50 µs on 2 cores: busy other
    core 50 of its 100 µs. Its ``wait_us`` µs of run-queue wait fell where the cores were busy,
    so over its running time ``100 − w`` the busy share is ``(50 − w) / (100 − w)``."""
    acts = [Activity(0.0, 100.0, 1.0, 80.0, "batch", True, wait_us),
            Activity(0.0, 50.0, 2.0, 50.0, "step", True)]
    got = corun_loads(acts, 2)[0]
    assert got == pytest.approx((50.0 - wait_us) / (100.0 - wait_us), abs=1e-12)


def _acts(cpu_us, load_from, n=12):
    """``n`` batches of ``cpu_us`` µs CPU, each beside a co-runner (2 threads, so the other
    core is busy) for the first ``load_from`` share of its 100 ms."""
    out = []
    for i in range(n):
        t = i * 200_000.0
        c = cpu_us * (1 + 0.002 * ((i % 3) - 1))
        out.append(Activity(t, t + 100_000.0, 1.0, c, "batch", True))
        out.append(Activity(t, t + load_from * 100_000.0, 2.0, 1.0, "team_step", True))
    return out


def test_fit_at_grid_top_is_refused():
    """Load 0.5 → 1.0 and CPU ×1.5: ``(1 + k) / (1 + k / 2) = 1.5`` needs ``k = 2``, beyond
    the grid's top (1): the fit is refused with the reason, never returned as 1.0."""
    assert FIT_GRID[-1] == 1.0
    got = fit_interference(_acts(100_000.0, 0.5), _acts(150_000.0, 1.0), 2)
    assert isinstance(got, str) and "top of the coefficients tried" in got
    ok = fit_interference(_acts(100_000.0, 0.5), _acts(105_000.0, 1.0), 2)   # k = 0.105
    assert isinstance(ok, tuple) and ok[0] == pytest.approx(0.1053, abs=0.003)


def test_fresh13_probe_at_two_workers_keeps_the_prior(tmp_path):
    """fresh13's capture (num_workers=1, 2 intra-op threads, 2 cores, probe at 2 workers):
    its batches ran 84 ms of their 345 ms waiting for a core. Over the running time the
    capture's load is below the wall's, and the fit, which reached the grid's top, keeps the
    prior (it fitted 1.000 before)."""
    side = _side(tmp_path, "fresh13_cnn2t_nw1_probe2.sidecar.json.gz")
    cal, probe = probe_activities(side)
    batches = [a for a in cal if a.kind == "batch" and a.fitted]
    assert np.median([a.wait_us for a in batches]) > 50_000
    run = corun_loads(cal, 2)
    wall = corun_loads([Activity(a.start_us, a.end_us, a.threads, a.cpu_us, a.kind, a.fitted)
                        for a in cal], 2)
    sel = [i for i, a in enumerate(cal) if a.kind == "batch" and a.fitted]
    assert run[sel].mean() < wall[sel].mean() - 0.03
    host, sources, _, warns = interference_from_sidecar(side)
    assert sources["host.interference"] == "assumed"
    assert tuple(host["interference_range"]) == INTERFERENCE_PRIOR
    assert any("not a measurement" in str(w) for w in warns)


def test_fresh13_probe_at_zero_workers_still_fits(tmp_path):
    """The same job's capture with its probe at 0 workers (the batches move onto the main
    thread, load 0): the fit is inside the prior, as the batches' CPU says (about 0.04–0.06)."""
    side = _side(tmp_path, "fresh13_cnn2t_nw1_probe0.sidecar.json.gz")
    cal, probe = probe_activities(side)
    k, (lo, hi) = fit_interference(cal, probe, 2)
    assert 0.0 < lo <= k <= hi < INTERFERENCE_PRIOR[1]
