"""A gzip trace decompressed in a thread while the verb imports (simcore.read_ahead) is taken
only where the read was plain and the file is the one read: the bytes are the reader's own;
anything else (plain JSON, a second member, trailing bytes, a cut or corrupt stream, a file
changed meanwhile, a path never started) gives None and the reader reads the file itself, with
its notes and errors."""
from __future__ import annotations

import gzip
import json
import os

import pytest

import stepsim.calibration.trace_io as trace_io
from stepsim.simcore import read_ahead
from stepsim.simcore.errors import InputError
from tests.conftest import shared_traces

TEXT = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1,
                                    "tid": 1}]}).encode()


@pytest.fixture(autouse=True)
def _no_reads_left(monkeypatch):
    """Each test starts with no read pending (and leaves none in the module)."""
    monkeypatch.setattr(read_ahead, "_AHEAD", {})


def test_a_verb_that_ends_before_its_read_keeps_no_bytes(tmp_path):
    from stepsim.cli import main

    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(TEXT))
    out = str(tmp_path / "m.json")
    assert main(["calibrate", str(p), "-o", out, "--step-regex", "("]) == 2   # before its read
    assert not read_ahead._AHEAD


def taken(p):
    read_ahead.start(p)
    return read_ahead.take(p, os.stat(p))


def test_a_gzip_file_is_its_decompressed_bytes_once(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(TEXT))
    assert taken(p) == TEXT
    assert read_ahead.take(p, os.stat(p)) is None   # (forgotten once taken)


def test_the_same_path_spelled_another_way_is_the_same_read(tmp_path, monkeypatch):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(TEXT))
    monkeypatch.chdir(tmp_path)
    read_ahead.start("./t.json.gz")
    assert read_ahead.take(p.relative_to(tmp_path), os.stat(p)) == TEXT


@pytest.mark.parametrize("data", [TEXT, gzip.compress(TEXT) * 2, gzip.compress(TEXT) + b"junk",
                                  gzip.compress(TEXT)[:-5], gzip.compress(TEXT)[:12] + b"x" * 40])
def test_what_is_not_one_plain_member_is_left_to_the_reader(tmp_path, data):
    p = tmp_path / "t.json.gz"
    p.write_bytes(data)
    assert taken(p) is None


def test_a_file_larger_than_the_bound_is_left_to_the_reader(tmp_path, monkeypatch):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(TEXT))
    monkeypatch.setattr(read_ahead, "MAX_AHEAD_BYTES", len(TEXT) - 1)
    assert taken(p) is None
    monkeypatch.setattr(read_ahead, "MAX_AHEAD_BYTES", len(TEXT))
    assert taken(p) == TEXT


def test_a_file_changed_after_the_read_is_read_again(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(TEXT))
    read_ahead.start(p)
    read_ahead._AHEAD[os.fspath(p)].thread.join()
    p.write_bytes(gzip.compress(TEXT + b" "))
    assert read_ahead.take(p, os.stat(p)) is None


def test_a_path_never_started_or_not_a_file(tmp_path):
    assert read_ahead.take(tmp_path / "none.gz", os.stat(tmp_path)) is None
    read_ahead.start(tmp_path)                  # a folder: nothing started
    read_ahead.start(tmp_path / "missing.gz")   # nor for a missing file
    assert not read_ahead._AHEAD


@pytest.mark.parametrize("data,said", [
    (gzip.compress(TEXT) + b"junk", "ignored the bytes after the gzip data"),
    (gzip.compress(TEXT)[:-5], "gzip stream is truncated"),
])
def test_the_reader_says_what_it_said_without_the_read_ahead(tmp_path, data, said):
    p = tmp_path / "t.json.gz"
    p.write_bytes(data)
    read_ahead.start(p)
    try:
        rt = trace_io.load_trace(p)
    except InputError as e:
        assert said in str(e)
    else:
        assert any(said in w for w in rt.warnings)
    assert not read_ahead._AHEAD


def test_every_shared_gzip_trace_reads_the_same_ahead(monkeypatch):
    root = shared_traces()
    for p in sorted(root.rglob("*.json.gz")):
        notes: list[str] = []
        alone, size = trace_io._read_bytes(p, notes)
        read_ahead.start(p)
        ahead, size2 = trace_io._read_bytes(p, [])
        assert ahead == alone and size2 == size and not read_ahead._AHEAD, p
        if not notes:   # a plain member: it was the read ahead's bytes
            read_ahead.start(p)
            assert read_ahead.take(p, os.stat(p)) == alone, p
