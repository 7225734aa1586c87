"""``calibrate --steps A:B`` (calibration.stream) on a damaged trace: one line naming the file,
what is wrong and where, in bounded time. Before: a stray byte inside ``traceEvents`` of a
trace larger than a block made every block's split try every ``},`` of its last 4 MB, each a
parse of the whole (growing) buffer: a 79 MB trace with one stray byte ran past 60 s
(killed), ~300 s in an earlier session; now 5 s, the error at the byte. A file whose first
256 MB hold no ``traceEvents`` was read up to 2 GB, rescanning the whole prefix each block."""
from __future__ import annotations

import gzip
import json
import time

import pytest

from stepsim.calibration import stream
from stepsim.calibration.stream import MAX_PREFIX_BYTES, load_steps
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli


def _trace_text(n_steps: int = 40, ops: int = 200) -> bytes:
    """A plain trace of ``n_steps`` ProfilerStep markers with ``ops`` CPU ops each (~2 MB)."""
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}]
    for n in range(n_steps):
        t = 10_000.0 * n
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1,
                    "tid": 1, "ts": t, "dur": 9_000.0})
        evs += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                 "ts": t + 10 + 40 * i, "dur": 30, "args": {"Input Dims": [[4, 4], [4, 4]]}}
                for i in range(ops)]
    return json.dumps({"schemaVersion": 1, "traceEvents": evs}, indent=1).encode()


@pytest.fixture(scope="module")
def text() -> bytes:
    return _trace_text()


