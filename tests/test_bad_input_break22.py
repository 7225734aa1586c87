"""Bad input on session 12's readings (break22, 2026-12-07): the baseline check's record of the
captures a model was calibrated on (``meta.notes.calibration_captures``,
calibration/capture_ids.py), on real runs (tests/data/probe0_runs)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepsim.calibration.capture_ids import CAPTURES_NOTE, calibration_note, capture_ids
from tests.conftest import run_cli


def _without_id(src: Path, dst: Path) -> Path:
    """``src``'s capture folder copied to ``dst`` with its sidecar's ``iter_start_us`` removed
    (a sidecar written before the field)."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    data = json.loads((dst / "sidecar.json").read_text())
    del data["iter_start_us"]
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def test_a_capture_without_an_id_is_not_scored_as_a_fresh_run(probe0_runs, tmp_path):
    """A capture whose sidecar names no id, calibrated with a replicate that does: the note
    held the replicate alone, so validate of the capture itself (a replay) was scored as a
    baseline check against "fresh runs the model was not calibrated on" (-4.2 %, break22).
    Now no note is written: every run of the setting is in-sample, as for a model from before
    the note."""
    cap = _without_id(probe0_runs / "nw1-r0", tmp_path / "r0")
    model, ledger = tmp_path / "m.json", tmp_path / "l.jsonl"
    r = run_cli("calibrate", str(cap), "--replicate", str(probe0_runs / "nw1-r1"), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert CAPTURES_NOTE not in json.loads(model.read_text())["meta"]["notes"]
    r = run_cli("validate", str(model), str(cap), "--draws", "0", "--steps", "20", "--quiet",
                "--ledger", str(ledger))
    assert r.returncode == 0, r.stderr
    rec = json.loads(ledger.read_text())
    assert (rec["in_sample"], rec["baseline_check"]) == (True, False)


def test_the_note_reads_the_sidecar_calibrate_was_given(probe0_runs, tmp_path):
    """``calibrate TRACE --sidecar S``, S not beside the trace: the note named the replicates
    alone (the capture's id read from beside the trace, where there is none)."""
    cap = probe0_runs / "nw1-r0"
    alone = tmp_path / "t"
    alone.mkdir()
    (alone / "trace.json.gz").write_bytes((cap / "trace.json.gz").read_bytes())
    rep = probe0_runs / "nw1-r1"
    note = calibration_note(alone / "trace.json.gz", cap / "sidecar.json", [rep])
    assert note is not None and set(note.split(",")) == capture_ids([cap, rep])
    assert calibration_note(alone / "trace.json.gz", None, [rep]) is None
    assert calibration_note(cap, None, [rep]) == note


# --- the straggler record (Capture.straggler, ddp.straggler) on a real gloo job -------------

GLOO_JOB = Path(__file__).parent / "data" / "gloo_loader_job"
SPIN = {"rank": 1, "phase": "forward", "spin_us": 5000.0}


@pytest.fixture(scope="module")
def gloo_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gloo") / "m.json"
    r = run_cli("calibrate", str(GLOO_JOB), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _job_with(dst: Path, *records) -> Path:
    """The gloo job copied to ``dst`` with rank k's sidecar's ``ddp.straggler`` set to
    ``records[k]`` (None: none recorded)."""
    for k, rec in enumerate(records):
        (dst / f"rank{k}").mkdir(parents=True)
        (dst / f"rank{k}" / "trace.json.gz").write_bytes(
            (GLOO_JOB / f"rank{k}" / "trace.json.gz").read_bytes())
        data = json.loads((GLOO_JOB / f"rank{k}" / "sidecar.json").read_text())
        data["ddp"]["straggler"] = rec
        (dst / f"rank{k}" / "sidecar.json").write_text(json.dumps(data))
    return dst


def _validate(model: Path, job: Path, *extra: str):
    return run_cli("validate", str(model), str(job), "--draws", "0", "--steps", "10", "--quiet",
                   *extra)


def _one_line_refusal(r, *words: str) -> None:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith("stepsim: error: ") and all(w in line for w in words), line


def test_the_fix_a_refusal_names_is_taken(gloo_model, tmp_path):
    """A 3.3333333 ms spin: the refusal named ``ms=3.33333`` (6 digits), which validate then
    refused in the same words, as the match is to 1e-9 of the record."""
    job = _job_with(tmp_path / "j", *[dict(SPIN, spin_us=3333.3333)] * 2)
    r = _validate(gloo_model, job)
    _one_line_refusal(r, "would match")
    fix = r.stderr.split("(--fix ")[1].split(" would match")[0]
    assert fix == "straggler:rank=1,phase=forward,ms=3.3333333"
    r = _validate(gloo_model, job, "--fix", fix)
    assert r.returncode == 0, r.stderr


def test_a_straggler_only_another_rank_records_did_not_spin(gloo_model, tmp_path):
    """``Capture.straggler(1, 5)`` called on rank 0 alone: rank 1's hook was never set, so it
    did not spin; validate refused the straggler-free prediction of that run (exit 2, asking
    for a --fix of a spin that never ran). Now the record is dropped with a warning."""
    job = _job_with(tmp_path / "j", SPIN, None)
    r = _validate(gloo_model, job)
    assert r.returncode == 0, r.stderr
    assert "rank 0's sidecar records rank 1 as a straggler" in r.stderr
    # the straggler's own record is the one that says it spun, whichever ranks say it too
    for recs in ((None, SPIN), (dict(SPIN, spin_us=9000.0), SPIN)):
        r = _validate(gloo_model, _job_with(tmp_path / str(len(list(tmp_path.iterdir()))), *recs))
        _one_line_refusal(r, "rank 1 is a straggler", "ms=5 would match")


def test_every_rank_its_own_straggler_is_refused(gloo_model, tmp_path):
    """``Capture.straggler(rank=dist.get_rank(), ...)``: every rank spun, which no straggler
    --fix (one rank) predicts; rank 0's record was taken and the run validated with a rank-0
    straggler fix."""
    job = _job_with(tmp_path / "j", dict(SPIN, rank=0), SPIN)
    _one_line_refusal(_validate(gloo_model, job, "--fix", "straggler:rank=0,phase=forward,ms=5"),
                      "each record themselves as the straggler")


@pytest.mark.parametrize("bad", [{"phase": "x\ny"}, {"phase": ""}, {"spin_us": 4e9}])
def test_a_straggler_record_that_cannot_be_right_is_dropped_in_one_line(gloo_model, tmp_path, bad):
    """A phase with a newline made the refusal two lines; a spin past an hour named a --fix
    that is refused (ms at most 3,600,000). Each record is now refused at the sidecar (the
    sidecar ignored with a warning, as any bad ddp field)."""
    r = _validate(gloo_model, _job_with(tmp_path / "j", *[dict(SPIN, **bad)] * 2))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "ddp.straggler" in r.stderr and "stepsim: error" not in r.stderr


# --- the standard streams: closed, or not UTF-8 ------------------------------------------------

DDP_MODEL = Path(__file__).parent / "data" / "ddp_demo_model.json"
WHATIF = ("whatif", str(DDP_MODEL), "--set", "comm.bucket_cap_mb=1", "--draws", "2", "--jobs", "1")


def _sh(line: str, **env):
    """``line`` run by sh with ``$STEPSIM`` as ``python -m stepsim`` (for its redirections)."""
    import os
    import shlex
    import subprocess
    import sys

    return subprocess.run(["sh", "-c", line], capture_output=True, timeout=600, env={
        **os.environ, "COLUMNS": "110", "STEPSIM": f"{shlex.quote(sys.executable)} -m stepsim",
        **env})


def test_a_closed_stderr_neither_stops_a_verb_nor_enters_its_json():
    """``2>&-``: whatif ended at its progress bar (AttributeError, exit 1), and print() to a
    closed stderr goes to stdout, into --json."""
    args = " ".join(WHATIF)
    ok = _sh(f"$STEPSIM {args} --json 2>/dev/null")
    closed = _sh(f"$STEPSIM {args} --json 2>&-")
    assert (ok.returncode, closed.returncode) == (0, 0), closed
    assert json.loads(closed.stdout) == json.loads(ok.stdout)
    assert _sh(f"$STEPSIM {args} 2>&-").returncode == 0


def test_a_closed_stdout_is_one_line_exit_2():
    r = _sh(f"$STEPSIM {' '.join(WHATIF)} >&-")
    assert r.returncode == 2, r
    line, = r.stderr.decode().strip().splitlines()
    assert line.startswith("stepsim: error: standard output is closed"), line


@pytest.mark.parametrize("enc", ["latin-1", "ascii"])
def test_a_stream_that_is_not_utf8_takes_every_line(enc):
    """``PYTHONIOENCODING=latin-1`` (as a legacy locale sets): the table's first '–' was a
    UnicodeEncodeError (exit 1, the table cut), and so was --json's. The characters are now
    escaped: --json reads back the same document."""
    args = " ".join(WHATIF)
    for tail in ("", " --json"):
        r = _sh(f"$STEPSIM {args}{tail}", PYTHONIOENCODING=enc)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(enc)
    ref = _sh(f"$STEPSIM {args} --json")
    assert json.loads(r.stdout.decode(enc)) == json.loads(ref.stdout)


# --- a kept DDP demo's files as inputs ------------------------------------------------------

PEAK_KIB = ("print(next(int(x.split()[1]) for x in open('/proc/self/status')\n"
            "           if x.startswith('VmHWM:')))\n")
"""Code that prints its process's peak resident memory (KiB): the memory map's own high-water
mark, which starts anew at exec (``ru_maxrss`` keeps the forking parent's: pytest's, 264 MiB
in a long run)."""
needs_proc = pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                reason="reads its peak memory from /proc (Linux)")


@needs_proc
def test_a_binary_trace_is_refused_before_it_is_read(tmp_path):
    """A 2 GiB sparse file of zeros as a rank's trace (at the size limit, so read whole): it
    was refused as binary only after the read, with 4.25 GB of peak memory (19 s at load 10);
    its first byte is enough. The peak memory of the refusal, read in its own process."""
    import subprocess
    import sys

    f = tmp_path / "rank0.json"
    with open(f, "wb") as h:
        h.truncate(2 << 30)     # sparse: no disk
    code = ("import sys\n"
            "from stepsim.calibration.trace_io import load_trace\n"
            "from stepsim.simcore.errors import InputError\n"
            "try:\n    load_trace(sys.argv[1])\nexcept InputError as e:\n    print(e)\n"
            + PEAK_KIB)
    r = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True,
                       timeout=600)
    said, peak_kib = r.stdout.strip().splitlines()
    assert "binary data, not JSON text (it starts with byte 0x00)" in said, r
    assert int(peak_kib) < 512 * 1024, f"{int(peak_kib) / 1024:.0f} MiB to refuse it"


