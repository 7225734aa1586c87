"""A trace read a block at a time (calibration.block_reader) gives the table the whole-text
columnar read and the general reader give, wherever the blocks are cut; what it does not
take goes the whole-text way."""
from __future__ import annotations

import json

import pytest

import stepsim.calibration.trace_io as trace_io
from stepsim.calibration.block_reader import BlockEvents, load_columns
from stepsim.calibration.events import build_table
from tests.conftest import shared_traces
from tests.test_columnar import QUIRKS, differences, ev


def tables(p, block: int, monkeypatch):
    """(table read in blocks of ``block`` bytes, whole-text table, did the blocks take it)."""
    with monkeypatch.context() as m:
        m.setattr(trace_io, "load_columns", lambda raw: load_columns(raw, block))
        raw = trace_io.load_trace(p)
        took = isinstance(raw.events, BlockEvents)
        blocks = build_table(raw)
    with monkeypatch.context() as m:
        m.setattr(trace_io, "load_columns", lambda raw: None)
        whole = build_table(trace_io.load_trace(p))
    return blocks, whole, took


@pytest.mark.parametrize("block", [1, 60, 200])
@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_blocks_and_whole_text_agree(tmp_path, monkeypatch, name, block):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": QUIRKS[name] * 3, "schemaVersion": 1,
                             "baseTimeNanoseconds": 7}))
    try:
        blocks, whole, _ = tables(p, block, monkeypatch)
    except trace_io.InputError as e:
        with pytest.raises(trace_io.InputError) as again:
            build_table(trace_io.load_trace(p, columnar=False))
        assert str(again.value) == str(e)
        return
    assert differences(blocks, whole) == []
    assert differences(blocks, build_table(trace_io.load_trace(p, columnar=False))) == []


def test_cuts_inside_strings_and_nested_objects_are_not_taken(tmp_path, monkeypatch):
    evs = [ev(ts=10 + k, name="a},{b" * (k % 3), args={"x": {"y": k}, "z": "},", "correlation": k})
           for k in range(200)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(evs))
    blocks, whole, took = tables(p, 300, monkeypatch)
    assert took and len(blocks._raw.events._spans) > 10   # many blocks, each cut right
    assert differences(blocks, whole) == []
    assert [blocks.event(i) for i in (0, 57, 199)] == [evs[i] for i in (0, 57, 199)]
    assert blocks._raw.events[-2:] == evs[-2:]


def test_a_pid_of_minus_two_to_the_63_goes_the_whole_text_way(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text(json.dumps([ev(pid=-(2**63)), ev(pid="x"), ev()]))
    blocks, whole, took = tables(p, 1, monkeypatch)
    assert not took and differences(blocks, whole) == []


def test_every_shared_trace_reads_the_same_in_small_blocks(monkeypatch):
    root = shared_traces()
    files = sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    for p in files:
        blocks, whole, took = tables(p, 1 << 20, monkeypatch)
        assert took, p
        assert differences(blocks, whole) == [], p


def test_a_trailing_comma_cut_at_is_refused_as_the_general_reader_does(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps([ev(ts=10 + k) for k in range(20)]).encode()[:-1] + b",]")
    with monkeypatch.context() as m:
        m.setattr(trace_io, "load_columns", lambda raw: load_columns(raw, 64))
        with pytest.raises(trace_io.InputError) as blocks:
            trace_io.load_trace(p)
    with pytest.raises(trace_io.InputError) as general:
        trace_io.load_trace(p, columnar=False)
    assert str(blocks.value) == str(general.value)
    assert "trailing comma" in str(blocks.value)
