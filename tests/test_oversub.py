"""The slowdown past the cores (models.cpu_slowdown, calibration.oversub): closed forms in the
pool, the fit from a probe above the cores, and the prior widening only what-ifs past them."""
from __future__ import annotations

import pytest
import simpy

from stepsim.calibration.corun import Activity
from stepsim.calibration.oversub import OVERSUB_PRIOR, fit_oversub, oversub_shares, solve
from stepsim.models.cpu import CpuPool
from stepsim.models.cpu_slowdown import oversub_share, slowdown
from stepsim.models.params import StepModel
from stepsim.scenarios.predict import predict
from stepsim.scenarios.transforms import SetOp


def _run(n: int, k: int, work_us: float, oversub: float, ref: float = 0.0) -> list[float]:
    """End instants (µs) of ``n`` equal CPU-bound threads of ``work_us`` each on ``k`` cores."""
    env = simpy.Environment()
    pool = CpuPool(env, k, contended=n > k, oversub=oversub, oversub_ref=ref)
    ends = []

    def one():
        yield from pool.work(work_us)
        ends.append(env.now)

    for _ in range(n):
        env.process(one())
    env.run()
    return ends


@pytest.mark.parametrize("n, k, a", [(3, 2, 0.1), (4, 2, 0.1), (8, 2, 0.2), (6, 4, 0.5)])
def test_n_equal_workers_past_the_cores_take_the_closed_form(n, k, a):
    """``n > k`` equal CPU-bound threads of ``c`` µs on ``k`` cores: each ends at
    ``n / k × c × (1 + a (1 − k / n))`` (round robin, within one quantum) while all run; the
    last ones run alone past the cores at the end, so the bound is the mean end."""
    c = 200_000.0
    ends = _run(n, k, c, a)
    want = n / k * c * (1 + a * (1 - k / n))
    assert sum(ends) / n == pytest.approx(want, rel=0.02)
    assert max(ends) <= want + 2 * 2_000.0
    assert max(ends) > n / k * c * 1.0001 or a == 0     # the slowdown is there


@pytest.mark.parametrize("n, k", [(1, 2), (2, 2), (4, 4)])
def test_within_the_cores_nothing_slows(n, k):
    assert _run(n, k, 50_000.0, 0.5) == pytest.approx([50_000.0] * n)


def test_a_replay_at_the_captures_share_is_unchanged():
    """Work captured at 4 threads on 2 cores (``oversub_ref`` 0.5) replays at 4 in plain
    round robin: ``n / k × c``."""
    ends = _run(4, 2, 100_000.0, 0.3, ref=oversub_share(4, 2))
    assert max(ends) == pytest.approx(200_000.0, rel=0.01)


def test_slowdown_factor_closed_form():
    assert oversub_share(8, 2) == pytest.approx(0.75)
    assert oversub_share(2, 2) == 0.0
    assert slowdown(1.0, 0.0, 0.12, 8, 2) == pytest.approx(1.09)
    assert slowdown(1.1, 0.1, 0.12, 8, 2, ref=1.0) == pytest.approx(1.1 * 1.09)


def _acts(workers: int, batch_cpu, n_batches: int = 12, wall: float = 100_000.0):
    """``workers`` lanes of back-to-back batches and the main thread's steps, all overlapping
    (one runnable thread each): ``R = workers + 1`` throughout; ``batch_cpu(f)``: a batch's
    CPU at its oversubscription share ``f``."""
    acts = []
    for w in range(workers):
        for i in range(n_batches):
            acts.append(Activity(i * wall, (i + 1) * wall, 1.0, 0.0, "batch"))
    acts.append(Activity(0.0, n_batches * wall, 1.0, 1_000.0, "step"))
    f = oversub_shares(acts, 2)
    return [Activity(a.start_us, a.end_us, a.threads, batch_cpu(x) if a.kind == "batch"
                     else a.cpu_us, a.kind) for a, x in zip(acts, f)]


def test_shares_of_overlapping_threads():
    acts = [Activity(0.0, 10.0, 1.0, 1.0, "batch") for _ in range(4)]
    assert list(oversub_shares(acts, 2)) == pytest.approx([0.5] * 4)
    assert list(oversub_shares(acts[:2], 2)) == pytest.approx([0.0] * 2)


@pytest.mark.parametrize("a", [0.0, 0.1, 0.3])
def test_fit_recovers_the_coefficient_from_a_probe_past_the_cores(a):
    """Capture at 1 worker (2 runnable on 2 cores: ``f`` 0), probe at 4 (5 runnable: ``f``
    0.6), batches costing ``c (1 + a f)``: the fit reads ``a`` back, its bootstrap on it."""
    c = 90_000.0
    cal = _acts(1, lambda f: c * (1 + a * f))
    probe = _acts(4, lambda f: c * (1 + a * f))
    point, (lo, hi), f_c = fit_oversub(cal, probe, 2, interference=0.0)
    assert f_c == 0.0
    assert point == pytest.approx(a, abs=1e-9)
    assert lo == pytest.approx(a, abs=1e-9) and hi == pytest.approx(a, abs=1e-9)


def test_fit_leaves_the_interference_out():
    """The probe's batches also ran beside a busier other core: ``solve`` takes the model's
    interference between the two busy shares out before reading the coefficient."""
    r = (1 + 0.1 * 1.0) * (1 + 0.2 * 0.6) / (1 + 0.1 * 0.5)
    assert solve(r, 0.5, 1.0, 0.0, 0.6, 0.1) == pytest.approx(0.2)


def test_a_probe_within_the_cores_fits_nothing():
    cal = _acts(1, lambda f: 90_000.0)
    assert isinstance(fit_oversub(cal, _acts(1, lambda f: 90_000.0), 2, 0.0), str)


def _model(oversub_range, workers: int = 1) -> StepModel:
    host = {"ops": [{"kind": "next_batch"}, {"kind": "cpu", "name": "train", "dur_us": 30_000.0}],
            "oversub": sum(oversub_range) / 2 if oversub_range else 0.0,
            "oversub_range": oversub_range}
    return StepModel.model_validate({
        "loader": {"num_workers": workers, "produce": {"mean_us": 80_000.0}, "host_cores": 2},
        "host": host, "meta": {"name": "synthetic"}})


def test_the_prior_widens_only_whatifs_past_the_cores():
    """The prior's source width is 0 for a what-if within the cores (1 worker + the main
    thread on 2 cores) and above 0 past them (4 workers); the point past the cores is slower
    than without the term, by at most the prior's top."""
    m = _model(OVERSUB_PRIOR)
    within = predict(m, steps=20, warmup=2, seed=0, intervals=16, decompose=True)
    assert within.width_sources["host.oversub"] == 0.0
    four = [SetOp(path="loader.num_workers", value=4)]
    past = predict(m, four, steps=20, warmup=2, seed=0, intervals=16, decompose=True)
    assert past.width_sources["host.oversub"] > 0.5
    bare = predict(_model(None), four, steps=20, warmup=2, seed=0, intervals=0)
    assert bare.mean_step_us < past.mean_step_us <= bare.mean_step_us * (1 + OVERSUB_PRIOR[1])
