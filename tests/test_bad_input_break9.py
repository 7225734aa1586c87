"""Bad input found by the ninth breaker (2026-12-05): each refused in one line (exit 2, no
traceback), dropped or ignored and counted in a warning, or bounded; inputs never changed."""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from tests.kineto_gen import one_rank_trace
from stepsim.warning_order import printed_texts
from tests.test_quirks import cli, one_line_error


def _digest(*paths: Path) -> dict:
    """Each file under ``paths`` (files or folders) → its SHA-256."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*")))
             if f.is_file()]
    return {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _warnings(err: str) -> list[str]:
    """Each warning's whole line as it was printed before warnings had summaries (``warning:``
    and its text: stepsim.warning_order.printed_texts)."""
    return [f"warning: {t}" for t in printed_texts(err)]


# ------------------------------------------------------------------------ --jobs --------------
def test_jobs_past_the_cpus_is_capped_with_one_warning(tmp_path):
    """``--jobs 1000`` forked up to 1,000 simulators on 2 cores: now as many as the process may
    run on (its affinity mask), said in one warning; the answer is the same as with those."""
    from stepsim.models.params import save_model
    from stepsim.scenarios.parallel import capped_jobs, default_jobs
    from tests.test_batch_size_whatif import cpu_model

    cpus = default_jobs()
    assert capped_jobs(0) == (cpus, None) and capped_jobs(cpus) == (cpus, None)
    n, note = capped_jobs(1000)
    assert n == cpus and f"--jobs 1000: this process may run on {cpus} CPU(s)" in note
    save_model(cpu_model(1, produce_ms=2, train_ms=1), tmp_path / "m.json")
    args = ("whatif", tmp_path / "m.json", "--set", "loader.num_workers=2", "--draws", "2",
            "--steps", "10", "--json")
    rc, err, out = cli(*args, "--jobs", "1000")
    assert rc == 0 and "Traceback" not in err
    assert [w for w in _warnings(err) if "--jobs" in w] == [f"warning: {note}"]
    rc2, err2, out2 = cli(*args, "--jobs", str(cpus))
    assert rc2 == 0 and "--jobs" not in err2 and out2 == out


def test_run_many_never_forks_more_than_the_cpus(monkeypatch):
    """The API's own ``run_many(jobs=1000)`` asks its pool for the usable CPUs at most."""
    import stepsim.scenarios.parallel as par

    asked = []

    class Pool(par.ProcessPoolExecutor):
        def __init__(self, max_workers=None, **kw):
            asked.append(max_workers)
            super().__init__(max_workers=max_workers, **kw)

    monkeypatch.setattr(par, "ProcessPoolExecutor", Pool)
    assert par.run_many(abs, [-1, -2, -3, -4, -5], jobs=1000) == [1, 2, 3, 4, 5]
    assert asked == [min(5, par.default_jobs())]


# ------------------------------------------------------------- ProfilerStep#abc ---------------
@pytest.mark.parametrize("bad", ["ProfilerStep#abc", "ProfilerStep#-1", "ProfilerStep#1.5",
                                 "ProfilerStep#", "ProfilerStep#" + "9" * 19])
def test_a_step_marker_without_a_number_is_dropped_and_counted(tmp_path, bad):
    """A ``ProfilerStep#abc`` marker was dropped without a word (the regex took only
    ``#N``); now counted in a warning naming it. The last marker is the one spoilt, so no gap
    warning tells of it either."""
    def spoil(ev):
        [e for e in ev if e["name"].startswith("ProfilerStep#")][-1]["name"] = bad
    trace = one_rank_trace(tmp_path / "t.json", change=spoil)
    before = _digest(trace)
    rc, err, out = cli("calibrate", trace, "-o", tmp_path / "m.json")
    assert rc == 0 and "Traceback" not in err
    said = [w for w in _warnings(err) if "whose step number is not a whole number" in w]
    assert len(said) == 1 and "t.json: dropped 1 ProfilerStep marker(s)" in said[0]
    assert repr(bad)[:60] in said[0]
    assert "calibrated 3 steps" in out          # the 4 markers less the spoilt one
    assert _digest(trace) == before


