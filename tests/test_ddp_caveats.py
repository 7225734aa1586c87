"""DDP what-ifs' caveats on a one-host gloo job (fresh14, 2026-12-07): ``--fix
faster_interconnect`` prices a link the job does not have (its all-reduce is loopback), and an
explicit bucket cap moves the bucket count through DDP's first bucket, each said in one line."""
from __future__ import annotations

from pathlib import Path

from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.transforms import FixOp, SetOp

MODEL = Path(__file__).resolve().parent / "data" / "fresh12_gloo_model.json"
"""A user's 2-rank gloo job on one host, calibrated (default buckets: first 1 MiB)."""


def _model():
    from stepsim.api import load_model

    return load_model(str(MODEL))


def test_faster_interconnect_on_one_host_gloo_is_said_unvalidatable():
    m = _model()
    assert len({r.host for r in m.ranks}) == 1 and m.comm.comm_stream == "gloo"
    said = caveats(m, [FixOp(name="faster_interconnect")])
    assert any("one-host gloo job: its all-reduce is loopback" in w for w in said)
    assert not any("loopback" in w for w in caveats(m, [SetOp(path="loader.num_workers",
                                                              value=0)]))
    # ranks on two hosts: a link exists, no caveat
    two = m.model_copy(update={"ranks": [r.model_copy(update={"host": f"h{i}"})
                                         for i, r in enumerate(m.ranks)]})
    assert not any("loopback" in w for w in caveats(two, [FixOp(name="faster_interconnect")]))


def test_an_explicit_cap_says_the_first_bucket_moves_the_count():
    from stepsim.models.ddp import build_buckets

    m = _model()
    c = m.comm
    assert c.first_bucket_cap_mb == 1.0
    n = len(build_buckets(c.grad_params, c.bucket_cap_mb, c.first_bucket_cap_mb))
    k = len(build_buckets(c.grad_params, 25.0, 25.0))
    line = next(w for w in caveats(m, [SetOp(path="comm.bucket_cap_mb", value=25.0)])
                if "caps DDP's first bucket too" in w)
    assert f"{n} bucket(s) -> {k}" in line and "bucket_cap_mb=25 given explicitly" in line
    assert any("caps DDP's first bucket too" in w
               for w in caveats(m, [FixOp(name="bucket_cap_mb", args={"mb": 5})]))


def test_a_device_fix_on_a_cpu_model_says_it_does_not_apply_before_its_arguments():
    """``--fix mixed_precision`` without ``factor`` on a CPU model: "does not apply ... no
    device", not "factor: Field required" (fresh14); on a GPU model the missing argument is
    still refused."""
    from tests.test_quirks import cli, one_line_error

    rc, err, _ = cli("whatif", MODEL, "--fix", "mixed_precision", "--draws", "0")
    one_line_error(rc, err, "mixed_precision does not apply to this model",
                   "it has no device (a CPU run)")
    gpu = MODEL.parents[2] / "scenarios" / "reference" / "input_pipeline_a.yaml"
    rc, err, _ = cli("whatif", gpu, "--fix", "mixed_precision", "--draws", "0")
    one_line_error(rc, err, "fix mixed_precision: factor: Field required")
