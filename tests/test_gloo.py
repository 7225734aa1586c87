"""A real 2-rank DDP run on the CPU (gloo), recorded by the test, calibrated into one model."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from stepsim.fit import calibrate  # noqa: E402
from stepsim.models.simulate import simulate  # noqa: E402
from tests.conftest import later_run  # noqa: E402
from tests.test_profiler_split import (closed_form_split, cpu_steps,  # noqa: E402
                                       spied_phase_factors)

WIDTH, DEPTH, CAP_MB = 256, 4, 0.25
"""4 layers of 256² float32 weights (256 KiB each): a 0.25 MiB cap gives one bucket per layer."""


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    from stepsim.demo.ddp_job import Run, run_plan

    out = tmp_path_factory.mktemp("gloo") / "cal"
    res = run_plan([Run("cal", bucket_cap_mb=CAP_MB, steps=4, warmup=2, profile_dir=str(out)),
                    Run("default", bucket_cap_mb=None, steps=1, warmup=2),
                    Run("cap0.6", bucket_cap_mb=0.6, steps=1, warmup=2)],
                   width=WIDTH, depth=DEPTH, timeout_s=240)
    return out, res


def _reported(res, label) -> list[int]:
    """The bucket sizes (bytes, reduction order) DDP's reducer reports after its rebuild."""
    return [int(x) for x in res[label][0]["buckets"]["rebuilt_bucket_sizes"].split(",")]


def test_two_rank_gloo_run_calibrates_into_one_model(gloo_run):
    out, res = gloo_run
    ranks = res["cal"]
    model = calibrate(out)
    assert [r.rank for r in model.ranks] == [0, 1]
    assert model.comm.world_size == 2 and model.meta.notes["kind"] == "cpu_ddp"
    # the harness's ranks run on one intra-op thread each: 2 threads on the host, no warning
    assert model.meta.notes["intra_op_threads"] == 1
    assert not any("across ranks" in w for w in model.meta.warnings)
    assert len({r.host for r in model.ranks}) == 1 and model.ranks[0].host
    coll = model.device.streams["gloo"]
    assert all(t.kind == "collective" for t in coll)
    # the buckets read from the enqueues are those DDP itself reports, in reduction order
    reported = [int(x) for x in ranks[0]["buckets"]["rebuilt_bucket_sizes"].split(",")]
    assert [t.bytes for t in coll] == reported and len(reported) == DEPTH
    launches = [op for op in model.host.ops if op.kind == "launch"]
    assert [op.task for op in launches] == [t.id for t in coll]
    syncs = [op for op in model.host.ops if op.kind == "sync"]
    assert syncs and syncs[-1].task == coll[-1].id       # the untraced end-of-backward wait
    phases = [op.phase for op in model.host.ops if op.kind == "cpu"]
    assert phases[0] == "forward" and "backward" in phases and phases[-1] == "optimizer"
    # the collectives' CPU work on the shared cores, from the job's thread CPU times
    assert model.meta.sources["comm.host_cpu_us_per_mb"] == "measured"
    assert model.comm.host_cpu_us_per_mb > 0 and model.comm.host_cpu_us >= 0
    # the last bucket's copy into the gradients, after the resume (DDP's copy_bucket_to_grad)
    assert model.meta.sources["comm.grad_copy_us_per_mb"] == "measured"
    assert model.comm.grad_copy_us_per_mb > 0
    # the harness's cold-resume probe: one measured share per pause, read from both ranks
    from stepsim.demo.ddp_job import COLD_PAUSES_MS

    assert [p for p, _ in model.comm.cold_resume] == [ms * 1e3 for ms in COLD_PAUSES_MS]
    assert all(s >= 0 for _, s in model.comm.cold_resume)
    assert model.meta.sources["comm.cold_resume"] == "measured"
    # and the optimizer's, from the same probe steps
    assert [p for p, _ in model.comm.cold_resume_opt] == [ms * 1e3 for ms in COLD_PAUSES_MS]
    assert model.meta.sources["comm.cold_resume_opt"] == "measured"
    res = simulate(model, steps=3, warmup=1)
    assert res.step_us.shape == (2, 3) and (res.step_us > 0).all()


