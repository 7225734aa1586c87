"""A model of a profiled window unlike the steps after it says so in every verb, as a capture
under outside load does: a fresh user's window ran 2.25x its unprofiled steps (calibrate
warned once) and a batch_size what-if of it was +184 % off, unsaid by whatif and validate."""
from __future__ import annotations

import json
import shutil

from stepsim import api
from stepsim.scenarios.caveats import caveats, input_caveats
from stepsim.scenarios.op_text import parse_set
from tests.conftest import steps_in_turn
from tests.test_planner import cpu_model


def _drifted(ratio):
    m = cpu_model()
    return m.model_copy(update={"meta": m.meta.model_copy(
        update={"notes": {**m.meta.notes, "profiled_drift": ratio}})})


def test_the_drift_is_said_before_any_what_if():
    said = [c for c in input_caveats(_drifted(2.25)) if "profiled window" in c]
    assert len(said) == 1 and "ran 2.25x as long as" in said[0] and "re-capture" in said[0]
    assert any("2.25x" in c for c in caveats(_drifted(2.25), [parse_set("loader.num_workers=2")]))
    assert not [c for c in input_caveats(cpu_model()) if "profiled window" in c]


def test_calibrate_keeps_the_drift_of_a_team_capture(cpu_run_nw1, tmp_path):
    """On 2 intra-op threads (no measured step factor) a window of 2x the unprofiled steps'
    wall is kept in the model's notes and said by whatif; the same capture on 1 thread, whose
    step factor takes the profiler's cost out of the step, keeps none."""
    def edited(threads):
        run = tmp_path / f"run{threads}"
        shutil.copytree(cpu_run_nw1, run)
        data = json.loads((run / "sidecar.json").read_text())
        data["torch_num_threads"] = threads
        prof = [s for s in data["steps"] if s["profiled"]]
        t = max(s["t_start_us"] + s["wall_us"] for s in data["steps"])
        for k in range(24):   # unprofiled steps after the window, as after=24 records them
            s = dict(prof[k % len(prof)], profiled=False, profiler_on=False, t_start_us=t)
            s["next_wall_us"] = s["wall_us"] * 0.5   # each waited on the loader: not drained
            t += s["wall_us"]
            data["steps"].append(s)
        for s in prof:
            s["wall_us"] *= 2.0
        steps_in_turn(data["steps"])   # the longer walls move the later steps' starts
        (run / "sidecar.json").write_text(json.dumps(data))
        return api.calibrate(run).model

    team = edited(2)
    assert team.meta.notes["profiled_drift"] > 1.1
    w = api.whatif(team, set="loader.num_workers=2", steps=5, warmup=2, draws=0, jobs=1)
    assert sum("profiled window" in x for x in w.warnings) == 1
    assert "profiled_drift" not in edited(1).meta.notes


def test_simulate_and_diagnose_say_what_is_wrong_with_the_capture(tmp_path):
    """docs/interval.md: every verb on such a model says so once, before its result; simulate and
    diagnose of a model file said nothing (a fresh user's check, 2026-12-05), for a capture
    under outside load too."""
    from stepsim.models.params import save_model
    from tests.conftest import run_cli

    m = _drifted(2.25)
    m = m.model_copy(update={"meta": m.meta.model_copy(
        update={"notes": {**m.meta.notes, "outside_load_held": 0.5}})})
    save_model(m, tmp_path / "m.json")
    for verb in (["simulate", "--steps", "5"], ["diagnose", "--steps", "5", "--draws", "0"]):
        r = run_cli(verb[0], str(tmp_path / "m.json"), *verb[1:])
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("ran 2.25x as long as") == 1, (verb, r.stderr)
        assert r.stderr.count("ran under outside load (its threads advanced 2.0x") == 1
