"""DDP rank sidecars that disagree on a setting every rank of one job shares are refused in
one line naming both files and the field (exit 2); before, rank 1's num_workers, batch size or
bucket_cap_mb could differ from rank 0's and the job calibrated silently (the model took rank
0's for both). A field that may differ (the torch version) is a warning."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stepsim.calibration.rank_agree import MUST_AGREE, check_ranks_agree
from stepsim.calibration.sidecar import Sidecar
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli
from tests.test_gloo import gloo_run  # noqa: F401  (the module's real job)


def _side(rank: int, **over) -> Sidecar:
    data = {"stepsim_sidecar": 1, "torch_version": "2.13.0", "torch_num_threads": 1,
            "host_name": f"h{rank}", "host_cores": 2 + rank,
            "loader": {"num_workers": 2, "batch_size": 64, "prefetch_factor": 2},
            "ddp": {"world_size": 2, "rank": rank, "backend": "gloo", "bucket_cap_mb": 25.0,
                    "params": [{"name": "0.weight", "shape": [4, 4], "numel": 16,
                                "dtype": "torch.float32", "bytes": 64}]}}
    for dotted, v in over.items():
        obj, *path, last = [data, *dotted.split("__")]
        for p in path:
            obj = obj[p]
        obj[last] = v
    return Sidecar.model_validate(data)


@pytest.mark.parametrize("field,value", [("loader__num_workers", 4), ("loader__batch_size", 32),
                                         ("ddp__bucket_cap_mb", 1.0), ("ddp__world_size", 3),
                                         ("torch_num_threads", 2)])
def test_a_field_that_must_agree_is_refused_naming_both_files(field, value):
    sides = {0: (Path("a/rank0.sidecar.json"), _side(0)),
             1: (Path("a/rank1.sidecar.json"), _side(1, **{field: value}))}
    dotted = field.replace("__", ".")
    assert dotted in MUST_AGREE
    with pytest.raises(InputError) as e:
        check_ranks_agree(sides)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("a/rank1.sidecar.json: ") and "rank0.sidecar.json" in msg
    assert f"{dotted} is " in msg and "must agree" in msg


def test_fields_that_may_differ_pass_and_the_torch_version_warns():
    """Host name and cores differ (ranks on two hosts): accepted silently; another torch:
    a warning naming the field."""
    sides = {0: (Path("rank0.sidecar.json"), _side(0)),
             1: (Path("rank1.sidecar.json"), _side(1, torch_version="2.12.0"))}
    warns = check_ranks_agree(sides)
    assert len(warns) == 1 and "torch_version" in warns[0] and "rank0.sidecar.json" in warns[0]
    same = {0: sides[0], 1: (Path("rank1.sidecar.json"), _side(1))}
    assert check_ranks_agree(same) == []


def test_a_different_parameter_is_named():
    p = [{"name": "0.weight", "shape": [4, 8], "numel": 32, "dtype": "torch.float32",
          "bytes": 128}]
    sides = {0: (Path("rank0.sidecar.json"), _side(0)),
             1: (Path("rank1.sidecar.json"), _side(1, ddp__params=p))}
    with pytest.raises(InputError, match=r"ddp\.params is parameter 0 is 0\.weight \[4, 8\]"):
        check_ranks_agree(sides)


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["loader"].update(num_workers=2), "loader.num_workers"),
    (lambda d: d["ddp"].update(bucket_cap_mb=25.0), "ddp.bucket_cap_mb")])
def test_calibrate_refuses_a_real_job_whose_ranks_disagree(gloo_run, tmp_path, edit,  # noqa: F811
                                                           field):
    """The test's real 2-rank job with rank 1's sidecar edited: exit 2, one line; before, it
    calibrated (exit 0) with rank 0's setting for both."""
    d = tmp_path / "job"
    shutil.copytree(gloo_run[0], d)
    f = d / "rank1.sidecar.json"
    data = json.loads(f.read_text())
    edit(data)
    f.write_text(json.dumps(data))
    res = run_cli("calibrate", str(d), "-o", str(tmp_path / "m.json"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "rank1.sidecar.json" in lines[0] and "rank0.sidecar.json" in lines[0]
    assert f"{field} is " in lines[0]
    assert not (tmp_path / "m.json").exists()
