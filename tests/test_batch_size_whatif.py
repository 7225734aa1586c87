"""``--set loader.batch_size=N`` (scenarios.batch_size): never a silent no-op. It is modelled
from what the capture measured (produce per sample, bytes per sample, the step's per-sample
work assumed linear), each term's source named, or refused in one line saying what to capture."""
from __future__ import annotations

import pytest

from stepsim.models.params import StepModel, save_model
from stepsim.models.simulate import simulate
from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.transforms import SetOp, apply_ops
from stepsim.simcore.errors import ModelError, NotApplicable
from tests.test_quirks import cli, one_line_error

MEASURED = {"loader.batch_size": "measured", "loader.produce": "measured"}


def cpu_model(nw: int, produce_ms: float, train_ms: float, opt_ms: float = 0.0, cores: int = 4,
              batch: int | None = 8, sources: dict | None = None, samples: bool = False,
              per_step: float = 0.0, **loader) -> StepModel:
    """A CPU calibration's shape: ``next()``, the ``train`` op (with per-step samples of
    0.9 and 1.1 × its duration if ``samples``), and an optimizer op."""
    ops = [{"kind": "next_batch"},
           {"kind": "cpu", "name": "training step", "category": "train",
            "dur_us": train_ms * 1e3,
            "samples_us": [train_ms * 900, train_ms * 1100] if samples else None,
            "per_step_fraction": per_step}]
    if opt_ms:
        ops.append({"kind": "cpu", "name": "optimizer", "phase": "optimizer",
                    "dur_us": opt_ms * 1e3})
    return StepModel.model_validate({
        "loader": {"num_workers": nw, "produce": {"mean_us": produce_ms * 1e3},
                   "host_cores": cores, "batch_size": batch, "batch_bytes": 2112, **loader},
        "host": {"ops": ops},
        "meta": {"name": "cpu", "sources": MEASURED if sources is None else sources}})


def mean_ms(m: StepModel) -> float:
    return simulate(m, steps=60, warmup=10).mean_step_us / 1e3


@pytest.mark.parametrize("n", [4, 16, 24])
def test_no_workers_closed_form(n):
    """num_workers=0: a step makes its batch (P) then trains on it (T) then steps the
    optimizer (O): at N samples instead of B, step = (N/B)(P + T) + O."""
    m = cpu_model(0, produce_ms=40, train_ms=20, opt_ms=5)
    assert mean_ms(m) == pytest.approx(65.0)
    got = apply_ops(m, [SetOp(path="loader.batch_size", value=n)])
    assert mean_ms(got) == pytest.approx(n / 8 * 60 + 5, rel=1e-6)
    assert got.loader.batch_size == n and got.loader.batch_bytes == round(2112 * n / 8)
    assert got.host.ops[1].dur_us == pytest.approx(20e3 * n / 8)
    assert got.host.ops[2].dur_us == 5000          # the optimizer is per step
    assert m.loader.batch_size == 8                # pure
    sampled = apply_ops(cpu_model(0, 40, 20, samples=True),
                        [SetOp(path="loader.batch_size", value=n)]).host.ops[1]
    assert sampled.samples_us == pytest.approx([20 * 900 * n / 8, 20 * 1100 * n / 8])


@pytest.mark.parametrize("n", [4, 16, 32])
def test_the_measured_per_step_share_is_kept(n):
    """A train op of T whose share f is per step (the optimizer, measured from the trace):
    at N samples it takes T((1 - f)N/B + f), so step = (N/B)P + T((1 - f)N/B + f); its new
    share keeps the same µs per step, so a second change from there agrees with one."""
    m = cpu_model(0, produce_ms=40, train_ms=20, per_step=0.25)
    got = apply_ops(m, [SetOp(path="loader.batch_size", value=n)])
    r = n / 8
    assert mean_ms(got) == pytest.approx(40 * r + 20 * (0.75 * r + 0.25), rel=1e-6)
    op = got.host.ops[1]
    assert op.dur_us * op.per_step_fraction == pytest.approx(5000)
    twice = apply_ops(m, [SetOp(path="loader.batch_size", value=12),
                          SetOp(path="loader.batch_size", value=n)])
    assert twice.host.ops[1].dur_us == pytest.approx(op.dur_us)
    (note,) = [c for c in caveats(m, [SetOp(path="loader.batch_size", value=n)])
               if "batch_size" in c]
    assert "25.0 % of it, measured from the trace's Optimizer spans, kept per step" in note


