"""A CPU model (no device) gets no GPU-only advice: diagnose, ceiling and plan name no GPU fix,
and a GPU fix asked for by name is refused in one line saying why, as cuda_graphs is."""
from __future__ import annotations

import re

import pytest

from stepsim import api
from stepsim.models.params import save_model
from stepsim.simcore.errors import NotApplicable
from tests.conftest import run_cli
from tests.test_planner import cpu_model

FAST = {"steps": 5, "warmup": 2, "draws": 0, "jobs": 1}
GPU_WORDS = ("cuda", "graph", "pin_memory", "mixed_precision", "fused", "kernel launch")


@pytest.mark.parametrize("fix,why", [
    ("pin_memory", "it has no device (a CPU run): pinned memory only speeds host-to-device"),
    ("cuda_graphs", "no launches"),
])
def test_a_gpu_fix_on_a_cpu_model_is_refused(tmp_path, fix, why):
    with pytest.raises(NotApplicable, match=re.escape(f"fix {fix} does not apply to this model: {why}")):
        api.whatif(cpu_model(), fix=fix, **FAST)
    save_model(cpu_model(), tmp_path / "m.json")
    r = run_cli("whatif", str(tmp_path / "m.json"), "--fix", fix, "--steps", "5", "--draws", "0")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and why in r.stderr


def test_set_pin_memory_on_a_cpu_model_stays_a_caveat():
    w = api.whatif(cpu_model(), set="loader.pin_memory=true", **FAST)
    assert any("changes nothing here: this model has no device" in x for x in w.warnings)


def test_no_gpu_fix_is_offered_to_a_cpu_model():
    m = cpu_model(workers=0, produce_us=3000)
    d = api.diagnose(m, **FAST)
    fixes = [w.fix for f in d.diagnosis.findings for w in f.whatifs]
    c = api.ceiling(m, steps=5, warmup=2, jobs=1)
    p = api.plan(m, **FAST)
    text = " ".join([*fixes, *(mv.op.name for mv in p.plan.moves), p.plan.stop,
                     *(x.label for x in c.report.rows)]).lower()
    assert not any(w in text for w in GPU_WORDS), text
