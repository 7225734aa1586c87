"""A CPU model (no device) gets no GPU-only advice: diagnose, ceiling and plan name no GPU fix,
and a GPU fix asked for by name is refused in one line saying why, as cuda_graphs is."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stepsim import api
from stepsim.models.params import load_model, save_model
from stepsim.simcore.errors import NotApplicable
from tests.conftest import run_cli
from tests.test_planner import cpu_model

FAST = {"steps": 5, "warmup": 2, "draws": 0, "jobs": 1}
GPU_WORDS = ("cuda", "graph", "pin_memory", "mixed_precision", "fused", "kernel launch")


@pytest.mark.parametrize("fix,why", [
    ("pin_memory", "it has no device (a CPU run): pinned memory only speeds host-to-device"),
    ("cuda_graphs", "it has no device (a CPU run): a CUDA graph replays GPU kernels"),
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


# fresh12's 2-rank gloo DDP job (model_rep.json of 2026-12-07): a CPU run whose only device
# tasks are gloo's collectives, with a DataLoader that produces (52 ms a batch)
GLOO_CPU = Path(__file__).parent / "data" / "fresh12_gloo_model.json"
GPU_FIXES = ("gpu_decode", "pin_memory", "cuda_graphs", "fused_elementwise",
             "mixed_precision:factor=0.5")


@pytest.mark.parametrize("fix", GPU_FIXES)
def test_every_gpu_fix_is_refused_on_a_gloo_cpu_model_in_one_line(fix):
    name = fix.split(":")[0]
    r = run_cli("whatif", str(GLOO_CPU), "--fix", fix, "--steps", "5", "--draws", "0")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"fix {name} does not apply to this model: it has no device (a CPU run)" in r.stderr


def test_plan_proposes_no_gpu_fix_on_a_gloo_cpu_model():
    m = load_model(GLOO_CPU)
    assert {t.kind for t in m.task_map().values()} == {"collective"}   # gloo: no device
    p = api.plan(m, **FAST)
    names = [mv.op.name for mv in p.plan.moves]
    assert not set(names) & {f.split(":")[0] for f in GPU_FIXES}, names


def test_the_fixes_table_says_which_fixes_need_a_device():
    out = json.loads(run_cli("fixes", "--json").stdout)
    assert {k for k, f in out.items() if f["needs_device"]} == {
        f.split(":")[0] for f in GPU_FIXES}
    assert out["gpu_decode"]["changes"].endswith(
        "Refused on a model without a device (the decode would move to a GPU).")
