"""Bad input on the last landings' readings (break23, 2026-12-07): a gloo job's rank folder
with a rank trace that does not read, on a real 2-rank gloo capture (tests/data/gloo_loader_job)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

GLOO_JOB = Path(__file__).parent / "data" / "gloo_loader_job"


def _flat_job(dst: Path) -> Path:
    """The gloo job in the flat layout (``rank<N>.json.gz`` + ``rank<N>.sidecar.json``)."""
    dst.mkdir()
    for k in (0, 1):
        shutil.copy(GLOO_JOB / f"rank{k}" / "trace.json.gz", dst / f"rank{k}.json.gz")
        shutil.copy(GLOO_JOB / f"rank{k}" / "sidecar.json", dst / f"rank{k}.sidecar.json")
    return dst


@pytest.mark.parametrize("layout", ["flat", "harness"])
@pytest.mark.parametrize("bad", [0, 1])
def test_a_rank_trace_that_does_not_read_is_named_and_its_rank_said_missing(tmp_path, layout,
                                                                           bad):
    """A binary rank-0 trace in a gloo job's folder: the job was not known as a gloo job (its
    first file did not read), so rank 1's trace calibrated as a one-process CPU trace without
    its rank sidecar ("no sidecar"), exit 0 (break22's leftover); a binary rank-1 trace
    refused the job. Either is now skipped and named, its rank said to have no trace, and the
    other rank calibrated as a gloo job with its own sidecar."""
    if layout == "flat":
        job = _flat_job(tmp_path / "job")
        trace = job / f"rank{bad}.json.gz"
    else:
        job = shutil.copytree(GLOO_JOB, tmp_path / "job")
        trace = job / f"rank{bad}" / "trace.json.gz"
    trace.write_bytes(bytes(range(256)) * 64)
    out = tmp_path / "m.json"
    r = run_cli("calibrate", str(job), "-o", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    model = json.loads(out.read_text())
    assert model["comm"]["world_size"] == 2
    assert [k["rank"] for k in model["ranks"]] == [1 - bad]
    warnings = "\n".join(model["meta"]["warnings"])
    name = trace.relative_to(job).as_posix()
    assert f"skipped 1 of 2 rank trace files: {name}: " in warnings, warnings
    assert f"rank {bad} of the job's 2 (world size) has no trace" in warnings, warnings
    assert "no sidecar" not in r.stderr, r.stderr


# --- a sidecar of 200,000 batch records (break22: 10^6 took 2.67 GB) -----------------------

PEAK_KIB = ("print(next(int(x.split()[1]) for x in open('/proc/self/status')\n"
            "           if x.startswith('VmHWM:')))\n")
"""Code that prints its process's peak resident memory (KiB; the high-water mark starts anew
at exec)."""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                    reason="reads its peak memory from /proc (Linux)")
def test_a_large_sidecar_is_read_in_under_ten_bytes_a_byte(probe0_runs, tmp_path):
    """A sidecar of 200,000 copied batch records (all but the run's own are dropped as made
    while their worker made another, and counted): its reading held a second parse tree beside
    orjson's (the duplicate-key check) and each record's dict beside its model: 11.1 bytes of
    peak memory per byte of the file above the imports (10^6 records, 191 MB: 2.55 GB peak);
    now 9.3 (1.96 GB). The peak of the read, in its own process, less the peak before it."""
    import subprocess
    import sys

    data = json.loads((probe0_runs / "nw1-r0" / "sidecar.json").read_text())
    given = data["produce"]
    data["produce"] = [given[i % len(given)] for i in range(200_000)]
    side = tmp_path / "sidecar.json"
    side.write_text(json.dumps(data, separators=(",", ":")))
    code = ("import sys\n"
            "from stepsim.calibration.sidecar import load_sidecar\n"
            + PEAK_KIB + "s = load_sidecar(sys.argv[1])\n"
            "print(len(s.produce), s.dropped[0])\n" + PEAK_KIB)
    r = subprocess.run([sys.executable, "-c", code, str(side)], capture_output=True, text=True,
                       timeout=600)
    before, said, after = r.stdout.strip().splitlines()
    assert "of 200000 'produce' record(s) that cannot be right" in said, r
    per_byte = (int(after) - int(before)) * 1024 / side.stat().st_size
    assert per_byte < 10.2, f"{per_byte:.1f} bytes of peak memory per byte of the sidecar"


# --- step records out of their place (break22: the whole sidecar refused) ------------------

def _edited_capture(src: Path, dst: Path, edit) -> Path:
    """Capture folder ``src`` copied to ``dst`` with ``edit`` applied to its sidecar's steps."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "sidecar.json").read_text())
    edit(data["steps"], [i for i, s in enumerate(data["steps"]) if s["profiled"]])
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def _swap(steps, prof):
    steps[prof[2]], steps[prof[2] + 1] = steps[prof[2] + 1], steps[prof[2]]


@pytest.mark.parametrize("edit,said", [
    (lambda steps, prof: steps.insert(prof[2], dict(steps[prof[2]])), "as copies (first: steps."),
    (_swap, "(first: steps."),
    (lambda steps, prof: steps.reverse(), "(first: steps.0: steps.1 after it starts before it)")])
def test_step_records_out_of_place_are_dropped_and_counted(probe0_runs, tmp_path, edit, said):
    """A real capture's step records duplicated, swapped or reversed: calibrate refused the
    whole sidecar (exit 2) and validate ignored it. Now the records that cannot be in their
    place are dropped and counted and the rest calibrate; a copied record's model is the
    unedited capture's, but for the warning that counts it."""
    cap = _edited_capture(probe0_runs / "nw1-r0", tmp_path / "cap", edit)
    out = tmp_path / "m.json"
    r = run_cli("calibrate", str(cap), "-o", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    note = next(w for w in json.loads(out.read_text())["meta"]["warnings"]
                if "'steps' record(s) that cannot be right" in w)
    assert said in note, note
    if "copies" in said:
        ref = tmp_path / "ref.json"
        assert run_cli("calibrate", str(probe0_runs / "nw1-r0"), "-o", str(ref)).returncode == 0
        a, b = (json.loads(f.read_text()) for f in (ref, out))
        for m in (a, b):
            m["meta"] = {k: v for k, v in m["meta"].items()
                         if k not in ("warnings", "traces", "name")}
        assert a == b


def test_a_ledger_of_nul_bytes_past_the_read_limit_is_not_called_empty(tmp_path):
    """A 300 MiB sparse file of NUL bytes as a ledger (one line, longer than the 256 MiB read
    from a ledger's end): ``ledger`` said "the ledger is empty", naming nothing of what it
    holds; it now says why no record was read."""
    f = tmp_path / "ledger.jsonl"
    with open(f, "wb") as h:
        h.truncate(300 << 20)
    r = run_cli("ledger", str(f))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "holds no validation record (is larger than 256 MiB" in line, line
    assert "empty" not in line, line
