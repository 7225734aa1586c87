"""Trace loading: one small fixture per input quirk, named after it."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from stepsim.calibration.trace_io import load_rank_traces, load_trace
from stepsim.simcore.errors import InputError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def ev(name="aten::add", ts=10, dur=5, **kw):
    e = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    e.update(kw)
    return e


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def obj(events, **top) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


def test_plain_json_object(tmp_path):
    p = write(tmp_path, "t.json", obj([ev(), ev(ts=20)], schemaVersion=1))
    r = load_trace(p)
    assert r.path == p and len(r.events) == 2 and r.metadata == {"schemaVersion": 1}
    assert r.ts_ns.tolist() == [10_000, 20_000]


def test_gzip_detected_by_magic_not_suffix(tmp_path):
    p = write(tmp_path, "gzipped_but_named.json", gzip.compress(obj([ev()])))
    assert len(load_trace(p).events) == 1
    q = write(tmp_path, "plain_but_named.json.gz", obj([ev()]))
    assert len(load_trace(q).events) == 1


def test_bare_array_form(tmp_path):
    p = write(tmp_path, "bare.json", json.dumps([ev(), ev(ts=30)]).encode())
    r = load_trace(p)
    assert len(r.events) == 2 and r.metadata == {}


def test_top_level_keys_before_and_after_trace_events(tmp_path):
    text = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": ['
            + json.dumps(ev()) + '], "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 7}')
    r = load_trace(write(tmp_path, "keys.json", text.encode()))
    assert set(r.metadata) == {"schemaVersion", "deviceProperties", "distributedInfo",
                               "baseTimeNanoseconds"}
    assert r.metadata["distributedInfo"] == {"rank": 3}


def test_exact_sub_us_timestamps_at_epoch_scale(tmp_path):
    # 1606910596297023.125 µs cannot be held by a double; the ns must come from the text
    text = ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
            '"ts": 1606910596297023.125, "dur": 1}, {"ph": "X", "cat": "cpu_op", "name": "b", '
            '"pid": 1, "tid": 1, "ts": 1606910596297023.126, "dur": 1}]}')
    r = load_trace(write(tmp_path, "epoch.json", text.encode()))
    assert r.exact_ts
    assert r.ts_ns.tolist() == [1606910596297023125, 1606910596297023126]


def test_ts_written_as_string(tmp_path):
    p = write(tmp_path, "strts.json", obj([ev(ts="12.5"), ev(ts=13)]))
    assert load_trace(p).ts_ns.tolist() == [12_500, 13_000]


def test_nested_ts_key_in_args_does_not_shift_timestamps(tmp_path):
    p = write(tmp_path, "nested.json", obj([ev(ts=1.5, args={"ts": 999}), ev(ts=2.25)]))
    assert load_trace(p).ts_ns.tolist() == [1_500, 2_250]


def test_metadata_event_without_ts_is_allowed(tmp_path):
    p = write(tmp_path, "meta.json", obj([{"ph": "M", "name": "process_name", "pid": 1,
                                           "args": {"name": "python"}}, ev(ts=5)]))
    r = load_trace(p)
    assert r.ts_ns.tolist() == [5_000, 5_000]


@pytest.mark.parametrize("quirk,data,expect", [
    ("empty_file", b"", "file is empty"),
    ("whitespace_only", b"  \n", "only whitespace"),
    ("no_trace_events", b'{"schemaVersion": 1}', "no 'traceEvents'"),
    ("trace_events_not_array", b'{"traceEvents": 3}', "expected an array"),
    ("zero_events", b'{"traceEvents": []}', "no events"),
    ("top_level_number", b"42", "expected an object or array"),
])
def test_bad_structure(tmp_path, quirk, data, expect):
    p = write(tmp_path, f"{quirk}.json", data)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert expect in msg and str(p) in msg and "\n" not in msg


def test_invalid_json_reports_line_column_and_byte_offset(tmp_path):
    # a 2-byte character before the error: the offset is in bytes, not characters
    data = '{"traceEvents": [\n {"name": "é"}, ,]}'.encode()
    p = write(tmp_path, "invalid.json", data)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    at, nl = data.index(b', ,') + 2, data.index(b"\n")
    assert ei.value.where == f"line 2, column {at - nl}, byte {at}"
    assert "not valid JSON" in str(ei.value)


def test_invalid_utf8_reports_the_real_byte_offset(tmp_path):
    data = b'{"traceEvents": [\n {"name": "\xff"}]}'
    p = write(tmp_path, "not_utf8.json", data)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    at, nl = data.index(b"\xff"), data.index(b"\n")
    assert ei.value.where == f"line 2, column {at - nl}, byte {at}"
    assert "not valid UTF-8" in str(ei.value) and "0xff" in str(ei.value)


def test_truncated_gzip(tmp_path):
    blob = gzip.compress(obj([ev() for _ in range(50)]))
    p = write(tmp_path, "truncated.json.gz", blob[: len(blob) // 2])
    with pytest.raises(InputError, match="truncated"):
        load_trace(p)


def test_corrupt_gzip(tmp_path):
    blob = bytearray(gzip.compress(obj([ev()])))
    blob[12:20] = b"\xff" * 8
    p = write(tmp_path, "corrupt.json.gz", bytes(blob))
    with pytest.raises(InputError):
        load_trace(p)


def test_event_without_ts_names_its_index(tmp_path):
    e = ev()
    del e["ts"]
    p = write(tmp_path, "nots.json", obj([ev(), e]))
    assert _dropped(p).startswith("event 1: ") and "no 'ts'" in _dropped(p)


def _dropped(p) -> str:
    """The one bad event a trace's warning says was dropped (house rule: drop and count)."""
    said = [w for w in load_trace(p).warnings if "whose ts cannot be right were dropped" in w]
    assert len(said) == 1 and said[0].startswith(f"{p.name}: 1 event(s)"), said
    return said[0].split("(first: ", 1)[1]


