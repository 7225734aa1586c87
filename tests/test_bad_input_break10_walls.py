"""A step's wall that runs past the next step's start (tenth breaker, 2026-12-06): a sidecar
step of ``wall_us`` 1e11 µs (28 h) while the next step started 74 ms later calibrated with
exit 0 and no word, and a probe fitted co-run interference 0.435, outside its prior. One loop
runs its steps in turn: the harness stamps a step's end and the next step's start from one
clock, one after the other, so such a step cannot be right; it is dropped and counted in one
warning, its number kept for the trace's ``ProfilerStep#N`` match; inputs never changed."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_records import STEP_END_SLACK_US
from stepsim.warning_order import printed_texts
from tests.test_quirks import cli


def _sidecar(tmp_path, edit):
    """Four profiled steps of 100 µs, each starting as the one before ends (µs)."""
    steps = [{"t_start_us": 1000.0 + 100.0 * k, "wall_us": 100.0, "cpu_us": 50.0,
              "next_wall_us": 20.0, "next_cpu_us": 1.0, "profiled": True} for k in range(4)]
    d = {"stepsim_sidecar": 1, "loader": {"num_workers": 0}, "steps": steps,
         "probe": {"num_workers": 1,   # its steps after the run's (calibration.capture)
                   "steps": [dict(s, t_start_us=s["t_start_us"] + 1e4) for s in steps]}}
    edit(d)
    p = tmp_path / "sidecar.json"
    p.write_text(json.dumps(d))
    return load_sidecar(p)


@pytest.mark.parametrize("over_us, dropped", [(STEP_END_SLACK_US, False),
                                              (STEP_END_SLACK_US + 0.5, True),
                                              (1e3, True), (1e11 - 100.0, True)])
def test_a_wall_past_the_next_start_is_dropped_past_the_slack(tmp_path, over_us, dropped):
    """Closed form: step 1 ends ``over_us`` after step 2 starts; kept (as it is) up to the
    slack, dropped past it, its number remembered so the later steps keep theirs."""
    side = _sidecar(tmp_path, lambda d: d["steps"][1].update(wall_us=100.0 + over_us))
    if not dropped:
        assert side.dropped == [] and len(side.steps) == 4 and side.gone_steps == frozenset()
        return
    (note,) = side.dropped
    assert note.startswith("sidecar.json: dropped 1 of 4 'steps' record(s) that cannot be "
                           "right (first: steps.1: its wall_us of"), note
    assert f"ends {over_us:g} µs after steps.2 starts" in note, note
    assert [s.t_start_us for s in side.steps] == [1000.0, 1200.0, 1300.0]
    assert side.gone_steps == frozenset({1}) and len(side.probe.steps) == 4


def test_a_probe_step_past_the_next_start_is_dropped_too(tmp_path):
    side = _sidecar(tmp_path, lambda d: d["probe"]["steps"][0].update(wall_us=1e11))
    (note,) = side.dropped
    assert "dropped 1 of 4 'probe.steps'" in note and "(first: probe.steps.0:" in note, note
    assert len(side.probe.steps) == 3 and len(side.steps) == 4
    assert side.gone_steps == frozenset()     # the probe's steps are not the trace's


def test_only_the_last_step_of_a_run_is_left_when_every_wall_runs_on(tmp_path):
    """The last step has no next one to contradict it: it is kept."""
    def edit(d):
        for s in d["steps"]:
            s["wall_us"] = 1e11
    side = _sidecar(tmp_path, edit)
    assert "dropped 3 of 4 'steps'" in side.dropped[0]
    assert [s.t_start_us for s in side.steps] == [1300.0] and side.gone_steps == {0, 1, 2}


def _digest(folder) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())}


def _calibrate(src, tmp_path, name, wall_us):
    """``calibrate`` a copy of the real capture ``src`` whose third profiled step's wall is
    ``wall_us`` (the step after it starts where it did): (exit code, warnings, model)."""
    d = tmp_path / name
    shutil.copytree(src, d)
    data = json.loads((d / "sidecar.json").read_text())
    k = [i for i, s in enumerate(data["steps"]) if s["profiled"]][2]
    nxt = data["steps"][k + 1]["t_start_us"] - data["steps"][k]["t_start_us"]
    data["steps"][k]["wall_us"] = wall_us(nxt)
    (d / "sidecar.json").write_text(json.dumps(data))
    before = _digest(d)
    out = tmp_path / f"{name}.model.json"
    rc, err, _ = cli("calibrate", d, "-o", out)
    assert _digest(d) == before and "Traceback" not in err
    lines = [f"warning: {t}" for t in printed_texts(err)] + [     # each warning's whole text
        ln for ln in err.strip().splitlines() if not ln.startswith(("warning: ", "  "))]
    return rc, lines, json.loads(out.read_text()) if rc == 0 else None, k


def test_calibrate_drops_the_step_and_says_so_in_one_line(cpu_run_nw1, tmp_path):
    """A real 1-worker capture: a profiled step of 1e11 µs, and one whose wall ends 1 ms
    after the next step starts, each calibrate (exit 0) with one warning counting the dropped
    step; the two models are the same (what is left is the same records), and the trace's
    profiled steps still match the sidecar's (the dropped step's number is kept)."""
    runs = {name: _calibrate(cpu_run_nw1, tmp_path, name, wall)
            for name, wall in (("huge", lambda nxt: 1e11), ("ms", lambda nxt: nxt + 1e3))}
    models = []
    for name, (rc, lines, model, k) in runs.items():
        assert rc == 0, lines
        said = [w for w in lines if "'steps' record(s) that cannot be right" in w]
        assert len(said) == 1 and said[0].startswith("warning: sidecar.json: dropped 1 of "), \
            lines
        assert f"(first: steps.{k}: its wall_us of" in said[0], said[0]
        assert said[0][len("warning: "):] in model["meta"]["warnings"]
        meta = model.pop("meta")       # its name and paths are the copy's
        models.append((model, meta["steps_used"]))
    assert models[0] == models[1]
