"""break12 on a real 2-rank gloo job (:mod:`tests.test_gloo`'s recording): a replicate rank
folder of another DDP setting (``bucket_cap_mb`` 1 against the capture's) was taken as a run
of the capture's setting, its speed measured against it (exit 0); it is refused in one line,
as a plain replicate of another ``batch_size`` is."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from stepsim.fit import calibrate  # noqa: E402
from stepsim.simcore.errors import InputError  # noqa: E402
from tests.test_ddp_replicate_load import _runs  # noqa: E402
from tests.test_gloo import gloo_run  # noqa: E402,F401  (a real 2-rank job)


def test_a_ddp_replicate_of_another_bucket_cap_is_refused(gloo_run, tmp_path):  # noqa: F811
    cap, rep = _runs(gloo_run[0], tmp_path, [0.0, 0.0])
    assert calibrate(cap, replicates=[rep]).host.speed_runs[0] == 1.0   # as recorded: taken
    for f in sorted(rep.glob("rank*.sidecar.json")):
        data = json.loads(f.read_text())
        data["ddp"]["bucket_cap_mb"] = 1.0 if data["ddp"].get("bucket_cap_mb") != 1.0 else 2.0
        f.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"not a replicate of the capture: ddp\.bucket_cap_mb "
                                         r"is [12]\.0, the capture's is"):
        calibrate(cap, replicates=[rep])
