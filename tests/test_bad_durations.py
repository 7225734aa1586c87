"""An event whose ``dur`` cannot be right (``null``, a string, negative, ``NaN``, ``1e400``,
``true``) is dropped and counted in a warning by every reader alike: the columnar one, the
general one and the stream of ``--steps``. Before: ``"dur": null`` was read as a missing dur
(0 µs, no warning); ``1e400`` was a traceback in the columnar reader (orjson refuses the
event's text) and refused the trace in the stream ("Number out of range"); ``"ts": 1e400``
refused the whole trace ("not valid JSON"). When the drop leaves no complete step, the
refusal names the dropped event."""
from __future__ import annotations

import json

import pytest

from stepsim.calibration.events import build_table
from stepsim.calibration.stream import load_steps
from stepsim.calibration.trace_io import load_trace
from tests.conftest import run_cli, shared_traces
from tests.test_stream_steps import same_table

DLRM0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"
BAD = {"null": "dur is null", '"abc"': "non-numeric dur 'abc'", "-5": "negative dur -5 µs",
       '"NaN"': "non-finite dur 'NaN'", "1e400": "non-finite dur inf",
       "true": "non-numeric dur True"}


@pytest.fixture(scope="module")
def text() -> str:
    return (shared_traces() / DLRM0).read_text()


def _with(text: str, key: str, value: str) -> tuple[str, int]:
    """``text`` with the first kernel's ``key`` set to ``value``, and that kernel's index."""
    i = text.index('"cat": "kernel"')
    j = text.index(f'"{key}": ', i)
    k = text.index(",", j)
    at = next(n for n, e in enumerate(json.loads(text)["traceEvents"]) if e.get("cat") == "kernel")
    return text[:j] + f'"{key}": {value}' + text[k:], at


@pytest.mark.parametrize("value", list(BAD))
def test_every_reader_drops_and_counts_it(tmp_path, text, value):
    p = tmp_path / "t.json"
    bad, at = _with(text, "dur", value)
    p.write_text(bad)
    clean = build_table(load_trace(shared_traces() / DLRM0))
    tables = {"columnar": build_table(load_trace(p)),
              "general": build_table(load_trace(p, columnar=False)),
              "stream": build_table(load_steps(p, None, None, block=64 * 1024))}
    for how, t in tables.items():
        assert len(t) == len(clean) - 1, how
        said = [w for w in t.warnings if "whose dur cannot be right" in w]
        assert len(said) == 1 and "dropped 1 of" in said[0], (how, t.warnings)
        assert BAD[value] in said[0] and f"at event {at}" in said[0], (how, said)
    assert same_table(tables["general"], tables["columnar"]) == []
    assert same_table(tables["stream"], tables["columnar"]) == []


def test_a_missing_dur_is_not_counted(tmp_path, text):
    """A ``dur`` key the event lacks is not a bad one (instants and flows have none)."""
    t = build_table(load_trace(shared_traces() / DLRM0))
    assert not [w for w in t.warnings if "dur" in w]


def test_a_ts_past_a_double_drops_its_event(tmp_path, text):
    p = tmp_path / "t.json"
    p.write_text(_with(text, "ts", "1e400")[0])
    for t in (build_table(load_trace(p)), build_table(load_steps(p, None, None))):
        assert len(t) == len(build_table(load_trace(shared_traces() / DLRM0))) - 1
        assert [w for w in t.warnings if "non-finite ts inf" in w]
        assert not [w for w in t.warnings if "could not match" in w], t.warnings


@pytest.mark.parametrize("steps", [[], ["--steps", ":"]])
def test_a_refusal_for_what_is_left_names_the_dropped_event(tmp_path, text, steps):
    """The DLRM trace has one step: without the kernel it has no complete step."""
    p = tmp_path / "t.json"
    p.write_text(_with(text, "dur", "null")[0])
    r = run_cli("calibrate", str(p), *steps, "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")]
    assert len(lines) == 1 and "no complete step" in lines[0], r.stderr
    assert "dropped 1 of 2460 event(s) whose dur cannot be right (first: dur is null" \
        in lines[0], lines[0]


@pytest.mark.parametrize("value,says", [('"abc"', "non-numeric ts 'abc'"),
                                        ("1e16", "ts 1e+16 µs is out of range")])
def test_a_refusal_names_an_event_dropped_for_its_ts(tmp_path, text, value, says):
    """Before: 'no complete step' without a word of the kernel dropped for its ts."""
    p = tmp_path / "t.json"
    p.write_text(_with(text, "ts", value)[0])
    r = run_cli("calibrate", str(p), "-o", str(tmp_path / "m.json"))
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "no complete step" in lines[0] and "1 event(s) whose ts cannot be right were " \
        f"dropped (first: event 1737: {says}" in lines[0], lines[0]