def test_real_trace_markers_are_all_whole_numbers():
    """No marker of the real traces is dropped so (the warning fires on none of them)."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.steps import find_steps
    from stepsim.calibration.trace_io import load_trace
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto" / "515e6115_rec2020-12-02" / "resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    steps = find_steps(build_table(load_trace(trace)))
    assert len(steps) > 1 and not any("whole number" in w for w in steps.warnings)


# ------------------------------------------------------------------ memcpy bytes --------------
def _spoil_bytes(values):
    def spoil(ev):
        copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
        assert len(copies) >= len(values)
        for e, v in zip(copies, values):
            e["args"]["bytes"] = v
    return spoil


@pytest.mark.parametrize("gz", [False, True])
def test_a_copy_whose_bytes_cannot_be_right_is_counted(tmp_path, gz):
    """A memcpy's ``bytes`` of -5, "lots", 1e30 or 2**62 was taken as not given without a
    word; now counted in a warning (the event is kept: its time is what the device did),
    through the whole-file and the block (``--steps``) readers alike."""
    trace = one_rank_trace(tmp_path / "t.json", change=_spoil_bytes([-5, "lots", 1e30, 2**62]))
    if gz:
        trace.with_suffix(".json.gz").write_bytes(gzip.compress(trace.read_bytes()))
        trace.unlink()
        trace = trace.with_suffix(".json.gz")
    before = _digest(trace)
    good = one_rank_trace(tmp_path / "good.json")
    for extra in ((), ("--steps", "3:6")):
        rc, err, out = cli("calibrate", trace, "-o", tmp_path / "m.json", *extra)
        assert rc == 0 and "Traceback" not in err
        said = [w for w in _warnings(err) if "bytes cannot be right" in w]
        assert len(said) == 1 and f"{trace.name}: ignored the bytes of 4 of 8" in said[0], err
    rc, err, _ = cli("calibrate", good, "-o", tmp_path / "g.json")
    assert rc == 0 and "bytes cannot be right" not in err
    assert _digest(trace) == before


def test_both_column_readers_mark_bad_bytes_alike():
    """The per-event reader (:func:`row_columns`) and the columnar one give the same bytes."""
    from stepsim.calibration.event_rows import BAD_BYTES, MAX_COPY_BYTES, copy_bytes, row_columns

    vals = [7, -5, "lots", 1e30, MAX_COPY_BYTES, MAX_COPY_BYTES + 1, "12", None]
    ev = [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
           "ts": i, "dur": 1, "args": {"stream": 7, "bytes": v}} for i, v in enumerate(vals)]
    ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
               "ts": 9, "dur": 1, "args": {"stream": 7}})
    want = [7, BAD_BYTES, BAD_BYTES, BAD_BYTES, MAX_COPY_BYTES, BAD_BYTES, 12, -1, -1]
    assert row_columns(ev).ints["bytes"].tolist() == want
    assert copy_bytes(-1, False) == -1 and copy_bytes(3, True) == 3


@pytest.mark.parametrize("columnar", [True, False])
def test_the_table_takes_bad_bytes_as_not_given(tmp_path, columnar):
    """Both readers of a whole trace: the table holds −1 for each spoilt copy, its byte
    count for the others, and one warning."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace

    trace = one_rank_trace(tmp_path / "t.json", change=_spoil_bytes([-5, "lots"]))
    t = build_table(load_trace(trace, columnar=columnar))
    copies = t.bytes[t.cat == "gpu_memcpy"].tolist()
    assert copies[:2] == [-1, -1] and all(b >= 0 for b in copies[2:])
    assert sum("bytes cannot be right" in w for w in t.warnings) == 1


# ------------------------------------------------------------------ outputs -------------------
@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="no /proc (not Linux)")
@pytest.mark.parametrize("target", ["/proc/version", "/proc/self/m.json", "/proc/new/m.json"])
def test_an_output_in_proc_says_what_is_wrong(tmp_path, target):
    """``-o /proc/version`` said "No such file or directory" of a file that is there: its
    folder takes no new file (the temporary file of the atomic write), nor a new folder."""
    trace = one_rank_trace(tmp_path / "t.json")
    rc, err, _ = cli("calibrate", trace, "-o", target)
    line = one_line_error(rc, err, target, "cannot be written", "/proc takes no new file or "
                          "folder" if "new" in target else "takes no new file or folder")
    assert "No such file" not in line


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="no /proc (not Linux)")
def test_a_capture_folder_in_proc_says_what_is_wrong():
    """The capture tool's folder: the same error, not ``FileNotFoundError``."""
    from stepsim.calibration.capture import Capture
    from stepsim.simcore.errors import InputError

    with pytest.raises(InputError, match="/proc takes no new file or folder"):
        Capture("/proc/stepsim_capture")


