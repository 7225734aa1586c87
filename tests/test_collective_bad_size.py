"""A GPU collective whose record gives a size that cannot be right (an element count below 0
or past ``MAX_NUMEL``, a dtype that is no tensor element type) has unknown bytes, as before,
and now is counted in one warning (``calibration.step_fit.bad_sizes_said``), the house rule
for a record that cannot be right; a size the trace does not give stays unknown unsaid."""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from stepsim.calibration.gpu_kinds import MAX_NUMEL, size_bytes
from stepsim.models.params import load_model
from stepsim.models.warning_record import records
from tests.conftest import shared_traces
from tests.test_quirks import cli


@pytest.mark.parametrize("numel, dtype, want", [
    (10, "float", (40, False)), (10, "c10::BFloat16", (20, False)), (3, "Float", (12, False)),
    (7, "unsigned char", (7, False)), (2, "long int", (16, False)), (0, "int", (0, False)),
    (MAX_NUMEL, "int8", (MAX_NUMEL, False)), (None, "float", (None, False)),
    (10, "", (None, False)), (10, None, (None, False)),
    (-5, "float", (None, True)), (MAX_NUMEL + 1, "int8", (None, True)),
    (10, "quux", (None, True)), (None, "TensorList", (None, True))])
def test_size_bytes_says_which_sizes_cannot_be_right(numel, dtype, want):
    assert size_bytes(numel, dtype) == want


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _calibrated(path: Path, tmp_path: Path):
    out = tmp_path / f"{path.name}.model.json"
    rc, err, _ = cli("calibrate", path, "-o", out)
    assert rc == 0, err
    return load_model(out)


def _colls(m) -> list:
    return [t.bytes for ts in m.device.streams.values() for t in ts if t.kind == "collective"]


def test_impossible_collective_sizes_are_counted_in_one_warning(tmp_path):
    """HTA's sampled rank 0, a copy with two of its ``nccl:all_reduce`` annotations edited:
    the first's Input Dims to [[-5, 4]], the second's Input type to ["quux"]. Both were
    unknown bytes without a word; now one line counts them, and every other size is as in
    the unedited copy. The original trace is not changed."""
    src = shared_traces() / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    before = _md5(src)
    d = json.load(gzip.open(src))
    hits = [e for e in d["traceEvents"] if e.get("name") == "nccl:all_reduce"
            and e.get("args", {}).get("Input type") == ["float"]]
    assert len(hits) >= 2
    orig = tmp_path / "orig.json.gz"
    with gzip.open(orig, "wt") as f:
        json.dump(d, f)
    hits[0]["args"]["Input Dims"] = [[-5, 4]]
    hits[1]["args"]["Input type"] = ["quux"]
    edited = tmp_path / "rank0.json.gz"
    with gzip.open(edited, "wt") as f:
        json.dump(d, f)
    m0, m1 = _calibrated(orig, tmp_path), _calibrated(edited, tmp_path)
    assert not [w for w in m0.meta.warnings if "cannot be right (an element count" in w]
    said = [r for r in records(m1.meta) if r.kind == "collective_bad_size"]
    assert len(said) == 1 and said[0].noted
    n = len(_colls(m1))
    assert said[0].text.startswith(f"rank0.json.gz: 2 of {n} collective(s) in step ")
    assert "the first: all_reduce" in said[0].text
    b0, b1 = _colls(m0), _colls(m1)
    changed = [i for i, (x, y) in enumerate(zip(b0, b1)) if x != y]
    assert len(b0) == len(b1) and len(changed) == 2 and all(b1[i] is None for i in changed)
    assert None not in b0                 # its byte and long-int collectives are sized too
    assert _md5(src) == before