@pytest.mark.parametrize("spiked", [False, True])
def test_calibration_measures_the_optimizers_share(cpu_run_nw0, tmp_path, spiked):
    """A CPU capture's ``Optimizer.step#`` and ``Optimizer.zero_grad#`` spans on the step's
    thread, over the step's wall outside next(), are the train op's per-step share, over the
    profiled steps calibration keeps: those with a system-CPU spike (calibration.sys_spikes)
    are left out of the step and of its share (``meta.steps_used`` still lists them), so a
    capture that drew one compared the share over every step with calibration's over the
    calm ones. ``spiked``: on a copy with 200 ms of system CPU added to two profiled steps
    (their walls that much longer), so that path is taken whatever the live capture drew."""
    import gzip
    import json

    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.calibration.sys_spikes import spikes
    from stepsim.fit import calibrate
    from tests.test_sys_spikes import _spike_capture

    run = cpu_run_nw0
    if spiked:
        side0 = load_sidecar(run / "sidecar.json")
        flags = spikes(side0) or [False] * len(side0.steps)
        prof = [i for i, s in enumerate(side0.steps) if s.profiled and not flags[i]]
        if len(prof) < 4:
            pytest.skip(f"the capture's own spikes leave {len(prof)} calm profiled steps (< 4)")
        run = _spike_capture(run, tmp_path / "spiked", [prof[1], prof[3]], 200_000.0)
    m = calibrate(run)
    op = m.host.ops[1]
    assert m.meta.sources["host.ops[1].per_step_fraction"] == "measured"
    side = load_sidecar(run / "sidecar.json")
    flags = spikes(side) or [False] * len(side.steps)
    # calibration leaves the spiked profiled steps out exactly when it notes the calm share
    left_out = ({i for i, x in enumerate(flags) if x and side.steps[i].profiled}
                if "calm_window_ratio" in m.meta.notes else set())
    assert bool(left_out) == ("calm_window_ratio" in m.meta.notes)
    assert not spiked or len(left_out) >= 2
    events = json.load(gzip.open(run / "trace.json.gz"))["traceEvents"]
    steps = {e["args"].get("Step", e["name"]): e for e in events
             if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
    used = [e for k, e in steps.items() if (n := int(e["name"].split("#")[1]))
            in m.meta.steps_used and n not in left_out]

    def inside(pred, s):
        return sum(e["dur"] for e in events if e.get("ph") == "X" and pred(e["name"])
                   and e["tid"] == s["tid"] and s["ts"] <= e["ts"] < s["ts"] + s["dur"])

    opt = sum(inside(lambda n: n.startswith(("Optimizer.step#", "Optimizer.zero_grad#")), s)
              for s in used)
    nxt = sum(inside(lambda n: n.startswith("enumerate(DataLoader)#") and
                     n.endswith("__next__"), s) for s in used)
    wall = sum(s["dur"] for s in used) - nxt
    assert 0 < op.per_step_fraction < 0.5
    assert op.per_step_fraction == pytest.approx(opt / wall, rel=0.02)


def test_workers_closed_form():
    """Two workers on enough cores (three threads, three cores), producer-bound: step = P/2;
    at 2B the workers' produce doubles, and so does the step (train T·2 < P·2/2)."""
    m = cpu_model(2, produce_ms=60, train_ms=20, cores=3,
                  produce_by_worker=[{"mean_us": 60e3}, {"mean_us": 60e3}])
    assert mean_ms(m) == pytest.approx(30.0, rel=0.02)
    got = apply_ops(m, [SetOp(path="loader.batch_size", value=16)])
    assert got.loader.produce.mean_us == pytest.approx(120e3)
    assert [d.mean_us for d in got.loader.produce_by_worker] == pytest.approx([120e3, 120e3])
    assert mean_ms(got) == pytest.approx(60.0, rel=0.02)
    # an epoch of 10 batches of 8 is 5 batches of 16, ceil(3.3) = 4 of 24, 20 of 4
    for n, batches in ((16, 5), (24, 4), (4, 20)):
        assert apply_ops(cpu_model(2, 60, 20, batches_per_epoch=10),
                         [SetOp(path="loader.batch_size", value=n)]) \
            .loader.batches_per_epoch == batches


def test_device_model_scales_forward_backward_kernels_and_input_copies():
    """On a model with a device: forward and backward kernels and H2D copies × N/B; the
    optimizer's kernels, launches and host CPU work are per step."""
    m = StepModel.model_validate({
        "loader": {"num_workers": 0, "produce": {"mean_us": 1000.0}, "batch_size": 32},
        "host": {"ops": [
            {"kind": "next_batch"},
            {"kind": "launch", "task": "h2d", "dur_us": 10},
            {"kind": "cpu", "dur_us": 100, "phase": "forward"},
            {"kind": "launch", "task": "fwd", "dur_us": 10},
            {"kind": "launch", "task": "bwd", "dur_us": 10},
            {"kind": "launch", "task": "opt", "dur_us": 10},
            {"kind": "sync", "dur_us": 5}]},
        "device": {"streams": {"7": [
            {"id": "h2d", "stream": "7", "kind": "memcpy", "copy_kind": "h2d", "dur_us": 400,
             "phase": "data"},
            {"id": "fwd", "stream": "7", "kind": "kernel", "dur_us": 2000, "phase": "forward"},
            {"id": "bwd", "stream": "7", "kind": "kernel", "dur_us": 4000, "phase": "backward"},
            {"id": "opt", "stream": "7", "kind": "kernel", "dur_us": 300,
             "phase": "optimizer"}]}},
        "meta": {"sources": MEASURED}})
    got = apply_ops(m, [SetOp(path="loader.batch_size", value=64)])
    durs = {t.id: t.dur_us for t in got.task_map().values()}
    assert durs == pytest.approx({"h2d": 800, "fwd": 4000, "bwd": 8000, "opt": 300})
    assert [op.dur_us for op in got.host.ops] == [op.dur_us for op in m.host.ops]
    assert got.loader.produce.mean_us == pytest.approx(2000)
    # produce (2 ms) + launches and forward CPU (0.14 ms) + the device's work after them
    assert mean_ms(got) == pytest.approx(mean_ms(m) + 1.0 + 0.4 + 2.0 + 4.0, rel=1e-6)


def test_the_warning_names_each_terms_source():
    m = cpu_model(0, produce_ms=40, train_ms=20)
    (note,) = [c for c in caveats(m, [SetOp(path="loader.batch_size", value=16)])
               if "batch_size" in c]
    assert "5.00 ms per sample" in note and "inferred" in note
    assert "assumed linear in samples" in note and "capture with probe_batch_size=16" in note
    assert "per batch of 16 samples, not 8" in note


@pytest.mark.parametrize("kw,named", [
    ({"batch": None}, "does not know the batch size it was captured at"),
    ({"sources": {"loader.batch_size": "measured"}}, "produce time per batch is not measured"),
])
def test_refused_without_what_it_needs(kw, named, tmp_path):
    m = cpu_model(0, produce_ms=40, train_ms=20, **kw)
    with pytest.raises(NotApplicable, match=named):
        apply_ops(m, [SetOp(path="loader.batch_size", value=16)])
    save_model(m, tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", "--set", "loader.batch_size=16",
                        "--draws", "0", "--steps", "5")[:2], "loader.batch_size=16",
                   named, "Capture")


