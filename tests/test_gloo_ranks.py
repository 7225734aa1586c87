"""Each rank's extra per phase pooled over the 2-rank gloo job's (:mod:`tests.test_gloo`)
capture and replicates (:mod:`calibration.gloo_ranks`)."""
from __future__ import annotations

import json
import shutil

import pytest

from stepsim.fit import calibrate
from tests.conftest import later_run
from tests.test_gloo import gloo_run  # noqa: F401  (the module's real job)


def _mirrored(src, dst):
    """A copy of the job's capture with its two ranks' records swapped (rank 0's trace and
    sidecar become rank 1's and back), a minute later: the same run with every rank-to-rank
    difference the other way round."""
    shutil.copytree(src, dst)
    for r in (0, 1):
        for suffix in (".json", ".sidecar.json"):
            (dst / f"rank{r}{suffix}").rename(dst / f"swap{1 - r}{suffix}")
    for r in (0, 1):
        for suffix in (".json", ".sidecar.json"):
            f = dst / f"swap{r}{suffix}"
            data = json.loads(f.read_text())
            if suffix == ".json":
                data.setdefault("distributedInfo", {})["rank"] = r
            else:
                later_run(data)
                if data.get("ddp"):
                    data["ddp"]["rank"] = r
            (dst / f"rank{r}{suffix}").write_text(json.dumps(data))
            f.unlink()
    return dst


def test_the_capture_alone_keeps_its_own_rank_extras(gloo_run):  # noqa: F811
    """:func:`run_phases_us` measures each rank's phases as calibration does: on the capture
    alone, each rank's mean less the reference's, where positive, is the model's
    ``phase_extra_us`` exactly."""
    from stepsim.calibration.calibrate import _rank_sidecars, load_sidecar
    from stepsim.calibration.gloo_pool import _by_rank, _tables
    from stepsim.calibration.gloo_ranks import run_phases_us

    out, _ = gloo_run
    model = calibrate(out)
    sides = _by_rank([load_sidecar(p) for p in _rank_sidecars(out).values()])
    ph = run_phases_us(_tables(out), sides)
    ref = model.meta.notes["reference_rank"]
    for rp in model.ranks:
        want = {p: ph[rp.rank][p] - ph[ref][p] for p in ph[ref]}
        assert rp.phase_extra_us == pytest.approx({p: v for p, v in want.items() if v > 0})


def test_a_mirrored_replicate_cancels_the_captures_rank_difference(gloo_run, tmp_path):  # noqa: F811
    """Closed form: a replicate that is the capture with its ranks swapped differs between the
    ranks by exactly minus the capture's difference, at the capture's speed (each rank's
    identical work is the other's: their ratios' geometric mean is 1), so the mean over the
    two runs is 0 in every phase and no rank keeps an extra, where the capture alone gives
    one rank the whole of its difference (the demo's captures: up to 3.2 ms of backward that
    the ranks' replicates did not repeat)."""
    out, _ = gloo_run
    alone = calibrate(out)
    rep = _mirrored(out, tmp_path / "mirror")
    model = calibrate(out, replicates=[rep])
    assert model.meta.notes["rank_extra_runs"] == 2
    assert model.host.speed_runs == pytest.approx([1.0, 1.0])
    for rp in model.ranks:
        assert all(v == pytest.approx(0.0, abs=1e-6) for v in rp.phase_extra_us.values())
    before = dict(kv.split(":") for kv in model.meta.notes["rank_extra_capture_us"].split(";"))
    assert {int(k) for k in before} == {rp.rank for rp in alone.ranks}
    # the capture's own extras, as calibrated from it alone, are noted
    for rp in alone.ranks:
        got = dict(kv.split("=") for kv in before[str(rp.rank)].split(",") if kv)
        assert {p: float(v) for p, v in got.items()} == pytest.approx(
            {p: round(v) for p, v in rp.phase_extra_us.items()}, abs=0.5)


