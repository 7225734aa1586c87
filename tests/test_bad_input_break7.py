"""Bad input, seventh round (break7). 1: an output that is a symbolic link is written through
to its target (the atomic rename replaced the link with a file before); a link loop is one
line, exit 2."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stepsim.cli import main
from stepsim.simcore.atomic import write_atomic
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli
from tests.test_ledger import _rec

MODEL = Path(__file__).resolve().parents[1] / "scenarios" / "reference" / "input_pipeline_a.yaml"


def test_write_atomic_keeps_a_link_and_writes_its_target(tmp_path):
    real = tmp_path / "real" / "m.json"
    real.parent.mkdir()
    real.write_bytes(b"old")
    link = tmp_path / "link.json"
    link.symlink_to(Path("real") / "m.json")            # relative, from the link's folder
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)                              # a link to a link
    write_atomic(chain, b"new")
    assert chain.is_symlink() and link.is_symlink()
    assert real.read_bytes() == b"new"
    assert sorted(os.listdir(real.parent)) == ["m.json"]
    dangling = tmp_path / "d.json"
    dangling.symlink_to(tmp_path / "later.json")        # open() would create the target
    write_atomic(dangling, b"x")
    assert dangling.is_symlink() and (tmp_path / "later.json").read_bytes() == b"x"


def test_a_link_loop_is_one_line(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(InputError, match="symbolic link loop"):
        write_atomic(a, b"new")
    assert a.is_symlink() and b.is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]


def test_cli_outputs_through_links(tmp_path):
    ct, out = tmp_path / "ct.json", tmp_path / "real.png"
    ct.write_text("{}")
    out.write_text("{}")
    lct, lout = tmp_path / "lct", tmp_path / "lout.png"
    lct.symlink_to(ct)
    lout.symlink_to(out)
    r = run_cli("simulate", str(MODEL), "--chrome-trace", str(lct), "--plot", str(lout),
                "--steps", "4", "--warmup", "1")
    assert r.returncode == 0, r.stderr
    assert lct.is_symlink() and lout.is_symlink()
    assert len(ct.read_bytes()) > 2 and len(out.read_bytes()) > 2


def test_cli_link_loop_exits_2(tmp_path, capsys):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    assert main(["simulate", str(MODEL), "--steps", "4", "--warmup", "1",
                 "--chrome-trace", str(loop)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1 and str(loop) in err[0] and "loop" in err[0], err
    assert loop.is_symlink()


def test_a_symlinked_ledger_is_appended_through(tmp_path):
    from stepsim.scenarios.validate import append_ledger, read_ledger

    real = tmp_path / "store" / "ledger.jsonl"
    real.parent.mkdir()
    link = tmp_path / "ledger.jsonl"
    link.symlink_to(real)
    append_ledger(real, _rec(1.0, True))
    append_ledger(link, _rec(2.0, None))
    assert link.is_symlink()
    assert [r.error_pct for r in read_ledger(real)] == [1.0, 2.0]


# 3: a pid or tid that is not a finite integer within int64 is an event that cannot be right

def _cpu(i, **kw):
    e = {"ph": "X", "cat": "cpu_op", "name": "k", "pid": 1, "tid": 7, "ts": 10 * i, "dur": 5}
    e.update(kw)
    return json.dumps(e)


@pytest.mark.parametrize("columnar", [True, False])
def test_huge_or_fractional_ids_are_dropped_and_counted(tmp_path, columnar):
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace

    p = tmp_path / "t.json"
    p.write_text("[" + ",".join([
        _cpu(0), _cpu(1).replace('"pid": 1', '"pid": 1e400'),
        _cpu(2, tid=12345678901234567890123), _cpu(3, tid="12345678901234567890123"),
        _cpu(4, pid=2.5), _cpu(5, pid=3.0), _cpu(6, tid="stream " + "9" * 30),
        _cpu(7, pid="CPU functions", tid="stream 7"), _cpu(8, tid="9" * 5000)]) + "]")
    before = p.read_bytes()
    t = build_table(load_trace(p, columnar=columnar))
    assert t.index.tolist() == [0, 5, 7]
    assert t.pid.tolist()[:2] == [1, 3] and t.tid.tolist() == [7, 7, 7]
    assert t.warnings == ["t.json: dropped 6 of 9 event(s) whose args, pid or tid cannot be "
                          "right (first: pid is inf, not a finite integer within int64 at "
                          "event 1)"]
    assert p.read_bytes() == before


# 2: overlapping ProfilerStep ranges on one thread (the shared traces have none: their closest
# pair is 17 µs apart; see calibration.steps.OVERLAP_NS)

def _step_trace(p, spans):
    evs = []
    for n, (a, b) in enumerate(spans):
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                    "pid": 1, "tid": 1, "ts": a, "dur": b - a})
        evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                    "ts": a + 10, "dur": 20})
    p.write_text(json.dumps({"traceEvents": evs}))
    return p


def test_overlapping_profiler_steps_drop_the_later_one(tmp_path):
    from stepsim.calibration.events import build_table
    from stepsim.calibration.steps import find_steps
    from stepsim.calibration.trace_io import load_trace

    p = _step_trace(tmp_path / "t.json", [(0, 100), (50, 150), (100, 200)])
    steps = find_steps(build_table(load_trace(p)))
    assert [(s.number, s.start_ns, s.end_ns) for s in steps][:1] == [(0, 0, 100_000)]
    assert [s.number for s in steps] == [0, 2]
    assert any(w.startswith("dropped 1 ProfilerStep marker(s) that start more than 1 µs before")
               for w in steps.warnings), steps.warnings


def test_a_rounding_overlap_is_kept(tmp_path):
    from stepsim.calibration.events import build_table
    from stepsim.calibration.steps import find_steps
    from stepsim.calibration.trace_io import load_trace

    p = _step_trace(tmp_path / "t.json", [(0, 100.5), (100, 200), (200.75, 300)])
    steps = find_steps(build_table(load_trace(p)))
    assert [s.number for s in steps] == [0, 1, 2]
    assert not any("ProfilerStep marker(s) that start" in w for w in steps.warnings)


# 4: demo --out into a folder that is not empty: refused unless an earlier demo's (whose old
# captures are removed, so they never mix with the new ones)

class _Stop(Exception):
    pass


def _no_capture(monkeypatch, seen):
    import stepsim.demo.run as demo_run

    def stop(num_workers, out, seed, probe=None):
        seen.append(out)
        raise _Stop
    monkeypatch.setattr(demo_run, "_capture", stop)


def test_demo_refuses_a_folder_of_user_files(tmp_path, monkeypatch, capsys):
    seen = []
    _no_capture(monkeypatch, seen)
    out = tmp_path / "mine"
    (out / "runs" / "nw0-r0").mkdir(parents=True)
    (out / "runs" / "keep.txt").write_text("user")
    (out / "notes.txt").write_text("user")
    assert main(["demo", "--quick", "--out", str(out)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"stepsim: error: {out}: is not empty and not an earlier demo's output folder "
                   "(it holds 'notes.txt' and 1 more); give a new or empty folder"], err
    assert not seen
    assert (out / "notes.txt").read_text() == "user" and (out / "runs" / "nw0-r0").is_dir()
    assert (out / "runs" / "keep.txt").read_text() == "user"


def test_demo_into_an_earlier_demo_folder_removes_its_old_runs(tmp_path, monkeypatch):
    seen = []
    _no_capture(monkeypatch, seen)
    out = tmp_path / "demo"
    (out / "runs" / "nw8-r3").mkdir(parents=True)
    (out / "runs" / "nw8-r3" / "trace.json.gz").write_bytes(b"old")
    (out / "model.json").write_text("{}")
    with pytest.raises(_Stop):
        main(["demo", "--quick", "--out", str(out)])
    assert seen and not (out / "runs" / "nw8-r3").exists()


def test_ddp_demo_refuses_a_folder_of_user_files(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "model.json").write_text("{}")
    (out / "data.csv").write_text("user")
    assert main(["demo", "--ddp", "--out", str(out)]) == 2
    assert "'data.csv'" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["data.csv", "model.json"]


def test_int64_min_id_is_dropped_by_both_readers(tmp_path):
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace

    for bad in ({"pid": -2**63}, {"tid": 2**64 - 1}):
        p = tmp_path / "t.json"
        p.write_text("[" + ",".join([_cpu(0), _cpu(1, **bad), _cpu(2)]) + "]")
        for columnar in (True, False):
            t = build_table(load_trace(p, columnar=columnar))
            assert t.index.tolist() == [0, 2] and "dropped 1 of 3" in t.warnings[0], (bad,
                                                                                  columnar)
