"""Each source of a prediction interval, checked against a closed form, and the interval's
width decomposed by source (scenarios.interval_sources, models.host_speed)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from stepsim.calibration.sidecar_fit import uniform_with_p10_p90
from stepsim.models.host_speed import (HOST_NOISE_PRIOR, PRIOR_DOF, coverage_at_width, draw_factor,
                                      factor_range, prior_log_sd, speed_interval)
from stepsim.models.params import StepModel
from stepsim.scenarios.interval_sources import width_line
from stepsim.scenarios.predict import predict
from stepsim.scenarios.transforms import SetOp
from stepsim.simcore.errors import ModelError

SIGMA = 0.1
"""The synthetic host's run-to-run log-speed standard deviation (where one is fixed)."""
PRIOR = HOST_NOISE_PRIOR
"""The stated prior range every calibration gives ``host.cpu_scale``."""


def _prior_sigma(rng) -> float:
    """A true log-speed sd drawn from the prior the predictive assumes: σ² scaled-inverse-χ²
    with ``PRIOR_DOF`` dof and scale ``s0`` of the stated range (σ² = ν0 s0² / χ²(ν0))."""
    return math.sqrt(PRIOR_DOF * prior_log_sd(PRIOR) ** 2 / rng.chisquare(PRIOR_DOF))


def _speeds(rng, n: int, k: int, sigma: float) -> tuple[list[float], float]:
    """``n`` measured runs' speed factors relative to the first (the capture), and the pooled
    speed of ``k`` new runs relative to it (geometric mean: the module's stated quantity), on a
    host of log-speed sd ``sigma`` and an unknown mean."""
    logs = rng.normal(rng.uniform(-1, 1), sigma, n + k)
    rel = logs - logs[0]
    return [float(math.exp(x)) for x in rel[:n]], float(math.exp(rel[n:].mean()))