def test_bucket_rebuild_matches_what_ddp_reports(gloo_run):
    """The sidecar's parameters (measured) rebuilt as DDP does, against the reducer's own
    bucket sizes at each cap, and a what-if that rebuilds the model's all-reduces."""
    from stepsim.models.ddp import build_buckets, set_bucket_caps

    out, res = gloo_run
    model = calibrate(out)
    assert model.meta.notes["buckets"] == "measured"
    gp = model.comm.grad_params
    assert len(gp) == 2 * DEPTH
    assert [b.bytes for b in build_buckets(gp, model.comm.bucket_cap_mb,
                                           model.comm.first_bucket_cap_mb)] == _reported(res, "cal")
    assert [b.bytes for b in build_buckets(gp, 25.0, 1.0)] == _reported(res, "default")
    assert [b.bytes for b in build_buckets(gp, 0.6, 0.6)] == _reported(res, "cap0.6")
    # --set comm.bucket_cap_mb=0.6 is DDP(bucket_cap_mb=0.6): the first bucket capped alike
    new = set_bucket_caps(model, bucket_cap_mb=0.6)
    coll = [t for t in new.device.streams["gloo"] if t.bytes]
    assert [t.bytes for t in coll] == _reported(res, "cap0.6")
    launches = [op.task for op in new.host.ops if op.kind == "launch"]
    assert launches == [t.id for t in coll]
    bwd = lambda m: sum(op.dur_us for op in m.host.ops if op.kind == "cpu" and op.phase == "backward")
    assert bwd(new) == pytest.approx(bwd(model))
    assert simulate(new, steps=2, warmup=1).mean_step_us > 0


def test_ddp_whatif_without_gradients_is_one_clear_error(gloo_run):
    from stepsim.scenarios.op_text import parse_set
    from stepsim.simcore.errors import ModelError

    model = calibrate(gloo_run[0])
    bare = model.model_copy(update={"comm": model.comm.model_copy(update={"grad_params": []})})
    for path in ("comm.bucket_cap_mb=1", "comm.first_bucket_cap_mb=2"):
        with pytest.raises(ModelError, match="lists no DDP gradients"):
            parse_set(path).apply(bare)