def test_pooled_extras_closed_form(gloo_run):  # noqa: F811
    """The pooled extra is the mean over runs of each rank's phase less the reference's,
    each divided by its run's host speed, kept where positive; a run without the reference
    rank, or a single run, leaves the model as it is."""
    from stepsim.calibration.gloo_ranks import pool_rank_extras

    out, _ = gloo_run
    model = calibrate(out)
    ref = model.meta.notes["reference_rank"]
    other = next(rp.rank for rp in model.ranks if rp.rank != ref)
    base = {"forward": 1000.0, "backward": 5000.0, "optimizer": 2000.0}
    runs = [{ref: base, other: {"forward": 1300.0, "backward": 7400.0, "optimizer": 1000.0}},
            {ref: base, other: {"forward": 1000.0, "backward": 4000.0, "optimizer": 2000.0}}]
    got = pool_rank_extras(model, runs, [1.0, 0.5])
    extra = {rp.rank: rp.phase_extra_us for rp in got.ranks}
    # forward (300 + 0) / 2, backward (2400 + (-1000) / 0.5) / 2 = 200, optimizer negative
    assert extra[other] == pytest.approx({"forward": 150.0, "backward": 200.0})
    assert extra[ref] == {}
    assert got.meta.notes["rank_extra_runs"] == 2
    assert pool_rank_extras(model, runs[:1], [1.0]) is model
    assert pool_rank_extras(model, [runs[0], {other: base}], [1.0, 1.0]) is model


def test_a_rank_extra_is_bounded_by_its_unprofiled_cpu_difference():
    """Closed form (calibration.gloo_ranks.cpu_bounded): rank 0's phases exceed the
    reference's by forward +1,000 and backward +3,000 µs (4,000 in all) and fall short by 500
    in the optimizer; its unprofiled steps used 1,000 µs more CPU a step than the
    reference's, so the positive part is scaled to sum 1,000 (250 and 750) and the shortfall
    stays; with no CPU difference (ddp20's demo of 08:46: the capture's rank 0 +3.9 ms of
    backward in the trace from a page-fault storm under the profiler, 11.4 against 11.3 ms
    of unprofiled CPU a step) nothing is left; a CPU difference past the walls' leaves them
    as they are, and so does an unknown one. The pooled extras take the bounded differences."""
    from stepsim.calibration.gloo_ranks import cpu_bounded
    from stepsim.calibration.gloo_steps import PHASES

    run = {0: {p: 0.0 for p in PHASES}, 1: {p: 0.0 for p in PHASES}}
    run[0].update(forward=1000.0, backward=3000.0, optimizer=-500.0)
    got = cpu_bounded(run, 1, 0, {0: 12_000.0, 1: 11_000.0})
    assert got["forward"] == pytest.approx(250.0) and got["backward"] == pytest.approx(750.0)
    assert got["optimizer"] == pytest.approx(-500.0)
    none = cpu_bounded(run, 1, 0, {0: 11_400.0, 1: 11_400.0})
    assert none["forward"] == 0.0 and none["backward"] == 0.0
    assert cpu_bounded(run, 1, 0, {0: 16_000.0, 1: 11_000.0})["backward"] == 3000.0
    assert cpu_bounded(run, 1, 0, {0: None, 1: 11_000.0})["backward"] == 3000.0
    assert cpu_bounded(run, 1, 0, None)["backward"] == 3000.0


def test_unprofiled_cpu_reads_the_steps_without_the_profiler():
    """Closed form (calibration.gloo_ranks.unprofiled_cpu_us): the median training-thread CPU
    outside ``next()`` over the unprofiled steps, the first left out: steps 9 (first), 11,
    12 and 30 unprofiled, 20 and 24 profiled: the median of 11, 12, 30 is 12 ms."""
    from types import SimpleNamespace as NS

    from stepsim.calibration.gloo_ranks import unprofiled_cpu_us

    def step(ms, prof):
        return NS(cpu_us=ms * 1e3, next_cpu_us=0.0, profiled=prof, profiler_on=prof)

    side = NS(steps=[step(9, False), step(20, True), step(11, False), step(24, True),
                     step(12, False), step(30, False)])
    assert unprofiled_cpu_us(side) == pytest.approx(12_000.0)
    assert unprofiled_cpu_us(NS(steps=[step(9, False), step(11, False)])) is None
    assert unprofiled_cpu_us(None) is None
