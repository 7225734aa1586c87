"""Outputs are written atomically (simcore.atomic): a temporary file in the target's folder,
fsync, os.replace; the temporary file is gone after an exception or a SIGTERM, the old file
intact; an output whose folder is a file is one clear line. Before: ``-o notes/m.json`` with
``notes`` a file said ``File exists``; no fsync; a SIGTERM during a write left
``.m.json.XXXX.tmp`` behind; the DDP demo's profiler wrote its trace in place."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import stepsim.simcore.atomic as atomic
from stepsim.cli import main
from stepsim.simcore.atomic import atomic_path, write_atomic
from stepsim.simcore.errors import InputError
from tests.conftest import REPO, shared_traces

DLRM0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"


def test_a_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.write_text("keep me")
    for out in (notes / "m.json", notes / "sub" / "m.json"):
        assert main(["calibrate", str(shared_traces() / DLRM0), "-o", str(out)]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines()
               if not ln.startswith("warning:")]
        assert err == [f"stepsim: error: {out}: cannot be written: {notes} is a file, "
                       "not a folder"], err
    assert notes.read_text() == "keep me"


def test_the_write_is_flushed_then_renamed(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(atomic.os, "replace",
                        lambda a, b: (calls.append(("replace", os.path.dirname(a))),
                                      real_replace(a, b)))
    out = tmp_path / "d" / "m.json"
    write_atomic(out, b"new")
    assert out.read_bytes() == b"new"
    assert calls[0] == "fsync" and calls[1] == ("replace", str(out.parent)), calls
    assert sorted(os.listdir(out.parent)) == ["m.json"]


@pytest.mark.parametrize("fail", ["write", "replace"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, fail):
    out = tmp_path / "m.json"
    out.write_bytes(b"old")
    if fail == "replace":
        def boom(a, b):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(atomic.os, "replace", boom)
        with pytest.raises(OSError) as e:
            write_atomic(out, b"new")
        assert e.value.filename == str(out)   # the output, never the temporary file
    else:
        with pytest.raises(TypeError):
            write_atomic(out, "not bytes")
    assert out.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["m.json"]


def test_atomic_path_for_a_tool_that_takes_a_file_name(tmp_path):
    out = tmp_path / "t.json"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text('{"traceEvents": [')   # half a trace, then the tool fails
            raise RuntimeError("export failed")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]
    with atomic_path(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".t.json.")
        tmp.write_text("new")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["t.json"]
    with pytest.raises(InputError, match="is a directory"):
        with atomic_path(tmp_path):
            pass


def test_sigterm_during_a_write_removes_the_temporary_file(tmp_path):
    """A write held in its fsync (a slow disk); SIGTERM: exit 143, no temporary, the old file
    intact. Before, the default action killed the process with the temporary file left."""
    out = tmp_path / "m.json"
    out.write_bytes(b"old")
    code = textwrap.dedent(f"""
        import os, sys, time
        import stepsim.simcore.atomic as atomic
        def slow(fd):
            print("writing", flush=True)
            time.sleep(30)
        atomic.os.fsync = slow
        atomic.write_atomic(atomic.Path({str(out)!r}), b"new")
    """)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    assert any(n.endswith(".tmp") for n in os.listdir(tmp_path))   # it is being written
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 143 and "Traceback" not in err, err
    assert time.monotonic() - t0 < 10
    assert os.listdir(tmp_path) == ["m.json"] and out.read_bytes() == b"old"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL   # this process: untouched


def test_the_ddp_demo_writes_its_trace_atomically(tmp_path, monkeypatch):
    """The profiler's export fails half-way: no rank0.json (before: the half-written file, which
    the demo's calibration then read), no temporary file."""
    torch = pytest.importorskip("torch")
    from torch.profiler import profile

    from stepsim.demo.ddp_job import Run, _profiled

    def half(self, path):
        with open(path, "w") as f:
            f.write('{"traceEvents": [')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profile, "export_chrome_trace", half)
    model = torch.nn.Linear(4, 4)
    x = torch.ones(2, 4)
    run = Run("capture", steps=1, profile_dir=str(tmp_path / "capture"))
    with pytest.raises(OSError) as e:
        _profiled(0, run, model,
                  lambda pause_ms=0.0, held_ms=None: model(x).sum().backward() or [0.0] * 11)
    assert e.value.filename == str(tmp_path / "capture" / "rank0.json")
    assert os.listdir(tmp_path / "capture") == []


def test_a_long_valid_name_is_written(tmp_path):
    """250 bytes: a valid file name, whose temporary name (``.NAME.XXXXXXXX.tmp``) was
    not ('File name too long')."""
    for name in ("a" * 245 + ".json", "é" * 120 + ".json"):   # 250 bytes each
        out = tmp_path / name
        write_atomic(out, b"x")
        assert out.read_bytes() == b"x" and os.listdir(tmp_path) == [out.name]
        out.unlink()
