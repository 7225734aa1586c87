"""Bad or outsized input found by the third breaker (2026-12-05): each refused in one line
(exit 2, no traceback), dropped and counted, or bounded in time."""
from __future__ import annotations

import json

import pytest

from stepsim.models.params import save_model
from stepsim.scenarios.validate import ledger_line
from stepsim.simcore.errors import InputError
from tests.test_ledger import _rec
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli, one_line_error
from tests.test_sidecar_cross import _sidecar


def test_a_long_ledger_shows_its_latest_rows_and_scores_them_all(tmp_path):
    """A 200,000-line ledger printed every record as a table row (about 2 ms each: 200 s);
    the table now holds the latest 100, a line says how many are not shown, and the score
    counts every record."""
    recs = [_rec(float(i % 7), True).model_copy(update={"label": f"run{i}"})
            for i in range(250)]
    p = tmp_path / "l.jsonl"
    p.write_bytes(b"".join(ledger_line(r) for r in recs))
    rc, err, out = cli("ledger", p)
    assert rc == 0, err
    assert "150 earlier record(s) not shown" in out and "counts all 250" in out
    assert "run149 " not in out and "run150 " in out and "run249 " in out
    assert "250 out-of-sample predictions" in out


@pytest.mark.parametrize("edit,first", [
    (lambda d: d["produce"][2].update(cpu_us=5000.0),
     "produce.2: thread CPU 5000 µs past its wall_us of 100 µs"),
    (lambda d: d["probe"]["produce"][0].update(cpu_us=1e6, wall_us=1e4),
     "probe.produce.0: thread CPU 1e+06 µs past its wall_us of 10000 µs"),
])
def test_a_batch_whose_thread_cpu_passes_its_wall_is_dropped(tmp_path, edit, first):
    """A batch whose producing thread ran 50x its wall (one thread runs on one core at a
    time) was kept and fitted; the clocks' own error (at most 120 µs over 48,000 real
    records) stays within the slack."""
    side = _sidecar(tmp_path, edit)
    (note,) = side.dropped
    assert "dropped 1 of 4" in note and f"(first: {first}" in note, note
    ok = _sidecar(tmp_path, lambda d: d["produce"][2].update(cpu_us=1100.0 - 1,
                                                             proc_cpu_us=1100.0))
    assert ok.dropped == [] and len(ok.produce) == 4


@pytest.mark.parametrize("field,wall", [("cpu_us", "wall_us"), ("next_cpu_us", "next_wall_us")])
def test_a_step_whose_thread_cpu_passes_its_wall_is_refused(tmp_path, field, wall):
    """A step record of 0 µs wall holding 81 ms of main-thread CPU calibrated (exit 0); a
    step record is not dropped (its place is its step's number): the file is refused."""
    with pytest.raises(InputError) as e:
        _sidecar(tmp_path, lambda d: d["steps"][1].update({field: 5e4}))
    assert f"bad sidecar record steps.1: {field} 50000 µs past its {wall}" in str(e.value)


def _team_model(threads: int, nw: int = 8, cores: int = 2):
    m = cpu_model(nw, produce_ms=40, train_ms=20, cores=cores)
    ops = [op.model_copy(update={"threads": threads, "parallel_fraction": 0.9})
           if op.kind == "cpu" else op for op in m.host.ops]
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


def test_a_big_team_bounds_the_chosen_step_count():
    """A team of 256 threads beside 8 workers on 2 cores simulated about 20 steps a second,
    and a chosen step count went to 10,000 (a ``whatif`` did not end in 400 s): its thread
    pieces (256 + 1 a slice, 8 slices; one batch's thread) count toward the simulated work, so
    the count and each draw's stop at that work's bound."""
    from stepsim.scenarios.stepcount import (FIRST_STEPS, MAX_WORK, draw_bound, step_bound,
                                             thread_pieces)

    m = _team_model(256)
    assert thread_pieces(m) == 8 * 257 + 1
    assert step_bound(m) == MAX_WORK // (len(m.host.ops) + 8 * 257 + 1)
    assert draw_bound(m, 16) == FIRST_STEPS
    one = _team_model(1)          # no team: as before
    assert thread_pieces(one) == 1 and step_bound(one) == 10_000 and draw_bound(one, 16) == 640


