"""The Python API's results carry the warnings the command line prints, as whatif's do: a
fresh user's ``simulate``, ``diagnose`` and ``report`` of a model captured under outside load
and off its unprofiled steps said so on the command line only (2026-12-05); ``report`` with no
what-if said it nowhere. ``diagnose MODEL.json`` names the model by the file given, not by its
capture folder."""
from __future__ import annotations

from stepsim import api
from stepsim.models.params import save_model
from stepsim.warning_order import printed_texts
from tests.conftest import run_cli
from tests.test_planner import cpu_model

DRIFT = "ran 2.25x as long as"
LOAD = "ran under outside load (its threads advanced 2.0x"
QUICK = {"steps": 5, "warmup": 2, "jobs": 1}


def _bad_capture(tmp_path):
    """A model file of a capture under outside load (held 0.5) whose profiled window ran
    2.25x its unprofiled steps, and its meta.name (its capture folder's) unlike the file's."""
    m = cpu_model()
    m = m.model_copy(update={"meta": m.meta.model_copy(update={
        "name": "base", "notes": {**m.meta.notes, "profiled_drift": 2.25,
                                  "outside_load_held": 0.5}})})
    path = tmp_path / "model.json"
    save_model(m, path)
    return m, path


def _said_once(warnings, printed=None):
    """Each of the two said in exactly one warning (printed: in one warning's whole text, under
    its summary line, stepsim.warning_order)."""
    for w in (DRIFT, LOAD):
        assert sum(w in x for x in warnings) == 1, warnings
        if printed is not None:
            assert "\n".join(printed_texts(printed)).count(w) == 1, printed


def test_simulate_and_ceiling_carry_the_capture_warnings(tmp_path):
    m, path = _bad_capture(tmp_path)
    for model in (m, path):
        s = api.simulate(model, steps=5, warmup=2)
        _said_once(s.warnings, str(s))
        assert str(s).startswith("Simulation(") and "\nwarning: " in repr(s)
        c = api.ceiling(model, **QUICK)
        _said_once(c.warnings, str(c))
        assert str(c).startswith("Ceilings(") and "\nwarning: " in repr(c)
    assert api.simulate(cpu_model(), steps=5, warmup=2).warnings == ()


def test_diagnose_carries_them_and_names_the_file(tmp_path):
    m, path = _bad_capture(tmp_path)
    d = api.diagnose(path, draws=0, **QUICK)
    _said_once(d.warnings, str(d))
    assert d.diagnosis.name == "model.json" and str(d).startswith("Diagnosed(model.json:")
    assert api.diagnose(m, draws=0, **QUICK).diagnosis.name == "base"   # an object: its own
    r = run_cli("diagnose", str(path), "--steps", "5", "--draws", "0")
    assert r.returncode == 0, r.stderr
    assert "diagnosis of model.json:" in r.stdout and "diagnosis of base" not in r.stdout


def test_report_carries_them_with_or_without_a_what_if(tmp_path):
    m, path = _bad_capture(tmp_path)
    kw = {"draws": 0, "with_plan": False, **QUICK}
    _said_once(api.report(m, **kw).warnings)
    _said_once(api.report(path, [("set", "loader.num_workers=2")], **kw).warnings)
    r = run_cli("report", str(path), "-o", str(tmp_path / "r.html"), "--steps", "5",
                "--draws", "0", "--no-plan")
    assert r.returncode == 0, r.stderr
    _said_once([r.stderr], r.stderr)
