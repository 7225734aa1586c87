"""A sidecar's fields of the right type but impossible values (findings of the breaker
session): a count past the model's bounds, a time past MAX_DURATION_US (about 11.6 days), a
schema version this stepsim does not read. Before: ``torch_num_threads: 10**18`` or a produce
record's ``cpu_us: 1e300`` passed the sidecar's checks and failed the model's, a pydantic
traceback (exit 1); ``stepsim_sidecar: 99`` was read as version 1. Now a count or a step
record out of range refuses the sidecar in one line naming the field; a produce record
(one batch, standing alone) that cannot be right is dropped and counted in a warning."""
from __future__ import annotations

import json

import pytest

from stepsim.fit import calibrate
from stepsim.calibration.sidecar import load_sidecar
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli
from tests.conftest import later_run
from tests.test_bad_input_session import _edited as _copy




@pytest.mark.parametrize("edit,says", [
    (lambda d: d.update(torch_num_threads=10**18), "torch_num_threads: Input should be less "
                                                   "than or equal to 256"),
    (lambda d: d.update(cpu_count=10**18), "cpu_count"),
    (lambda d: d["steps"][2].update(wall_us=1e300), "steps.2.wall_us"),
    (lambda d: d["steps"][0].update(next_cpu_us=-4), "steps.0.next_cpu_us"),
    (lambda d: d.update(stepsim_sidecar=99), "is 99; this stepsim reads version 1 (a newer"),
    (lambda d: d.update(stepsim_sidecar="1"), "is '1'; this stepsim reads version 1"),
])
def test_out_of_range_is_one_line_naming_the_field(tmp_path, cpu_run_nw1, edit, says):
    d = _copy(cpu_run_nw1, tmp_path / "run", edit)
    with pytest.raises(InputError, match="sidecar") as e:
        load_sidecar(d / "sidecar.json")
    assert says in str(e.value) and str(d / "sidecar.json") in str(e.value)
    r = run_cli("calibrate", str(d), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("warning:")] == \
        [f"stepsim: error: {e.value}"]


def test_a_produce_record_that_cannot_be_right_is_dropped_and_counted(tmp_path, cpu_run_nw1):
    n = len(json.loads((cpu_run_nw1 / "sidecar.json").read_text())["produce"])

    def edit(d):
        d["produce"][1].update(cpu_us=1e300)
        d["produce"][3] = None

    d = _copy(cpu_run_nw1, tmp_path / "run", edit)
    side = load_sidecar(d / "sidecar.json")
    assert len(side.produce) == n - 2
    # a real capture under load can add its own note (a scheduler measurement ignored)
    assert [w for w in side.dropped if "'produce'" in w] == [
                            f"sidecar.json: dropped 2 of {n} 'produce' record(s) that cannot be "
                            "right (first: produce.1.cpu_us: Input should be less than or equal "
                            "to 1000000000000)"]
    model = calibrate(d)
    assert [w for w in side.dropped if "'produce'" in w][0] in model.meta.warnings


def test_a_replicate_without_produce_records_is_compared_on_the_steps(tmp_path, cpu_run_nw1):
    """A replicate whose produce records were all dropped (or never written) measures the
    host's speed from the step records alone, against the capture's step records alone.
    Before: its steps' CPU time was divided by the capture's produce + steps (0.341x for an
    unchanged copy), and the dropped records went unsaid."""
    from stepsim.calibration.host_noise import replicate_speeds

    def slower(d):
        for rec in d["steps"]:
            for k in ("cpu_us", "proc_cpu_us", "next_cpu_us", "next_proc_cpu_us"):
                if rec.get(k) is not None:
                    rec[k] *= 1.2
        for rec in d["produce"]:
            rec["cpu_us"] = 1e300
        later_run(d, quiet=True)

    rep = _copy(cpu_run_nw1, tmp_path / "rep", slower)
    side = load_sidecar(cpu_run_nw1 / "sidecar.json")
    speeds = replicate_speeds(cpu_run_nw1 / "sidecar.json", side,
                              [(rep, load_sidecar(rep / "sidecar.json"))])
    assert speeds == [1.0, pytest.approx(1.2)]
    model = calibrate(cpu_run_nw1, replicates=[rep])
    assert [w for w in model.meta.warnings if w.startswith("replicate sidecar.json: dropped")]
