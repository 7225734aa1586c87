"""The columnar reader (calibration.columnar, calibration.fast_columns) gives the table the
general reader (orjson, a dict per event) gives: column by column, on quirky fixtures and on
every shared trace; what it does not take it hands to the general reader."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.calibration.columnar import ABSENT, decode, texts_to_ns
from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.trace_io import load_trace
from stepsim.calibration.trace_ts import text_to_ns
from stepsim.simcore.errors import InputError
from tests.conftest import shared_traces


def both(p):
    """(fast table, general table, did the fast reader take it)."""
    raw = load_trace(p)
    took = raw.columns is not None
    return build_table(raw), build_table(load_trace(p, columnar=False)), took


def differences(a: EventTable, b: EventTable) -> list[str]:
    bad = [c for c in a._COLUMNS if getattr(a, c).dtype != getattr(b, c).dtype or not
           np.array_equal(getattr(a, c), getattr(b, c), equal_nan=getattr(a, c).dtype == float)]
    return bad + [k for k in ("str_ids", "warnings", "metadata", "base_ns")
                  if getattr(a, k) != getattr(b, k)]


def ev(**kw):
    e = {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 10, "dur": 5}
    e.update(kw)
    return e


QUIRKS = {
    "plain": [ev(), ev(ts=12.125, dur=9.5, args={"correlation": 3, "stream": 7})],
    "epoch ts": [ev(ts=1606910596297023.125), ev(ts=1606910596297024), ev(ts=1606910596297023.9)],
    "ts spread over 30 days": [ev(ts=10), ev(ts=1606910596297023.125)],
    "string pids and stream tids": [ev(pid="CPU functions", tid="stream 7"), ev(pid=1, tid=2),
                                    ev(pid="CPU functions", tid="PyTorch Profiler")],
    "float ids": [ev(pid=1.0, tid=7.5), ev(ph="s", cat="ac2g", id=4.0)],
    "ids beyond int64": [ev(pid=2**63, tid=2**64 - 1, args={"correlation": 2**63 + 5})],
    "both external id spellings": [ev(cat="Runtime", args={"external id": 7}),
                                   ev(cat="cuda_runtime", args={"External id": 8,
                                                                "external id": 9})],
    "null args values": [ev(args={"correlation": None, "External id": None,
                                  "external id": 4})],
    "numeric strings": [ev(pid="0", tid="7", dur="2.5", args={"correlation": "12",
                                                               "bytes": "1024"})],
    "bad durs": [ev(dur=-1), ev(dur=1e12), ev(dur=True), ev(dur="x"), ev(dur=3)],
    "float durs rounding": [ev(dur=0.0015), ev(dur=0.0025), ev(dur=1.0005), ev(dur=2**40 + 0.5)],
    "no cat (pre-Kineto)": [{"ph": "X", "name": "a", "pid": "CPU functions", "tid": 1,
                             "ts": 1.5, "dur": 1},
                            {"ph": "X", "name": "k", "pid": "CUDA functions", "tid": 1,
                             "ts": 2.5, "dur": 1}],
    "metadata without ts": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}},
                            ev(ts=5)],
    "instants and phases": [ev(ph="i", cat="cpu_instant_event"), ev(ph="I"), ev(ph="M"),
                            ev(ph=1), ev(cat=3)],
    "collectives": [ev(cat="cpu_op", name="record_param_comms",
                       args={"Collective name": "all_reduce", "In msg nelems": 10,
                             "Out msg nelems": "10", "Group size": 8, "dtype": "Float"}),
                    ev(args={"Collective name": 5.0})],
    "gpu args only on gpu rows": [ev(cat="cpu_op", args={"stream": 3, "device": 1}),
                                  ev(cat="gpu_memcpy", args={"bytes": 64, "device": 0,
                                                             "memory bandwidth (GB/s)": 1.5}),
                                  ev(cat="gpu_user_annotation", args={"Device": 2})],
    "negative and odd ts": [ev(ts=-5.25), ev(ts=0.0001), ev(ts=7.999999), ev(ts=3)],
    "args not an object": [ev(args=[1, 2]), ev(args="x"), ev()],
    "args null": [ev(args=None), ev(args={"correlation": 1})],
    "pid or tid an object": [ev(pid={"a": 1}), ev(tid=[2]), ev(), ev(pid="a")],
    "ts as strings": [ev(ts="12.5"), ev(ts=" 13 ")],
    "exponent ts": [ev(ts=1.5e3), ev(ts=2)],
    "non-ascii names": [ev(name="kernel \u00e9\u4e2d"), ev()],
}


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_fast_and_general_readers_agree(tmp_path, name):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": QUIRKS[name], "schemaVersion": 1,
                             "baseTimeNanoseconds": 7}))
    try:
        fast, general, _ = both(p)
    except InputError as e:
        with pytest.raises(InputError) as again:
            build_table(load_trace(p, columnar=False))
        assert str(again.value) == str(e)
        return
    assert differences(fast, general) == []


@pytest.mark.parametrize("name", ["args not an object", "ts as strings", "exponent ts",
                                  "args null", "pid or tid an object"])
def test_what_the_fast_reader_does_not_take_goes_the_general_way(tmp_path, name):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": QUIRKS[name]}))
    raw = load_trace(p)
    fast = build_table(raw)
    assert differences(fast, build_table(load_trace(p, columnar=False))) == []


def test_plain_trace_takes_the_fast_reader_and_events_read_back(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps([ev(args={"correlation": 3, "Input Dims": [[2, 3]]})]))
    raw = load_trace(p)
    assert raw.columns is not None and raw.exact_ts
    t = build_table(raw)
    assert raw.columns is None            # read once: the per-event lists are let go
    assert t.event(0)["args"]["Input Dims"] == [[2, 3]] and t.arg(0, "correlation") == 3
    raw.events[0]["name"] = "changed"                 # a fresh dict: nothing else changes
    assert t.event(0)["name"] == "k"


@pytest.mark.parametrize("bad", [b'{"traceEvents": [{"ts": 1, "name": "\xff"}]}',
                                 b'{"traceEvents": [{"ts": 1, "args": {"a": NaN}}]}',
                                 b'{"traceEvents": [1, 2]}', b'{"traceEvents": {}}',
                                 b'{"other": 1}', b'"text"', b'[]'])
def test_decode_refuses_what_is_not_plainly_a_trace(bad):
    assert decode(bad) is None


def test_missing_args_keys_are_absent_not_values():
    from stepsim.calibration.columnar import arg_columns
    import msgspec

    got = arg_columns([msgspec.Raw(b"{}"), msgspec.Raw(b'{"correlation": -9223372036854775808}')])
    assert got["correlation__0"][0] is ABSENT and got["correlation__0"][1] is not ABSENT


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**15, 10**15), st.text("0123456789", min_size=0, max_size=7))
def test_ts_texts_to_ns_as_the_general_reader(whole, frac):
    text = f"{whole}" + (f".{frac}" if frac else "")
    i, _, f = text.partition(".")
    assert texts_to_ns([text]).tolist() == [text_to_ns(i.encode(), f.encode(), b"")]


def test_every_shared_trace_reads_the_same_both_ways():
    root = shared_traces()
    files = sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    assert files
    for p in files:
        fast, general, took = both(p)
        assert took, p
        assert differences(fast, general) == [], p
