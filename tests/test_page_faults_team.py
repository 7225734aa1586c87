"""A training step on torch's intra-op threads (torch's default: one per core) gets the page
fault model too (calibration.page_faults): its profiler cost is not measured, which had left
the re-faulting step in the model whole. A user's 2-thread CNN (2026-12-05, 2 cores) re-faulted
6,126 pages a step at 1 worker, its calibration setting, and 0-15 at 0 and 2 workers, which
then measured 52.3 and 60.4 ms against 69.3 and 73.0 predicted (+33 / +21 %, both outside
their intervals); with the faults held apart: 64.4 and 60.8 ms (+23 / +0.6 %, both inside)."""
from __future__ import annotations

import json
import shutil

import pytest

from stepsim.calibration.page_faults import refault_fit
from stepsim.calibration.sidecar import load_sidecar
from tests.conftest import steps_in_turn

C_US, BIG = 2.0, 60_000          # CPU µs per fault, the faults of a re-faulting step


def _copy(src, d, faults: bool):
    """The capture ``src`` as a 2-thread team on its 2 cores beside its worker, every third
    step re-faulting BIG pages (its CPU and wall C_US each more); fault counts kept only where
    ``faults``."""
    shutil.copytree(src, d)
    data = json.loads((d / "sidecar.json").read_text())
    data["torch_num_threads"], data["host_cores"] = 2, 2
    last = max(i for i, s in enumerate(data["steps"]) if s["profiled"])
    for i, s in enumerate(data["steps"]):
        flt = BIG if i % 3 == 1 and i != last else 0
        for f in ("cpu_us", "wall_us", "proc_cpu_us"):
            if s.get(f) is not None:
                s[f] += C_US * flt * (2 if f == "proc_cpu_us" else 1)
        for f in ("minflt", "next_minflt", "sys_cpu_us"):
            s.pop(f, None)
        if faults:
            s["minflt"] = 3 * BIG if i == 0 else flt
    steps_in_turn(data["steps"])       # the longer walls move the later steps' starts
    (d / "sidecar.json").write_text(json.dumps(data))
    return d


def test_a_team_capture_holds_its_re_faulting_apart(cpu_run_nw1, tmp_path):
    from stepsim.fit import calibrate
    from stepsim.models.host_speed import at_capture_speed

    old = calibrate(_copy(cpu_run_nw1, tmp_path / "old", False))
    d = _copy(cpu_run_nw1, tmp_path / "new", True)
    new = calibrate(d)
    rf = refault_fit(load_sidecar(d / "sidecar.json"))
    assert rf is not None and rf.max_faults == BIG
    o, n = old.host.ops[1], new.host.ops[1]
    assert o.threads == n.threads == 2 and o.refault_us == 0
    assert n.dur_us == pytest.approx(o.dur_us * rf.fault_free_us / rf.unprofiled_us, rel=1e-6)
    assert n.refault_us == pytest.approx(n.dur_us * rf.refault_us / rf.fault_free_us, rel=1e-6)
    assert new.host.refault_share == 0.5 and new.host.refault_share_range == (0.0, 1.0)
    assert any("page faults (measured)" in w for w in new.meta.warnings)
    # the replay of the capture gets the profiled window back, its faults included
    r = at_capture_speed(new).host.ops[1]
    assert r.refault_us == 0
    assert r.dur_us == pytest.approx(at_capture_speed(old).host.ops[1].dur_us, rel=1e-6)
