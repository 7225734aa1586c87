"""Bad input, sixth pass (2026-12-05): a ledger far larger than the input limit is read from
its end in bounded memory (it was refused whole past 256 MiB), and appending to it copies it
without holding it."""
from __future__ import annotations

import importlib
import io
import os
import sys

import pytest

from stepsim import cli
from stepsim.simcore import files
from tests.test_ledger import _rec

V = importlib.import_module("stepsim.scenarios.validate")   # the package's `validate` is the verb


def _sparse_ledger(path, gib: float, n: int, newline: bool = True) -> None:
    """``gib`` GiB of a hole (NUL bytes, no disk), then ``n`` records."""
    with open(path, "wb") as f:
        f.truncate(int(gib * 2**30))
        f.seek(0, 2)
        f.write(b"\n" * newline + b"".join(V.ledger_line(_rec(float(i), True)) for i in range(n)))


def test_a_multi_gb_ledger_is_read_from_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "MAX_LEDGER_RECORDS", 3)
    p = tmp_path / "ledger.jsonl"
    _sparse_ledger(p, 4, 5)
    said: list[str] = []
    assert [r.error_pct for r in V.read_ledger(p, said)] == [2.0, 3.0, 4.0]
    assert len(said) == 1 and "holds more than 3 records" in said[0]
    assert "bytes before them are not" in said[0]   # too far to count: no line numbers
    # a bad line among them is named from the end
    with open(p, "ab") as f:
        f.write(b"{cut\n" + V.ledger_line(_rec(9.0, True)))
    said.clear()
    assert [r.error_pct for r in V.read_ledger(p, said)] == [4.0, 9.0]
    assert "line 2 from the end" in said[1]


def test_a_ledger_past_the_size_limit_keeps_its_records_in_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", 4096)
    p = tmp_path / "ledger.jsonl"
    line = V.ledger_line(_rec(1.0, True))
    p.write_bytes(b"x" * 10_000 + b"\n" + line * (3000 // len(line) + 2))
    said: list[str] = []
    got = V.read_ledger(p, said)
    assert got and len(got) * len(line) <= 4096
    assert "is larger than" in said[0] and "lines 1 to" in said[0]   # counted: small head
    first = int(said[0].split("lines 1 to ")[1].split()[0].rstrip(","))
    assert first == p.read_bytes().count(b"\n") - len(got)


def test_appending_to_a_long_ledger_copies_it(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", 4096)
    p = tmp_path / "ledger.jsonl"
    old = b"".join(V.ledger_line(_rec(float(i), True)) for i in range(40))[:-1]   # no newline
    p.write_bytes(old)
    V.append_ledger(p, _rec(99.0, True), [])
    assert p.read_bytes() == old + b"\n" + V.ledger_line(_rec(99.0, True))
    assert V.read_ledger(p)[-1].error_pct == 99.0


@pytest.mark.parametrize("raw", [b"", b"a", b"a\n", b"a\n\nb\n", b"a\nb\nc", b"a\nb\nc\n\n",
                                 b"\n\na\n  \nb\nc\n", b"a\r\nb\r\n", b"\n" * 5])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 100])
def test_the_tail_read_from_the_end_is_the_tail_read_whole(tmp_path, monkeypatch, raw, n, limit):
    """Read from the end with a tiny limit, a file's latest lines are those read whole, or
    fewer (what the limit cuts), never a line cut short."""
    p = tmp_path / "f"
    p.write_bytes(raw)
    whole = files.read_latest_lines(p, "ledger", n)
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", limit)
    if len(raw) <= limit:
        return
    t = files.read_latest_lines(p, "ledger", n)
    assert t.lines == raw[t.before:].splitlines()
    assert t.before in (0, len(raw)) or raw[t.before - 1:t.before] == b"\n"
    assert t.first == raw.count(b"\n", 0, t.before) + 1
    assert whole.lines[len(whole.lines) - len(t.lines):] == t.lines or not t.lines


def test_output_left_unread_in_a_pipe_ends_with_141(tmp_path, monkeypatch):
    """``--json | head -c 10``: the document goes out in one write, which the pipe holds whole,
    and the reader leaves; no write fails, and stepsim said 0 where a longer output (whose
    later writes fail) said 141. The pipe's reader gone when stepsim ends: 141."""
    ledger = tmp_path / "l.jsonl"
    ledger.write_bytes(b"".join(V.ledger_line(_rec(float(i), True)) for i in range(3)))
    r, w = os.pipe()
    verb = cli.COMMANDS["ledger"]

    def write_then_reader_leaves(args):
        rc = verb(args)
        sys.stdout.flush()   # all of it in the pipe, then its reader goes
        os.close(r)
        return rc

    out = io.TextIOWrapper(io.FileIO(w, "w", closefd=True))
    monkeypatch.setitem(cli.COMMANDS, "ledger", write_then_reader_leaves)
    monkeypatch.setattr(sys, "stdout", out)
    try:
        assert cli.main(["ledger", "--json", str(ledger)]) == 141
    finally:
        monkeypatch.undo()
        try:
            out.close()
        except OSError:
            pass


@pytest.mark.parametrize("field,value,says", [
    ("runs", True, "line 2: not a ledger record: runs: must be an integer, not bool True"),
    ("error_pct", "5", "line 2: not a ledger record: error_pct: must be a number, not str '5'"),
    ("steps_measured", 2.5, "steps_measured: must be a whole number")])
def test_a_ledger_line_names_its_field_by_its_location(tmp_path, field, value, says):
    """A strict scalar's refusal names its field from pydantic's location (the field's name
    and its message were split on " must "; a record's field was shown as "(record): runs
    must be ...")."""
    good = V.ledger_line(_rec(5.0, True))
    p = tmp_path / "ledger.jsonl"
    p.write_bytes(good + V.orjson.dumps({**V.orjson.loads(good), field: value}) + b"\n")
    said: list[str] = []
    assert len(V.read_ledger(p, said)) == 1
    assert says in said[0] and "(record)" not in said[0]