@pytest.mark.parametrize("how", ["directory", "link loop"])
def test_a_ranks_sidecar_that_is_no_file_is_named(tmp_path, how):
    """A rank's ``sidecar.json`` replaced by a directory or a symbolic-link loop was taken as no
    sidecar, unsaid: validate then refused the job as "the 2 rank traces share no step number"
    (one rank measured on its unprofiled steps, the other on its profiled ones), naming no
    sidecar. The refusal now names it and what is wrong with it."""
    job = _job_with(tmp_path / "j", None, None)
    side = job / "rank1" / "sidecar.json"
    side.unlink()
    if how == "directory":
        side.mkdir()
    else:
        side.symlink_to("sidecar.json")
    r = run_cli("validate", str(DDP_MODEL), str(job), "--draws", "0", "--steps", "10", "--quiet")
    _one_line_refusal(r, "share no step number", "a rank's sidecar was not read",
                      "rank1/sidecar.json")


def test_a_run_that_names_no_id_is_not_known_fresh(probe0_runs, tmp_path):
    """The model's own capture, its sidecar's id since lost (an edit, a sidecar over the size
    limit and so ignored): validate scored it as a baseline check of a fresh run."""
    cap, rep = probe0_runs / "nw1-r0", probe0_runs / "nw1-r1"
    model, ledger = tmp_path / "m.json", tmp_path / "l.jsonl"
    r = run_cli("calibrate", str(cap), "--replicate", str(rep), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert CAPTURES_NOTE in json.loads(model.read_text())["meta"]["notes"]
    r = run_cli("validate", str(model), str(_without_id(cap, tmp_path / "r0")), "--draws", "0",
                "--steps", "20", "--quiet", "--ledger", str(ledger))
    assert r.returncode == 0, r.stderr
    rec = json.loads(ledger.read_text())
    assert (rec["in_sample"], rec["baseline_check"]) == (True, False)


@needs_proc
def test_a_sidecar_over_the_size_limit_is_not_read_for_its_id(tmp_path):
    """capture_ids read a sidecar whole, past the limit its reader refuses (a 450 MB sidecar
    of 10^6 step records: 2.6 GB of peak memory in validate). A 300 MiB sparse file: refused
    unread, in its own process's peak memory."""
    import subprocess
    import sys

    side = tmp_path / "sidecar.json"
    with open(side, "wb") as h:
        h.truncate(300 << 20)
    code = ("import sys\n"
            "from stepsim.calibration.capture_ids import capture_ids\n"
            "print(sorted(capture_ids([sys.argv[1]])))\n" + PEAK_KIB)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, timeout=600)
    ids, peak_kib = r.stdout.strip().splitlines()
    assert ids == "[]", r
    assert int(peak_kib) < 200 * 1024, f"{int(peak_kib) / 1024:.0f} MiB to read no id"