@pytest.mark.parametrize("bad", ["soon", None, [1], True, "nan"])
def test_non_numeric_ts_names_its_index(tmp_path, bad):
    events = [ev(), ev(), ev(ts=bad)]
    if bad is None:
        events[2]["ts"] = None
    p = write(tmp_path, "badts.json", obj(events))
    assert _dropped(p).startswith("event 2: ")


def test_event_not_an_object(tmp_path):
    p = write(tmp_path, "notobj.json", obj([ev(), 7]))
    assert _dropped(p).startswith("event 1: ")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(InputError, match="is a directory"):
        load_trace(tmp_path)


def test_input_is_never_modified(tmp_path):
    data = gzip.compress(obj([ev(), ev(ts=20)]))
    p = write(tmp_path, "keep.json.gz", data)
    os.utime(p, (1_000_000, 1_000_000))
    r = load_trace(p)
    r.events[0]["name"] = "changed in memory only"
    assert p.read_bytes() == data and p.stat().st_mtime == 1_000_000


def test_load_rank_traces_reads_a_directory_sorted(tmp_path):
    write(tmp_path, "rank1.json", obj([ev()], distributedInfo={"rank": 1}))
    write(tmp_path, "rank0.json.gz", gzip.compress(obj([ev()], distributedInfo={"rank": 0})))
    write(tmp_path, "notes.txt", b"not a trace")
    rs = load_rank_traces(tmp_path)
    assert [r.path.name for r in rs] == ["rank0.json.gz", "rank1.json"]
    with pytest.raises(InputError, match="no trace files"):
        load_rank_traces(_empty(tmp_path))
    with pytest.raises(InputError, match="no such file"):
        load_rank_traces(tmp_path / "missing")


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_shared_bare_array_trace_loads():
    p = SHARED / "kineto" / "515e6115_rec2020-12-02" / "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"
    if not p.exists():
        pytest.skip(f"shared traces not present at {SHARED}")
    r = load_trace(p)
    assert r.metadata == {} and len(r.events) == 76898 and r.exact_ts


# ------------------------------------------------------- absurd timestamps and sizes

@pytest.mark.parametrize("ts", [1e300, 10**30, "1e30", -1e18])
def test_ts_beyond_int64_ns_names_its_index(tmp_path, ts):
    p = write(tmp_path, "hugets.json", obj([ev(), ev(ts=ts)]))
    assert _dropped(p).startswith("event 1: ") and "out of range" in _dropped(p)


def test_timestamps_spread_over_more_than_30_days(tmp_path):
    p = write(tmp_path, "spread.json", obj([ev(ts=0), ev(ts=20), ev(ts=3e12), ev(ts=3e12 + 9)]))
    with pytest.raises(InputError) as ei:
        load_trace(p)
    assert ei.value.where == "event 0" and "at most 30 days" in ei.value.problem


def test_one_timestamp_far_from_the_others_is_dropped(tmp_path):
    """One corrupt ts is a record that cannot be right (house rule), not a 35-day trace."""
    r = load_trace(write(tmp_path, "far.json", obj([ev(ts=0), ev(ts=20), ev(ts=3e12), ev(ts=40)])))
    assert len(r.events) == 3 and r.ts_ns.tolist() == [0, 20_000, 40_000]
    assert any(w.startswith("far.json: dropped 1 of 4 event(s) whose ts lies more than 15 days")
               and "first: event 2: ts 3000000000000.0 µs" in w for w in r.warnings), r.warnings