def test_team_shares_are_each_threads_core_share():
    """The team's shares, each core's worked out once, are the per-thread values (the
    simulation's output is byte-identical; 3.5 s where 11.1 s for 5 steps of a team of 256)."""
    from stepsim.models.cpu_place import placed_share, team_shares

    loads, cores = [3.0, 1.0, 0.0], [0, 1, 1, 2, 0]
    assert team_shares(loads, 2, cores) == [placed_share(loads, 2, j) for j in cores]


def test_loader_threads_past_the_bound_are_one_line(tmp_path):
    """1024 workers x 256 threads a worker ran for 132 s (2,048 outstanding batches of 256
    simulated threads each); now refused in one line."""
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", "--set", "loader.num_workers=1024",
                        "--set", "loader.threads_per_worker=256", "--steps", "3",
                        "--draws", "0")[:2],
                   "num_workers x threads_per_worker = 262144 threads; at most 16384")


@pytest.mark.parametrize("field,rng", [("interference_range", [0.2, 0.1]),
                                       ("interference_range", [-1.0, 0.1]),
                                       ("team_stall_range", [5.0, 1.0])])
def test_a_hand_edited_range_low_above_high_is_one_line(tmp_path, field, rng):
    """host.interference_range (0.2, 0.1) loaded, then numpy's 'high - low < 0' came out of
    the interval's draws as a traceback."""
    p = tmp_path / "m.json"
    save_model(cpu_model(1, produce_ms=40, train_ms=20), p)
    data = json.loads(p.read_text())
    data["host"][field] = rng
    p.write_text(json.dumps(data))
    one_line_error(*cli("whatif", p, "--set", "loader.num_workers=2", "--steps", "5",
                        "--draws", "3")[:2], f"{field} must satisfy 0 <= low <= high")


@pytest.mark.parametrize("axes,named", [
    (("loader.num_workers=" + ",".join(map(str, range(1025))),),
     "has 1025 values; a sweep simulates at most 256 points"),
    (("loader.num_workers=" + ",".join(map(str, range(101))), "loader.prefetch_factor=1,2,3"),
     "a sweep of 303 points (101 x 3 values): at most 256 points"),
    (("loader.num_workers=" + ",".join(map(str, range(101))), "--draws", "100"),
     "a sweep of 101 points (101 values) x 100 draws"),
])
def test_a_sweep_past_its_bound_is_one_line(tmp_path, axes, named):
    """A grid of 1,025 x 16 values ran for minutes (each point a whole simulation)."""
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    one_line_error(*cli("sweep", tmp_path / "m.json", *axes, "--steps", "3")[:2], named)


@pytest.mark.parametrize("args,named", [
    (("--draws", "1000"), "1000 draws of 640 steps (the most a chosen count takes) are "
                          "640,000 simulated steps; at most 200,000"),
    (("--draws", "100", "--steps", "100000"), "100 draws of 100000 steps"),
])
def test_draws_times_steps_past_the_bound_is_one_line(tmp_path, args, named):
    """``--draws 10000 --steps 100000`` was accepted (1,000 draws of 30 steps took 33 s)."""
    from stepsim.limits import DRAW_STEPS
    from stepsim.scenarios import stepcount

    assert stepcount.DRAW_STEPS == DRAW_STEPS
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", "--set", "loader.num_workers=2",
                        *args)[:2], named)