def test_refused_without_a_training_step_to_scale():
    m = cpu_model(0, produce_ms=40, train_ms=20)
    m = m.model_copy(update={"host": m.host.model_copy(update={"ops": [
        m.host.ops[0], m.host.ops[1].model_copy(update={"category": "other"})]})})
    with pytest.raises(NotApplicable, match="no forward or backward work"):
        apply_ops(m, [SetOp(path="loader.batch_size", value=16)])


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "big"])
def test_a_bad_value_is_refused(value):
    with pytest.raises(ModelError, match="whole number of samples"):
        apply_ops(cpu_model(0, 40, 20), [SetOp(path="loader.batch_size", value=value)])


def test_the_cli_reads_the_speed_up_per_sample(tmp_path):
    """A step of another batch size is other work: the what-if prints the per-sample speed-up
    beside the per-step one (at num_workers=0 with every cost per sample: 0.50x, 1.00x)."""
    import json

    save_model(cpu_model(0, produce_ms=40, train_ms=20), tmp_path / "m.json")
    args = ("whatif", tmp_path / "m.json", "--set", "loader.batch_size=16", "--draws", "0",
            "--steps", "20")
    rc, err, out = cli(*args)
    assert rc == 0, err
    assert "speed-up 0.50x" in out and "per sample (batches of 8 -> 16): 7.5 -> 7.5 ms, " \
        "speed-up 1.00x" in out
    assert "warning: loader.batch_size=16 (captured at 8)" in err
    d = json.loads(cli(*args, "--json")[2])
    assert d["batch_sizes"] == [8, 16] and d["per_sample_speedup"] == pytest.approx(1.0)


