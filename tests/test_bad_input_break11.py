"""Bad input found by the eleventh breaker (2026-12-06) in the cold-resume probe and the
ledger's text: a probe record or a ``comm.cold_resume`` that cannot be right made a 20 ms
straggler a 3.8-day step, with exit 0 and no word; a ledger label ``[/]`` (``validate --label``
or a hand edit) was a rich ``MarkupError`` traceback on every later ``stepsim ledger``; a 10 MB
label took 104 s to print. Each is refused in one line, dropped and counted, or bounded;
inputs never changed."""
from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from stepsim.calibration.gloo_cold import cold_params
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_ddp import ColdProbe
from stepsim.models.param_comm import MAX_COLD_SHARE, CommParams
from stepsim.report.validation import LABEL_SHOWN, shown
from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier
from stepsim.simcore.errors import ModelError
from tests.test_ddp_ranks import B, S, cpu_ddp
from tests.test_quirks import cli, one_line_error


@pytest.mark.parametrize("pts, says", [
    ([(1e4, -5.0)], "share -5 at 0"),
    ([(1e4, MAX_COLD_SHARE * 2)], "share 2e+12 at 0"),
    ([(4e4, 0.1), (1e4, 0.2)], "pause 10000 µs at 1 after 40000 µs"),
    ([(1e4, 0.1), (1e4, 0.5)], "pause 10000 µs at 1 after 10000 µs"),
    ([(0.0, 0.5)], "pause 0 µs at 0"),
])
def test_a_cold_resume_that_cannot_be_right_is_refused(pts, says):
    """Pauses out of order or repeated gave np.interp's shares from the wrong pair, silently;
    a share below 0 or past the bound was taken as it was."""
    with pytest.raises(ValidationError, match=says.replace("+", r"\+")):
        CommParams(cold_resume=pts)
    assert CommParams(cold_resume=[(1e4, 0.0), (2e4, MAX_COLD_SHARE)]).cold_resume[1][1] \
        == MAX_COLD_SHARE


def _cold(model, pts):
    # model_copy: a share inside the bound that still makes the extra past a duration's
    return model.model_copy(update={"comm": model.comm.model_copy(update={"cold_resume": pts})})


def test_a_straggler_whose_cold_extra_passes_a_duration_is_one_error():
    """Closed form: the straggler's backward B (20 ms) after a pause S costs share x B more;
    a share of 1e8 gives 2e12 µs, past MAX_DURATION_US (1e12): model_copy kept it unchecked
    and the step came out as 3e298 ms for a share of 1e300. Just inside: kept."""
    m = cpu_ddp(cores=2)
    with pytest.raises(ModelError, match=r"rank 1's backward after a 40 ms pause costs 2e\+12"):
        add_straggler(_cold(m, [(S, 1e8)]), 1, "forward", S / 1e3)
    with pytest.raises(ModelError, match="past the longest duration"):
        insert_barrier(add_straggler(_cold(m, [(S, 1e8)]), 1, "forward", 0.0)
                       .model_copy(update={"ranks": [r.model_copy(update={"phase_wall_us": (
                           {"forward": S} if r.rank == 1 else {})}) for r in m.ranks]}))
    ok = add_straggler(_cold(m, [(S, 1e12 / B - 1)]), 1, "forward", S / 1e3)
    assert ok.ranks[1].phase_extra_us["backward"] == pytest.approx(1e12 - B)


def _probe(hot, cold, pause=1e4, steps=4):
    return ColdProbe(pause_us=pause, hot_cpu_us=hot, cold_cpu_us=cold, steps=steps)


def test_a_pause_whose_share_passes_the_bound_is_left_out_and_said():
    """A hot CPU of 1.2e-8 µs (summed) against a cold one of 1205 µs made a share of 1.2e12:
    the calibrated model was then refused whole. The pause is left out, said; the others kept."""
    from types import SimpleNamespace

    side = SimpleNamespace(ddp=SimpleNamespace(cold_probe=[
        _probe(1e-9, 1205.0), _probe(1000.0, 1100.0, pause=2e4)]))
    said: list[str] = []
    assert cold_params([side], said) == [(2e4, pytest.approx(0.1))]
    (note,) = said
    assert "10 ms pause left out" in note and "cannot be right" in note, note