def test_a_backend_thread_past_the_profiled_span_is_dropped(tmp_path):
    """A gloo thread of 1e308 µs CPU gave an infinite CPU per MiB, refusing the job ('its
    records give an impossible model'); a thread's CPU over the profiled steps cannot pass
    their span (400 µs here): dropped and counted, the others kept."""
    def edit(d):
        d["ddp"] = {"world_size": 2, "rank": 0, "backend": "gloo",
                    "threads": [{"tid": 1, "name": "gloo_tcp_loop", "cpu_us": 300.0},
                                {"tid": 2, "name": "pt_gloo", "cpu_us": 1e308}]}
    side = _sidecar(tmp_path, edit)
    (note,) = side.dropped
    assert ("dropped 1 of 2 'ddp.threads' record(s) that cannot be right (first: "
            "ddp.threads.1: pt_gloo CPU 1e+308 µs past the profiled steps' span of 400 µs)"
            in note), note
    assert [t.tid for t in side.ddp.threads] == [1]


@pytest.mark.parametrize("text,named", [
    ("null", "JSON top level is null, expected an object or array"),
    ('{"traceEvents": 5}', "'traceEvents' is a number, expected an array"),
    ('{"traceEvents": "x"}', "'traceEvents' is a string, expected an array"),
])
def test_a_trace_of_the_wrong_json_type_is_named_in_json_words(tmp_path, text, named):
    """Said 'JSON top level is a NoneType' and "'traceEvents' is a int": Python's names."""
    p = tmp_path / "t.json"
    p.write_text(text)
    one_line_error(*cli("calibrate", p, "-o", tmp_path / "m.json")[:2], named)


def test_a_measured_point_of_another_setting_is_refused(tmp_path, cpu_run_nw1):
    """``sweep ... loader.num_workers=0,2 --measured 2=RUN`` with RUN captured at 1 worker
    drew the 1-worker step time at 2 workers, said nothing (validate refuses such a run)."""
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    one_line_error(*cli("sweep", tmp_path / "m.json", "loader.num_workers=0,2", "--measured",
                        f"2={cpu_run_nw1}", "--steps", "3", "--plot", tmp_path / "s.png")[:2],
                   "a run of loader.num_workers=1 (its sidecar), not 2")
    assert not (tmp_path / "s.png").exists()


def test_the_report_shows_a_long_ledgers_latest_rows():
    """``report --ledger`` of 200,000 records wrote every one as a row (a 42 MB page)."""
    from types import SimpleNamespace

    from stepsim.report.html import _validation

    recs = [_rec(1.0, True).model_copy(update={"label": f"run{i}"}) for i in range(250)]
    html = _validation(SimpleNamespace(ledger=recs, ledger_summary=None, sweep_png=None))
    assert "150 earlier record(s) not shown, the latest 100 below; the score counts all 250" \
        in html
    assert ">run149<" not in html and ">run150<" in html and ">run249<" in html


def test_a_team_that_fits_the_cores_adds_no_pieces():
    """Threads that fit the cores wait for none: their step count is as before."""
    from stepsim.scenarios.stepcount import step_bound, thread_pieces

    m = _team_model(4, nw=2, cores=16)
    assert thread_pieces(m) == 0 and step_bound(m) == 10_000


@pytest.mark.parametrize("edit,left,gone,first", [
    (lambda d: [s.update(t_start_us=0.0) for s in d["steps"]], 1, set(),
     "dropped 3 of 4 'steps' record(s) that cannot be right as copies (first: steps.1: a second "
     "record of the step that starts at 0 µs, as steps.0)"),
    (lambda d: d["steps"][2].update(t_start_us=900.0), 2, {1, 2},
     "dropped 2 of 4 'steps' record(s) that cannot be right (first: steps.1: steps.2 after it "
     "starts before it)")])
def test_steps_out_of_order_are_dropped_and_counted(tmp_path, edit, left, gone, first):
    """Every step at t_start_us 0 (or one before the step before it) calibrated, exit 0; then
    the whole sidecar was refused (break22: the records could be dropped instead). Copies go
    without a number; a pair out of order goes whole, its numbers kept (each is out of its
    place)."""
    side = _sidecar(tmp_path, edit)
    assert len(side.steps) == left and side.gone_steps == gone
    assert any(first in w for w in side.dropped), side.dropped