def test_a_sweep_of_batch_sizes_says_to_compare_per_sample():
    (note,) = [c for c in caveats(cpu_model(0, 40, 20), [], ["loader.batch_size"])
               if "swept" in c]
    assert "mean ms / batch_size (per sample)" in note and "assumed linear" in note


def test_a_sweep_of_batch_sizes_prints_ms_per_sample(tmp_path):
    import json

    save_model(cpu_model(0, produce_ms=40, train_ms=20, opt_ms=4), tmp_path / "m.json")
    args = ("sweep", tmp_path / "m.json", "loader.batch_size=4,8,16", "--draws", "0", "--steps",
            "20", "--jobs", "1")
    rc, err, out = cli(*args)
    assert rc == 0, err
    assert "ms / sample" in out and "compare mean ms / batch_size" in err
    points = json.loads(cli(*args, "--json")[2])["points"]
    # (N/8)·60 + 4 ms per step: per sample 7.5 + 4/N ms
    assert [p["ms_per_sample"] for p in points] == pytest.approx([8.5, 8.0, 7.75], rel=1e-6)


@pytest.mark.parametrize("n", [4, 16, 32])
def test_the_page_faults_grow_with_the_batch(n):
    """num_workers=0, a training step of T = 20 ms that re-faults up to F = 8 ms of CPU, paying
    half (host.refault_share 0.5): step = P + T + F/2; at N samples instead of B, the
    activations it faults in again grow with the batch as its work does:
    (N/B)(P + T + F/2). Before, F stayed the captured batch's (a user's CNN at 64 against 32
    re-faulted 2.9-3.2x the pages a step)."""
    m = cpu_model(0, produce_ms=40, train_ms=20)
    data = m.model_dump()
    data["host"]["ops"][1]["refault_us"] = 8_000.0
    m = StepModel.model_validate(data)
    assert mean_ms(m) == pytest.approx(64.0)
    got = apply_ops(m, [SetOp(path="loader.batch_size", value=n)])
    assert got.host.ops[1].refault_us == pytest.approx(8_000.0 * n / 8)
    assert mean_ms(got) == pytest.approx(n / 8 * 64.0, rel=1e-6)
    note = [w for w in caveats(m, [SetOp(path="loader.batch_size", value=n)])
            if "page faults" in w]
    assert len(note) == 1 and f"8.0 -> {8.0 * n / 8:.1f} ms at the most" in note[0]


def test_a_time_per_sample_below_a_ms_keeps_three_digits(tmp_path):
    """Below 1 ms a sample, one decimal printed "0.3 -> 0.2 ms" for 0.250 -> 0.226 (a fresh
    user's MLP, 1.11x): three significant digits. At num_workers=0: 1 ms of produce and 1 ms of
    training a batch of 8, half of it per step, give 2.0 ms for 8 and 1 + 1 + 0.5 + 0.5 ms for
    16 samples: 0.250 -> 0.219 ms a sample."""
    save_model(cpu_model(0, produce_ms=1, train_ms=1, per_step=0.5), tmp_path / "m.json")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--set", "loader.batch_size=16",
                       "--draws", "0", "--steps", "20")
    assert rc == 0, err
    assert "per sample (batches of 8 -> 16): 0.250 -> 0.219 ms, speed-up 1.14x" in out