def _damaged(text: bytes, how: str) -> tuple[bytes, int]:
    """``text`` damaged near its middle, and the byte where the damage is."""
    mid = text.index(b"},", len(text) // 2) + 2
    if how == "stray byte":
        return text[:mid] + b"x" + text[mid:], mid
    if how == "NUL":
        return text[:mid] + b"\0" + text[mid:], mid
    if how == "stray ]":   # ends the array early: trailing characters, not its end
        return text[:mid] + b"]" + text[mid:], mid
    i = text.index(b'"aten::add"', len(text) // 2)
    if how == "unterminated string":
        return text[:i + 10] + text[i + 11:], i + 10
    if how == "invalid UTF-8":
        return text[:i + 1] + b"\xff\xfe" + text[i + 1:], i + 1
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["stray byte", "NUL", "stray ]", "unterminated string",
                                 "invalid UTF-8"])
def test_a_damaged_byte_is_refused_fast_at_its_place(tmp_path, text, how):
    """Blocks of 16 kB over a 1.9 MB trace: before, a stray byte took every later block's
    split through every candidate (7.2 s CPU, growing with the square of the file); now the
    first block holding it is refused (0.02 s)."""
    p = tmp_path / "t.json"
    bad, where = _damaged(text, how)
    p.write_bytes(bad)
    t0 = time.process_time()
    # invalid UTF-8 still parses as JSON text: seen when its event is kept (steps 18-22)
    steps = (18, 23) if how == "invalid UTF-8" else (3, 6)
    with pytest.raises(InputError, match="not valid (JSON|UTF-8)") as e:
        load_steps(p, *steps, block=16 * 1024)
    assert time.process_time() - t0 < 2
    assert str(p) in str(e.value)
    if how == "invalid UTF-8":   # read from the kept events: no place in the file
        assert e.value.where == "an event of the steps kept by --steps"
    else:
        at = int(e.value.where.split()[1].replace(",", ""))
        assert where <= at < where + 100   # where the text stops parsing


def test_the_undamaged_trace_streams(tmp_path, text):
    """The same trace and blocks, undamaged: read (the check above does not refuse a split
    inside a string or nested object, which is text fine as far as it goes)."""
    p = tmp_path / "t.json"
    p.write_bytes(text)
    kept = load_steps(p, 3, 6, block=16 * 1024)
    assert len(kept.events) > 0


def test_a_truncated_gzip_or_a_cut_file_is_one_line(tmp_path, text):
    g = gzip.compress(text)
    (tmp_path / "t.json.gz").write_bytes(g[:len(g) // 2])
    with pytest.raises(InputError, match="gzip stream is truncated"):
        load_steps(tmp_path / "t.json.gz", 3, 6, block=16 * 1024)
    (tmp_path / "cut.json").write_bytes(text[:len(text) // 2])
    with pytest.raises(InputError, match="not a complete JSON array"):
        load_steps(tmp_path / "cut.json", 3, 6, block=16 * 1024)


def test_no_trace_events_in_the_first_part_is_refused_at_the_bound(tmp_path, monkeypatch):
    """A document whose first key is megabytes of something else: refused once the bound is
    read, naming it (the bound is 256 MB; set to 1 MB here to keep the test small)."""
    assert MAX_PREFIX_BYTES == 256 * 1024**2
    monkeypatch.setattr(stream, "MAX_PREFIX_BYTES", 1024**2)
    p = tmp_path / "t.json"
    p.write_bytes(b'{"other": "' + b"a" * 3 * 1024**2 + b'", "traceEvents": []}')
    with pytest.raises(InputError, match="no 'traceEvents' array in the first 1 MB"):
        load_steps(p, 3, 6, block=64 * 1024)


def test_cli_one_line_exit_2(tmp_path, text):
    p = tmp_path / "t.json"
    p.write_bytes(_damaged(text, "stray byte")[0])
    r = run_cli("calibrate", str(p), "--steps", "3:6", "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")]
    assert len(lines) == 1 and "t.json" in lines[0] and "not valid JSON" in lines[0], r.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("what", ["empty", "whitespace", "device", "missing", "dangling link"])
def test_the_stream_says_what_the_whole_read_says(tmp_path, what):
    """Before: /dev/null and a whitespace file were 'file is empty' in the stream ('is a
    device', 'file holds only whitespace' in the whole read); a dangling link 'no such file'."""
    from stepsim.calibration.trace_io import load_trace

    p = tmp_path / "t.json"
    if what == "empty":
        p.write_bytes(b"")
    elif what == "whitespace":
        p.write_bytes(b"  \n\t ")
    elif what == "device":
        p = "/dev/null"
    elif what == "dangling link":
        p.symlink_to(tmp_path / "gone.json")
    with pytest.raises(InputError) as whole:
        load_trace(p)
    with pytest.raises(InputError) as streamed:
        load_steps(p, None, None)
    assert str(streamed.value) == str(whole.value)


def test_a_nested_trace_events_key_is_not_the_trace(tmp_path, text):
    """``"meta": {"traceEvents": []}`` before the real array: before, the stream took the
    nested (empty) array ('the trace has no ProfilerStep markers'); now the top-level one,
    the whole read's table."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace
    from tests.test_stream_steps import same_table

    p = tmp_path / "t.json"
    p.write_bytes(text.replace(b'{\n "schemaVersion": 1,',
                               b'{"meta": {"traceEvents": []}, "note": "\\"traceEvents\\": [",'
                               b' "schemaVersion": 1,', 1))
    assert b'"meta": {"traceEvents": []}' in p.read_bytes()
    assert same_table(build_table(load_steps(p, None, None, block=16 * 1024)),
                      build_table(load_trace(p))) == []


def test_two_top_level_trace_events_keys_are_refused(tmp_path, text):
    p = tmp_path / "t.json"
    p.write_bytes(text.replace(b'{\n "schemaVersion": 1,',
                               b'{"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}],'
                               b' "schemaVersion": 1,', 1))
    with pytest.raises(InputError, match="two top-level 'traceEvents' keys"):
        load_steps(p, 3, 6, block=16 * 1024)


def test_invalid_json_before_the_array_is_refused_at_its_byte(tmp_path, text):
    """Before: 'no traceEvents array found' (the array is there; the text before it is not
    JSON), after reading up to the prefix bound."""
    p = tmp_path / "t.json"
    bad = text.replace(b'"schemaVersion": 1,', b'"schemaVersion": 1x,', 1)
    p.write_bytes(bad)
    with pytest.raises(InputError, match="not valid JSON before traceEvents") as e:
        load_steps(p, 3, 6, block=16 * 1024)
    assert e.value.where == f"byte {bad.index(b'x')} of the decompressed JSON"


def test_junk_after_the_gzip_data_is_ignored_and_said(tmp_path, text):
    """Before: 'corrupt gzip data: Not a gzipped file' from both readers, though the JSON was
    whole; now both read it, with a warning. A truncated member is still refused."""
    from stepsim.calibration.trace_io import load_trace

    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text) + b"garbage\n")
    for rt in (load_trace(p), load_steps(p, None, None, block=16 * 1024)):
        assert len(rt.events) == len(json.loads(text)["traceEvents"])
        assert "t.json.gz: ignored the bytes after the gzip data (not gzip: trailing junk)" \
            in rt.warnings
    p.write_bytes(b"junk" + gzip.compress(text))   # no gzip header: not gzip at all
    with pytest.raises(InputError):
        load_trace(p)


def test_the_whole_read_refuses_two_top_level_arrays_too(tmp_path, text):
    """Before: the whole read took the last array silently (orjson's rule), the stream the
    first; now both refuse in the same words. A nested key is not a second array."""
    from stepsim.calibration.trace_io import TWO_ARRAYS, load_trace

    p = tmp_path / "t.json"
    p.write_bytes(text.replace(b'{\n "schemaVersion": 1,',
                               b'{"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}],'
                               b' "schemaVersion": 1,', 1))
    for read in (load_trace, lambda q: load_steps(q, None, None)):
        with pytest.raises(InputError) as e:
            read(p)
        assert e.value.problem == TWO_ARRAYS
    p.write_bytes(text.replace(b'{\n "schemaVersion": 1,',
                               b'{"meta": {"traceEvents": []}, "schemaVersion": 1,', 1))
    assert len(load_trace(p).events) == len(json.loads(text)["traceEvents"])


def test_places_in_warnings_and_errors_are_the_files(tmp_path, text):
    """``--steps`` keeps a part of the events; a warning's or an error's ``event N`` was a
    place among them (event 1 for the file's event 3,419); now the file's, as the whole
    read says it."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.stream import steps_table
    from stepsim.calibration.trace_io import load_trace

    evs = json.loads(text)["traceEvents"]
    at = next(i for i, e in enumerate(evs) if e.get("name") == "aten::add" and e["ts"] > 200_000)
    evs[at]["dur"] = None
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    said = [w for w in build_table(load_trace(p)).warnings if "dur is null" in w]
    assert f"at event {at})" in said[0]
    part = [w for w in steps_table(p, 18, 23, block=16 * 1024).warnings if "dur is null" in w]
    assert part[0].endswith(f"at event {at})"), part
    for e in evs:            # every op's dur bad: the error names the first kept, in the file
        if e.get("name") == "aten::add":
            e["dur"] = -1
        elif e.get("ph") == "X":
            e.pop("dur")     # the markers: no dur (the window from their starts)
    p.write_text(json.dumps({"traceEvents": evs}))
    with pytest.raises(InputError) as e:
        steps_table(p, 18, 23, block=16 * 1024)
    n = int(e.value.where.split()[1])
    assert evs[n]["dur"] == -1 and evs[n]["ts"] >= 170_000, (n, evs[n])   # step 17 or later