def _sidecar(tmp_path, probe):
    """Four 10 ms steps (main thread 6 ms each) of a 2-rank gloo job, with ``probe``."""
    steps = [{"t_start_us": 1000.0 + 10_000.0 * k, "wall_us": 10_000.0, "cpu_us": 6000.0, "next_wall_us": 20.0, "next_cpu_us": 1.0,
              "profiled": True} for k in range(4)]
    d = {"stepsim_sidecar": 1, "loader": {"num_workers": 0}, "steps": steps,
         "ddp": {"world_size": 2, "rank": 0, "backend": "gloo", "cold_probe": probe}}
    p = tmp_path / "rank0.sidecar.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("field, value, dropped", [
    ("cold_cpu_us", 10_000.0 * 1.01 + 1000.0, False),       # at the bound (THREAD slack)
    ("cold_cpu_us", 10_000.0 * 1.01 + 1000.5, True),
    ("cold_cpu_us", 1e11, True),
    ("hot_cpu_us", 1e11, True),
    ("cold_opt_cpu_us", 1e11, True),
])
def test_a_probe_backward_past_the_longest_step_is_dropped(tmp_path, field, value, dropped):
    """Closed form: a backward is part of a step, so its thread CPU cannot pass the longest
    step wall (10 ms here) past the clocks' slack (1 % + 1000 µs). A cold CPU of 1e11 µs
    calibrated into a share of 8.5e7 with exit 0."""
    probe = [{"pause_us": 1e4, "hot_cpu_us": 1000.0, "cold_cpu_us": 1100.0, "steps": 4},
             {"pause_us": 2e4, "hot_cpu_us": 1000.0, "cold_cpu_us": 1200.0, "steps": 4}]
    probe[0][field] = value
    p = _sidecar(tmp_path, probe)
    before = p.read_bytes()
    side = load_sidecar(p)
    assert p.read_bytes() == before
    if not dropped:
        assert side.dropped == [] and len(side.ddp.cold_probe) == 2
        return
    (note,) = side.dropped
    assert note.startswith("rank0.sidecar.json: dropped 1 of 2 'ddp.cold_probe' record(s) "
                           f"that cannot be right (first: ddp.cold_probe.0: {field} "), note
    assert [c.pause_us for c in side.ddp.cold_probe] == [2e4]


_RECORD = {
    "time": "2026-12-06T03:36:45+00:00", "label": "baseline", "model": "2 ranks (gloo)",
    "scenario": "baseline", "traces": ["gloo/cal"], "steps_measured": 4,
    "predicted_mean_us": 10327.1, "predicted_median_us": 10208.0, "p10_us": None,
    "p50_us": None, "p90_us": None, "measured_mean_us": 11620.87, "measured_median_us": 9678.55,
    "error_pct": 100 * (10327.1 - 11620.87) / 11620.87,
    "median_error_pct": 100 * (10208.0 - 9678.55) / 9678.55, "inside": None,
    "predicted_bottleneck": "host_compute", "measured_bottleneck": "host_compute",
    "bottleneck_agrees": True, "in_sample": False, "runs": 1, "width_sources_pct": {},
}


def _ledger(tmp_path, **edit):
    p = tmp_path / "ledger.jsonl"
    p.write_text(json.dumps({**_RECORD, **edit}) + "\n")
    return p


@pytest.mark.parametrize("edit", [
    {"label": "[/]"},
    {"label": "[/yellow] x", "width_sources_pct": {"host.cpu_scale": 5.0}},
    {"label": "[/]", "outside_load_slowdown": 0.9},
    {"width_sources_pct": {"[/]": 5.0}},
    {"predicted_bottleneck": "[/b]", "bottleneck_agrees": False},
])
def test_a_ledger_text_with_rich_markup_prints_as_it_is(tmp_path, edit):
    p = _ledger(tmp_path, **edit)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    rc, err, out = cli("ledger", p)
    assert rc == 0 and "Traceback" not in err, err
    text = next(iter(v for v in edit.values() if isinstance(v, str)), "[/]")
    assert text in out, out
    assert hashlib.sha256(p.read_bytes()).hexdigest() == digest


def test_validate_with_a_markup_label_writes_and_shows_it(cpu_run_nw1, tmp_path):
    """``validate --label '[/]'`` wrote its record, then printed a traceback (exit 1), and
    every later ``stepsim ledger`` of that file did too."""
    model, led = tmp_path / "m.json", tmp_path / "l.jsonl"
    rc, err, _ = cli("calibrate", cpu_run_nw1, "-o", model)
    assert rc == 0, err
    rc, err, out = cli("validate", model, cpu_run_nw1, "--steps", "3", "--draws", "0",
                       "--label", "[/]", "--ledger", led)
    assert rc == 0 and "[/]" in out, err
    rc, err, out = cli("ledger", led)
    assert rc == 0 and "[/]" in out, err


