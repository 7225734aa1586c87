"""A whole trace read as two halves at once (calibration.block_halves) gives the table one
process's read gives: the second half's pid/tid text codes given again after the first's, its
``dur`` problems counted after the first's events; a cut inside a string read whole here; a
second half whose numbers could be taken for its codes read again here."""
from __future__ import annotations

import json
import os

import pytest

import stepsim.calibration.block_halves as block_halves
import stepsim.calibration.trace_io as trace_io
from stepsim.calibration.block_reader import BlockEvents, _body, load_columns
from stepsim.calibration.events import build_table
from stepsim.calibration.rank_pool import JOBS_ENV, Problem, beside
from stepsim.simcore.errors import InputError
from tests.conftest import shared_traces
from tests.test_columnar import QUIRKS, differences, ev


def tables(p, split: int, monkeypatch, block: int | None = None):
    """(table read in halves from ``split`` bytes, table read in one process, whether the
    blocks took it)."""
    with monkeypatch.context() as m:
        m.setattr(trace_io, "load_columns", lambda raw: load_columns(raw, block, split))
        raw = trace_io.load_trace(p)
        took = isinstance(raw.events, BlockEvents)
        halves = build_table(raw)
    with monkeypatch.context() as m:
        m.setattr(trace_io, "load_columns", lambda raw: load_columns(raw, block, 1 << 62))
        one = build_table(trace_io.load_trace(p))
    return halves, one, took


def _read_apart(p, block: int):
    """:func:`block_halves._other_part` of the whole ``traceEvents`` text of ``p``."""
    raw = p.read_bytes()
    lo, end, _ = _body(raw)
    return block_halves._other_part((raw, lo, end, block))


def write(tmp_path, events) -> object:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events, "schemaVersion": 1}))
    return p


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_halves_and_one_read_agree(tmp_path, monkeypatch, name, jobs):
    monkeypatch.setenv(JOBS_ENV, jobs)
    p = write(tmp_path, QUIRKS[name] * 5)
    try:
        halves, one, _ = tables(p, 1, monkeypatch, 200)
    except InputError as e:
        with pytest.raises(InputError) as again:
            build_table(trace_io.load_trace(p, columnar=False))
        assert str(again.value) == str(e)
        return
    assert differences(halves, one) == []
    assert differences(halves, build_table(trace_io.load_trace(p, columnar=False))) == []


def test_texts_first_seen_in_the_second_half_get_codes_after_the_first_halfs(tmp_path,
                                                                             monkeypatch):
    evs = ([ev(ts=10 + k, pid="A" if k == 3 else 1, tid=2) for k in range(60)]
           + [ev(ts=100 + k, pid="C" if k % 2 else "A", tid="B", dur=-1 if k == 5 else 3)
              for k in range(40)])
    recoded = []
    real = block_halves._recode
    monkeypatch.setattr(block_halves, "_recode", lambda c, codes, i: (recoded.append(
        dict(codes)), real(c, codes, i)))
    halves, one, took = tables(write(tmp_path, evs), 1, monkeypatch)
    assert took and differences(halves, one) == []
    assert recoded and list(recoded[0]) == ["A", "B", "C"]   # the second half's, its order
    code = {text: c for c, text in halves.str_ids.items()}
    assert list(code) == ["A", "B", "C"]
    assert set(halves.pid[60:].tolist()) == {code["A"], code["C"]}


@pytest.mark.parametrize("number", [-3, -2, "-4"])
def test_a_second_half_whose_numbers_look_like_codes_is_read_again(tmp_path, monkeypatch,
                                                                   number):
    evs = ([ev(ts=10 + k, pid="A", tid=1) for k in range(60)]
           + [ev(ts=100 + k, pid=number if k == 7 else "X", tid=number if k == 9 else 1)
              for k in range(40)]
           + [ev(ts=200 + k, pid=number, tid=number) for k in range(5)])
    p = write(tmp_path, evs)
    halves, one, took = tables(p, 1, monkeypatch)
    assert took and differences(halves, one) == []
    assert _read_apart(p, 1 << 20).clash      # (read apart, its codes could not be told)


def test_numbers_only_blocks_in_the_second_half_are_checked_too(tmp_path, monkeypatch):
    evs = ([ev(ts=10 + k, pid="A", tid="B") for k in range(60)]
           + [ev(ts=100 + k, pid=-2, tid=3) for k in range(40)])   # -2: the code of "A"
    halves, one, took = tables(write(tmp_path, evs), 1, monkeypatch, 64)
    assert took and differences(halves, one) == []
    assert (halves.pid[60:] == -2).all() and halves.str_ids == {-2: "A", -3: "B"}
    assert _read_apart(write(tmp_path, evs[60:]), 64).clash   # numbers only: -2, no text


def test_a_cut_inside_a_string_reads_the_whole_here(tmp_path, monkeypatch):
    evs = ([ev(ts=10 + k) for k in range(5)] + [ev(ts=20, name="a},{b" * 2000)]
           + [ev(ts=30 + k, args={"x": {"y": k}, "z": "},"}) for k in range(5)])
    halves, one, took = tables(write(tmp_path, evs), 1, monkeypatch)
    assert took and differences(halves, one) == []
    assert halves._raw.events[5] == evs[5]


def test_every_shared_trace_reads_the_same_in_halves(monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    root = shared_traces()
    files = sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    for p in files:
        halves, one, took = tables(p, 1 << 16, monkeypatch, 1 << 20)
        assert took, p
        assert differences(halves, one) == [], p


def _pid_or_refuse(x: int):
    if x < 0:
        raise InputError("f.json", "negative")
    return os.getpid()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_beside_runs_the_item_in_another_process_while_here_runs(monkeypatch, jobs):
    monkeypatch.setenv(JOBS_ENV, jobs)
    there, here = beside(_pid_or_refuse, 1, os.getpid)
    assert here == os.getpid() and (there != here) == (jobs == "2")
    there, here = beside(_pid_or_refuse, -1, lambda: "here")
    assert here == "here" and there == Problem(("f.json", "negative", None))