def test_metadata_event_far_from_the_others_is_clamped(tmp_path):
    # Chrome ignores a metadata event's ts; it must not count as a 54-year span
    meta = {"ph": "M", "name": "process_name", "pid": 1, "ts": 0, "args": {"name": "py"}}
    r = load_trace(write(tmp_path, "meta_ts0.json",
                         obj([meta, ev(ts=1_700_000_000_000_000), ev(ts=1_700_000_000_000_010)])))
    assert r.ts_ns.tolist() == [1_700_000_000_000_000_000] * 2 + [1_700_000_000_000_010_000]


def test_gzip_bomb_stops_at_the_size_limit(tmp_path, monkeypatch):
    import stepsim.calibration.trace_io as tio
    monkeypatch.setattr(tio, "MAX_JSON_BYTES", 64 * 1024)
    monkeypatch.setattr(tio, "_CHUNK", 4096)
    events = obj([ev()])
    bomb = write(tmp_path, "bomb.json.gz", gzip.compress(events[:-2] + b" " * 10**6 + b"]}"))
    with pytest.raises(InputError, match="decompressed size exceeds .*MAX_JSON_BYTES"):
        load_trace(bomb)
    big = write(tmp_path, "big.json", events[:-2] + b" " * 70_000 + b"]}")
    with pytest.raises(InputError, match="file size .* exceeds"):
        load_trace(big)


def test_pipe_is_read_as_a_stream_under_the_size_limit(tmp_path, monkeypatch):
    import threading

    import stepsim.calibration.trace_io as tio
    monkeypatch.setattr(tio, "_CHUNK", 1024)

    def through_pipe(data: bytes) -> Path:
        fifo = tmp_path / "fifo.json"
        if fifo.exists():
            fifo.unlink()
        os.mkfifo(fifo)
        threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True).start()
        return fifo

    assert len(load_trace(through_pipe(obj([ev(), ev(ts=20)]))).events) == 2
    monkeypatch.setattr(tio, "MAX_JSON_BYTES", 4096)
    with pytest.raises(InputError, match="size exceeds"):
        load_trace(through_pipe(obj([ev(ts=i) for i in range(200)])))


def test_device_is_not_read(tmp_path):
    with pytest.raises(InputError, match="is a device"):
        load_trace("/dev/zero")


# ----------------------------------------------------------------- directories

def test_unreadable_directory(tmp_path, monkeypatch):
    write(tmp_path, "rank0.json", obj([ev()]))

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "iterdir", denied)
    with pytest.raises(InputError, match="cannot list the directory: Permission denied"):
        load_rank_traces(tmp_path)


def test_capture_folder_sidecar_is_not_a_trace(tmp_path):
    write(tmp_path, "trace.json.gz", gzip.compress(obj([ev()])))
    write(tmp_path, "sidecar.json", b'{"stepsim_sidecar": 1, "loader": {}}')
    write(tmp_path, "run2_sidecar_copy.json", b'{"loader": {}, "stepsim_sidecar": 1}')
    rs = load_rank_traces(tmp_path)
    assert [r.path.name for r in rs] == ["trace.json.gz"] and not rs[0].warnings
    with pytest.raises(InputError, match="is a stepsim capture sidecar, not a trace"):
        load_trace(tmp_path / "sidecar.json")


def test_dangling_symlink_in_a_directory_warns(tmp_path):
    write(tmp_path, "rank1.json", obj([ev()]))
    (tmp_path / "rank0.json").symlink_to(tmp_path / "gone.json")
    rs = load_rank_traces(tmp_path)
    assert [r.path.name for r in rs] == ["rank1.json"]
    assert rs[0].warnings == [f"{tmp_path.name}/rank0.json: broken symbolic link (to "
                              f"{tmp_path / 'gone.json'}); skipped"]
    (tmp_path / "rank1.json").unlink()
    with pytest.raises(InputError, match="no trace files .*broken symbolic link"):
        load_rank_traces(tmp_path)


def test_gzip_through_a_pipe_that_delivers_one_byte_first(tmp_path):
    import threading
    import time

    data = gzip.compress(obj([ev(), ev(ts=20)]))
    fifo = tmp_path / "slow.json.gz"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb", buffering=0) as f:
            f.write(data[:1])
            time.sleep(0.5)
            f.write(data[1:])

    threading.Thread(target=write, daemon=True).start()
    assert len(load_trace(fifo).events) == 2
