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