def test_a_huge_label_is_cut_where_it_is_shown(tmp_path):
    """Closed form: the first LABEL_SHOWN characters, then how many more; --json keeps it."""
    assert shown("a" * LABEL_SHOWN) == "a" * LABEL_SHOWN
    assert shown("a" * (LABEL_SHOWN + 5)) == "a" * LABEL_SHOWN + "… (5 more characters)"
    p = _ledger(tmp_path, label="x" * 3_000_000)
    rc, err, out = cli("ledger", p)
    assert rc == 0 and "… (2,999,600 more characters)" in out and len(out) < 20_000, err
    rc, err, out = cli("ledger", p, "--json")
    assert rc == 0 and json.loads(out)["records"][0]["label"] == "x" * 3_000_000


def test_a_negative_width_by_source_is_not_a_record(tmp_path):
    p = _ledger(tmp_path, width_sources_pct={"host.cpu_scale": -50.0})
    rc, err, _ = cli("ledger", p)
    one_line_error(rc, err, "ledger.jsonl", "width_sources_pct['host.cpu_scale'] -50 %",
                   "at least 0")


def _marks(tmp_path, cpu_us):
    """The sidecar of :func:`_sidecar` (10 ms steps) on 2 cores with three bucket marks."""
    p = _sidecar(tmp_path, [])
    d = json.loads(p.read_text())
    d["host_cores"] = 2
    d["ddp"]["bucket_cpu"] = [{"bytes": 1 << 20, "cpu_us": c, "steps": 4} for c in cpu_us]
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("cpu_us, dropped", [
    ([100.0, 4 * 10_000.0 * 2 * 1.01 + 1000.0, 100.0], False),   # at the bound
    ([100.0, 4 * 10_000.0 * 2 * 1.01 + 1000.5, 100.0], True),
    ([1e12] * 3, True),
])
def test_a_bucket_mark_past_the_cores_drops_the_sequence(tmp_path, cpu_us, dropped):
    """Closed form: a mark's backend CPU over ``steps`` steps is at most steps x the longest
    wall (10 ms) x host_cores (2), past the clocks' slack; one that passes drops every mark
    (they are one sequence), said once. A mark of 1e12 µs calibrated silently, half of each
    backward taken out as preemption."""
    side = load_sidecar(_marks(tmp_path, cpu_us))
    if not dropped:
        assert side.dropped == [] and len(side.ddp.bucket_cpu) == 3
        return
    (note,) = side.dropped
    assert note.startswith("rank0.sidecar.json: dropped 3 of 3 'ddp.bucket_cpu' record(s) that "
                           "cannot be right"), note
    assert ("; 2 more with them, one sequence (first: ddp.bucket_cpu.1:" in note) \
        == (cpu_us[0] == 100.0), note
    assert side.ddp.bucket_cpu == []


def test_a_parameter_of_negative_dims_refuses_the_sidecar(tmp_path):
    """``shape [-256, -256]``: numel 65,536, as the product says, and it passed."""
    p = _sidecar(tmp_path, [])
    d = json.loads(p.read_text())
    d["ddp"]["params"] = [{"name": "w", "shape": [-256, -256], "numel": 65536,
                           "dtype": "float32", "bytes": 262144}]
    p.write_text(json.dumps(d))
    from stepsim.simcore.errors import InputError

    with pytest.raises(InputError, match=r"rank0.sidecar.json: bad sidecar field "
                                         r"ddp.params.0.shape.0: .*greater than or equal to 0"):
        load_sidecar(p)


def _append_after(path, start, n):
    from stepsim.scenarios.validate import append_ledger

    from tests.test_ledger import _rec

    start.wait(60)
    for i in range(n):
        append_ledger(path, _rec(float(i), True))