# ------------------------------------------------------------------ shared correlation ids ----
def test_many_calls_of_one_correlation_id_link_as_the_scan_did(tmp_path):
    """Every runtime call of a real trace given one correlation id took 160 s to link (each
    activity scanned every call of its id): now a bisection, which links each activity as the
    scan did (the latest call that starts no later than it; of all when none does; the first
    of calls at one instant). Checked against the scan on the spoilt trace."""
    import re

    import numpy as np

    from stepsim.calibration.events import build_table
    from stepsim.calibration.linking import link
    from stepsim.calibration.trace_io import load_trace
    from tests.conftest import shared_traces

    text = gzip.decompress((shared_traces() / "param" / "linear_kineto.json.gz").read_bytes())
    spoilt = tmp_path / "one_id.json"
    spoilt.write_bytes(re.sub(rb'"correlation": \d+', b'"correlation": 7', text))
    t = build_table(load_trace(spoilt))
    links = link(t)
    api = np.nonzero(t.is_cat("cuda_runtime", "cuda_driver") & (t.ph == "X"))[0]
    calls = [r for r in api.tolist() if t.correlation[r] == 7]
    assert len(calls) > 10_000
    ts = t.ts_ns
    for k in range(0, len(links.gpu_rows), 97):   # the scan of the old code, on a sample
        g = links.gpu_rows[k]
        if t.correlation[g] != 7:
            continue
        before = [r for r in calls if ts[r] <= ts[g]] or calls
        assert links.launch_row[k] == max(before, key=lambda r: ts[r])
    # ids shared inside one process cannot be right (CUPTI numbers each call once): counted
    assert [w for w in links.warnings if "share their correlation id" in w] == [
        f"{len(calls)} of {len(calls)} runtime calls share their correlation id with another "
        "call of their process (each call has its own): their GPU activities are linked to the "
        "latest such call before each, which may not be the one that launched it"]
    real = tmp_path / "real.json"
    real.write_bytes(text)
    assert not any("share their" in w for w in link(build_table(load_trace(real))).warnings)
    rc, err, _ = cli("calibrate", spoilt, "-o", tmp_path / "m.json")
    assert rc == 0 and sum("share their correlation id" in w for w in _warnings(err)) == 1


# ------------------------------------------------------------------ name / ph not text -------
@pytest.mark.parametrize("field, value, kind", [("ph", 7, "ph is a number"),
                                                ("name", 12345, "name is a number"),
                                                ("name", ["ProfilerStep#4"], "name is an array")])
def test_an_event_whose_name_or_ph_is_not_text_is_dropped_and_counted(tmp_path, field, value,
                                                                     kind):
    """A ``ph`` of 7 made an event no phase (ignored) and a ``name`` of 12345 no step marker,
    both without a word (a step went missing); now dropped and counted, by both readers."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace

    def spoil(ev):
        marker = [e for e in ev if e["name"].startswith("ProfilerStep#")][1]
        marker[field] = value
    trace = one_rank_trace(tmp_path / "t.json", change=spoil)
    before = _digest(trace)
    for columnar in (True, False):
        t = build_table(load_trace(trace, columnar=columnar))
        said = [w for w in t.warnings if "whose name or ph is not text" in w]
        assert len(said) == 1 and "dropped 1 of " in said[0] and kind in said[0]
    rc, err, _ = cli("calibrate", trace, "-o", tmp_path / "m.json")
    assert rc == 0 and sum("not text" in w for w in _warnings(err)) == 1
    assert _digest(trace) == before


def test_a_trace_of_only_such_events_is_one_line(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": 1, "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}] * 3}))
    rc, err, _ = cli("calibrate", trace, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "t.json", "no event left", "whose name or ph is not text")


def test_a_peak_given_twice_is_one_line(tmp_path):
    """``--peak fp32=1,fp32=2`` took the last value silently."""
    from stepsim.scenarios.gpus import parse_peaks
    from stepsim.simcore.errors import ModelError

    assert parse_peaks("fp32=1e12,bw=9e11") == {"fp32": 1e12, "bw": 9e11}
    with pytest.raises(ModelError, match="fp32 is given twice"):
        parse_peaks("fp32=1e12,fp32=2e12")
    trace = one_rank_trace(tmp_path / "t.json")
    rc, err, _ = cli("diagnose", trace, "--peak", "fp32=1e12,fp32=2e12", "--draws", "0")
    one_line_error(rc, err, "--peak", "fp32 is given twice")
