"""A real 2-rank DDP run on the CPU (gloo), recorded by the test, calibrated into one model."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from stepsim.calibration.calibrate import calibrate  # noqa: E402
from stepsim.models.simulate import simulate  # noqa: E402

WIDTH, DEPTH, CAP_MB = 256, 4, 0.25
"""4 layers of 256² float32 weights (256 KiB each): a 0.25 MiB cap gives one bucket per layer."""


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    from stepsim.demo.ddp_job import Run, run_plan

    out = tmp_path_factory.mktemp("gloo") / "cal"
    res = run_plan([Run("cal", bucket_cap_mb=CAP_MB, steps=4, warmup=2, profile_dir=str(out))],
                   width=WIDTH, depth=DEPTH, timeout_s=240)
    return out, res["cal"]


def test_two_rank_gloo_run_calibrates_into_one_model(gloo_run):
    out, ranks = gloo_run
    model = calibrate(out)
    assert [r.rank for r in model.ranks] == [0, 1]
    assert model.comm.world_size == 2 and model.meta.notes["kind"] == "cpu_ddp"
    assert len({r.host for r in model.ranks}) == 1 and model.ranks[0].host
    coll = model.device.streams["gloo"]
    assert all(t.kind == "collective" for t in coll)
    # the buckets read from the enqueues are those DDP itself reports, in reduction order
    reported = [int(x) for x in ranks[0]["buckets"]["rebuilt_bucket_sizes"].split(",")]
    assert [t.bytes for t in coll] == reported and len(reported) == DEPTH
    launches = [op for op in model.host.ops if op.kind == "launch"]
    assert [op.task for op in launches] == [t.id for t in coll]
    syncs = [op for op in model.host.ops if op.kind == "sync"]
    assert syncs and syncs[-1].task == coll[-1].id       # the untraced end-of-backward wait
    phases = [op.phase for op in model.host.ops if op.kind == "cpu"]
    assert phases[0] == "forward" and "backward" in phases and phases[-1] == "optimizer"
    res = simulate(model, steps=3, warmup=1)
    assert res.step_us.shape == (2, 3) and (res.step_us > 0).all()
