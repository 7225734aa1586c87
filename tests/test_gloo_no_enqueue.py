"""A gloo job's trace whose every all-reduce enqueue (``c10d::allreduce_`` on the training
thread) is gone, removed or dropped by the reader for a negative ``dur``: its ``gloo:``
collectives cannot be paired with anything, and calibrate made a model of the job with no
all-reduce at all (a warning, exit 0; break21, 2026-12-07), on which every bucket what-if
was meaningless. It is refused in one line naming the file, exit 2, the input unchanged.
Enqueues that are there but of 0 µs still place their collectives: the job calibrates with
its all-reduces, as the unedited trace does."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from stepsim.models.params import load_model
from tests.test_quirks import cli, one_line_error

JOB = Path(__file__).parent / "data" / "gloo_loader_job"
ENQUEUE = "c10d::allreduce_"


def _edited(tmp_path: Path, how: str) -> Path:
    """A copy of the 2-rank job with every all-reduce enqueue ``gone``, of ``dur`` -1
    (``negative``) or of ``dur`` 0 (``zero``) in both ranks' traces."""
    out = tmp_path / how
    shutil.copytree(JOB, out)
    for t in out.glob("rank*/trace.json.gz"):
        with gzip.open(t, "rt") as f:
            raw = json.load(f)
        hit = [e for e in raw["traceEvents"] if str(e.get("name", "")).startswith(ENQUEUE)]
        assert hit
        if how == "gone":
            raw["traceEvents"] = [e for e in raw["traceEvents"] if not any(e is h for h in hit)]
        for e in hit:
            e["dur"] = 0 if how == "zero" else -1
        with gzip.open(t, "wt") as f:
            json.dump(raw, f)
    return out


def _md5s(folder: Path) -> dict:
    return {p.name + str(p.parent.name): hashlib.md5(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["gone", "negative"])
def test_a_job_with_no_enqueue_left_is_refused_in_one_line(tmp_path, how):
    job = _edited(tmp_path, how)
    before = _md5s(job)
    rc, err, _ = cli("calibrate", job, "-o", tmp_path / "m.json")
    line = one_line_error(rc, err, str(job / "rank0"), "gloo collective(s)",
                          "no c10d enqueue")
    assert "16 gloo collective(s)" in line     # the fixture's 8 steps of 2 all-reduces
    assert not (tmp_path / "m.json").exists()
    assert _md5s(job) == before


def test_enqueues_of_0_us_still_place_the_all_reduces(tmp_path):
    """The pairing holds, so the model keeps the job's all-reduces (one launch and one
    collective task per bucket, as the unedited trace's model)."""
    rc, err, _ = cli("calibrate", JOB, "-o", tmp_path / "base.json")
    assert rc == 0, err
    rc, err, _ = cli("calibrate", _edited(tmp_path, "zero"), "-o", tmp_path / "zero.json")
    assert rc == 0, err
    base, zero = load_model(tmp_path / "base.json"), load_model(tmp_path / "zero.json")

    def launches(m):
        return [op.task for op in m.host.ops if op.kind == "launch"]

    assert launches(zero) == launches(base) and len(launches(zero)) == 2
    assert sorted(zero.device.tasks()) == sorted(base.device.tasks())