def test_processes_creating_a_ledger_in_a_new_folder_keep_every_record(tmp_path):
    """A ledger whose folder was not there yet: ``updating`` ran unlocked until the first
    write made the folder, and 4 processes appending 10 records each kept 38-39 of the 40
    (3 runs). The folder is made before the lock is taken; 5 times, the 4 starting at once."""
    import multiprocessing as mp

    from stepsim.scenarios.validate import read_ledger

    ctx = mp.get_context("fork")
    for k in range(5):
        path = tmp_path / f"run{k}" / "new" / "deeper" / "ledger.jsonl"
        start = ctx.Barrier(4)     # every first append at once: the window of the race
        procs = [ctx.Process(target=_append_after, args=(path, start, 10)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * 4
        assert len(read_ledger(path)) == 40
        assert [f.name for f in path.parent.iterdir()] == ["ledger.jsonl"]


def test_a_ledger_under_a_file_is_one_line(tmp_path):
    from stepsim.scenarios.validate import append_ledger, LedgerRecord
    from stepsim.simcore.errors import InputError

    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="notes.txt is a file, not a folder"):
        append_ledger(tmp_path / "notes.txt" / "l.jsonl", LedgerRecord.model_validate(_RECORD))
    assert (tmp_path / "notes.txt").read_text() == "x"


@pytest.mark.parametrize("accum", [3, 7, 64])
def test_a_chosen_step_count_holds_whole_optimizer_steps(accum):
    """Closed form: with ``comm.grad_accum_steps`` = k the chosen count is a multiple of k,
    so the mean holds n/k optimizer steps whatever the warm-up (before, 80 micro-batch steps
    of ``micro_batches=1000000`` held none and predicted a 1.8x speed-up)."""
    from stepsim.models.ddp import apply_ddp
    from stepsim.models.stepcount import simulate_counted
    from tests.test_ddp import ddp_model

    m = apply_ddp(ddp_model(accum=accum))
    res, count = simulate_counted(m, None, warmup=5, seed=0)
    n = len(res.step_us[0])
    assert n % accum == 0 and n >= accum
    steps = res.step_us[0]   # a no_sync step is the micro-batch alone (90 ms); the sync
    assert int((steps > steps.min() + 1.0).sum()) == n // accum   # steps run longer


def test_a_step_count_without_an_optimizer_step_is_one_line(tmp_path):
    from stepsim.models.ddp import apply_ddp
    from stepsim.models.params import save_model
    from tests.test_ddp import ddp_model

    p = tmp_path / "m.json"
    save_model(apply_ddp(ddp_model(accum=4)), p)
    rc, err, _ = cli("simulate", p, "--steps", "3")
    one_line_error(rc, err, "m.json", "comm.grad_accum_steps=4: 3 step(s) given")
    rc, err, _ = cli("whatif", p, "--fix", "grad_accumulation:micro_batches=1000000",
                     "--draws", "0")
    one_line_error(rc, err, "comm.grad_accum_steps=1000000: at most",
                   "fewer than one optimizer step")
    rc, err, out = cli("simulate", p, "--steps", "4")
    assert rc == 0, err


def test_a_fixed_comparison_count_is_whole_cycles_and_bounded():
    """Closed form: 40 steps become ceil(40 / k) x k; a cycle past the bound is a one-line
    SimulationError (caught where a caveat prices intra-op threads: 1e6 micro-batches would
    have simulated 40 of them and called the mean the step's)."""
    from stepsim.models.ddp import apply_ddp
    from stepsim.models.stepcount import step_bound, whole_cycles
    from stepsim.simcore.errors import SimulationError
    from tests.test_ddp import ddp_model

    for k, want in ((1, 40), (3, 42), (40, 40), (64, 64)):
        assert whole_cycles(apply_ddp(ddp_model(accum=k)), 40) == want
    m = apply_ddp(ddp_model(accum=1))
    big = m.model_copy(update={"comm": m.comm.model_copy(
        update={"grad_accum_steps": step_bound(m) + 1})})
    with pytest.raises(SimulationError, match="fewer than one optimizer step"):
        whole_cycles(big, 40)


def test_a_dangling_output_link_makes_no_folder_where_it_points(tmp_path):
    """``--chrome-trace link`` where the link names ``<tmp>/gone/deeper/t.json``: the write
    made ``gone/deeper`` (a link to /nonexistent/dir made /nonexistent at the root). Refused
    in one line; a dangling link whose folder exists is written through, as open() does."""
    from stepsim.simcore.atomic import write_atomic
    from stepsim.simcore.errors import InputError

    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "gone" / "deeper" / "t.json")
    with pytest.raises(InputError, match=r"link.json: is a symbolic link to .*gone/deeper/"
                                         r"t.json, whose folder does not exist"):
        write_atomic(link, b"x")
    assert not (tmp_path / "gone").exists() and link.is_symlink()
    ok = tmp_path / "ok.json"
    ok.symlink_to(tmp_path / "there.json")
    write_atomic(ok, b"y")
    assert ok.is_symlink() and (tmp_path / "there.json").read_bytes() == b"y"


@pytest.mark.parametrize("target", ["loop", "missing"])
def test_an_output_under_a_link_to_nothing_says_so(tmp_path, target):
    """``-o loop/x.json`` said 'loop is a file, not a folder'."""
    from stepsim.simcore.atomic import write_atomic
    from stepsim.simcore.errors import InputError

    link = tmp_path / "d"
    link.symlink_to(link if target == "loop" else tmp_path / "missing")
    with pytest.raises(InputError, match="d is a symbolic link to nothing"):
        write_atomic(link / "x.json", b"x")
    assert not (tmp_path / "missing").exists()