def test_arrival_skew_vs_transfer_per_rank_in_simulate_and_whatif(gloo_run, tmp_path):
    """The calibrated 2-rank model's collectives split per rank in ``simulate --json``; with a
    barrier before backward (whatif), a 40 ms straggler in rank 1's forward makes rank 1 40 ms
    later at the barrier: the signed lateness (rank 0's skew minus rank 1's) grows by exactly
    40 ms when every thread has a core, and the barrier's transfer is ~0."""
    import json

    from stepsim.models.params import save_model
    from tests.conftest import run_cli

    path = tmp_path / "gloo.json"
    model = calibrate(gloo_run[0])
    # a core for every thread: no rank waits for a core, so the closed form is exact (with the
    # captured 2 cores a rank's wait for a core depends on the recording's load)
    model = model.model_copy(update={"loader": model.loader.model_copy(update={"host_cores": 64})})
    # and no late resume: below 3 ms of waiting its payer is a coin each step
    # (models.device.StepEvents.pays_lag), which moves the plain run's lateness by a draw;
    # nor the barrier's late release (comm.barrier_exit, priced as such a resume)
    model = model.model_copy(update={"host": model.host.model_copy(update={"ops": [
        op.model_copy(update={"resume_lag_us": None}) for op in model.host.ops]}),
        "comm": model.comm.model_copy(update={"barrier_exit": []})})
    save_model(model, path)
    r = run_cli("simulate", str(path), "--steps", "6", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rank_comm"]
    assert {(x["rank"], x["group"]) for x in rows} == {(0, "collective"), (1, "collective")}
    for x in rows:
        assert x["count"] == DEPTH and x["transfer_ms"] > 0
        assert x["in_ms"] == pytest.approx(x["skew_ms"] + x["transfer_ms"])

    def barrier_split(*fixes):
        args = [a for f in fixes for a in ("--fix", f)]
        r = run_cli("whatif", str(path), *args, "--fix", "barrier", "--steps", "6",
                    "--draws", "0", "--json")
        assert r.returncode == 0, r.stderr
        return {(x["rank"], x["group"]): x for x in json.loads(r.stdout)["scenario"]["rank_comm"]}

    plain, late = barrier_split(), barrier_split("straggler:rank=1,phase=forward,ms=40")
    lateness = [d[(0, "barrier")]["skew_ms"] - d[(1, "barrier")]["skew_ms"] for d in (plain, late)]
    assert lateness[1] - lateness[0] == pytest.approx(40.0, abs=0.05)
    assert late[(1, "barrier")]["skew_ms"] < 1.0
    assert late[(0, "barrier")]["transfer_ms"] < 1.0
    r = run_cli("whatif", str(path), "--fix", "straggler:rank=1,phase=forward,ms=40",
                "--steps", "6", "--draws", "0")
    assert "arrival skew vs transfer per rank" in r.stdout


def _copy_capture(src, dst, edit_sidecar=None, edit_event=None):
    """A copy of the demo job's capture folder with each rank's sidecar (dict) and trace
    events (dicts) passed through the given edits."""
    import json
    import shutil

    shutil.copytree(src, dst)
    for f in dst.glob("rank*.json"):
        data = json.loads(f.read_text())
        if f.name.endswith("sidecar.json"):
            if edit_sidecar:
                edit_sidecar(data)
        elif edit_event:
            for e in data["traceEvents"]:
                edit_event(e)
        f.write_text(json.dumps(data))
    return dst


def test_profiler_overhead_is_measured_and_applied(gloo_run, tmp_path):
    """The capture times unprofiled steps beside the profiled ones; calibration measures each
    rank's factor from its own sidecar and scales the host-side durations by it: against the
    same capture whose sidecars do not say which steps were profiled (an older sidecar), every
    host op's samples are exactly the factor of the reference rank times the uncorrected."""
    import math

    from stepsim.calibration.profiler_edges import edge_factor
    from stepsim.calibration.profiler_overhead import overhead_factor
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.scenarios.predict import uncertain_params

    out, _ = gloo_run
    model = calibrate(out)
    notes = model.meta.notes
    factors = dict(kv.split(":") for kv in notes["profiler_factor"].split(","))
    assert set(factors) == {"0", "1"} and notes["profiler_factor_source"].startswith("measured")
    for r, f in factors.items():
        side = load_sidecar(out / f"rank{r}.sidecar.json")
        own = edge_factor(side)       # at the profiled window's edges
        assert own is not None and overhead_factor(side) is not None
        assert own is not None and float(f) == pytest.approx(own.factor, abs=1e-4)
        assert own.n_unprofiled >= 2 and own.n_profiled >= 2
        assert 0.3 < own.factor < 1.5         # the profiler costs; it never halves a step
    assert any(w.startswith("profiler overhead (measured)") for w in model.meta.warnings)

    def forget(side):          # a sidecar written before profiler_on was recorded
        for s in side["steps"]:
            del s["profiler_on"]

    old = calibrate(_copy_capture(out, tmp_path / "old", edit_sidecar=forget))
    assert "profiler_factor" not in old.meta.notes
    assert any("profiler's own cost stays" in w for w in old.meta.warnings)
    ref = model.meta.notes["reference_rank"]
    f_ref = _phase_factors(model)[ref]      # the factor shared by the phases' events
    assert "profiler_phase_factor" not in old.meta.notes
    for a, b in zip(model.host.ops, old.host.ops):
        assert (a.kind, a.name) == (b.kind, b.name)
        if a.phase == "optimizer":
            # its samples hold each rank's resume lag, a wait the factor does not scale
            # (calibration.gloo_resume): work * f + lag against (work + lag) * f
            f = f_ref["optimizer"]
            assert len(a.samples_us) == len(b.samples_us)
            assert all((x - f * y) * (1 - f) >= -1e-5 * y    # lag * (1 - f)**2; f to 6 places
                       for x, y in zip(a.samples_us, b.samples_us))
            continue
        if a.kind in ("cpu", "launch"):
            assert a.dur_us == pytest.approx(b.dur_us * f_ref[a.phase], rel=1e-5)
        if a.kind == "cpu":
            assert a.samples_us == pytest.approx([v * f_ref[a.phase] for v in b.samples_us],
                                                 rel=1e-5)
    # the factor's uncertainty (the widest rank's) is drawn apart from the host's speed,
    # whose range stays the run-to-run prior
    widest = max(edge_factor(load_sidecar(out / f"rank{r}.sidecar.json")).half_log
                 for r in factors)
    assert model.host.cpu_scale_error_log == pytest.approx(widest) and widest > 0
    assert old.host.cpu_scale_error_log == 0.0
    assert model.meta.ranges["host.cpu_scale"] == old.meta.ranges["host.cpu_scale"]
    assert uncertain_params(model)[0]["host.cpu_scale"] == old.meta.ranges["host.cpu_scale"]
    assert math.isfinite(widest)


def test_profiler_factors_scale_each_rank_in_closed_form(gloo_run, tmp_path, monkeypatch):
    """Sidecars whose unprofiled steps took exactly half the profiled steps' CPU: the factor is
    0.5 on both ranks with no uncertainty, shared by the phases' events as this capture's own
    phase durations and events give (tests/test_profiler_split.py), and every host duration is
    exactly its phase's factor times the uncorrected one."""
    out, _ = gloo_run
    calls = spied_phase_factors(monkeypatch)
    half = calibrate(_copy_capture(out, tmp_path / "half", edit_sidecar=cpu_steps(10e3, 20e3)))
    half_calls = list(calls)
    same = calibrate(_copy_capture(out, tmp_path / "same", edit_sidecar=cpu_steps(20e3, 20e3)))
    assert half.meta.notes["profiler_factor"] == "0:0.5000,1:0.5000"
    assert same.meta.notes["profiler_factor"] == "0:1.0000,1:1.0000"
    assert half.meta.ranges["host.cpu_scale"] == same.meta.ranges["host.cpu_scale"]
    # no cost to share at 1; at 0.5 the step's half goes by events (calibration.profiler_events)
    assert all(set(v.values()) == {1.0} for v in _phase_factors(same).values())
    # each rank's split from its own phases' durations and events in this live capture
    pf = _phase_factors(half)
    assert len(half_calls) == 2
    for r, (f, dur, ev) in enumerate(half_calls):
        assert f == 0.5 and pf[r] == pytest.approx(closed_form_split(f, dur, ev), abs=1e-6)
    f_ref = pf[half.meta.notes["reference_rank"]]
    for a, b in zip(half.host.ops, same.host.ops):
        if a.phase == "optimizer":
            # work * f + lag against work + lag: the resume lag is a wait, not scaled
            f = f_ref["optimizer"]
            assert all(x - f * y >= -1e-5 * y and y - x >= -1e-6     # f to 6 places
                       for x, y in zip(a.samples_us, b.samples_us))
        elif a.kind in ("cpu", "launch"):
            assert a.dur_us == pytest.approx(f_ref[a.phase] * b.dur_us, rel=1e-5)


def _phase_factors(model) -> dict[int, dict[str, float]]:
    """``meta.notes["profiler_phase_factor"]`` as ``{rank: {phase: factor}}``."""
    out = {}
    for part in model.meta.notes["profiler_phase_factor"].split(";"):
        r, kv = part.split(":")
        out[int(r)] = {k: float(v) for k, v in (x.split("=") for x in kv.split(","))}
    return out


def test_buckets_without_input_dims_come_from_the_ddp_record(gloo_run, tmp_path):
    """A trace recorded without ``record_shapes`` (no Input Dims): the all-reduces' sizes are
    the buckets DDP builds from the sidecar's parameters at the recorded cap, which are the
    sizes DDP reported, and a bucket what-if can cost them."""
    from stepsim.models.ddp import set_bucket_caps

    out, res = gloo_run

    def no_dims(e):
        e.get("args", {}).pop("Input Dims", None)

    model = calibrate(_copy_capture(out, tmp_path / "nodims", edit_event=no_dims))
    assert [t.bytes for t in model.device.streams["gloo"]] == _reported(res, "cal")
    assert any("no Input Dims" in w for w in model.meta.warnings)
    new = set_bucket_caps(model, bucket_cap_mb=0.6)
    assert [t.bytes for t in new.device.streams["gloo"] if t.bytes] == _reported(res, "cap0.6")


def test_transfer_fit_uses_the_all_reduces_that_ran_after_backward(gloo_run, monkeypatch):
    """Each all-reduce's overlap with backward compute on the last rank to arrive is measured
    from the trace (a share in [0, 1]); the bus bandwidth is the one the clean ones give (every
    bucket is one layer: one size, through the origin), or all of them, with a warning, when
    each one overlapped backward."""
    import stepsim.calibration.gloo as gloo
    from stepsim.calibration.gloo_transfer import CLEAN_BUSY
    from stepsim.models.ddp import ring_bus_bytes

    seen = {}
    real = gloo.comm_params

    def spy(tasks, busy, *args):
        seen.update(tasks=tasks, busy=busy)
        return real(tasks, busy, *args)

    monkeypatch.setattr(gloo, "comm_params", spy)
    model = calibrate(gloo_run[0])
    busy, tasks = seen["busy"], seen["tasks"]
    assert len(busy) == DEPTH and all(0.0 <= b <= 1.0 for b in busy)
    clean = [t for t, b in zip(tasks, busy) if b < CLEAN_BUSY] or tasks
    x = sum(ring_bus_bytes(t.bytes, 2) for t in clean)
    assert model.comm.latency_us == 0.0
    assert model.comm.bus_gbps == pytest.approx(x / sum(t.dur_us for t in clean) / 1e3)
    n = sum(b < CLEAN_BUSY for b in busy)
    said = " ".join(model.meta.warnings)
    if n == 0:
        assert "every all-reduce overlapped its rank's backward compute" in said
    elif n < DEPTH:
        assert f"transfer cost fitted to {n} of {DEPTH} all-reduces" in said


def test_replicates_measure_the_ddp_hosts_speed(gloo_run, tmp_path):
    """Replicates of a gloo capture (folders of the same ranks' sidecars) give the job's model
    measured ``host.speed_runs``: per run, the geometric mean over the ranks of each rank's
    identical-work CPU time against its own in the capture (here closed-form: one replicate's
    step CPU times ×1.2 on rank 0 and ×1.3 on rank 1)."""
    import math

    from stepsim.simcore.errors import InputError

    out, _ = gloo_run

    def slower(side):
        k = 1.2 if side["ddp"]["rank"] == 0 else 1.3
        for s in side["steps"]:
            s["cpu_us"], s["next_cpu_us"] = s["cpu_us"] * k, s["next_cpu_us"] * k
        later_run(side)

    rep = _copy_capture(out, tmp_path / "rep", edit_sidecar=slower)
    model = calibrate(out, replicates=[rep])
    assert model.host.speed_runs == pytest.approx([1.0, math.sqrt(1.2 * 1.3)], rel=1e-9)
    # the replicates measure the run-to-run speed; the profiler factor's error stays drawn
    assert model.host.cpu_scale_error_log == calibrate(out).host.cpu_scale_error_log > 0
    assert model.meta.sources["host.speed_runs"] == "measured"
    assert model.meta.notes["kind"] == "cpu_ddp" and len(model.ranks) == 2
    (rep / "rank1.sidecar.json").unlink()
    with pytest.raises(InputError, match="not a replicate"):
        calibrate(out, replicates=[rep])


def test_replicate_speed_is_measured_on_unprofiled_steps(gloo_run, tmp_path):
    """The profiler's own cost differs from run to run (the demo's capture, the plan's first
    profiled run, paid 1.8-2.0 ms of main-thread CPU a step, its replicates 0.8-1.4 ms), and
    the model's host durations are the capture's unprofiled ones: a replicate whose profiled
    steps took ×1.3 the CPU and whose unprofiled steps took ×1.1 ran at speed 1.1 (closed
    form), where the profiled steps (most of them) said 1.3 before."""
    out, _ = gloo_run

    def profiler_dearer(side):
        for s in side["steps"]:
            k = 1.3 if s["profiler_on"] else 1.1
            s["cpu_us"], s["next_cpu_us"] = s["cpu_us"] * k, s["next_cpu_us"] * k
        later_run(side)

    rep = _copy_capture(out, tmp_path / "rep", edit_sidecar=profiler_dearer)
    model = calibrate(out, replicates=[rep])
    assert model.host.speed_runs == pytest.approx([1.0, 1.1], rel=1e-9)


def test_every_all_reduce_enqueue_is_priced_at_its_own_cost(gloo_run, tmp_path, monkeypatch):
    """On a host whose ranks' training threads fill its cores, a gloo thread woken by an
    enqueue takes the enqueuing thread's core, so the enqueue's captured wall holds a wait the
    simulator prices itself (calibration.gloo_preempt): with the bucket marks a capture
    records (here 200 µs of gloo CPU a step per bucket, added to this run's sidecars, whose
    small job records none), every all-reduce enqueue of the model is priced at one own
    cost, from every profiled step of the reference rank (DEPTH enqueue walls each), at no
    more than any enqueue position's median wall; without the marks the walls stay."""
    import numpy as np

    import stepsim.calibration.gloo as gloo

    out, _ = gloo_run

    def marks(side):
        side["host_cores"] = 2       # the harness's 2 ranks of one thread fill 2 cores
        side["ddp"]["bucket_cpu"] = [{"bytes": 256 * 1024 * 4 + 1024, "cpu_us": 800.0,
                                      "runqueue_us": 0.0, "timeslices": 8, "steps": 4}
                                     for _ in range(DEPTH)]

    seen = []
    real = gloo.own_enqueue_us

    def spy(step_walls, *rest):
        seen.append(step_walls)
        return real(step_walls, *rest)

    monkeypatch.setattr(gloo, "own_enqueue_us", spy)
    model = calibrate(_copy_capture(out, tmp_path / "marked", edit_sidecar=marks))
    walls = seen[-1]
    assert len(walls) == len(model.meta.steps_used) and all(len(w) == DEPTH for w in walls)
    own = float(np.median([min(w) for w in walls]))
    assert model.meta.notes["backward_preempted_us"] > 0
    launches = [op for op in model.host.ops if op.kind == "launch"]
    assert len(launches) == DEPTH and all(op.dur_us == pytest.approx(own) for op in launches)
    assert own <= min(float(np.median([w[k] for w in walls])) for k in range(DEPTH))
    plain = calibrate(out)           # no marks: nothing is taken out, the walls stay
    assert "backward_preempted_us" not in plain.meta.notes
    assert [op.dur_us for op in plain.host.ops if op.kind == "launch"] == pytest.approx(
        [float(np.median([w[k] for w in seen[-1]])) for k in range(DEPTH)])