def _coverage(seed: int, n: int, k: int, sigma, trials: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        speeds, truth = _speeds(rng, n, k, sigma(rng))
        _, p10, p90 = speed_interval(speeds, PRIOR, runs=k)
        hits += p10 <= truth <= p90
    return hits / trials


def _tolerance(trials: int) -> float:
    """Four binomial standard deviations of an 80 % hit rate over ``trials``."""
    return 4 * math.sqrt(0.8 * 0.2 / trials)


@pytest.mark.parametrize("n, k", [(2, 1), (3, 1), (3, 2), (8, 4)])
def test_speed_interval_covers_at_least_80_percent_of_hosts_drawn_from_its_prior(n, k):
    """Ground truth drawn from the stated range's prior (a log-normal host with an unknown
    mean, its log-speed variance scaled-inverse-χ² with ν0 = 2 dof and the scale of the ±6 %
    range, redrawn per experiment): at n = 2 the pooled predictive is exact (80 %); from 3
    runs the wider of it and the runs' own t holds at least that."""
    trials = 4000
    cov = _coverage(n * 10 + k, n, k, _prior_sigma, trials)
    if n == 2:
        assert cov == pytest.approx(0.8, abs=_tolerance(trials))
    else:
        assert 0.8 - _tolerance(trials) <= cov <= 0.9


@pytest.mark.parametrize("sigma", [0.1, 0.3])
@pytest.mark.parametrize("n, k", [(3, 1), (5, 2), (20, 2)])
def test_measured_spread_covers_80_percent_of_a_host_noisier_than_the_prior(sigma, n, k):
    """A host 3.8× and 11× noisier than the stated range (log sd 0.1: this project's 2-core
    machine measures 0.095): from 3 runs the runs' own t (n − 1 dof) holds the pooled speed
    of k new runs in 80 %, exactly, whatever σ. The pooled predictive alone, which the
    stated range's two pseudo-runs pulled toward ±6 %, gave 64 % at n = 3, 71 % at 5 and 78 %
    at 20 (log sd 0.1): the demo's 5 replicates under-covered its host."""
    trials = 3000
    cov = _coverage(int(300 + 10 * n + k + 1000 * sigma), n, k, lambda rng: sigma, trials)
    assert cov == pytest.approx(0.8, abs=_tolerance(trials))


def test_one_replicate_keeps_the_priors_weight():
    """At n = 2 (one replicate: its own t is a Cauchy) the pooled predictive stays: a host of
    log sd 0.1 is under-covered (56 % over 400 000 experiments), as docs/interval.md states."""
    trials = 3000
    assert _coverage(202, 2, 1, lambda rng: SIGMA, trials) == pytest.approx(
        0.563, abs=_tolerance(trials))


def test_quiet_host_keeps_the_stated_range_as_a_floor():
    """A host 2.7× quieter than the range (log sd 0.01): the range's spread is a floor, so
    the interval over-covers (not narrower than the range's pooled spread) rather than
    trusting a small sample's tiny spread; identical runs keep it (test_host_noise)."""
    trials = 2000
    assert _coverage(77, 5, 2, lambda rng: 0.01, trials) >= 0.95


def test_coverage_at_width_closed_form():
    """The share of runs an interval of a given width holds when host noise is all of it,
    and the width it needs for 80 %: the demo's case, 5 runs of log sd 0.1 and the pooled
    mean of 2 re-measured runs (t with 4 dof, scale 0.1 · sqrt(1/2 + 1/5))."""
    speeds = list(np.exp([0.0, 0.1, -0.1, 0.1, -0.1]))      # log sd 0.1
    logs = np.log(speeds)
    s = logs.std(ddof=1)
    scale = s * math.sqrt(1 / 2 + 1 / 5)
    needed, held = coverage_at_width(speeds, PRIOR, 2, 0.20)
    assert needed == pytest.approx(2 * (math.exp(student_t.ppf(0.9, 4) * scale) - 1))
    assert held == pytest.approx(2 * student_t.cdf(math.log(1.1) / scale, 4) - 1)
    assert needed > 0.20 and held < 0.8            # the 20 % goal cannot hold 80 % here
    # a width of exactly what it needs holds 80 %
    assert coverage_at_width(speeds, PRIOR, 2, needed)[1] == pytest.approx(0.8, abs=1e-9)


def test_speed_interval_closed_form_and_pooling():
    """s0 from the range's P10–P90 (±4.8 % for ±6 %: half its log width is z90 · sqrt(2) ·
    s0); runs spread wider than the range take their own t (n − 1 dof), runs spread about as
    the range the pooled one, (ν0 s0² + (n − 1) s²) / (ν0 + n − 1) over ν0 + n − 1 dof:
    whichever P10–P90 is the wider."""
    s0 = math.log(1.048 / 0.952) / 2 / (norm.ppf(0.9) * math.sqrt(2))
    assert prior_log_sd(PRIOR) == pytest.approx(s0) and s0 == pytest.approx(0.02650, abs=1e-5)
    speeds = [1.0, 1.1, 0.9]
    logs = np.log(speeds)
    s = logs.std(ddof=1)
    for k in (1, 2):
        half = student_t.ppf(0.9, 2) * s * math.sqrt(1 / k + 1 / 3)
        c, p10, p90 = speed_interval(speeds, PRIOR, runs=k)
        assert c == pytest.approx(math.exp(logs.mean()))
        assert (p10, p90) == pytest.approx((c * math.exp(-half), c * math.exp(half)))
    close = [1.0, 1.02, 0.99]                       # s below s0: the pooled t is the wider
    logs = np.log(close)
    s = logs.std(ddof=1)
    sp = math.sqrt((2 * s0 ** 2 + 2 * s ** 2) / 4)
    assert sp * student_t.ppf(0.9, 4) > s * student_t.ppf(0.9, 2)
    c, p10, p90 = speed_interval(close, PRIOR)
    assert math.log(p90 / c) == pytest.approx(student_t.ppf(0.9, 4) * sp * math.sqrt(4 / 3))
    # two runs pooled: narrower by sqrt((1/2 + 1/3) / (1 + 1/3)), never by sqrt(2)
    (_, a, b), (_, c2, d2) = speed_interval(speeds, PRIOR, 1), speed_interval(speeds, PRIOR, 2)
    assert math.log(d2 / c2) / math.log(b / a) == pytest.approx(
        math.sqrt((0.5 + 1 / 3) / (4 / 3)))
    # many runs: the measured spread's own t (n − 1 dof)
    many = list(np.exp(np.random.default_rng(0).normal(0, 0.1, 400)))
    logs = np.log(many)
    own = student_t.ppf(0.9, 399) * logs.std(ddof=1) * math.sqrt(1 + 1 / 400)
    c, _, p90 = speed_interval(many, PRIOR)
    assert math.log(p90 / c) == pytest.approx(own, rel=1e-9)


def test_one_replicate_of_a_2x_spread_is_finite_and_bounded():
    """A new user's one replicate (speeds 1.0 and 2.0): the t with 1 dof alone gave a
    P10–P90 of 0.158–6.34× the centre (a Cauchy: 8 draws of it put a 59.6 ms step's P10 at
    0.4 ms); pooled with the ±6 % range's two dof it is 0.566–1.767× (t with 3 dof, s_p
    0.284), and a bad prior range is refused in one line."""
    c, p10, p90 = speed_interval([1.0, 2.0], PRIOR)
    assert c == pytest.approx(math.sqrt(2))
    assert (p10 / c, p90 / c) == pytest.approx((0.5659, 1.7670), abs=1e-4)
    assert factor_range([1.0, 2.0], PRIOR, 1) == pytest.approx((p10 / c, p90 / c))
    rng = np.random.default_rng(5)
    f = np.array([draw_factor([1.0, 2.0], PRIOR, 1, rng) for _ in range(20_000)])
    assert np.percentile(f, [10, 90]) == pytest.approx([p10 / c, p90 / c], rel=0.02)
    with pytest.raises(ModelError, match=r"meta.ranges\['host.cpu_scale'\] is \(0.0, 1.06\)"):
        speed_interval([1.0, 2.0], (0.0, 1.06))


def test_draws_follow_the_stated_distribution():
    rng = np.random.default_rng(0)
    speeds = [1.0, 0.88, 1.08]
    f = [draw_factor(speeds, (0.94, 1.06), 2, rng) for _ in range(20_000)]
    lo, hi = factor_range(speeds, (0.94, 1.06), 2)
    assert np.percentile(f, [10, 90]) == pytest.approx([lo, hi], rel=0.01)
    # the prior: uniform for one run, its spread shrunk by sqrt((1 + 1/k) / 2) for k runs
    u = [draw_factor([], (0.94, 1.06), 1, rng) for _ in range(20_000)]
    assert min(u) >= 0.94 and max(u) <= 1.06
    assert factor_range([], (0.94, 1.06), 2) == pytest.approx((1 - 0.06 * math.sqrt(0.75),
                                                               1 + 0.06 * math.sqrt(0.75)))


def test_the_calibrations_own_error_is_drawn_beside_the_hosts_speed():
    """``error_log`` h multiplies every draw by exp(U(−h, h)), replicates or not: on replicates
    that agree exactly beside a point prior (no run-to-run spread) and on a point prior alone,
    the draws are exactly that uniform in log space (P10–P90 ±0.8 h); with a spread, the
    speed's own draw times it."""
    h = 0.1
    for speeds, prior in (([1.0, 1.0, 1.0], (1.0, 1.0)), ([], (1.0, 1.0))):
        rng = np.random.default_rng(1)
        logs = np.log([draw_factor(speeds, prior, 1, rng, error_log=h) for _ in range(20_000)])
        assert -h <= logs.min() and logs.max() <= h
        assert np.percentile(logs, [10, 90]) == pytest.approx([-0.8 * h, 0.8 * h], rel=0.02)
    # with a spread: the speed's own draw, times the uniform drawn next from the same stream
    for seed in range(20):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        alone = draw_factor([1.0, 0.88, 1.08], (1, 1), 2, b)
        assert draw_factor([1.0, 0.88, 1.08], (1, 1), 2, a, error_log=h) == pytest.approx(
            alone * math.exp(b.uniform(-h, h)), rel=1e-12)


def test_uniform_range_has_the_fits_p10_p90():
    lo, hi = uniform_with_p10_p90(0.1, 0.3)
    u = np.random.default_rng(0).uniform(lo, hi, 100_000)
    assert np.percentile(u, [10, 90]) == pytest.approx([0.1, 0.3], rel=0.01)
    assert uniform_with_p10_p90(0.0, 0.04)[0] == 0.0      # cut at 0


def _cpu_model(speeds: list[float], work_us: float = 10_000.0, workers: int = 0,
               samples: list[float] | None = None, interference=None,
               produce_us: float = 100.0) -> StepModel:
    """A step that is one host CPU op (and, with ``workers``, a cheap DataLoader) on plenty
    of cores; the host speed measured over ``speeds``."""
    from stepsim.calibration.host_noise import apply_replicates

    op = {"kind": "cpu", "name": "train", "dur_us": work_us}
    if samples:
        op["samples_us"] = samples
        op["dur_us"] = float(np.mean(samples))
    host = {"ops": [{"kind": "next_batch"}, op]}
    if interference:
        host.update(interference=sum(interference) / 2, interference_range=interference)
    m = StepModel.model_validate({
        "loader": {"num_workers": workers, "produce": {"mean_us": produce_us}, "host_cores": 8},
        "host": host, "meta": {"name": "synthetic"}})
    return apply_replicates(m, speeds) if len(speeds) > 1 else m


def test_predicted_interval_covers_the_pooled_runs_of_a_lognormal_host():
    """The whole pipeline: a pure-CPU step on a host whose speed per run is log-normal, its
    log-speed sd drawn per experiment from the predictive's stated prior (:func:`_prior_sigma`);
    from three measured runs, the P10–P90 of 16 draws for two pooled new runs holds their mean
    step in about 80 % of seeded experiments (the draws are exchangeable with the truth)."""
    rng = np.random.default_rng(7)
    hits, trials = 0, 200
    for i in range(trials):
        sigma = _prior_sigma(rng)
        cap = rng.normal(0, sigma)       # the capture's log speed; every factor relative to it
        speeds = [1.0] + [math.exp(rng.normal(0, sigma) - cap) for _ in range(2)]
        truth = 10_000.0 * float(np.mean([math.exp(rng.normal(0, sigma) - cap)
                                          for _ in range(2)]))
        p = predict(_cpu_model(speeds), steps=10, warmup=2, seed=i, intervals=16, runs=2)
        hits += p.p10_step_us <= truth <= p.p90_step_us
    assert 0.72 <= hits / trials <= 0.88


def test_host_noise_is_once_per_run_and_step_noise_through_the_standard_error():
    """The step-to-step variation of a re-measured mean of M steps: with the per-step
    samples of a wide distribution and no other source, the interval for M measured steps is
    about sqrt(S/M) times the interval of the draws' own S-step means (standard error), and
    holds the mean of M new steps in about 80 % of cases."""
    rng = np.random.default_rng(3)
    samples = list(rng.normal(10_000, 2_000, 4000).clip(1_000))
    m = _cpu_model([], samples=samples)
    long = predict(m, steps=200, warmup=5, seed=0, intervals=64, decompose=True)
    short = predict(m, steps=200, warmup=5, seed=0, intervals=64, measured_steps=8,
                    decompose=True)
    sd = float(np.std(samples))
    # the draws' own means: P10–P90 of a normal mean over 200 steps (batch means)
    assert long.width_sources["steps"] == pytest.approx(
        100 * 2 * 1.2816 * sd / math.sqrt(200) / long.mean_step_us, rel=0.4)
    assert short.width_sources["steps"] == pytest.approx(
        100 * 2 * 1.2816 * sd / math.sqrt(8) / short.mean_step_us, rel=0.4)
    hits = 0
    for _ in range(2000):
        truth = float(np.mean(rng.choice(samples, 8)))
        hits += short.p10_step_us <= truth <= short.p90_step_us
    assert 0.7 <= hits / 2000 <= 0.9


def test_width_by_source():
    """One source at a time: the host noise alone gives, on a pure CPU step, exactly the
    P10–P90 width of the draws' speed factors, and those the t predictive's (64 draws: their
    sampled width has a 14 % standard deviation, 28.0 ± 4.0 % over 4000 seeds against the
    closed form's 26.8 %); interference gives none to a what-if with no co-runners (no
    workers before or after) and some to one that adds them; the whole is near the sources
    in quadrature."""
    from stepsim.scenarios.draws import HOST_SPEED, draw_plan, quantiles

    m = _cpu_model([1.0, 0.88, 1.08], interference=(0.0, 0.16), produce_us=20_000.0)
    p = predict(m, steps=20, warmup=2, seed=0, intervals=64, decompose=True)
    f10, _, f90 = quantiles(np.array([f[HOST_SPEED] for f, _ in draw_plan(m, 64, 0)]))
    assert p.width_sources["host.cpu_scale"] == pytest.approx(100 * (f90 - f10), rel=1e-9)
    lo, hi = factor_range([1.0, 0.88, 1.08], PRIOR, 1)
    assert f90 - f10 == pytest.approx(hi - lo, rel=0.35)
    assert p.width_sources["host.interference"] == 0.0
    assert p.width_sources["window"] == 0.0           # nothing measured to bootstrap
    rss = math.sqrt(sum(v * v for v in p.width_sources.values()))
    assert p.width_pct == pytest.approx(rss, rel=0.1)
    busy = predict(m, [SetOp(path="loader.num_workers", value=4),
                       SetOp(path="loader.host_cores", value=2)],
                   steps=20, warmup=2, seed=0, intervals=16, decompose=True)
    assert busy.width_sources["host.interference"] > 0.5
    line = width_line(p.width_pct, p.width_sources)
    assert line.startswith(f"width {p.width_pct:.1f} % of the prediction")
    assert "host noise ±" in line and "interference ±0.0 %" in line
    assert p.to_dict()["width_sources_pct"] == p.width_sources


def test_whatif_prints_the_width_by_source(tmp_path):
    import json

    from stepsim.models.params import save_model
    from tests.conftest import run_cli

    path = tmp_path / "m.json"
    save_model(_cpu_model([1.0, 0.88, 1.08], interference=(0.0, 0.16), produce_us=20_000.0),
               path)
    args = ("whatif", str(path), "--set", "loader.num_workers=2", "--steps", "10",
            "--warmup", "2", "--draws", "8", "--width-sources")
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    widths = json.loads(r.stdout)["scenario"]["width_sources_pct"]
    assert set(widths) >= {"host.cpu_scale", "host.interference", "window", "steps"}
    r = run_cli(*args)
    assert r.returncode == 0 and "scenario interval width" in r.stdout
    assert "host noise ±" in r.stdout


def test_host_factors_of_a_plan_are_the_predictives_quantiles_whatever_the_seed():
    """The 16 host factors every what-if of a model shares: drawn independently, seed 0 gave
    0.965–1.398 for a predictive whose P10–P90 is 0.878–1.139 (the demo's model of
    2026-12-05 07:20), so every setting's interval reached 3–4 % below the prediction and
    18–25 % above, and over seeds the P10–P90 of 16 such draws was 0.85–1.64× the predictive's. Now
    they are its quantiles at k / 17 in random order: the interval's ranks p (n + 1) return the
    predictive's own P10 and P90 at every seed (within 0.4 %, the linear interpolation between
    two neighbouring quantiles), and the factor of each draw follows the
    permutation only (every other path draws what it drew before)."""
    from stepsim.models.params import StepModel
    from stepsim.scenarios.draws import HOST_SPEED, draw_plan, quantiles

    speeds = [0.9788, 1.1421, 0.8758, 0.9218, 0.9331]
    m = StepModel.model_validate({
        "loader": {"num_workers": 0, "produce": {"mean_us": 10_000.0}},
        "host": {"ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "name": "training step", "dur_us": 4000}],
                 "speed_runs": speeds},
        "meta": {"ranges": {"host.cpu_scale": list(PRIOR)}}})
    lo, hi = factor_range(speeds, PRIOR, 2)
    for seed in range(5):
        plan = draw_plan(m, 16, seed, runs=2)
        f = [p[HOST_SPEED] for p, _ in plan]
        p10, _, p90 = quantiles(np.array(f))
        assert (p10, p90) == pytest.approx((lo, hi), rel=0.005)   # ranks interpolated
        want = sorted(math.exp(math.log(hi) / student_t.ppf(0.9, 4) * student_t.ppf(k / 17, 4))
                      for k in range(1, 17))
        assert sorted(f) == pytest.approx(want)
    assert [p[HOST_SPEED] for p, _ in draw_plan(m, 16, 0, runs=2)] != \
        [p[HOST_SPEED] for p, _ in draw_plan(m, 16, 1, runs=2)]
    # the prior alone (no measured runs): the uniform's quantiles
    bare = m.model_copy(update={"host": m.host.model_copy(update={"speed_runs": []})})
    f = sorted(p[HOST_SPEED] for p, _ in draw_plan(bare, 16, 0))
    assert f == pytest.approx([0.94 + 0.12 * k / 17 for k in range(1, 17)])
