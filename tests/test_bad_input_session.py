"""Bad input to this session's new features: one line naming the file, exit code 2, nothing
written (calibrate --replicate, the API's bounds, the prefetch rule, the step count)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from stepsim.fit import calibrate
from stepsim.simcore.errors import InputError
from tests.conftest import later_run


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "stepsim", *map(str, argv)],
                          capture_output=True, text=True, timeout=300)


def _one_line_error(r, *words):
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def _edited(src, dst, edit):
    """A copy of capture ``src`` whose sidecar JSON ``edit`` changes in place."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "sidecar.json").read_text())
    edit(data)
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def _scaled(factor):
    def edit(data):
        for rec in data["produce"] + data["steps"]:
            for k in ("cpu_us", "proc_cpu_us", "next_cpu_us", "next_proc_cpu_us",
                      "sys_cpu_us"):
                if rec.get(k) is not None:
                    rec[k] *= factor
        later_run(data, quiet=True)
    return edit


def test_the_capture_or_a_copy_is_not_a_replicate(cpu_run_nw1, tmp_path):
    copy = _edited(cpu_run_nw1, tmp_path / "copy", lambda d: None)
    for rep in (cpu_run_nw1, cpu_run_nw1 / "sidecar.json", copy):
        with pytest.raises(InputError, match="same records as") as e:
            calibrate(cpu_run_nw1, replicates=[rep])
        assert str(rep) in str(e.value)
    slow = _edited(cpu_run_nw1, tmp_path / "slow", _scaled(1.1))
    with pytest.raises(InputError, match=f"same records as {slow}"):
        calibrate(cpu_run_nw1, replicates=[slow, slow])


def test_an_edited_copy_of_the_capture_is_not_a_replicate(cpu_run_nw1, tmp_path):
    """A copy of the capture with its CPU times edited (1.1x) keeps the capture's instants (to
    the µs on the host's clock): not another run, refused in one line naming it; the same
    edit captured later (its instants moved) is a replicate."""
    def edited_only(data):
        _scaled(1.1)(data)
        later_run(data, -6e7)          # undo the move: the capture's own instants
    copy = _edited(cpu_run_nw1, tmp_path / "copy", edited_only)
    r = _cli("calibrate", cpu_run_nw1, "--replicate", copy, "-o", tmp_path / "m.json")
    _one_line_error(r, str(copy), "step and batch instants are those of",
                    "a copy of that run with edited values")
    later = _edited(cpu_run_nw1, tmp_path / "later", _scaled(1.1))
    runs = calibrate(cpu_run_nw1, replicates=[later]).host.speed_runs
    assert runs[1] / runs[0] == pytest.approx(1.1)


def test_a_replicate_whose_cpu_times_cannot_be_right(cpu_run_nw1, tmp_path):
    huge = _edited(cpu_run_nw1, tmp_path / "huge", _scaled(1e300))   # past MAX_DURATION_US
    r = _cli("calibrate", cpu_run_nw1, "--replicate", huge, "-o", tmp_path / "m.json")
    _one_line_error(r, str(huge), "cpu_us: Input should be less than or equal to 1000000000000")
    slow = _edited(cpu_run_nw1, tmp_path / "slow", _scaled(1e5))   # in range, 1e5x the work
    r = _cli("calibrate", cpu_run_nw1, "--replicate", slow, "-o", tmp_path / "m.json")
    _one_line_error(r, str(slow), "not a run of the same work")
    assert not (tmp_path / "m.json").exists()
    zero = _edited(cpu_run_nw1, tmp_path / "zero", _scaled(0.0))
    with pytest.raises(InputError, match="no produce or step records with CPU time"):
        calibrate(cpu_run_nw1, replicates=[zero])


def test_replicate_errors_name_the_capture_file(cpu_run_nw1, tmp_path):
    zero = _edited(cpu_run_nw1, tmp_path / "zero", _scaled(0.0))
    with pytest.raises(InputError, match="calibration capture's sidecar") as e:
        calibrate(zero, replicates=[cpu_run_nw1])
    assert str(zero / "sidecar.json") in str(e.value)
    r = _cli("calibrate", cpu_run_nw1 / "trace.json.gz", "--replicate", cpu_run_nw1,
             "-o", tmp_path / "m.json")
    _one_line_error(r, str(cpu_run_nw1 / "trace.json.gz"), "needs the capture's sidecar")


def test_huge_cpu_work_takes_bounded_quanta():
    """Two threads of 1e12 µs of work on one core: round robin, both end near 2e12 µs, in at
    most MAX_QUANTA quanta each (it was 5e8 quanta: a model with 1e12 µs ops never ended)."""
    import simpy

    from stepsim.models.cpu import MAX_QUANTA, CpuPool

    env = simpy.Environment()
    pool = CpuPool(env, cores=1, contended=True)
    procs = [env.process(pool.work(1e12)) for _ in range(2)]
    ends = []
    for p in procs:
        p.callbacks.append(lambda _e: ends.append(env.now))
    events = 0
    while env.peek() != float("inf"):
        env.step()
        events += 1
        assert events < 20 * MAX_QUANTA
    assert ends == pytest.approx([2e12, 2e12], rel=1e-3)


def test_a_draw_past_the_duration_bound_is_one_error():
    """A host op at the most a model holds (1e12 µs) and measured steps to bootstrap: a draw
    that scales it up was a pydantic traceback; it is a ModelError the CLI shows in one line."""
    from stepsim.models.params import (MAX_DURATION_US, DurationSpec, HostOp, HostParams,
                                       LoaderParams, StepModel)
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.op_text import parse_set
    from stepsim.simcore.errors import ModelError

    m = StepModel(loader=LoaderParams(num_workers=1, produce=DurationSpec(mean_us=10.0)),
                  host=HostParams(uses_core=False, ops=[
                      HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=MAX_DURATION_US)]))
    m.meta.measured_step_us = [MAX_DURATION_US / 2, MAX_DURATION_US]
    with pytest.raises(ModelError, match="interval draw leaves an invalid model"):
        predict(m, [parse_set("loader.num_workers=2")], steps=3, warmup=1, seed=0, intervals=4,
                jobs=1)


def _one_rank_model():
    from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel

    return StepModel(loader=LoaderParams(num_workers=1, produce=DurationSpec(mean_us=10.0)),
                     host=HostParams(uses_core=False, ops=[HostOp(kind="next_batch"),
                                                           HostOp(kind="cpu", dur_us=50.0)]))


@pytest.mark.parametrize("fix, words", [("straggler:rank=0,ms=5", "one rank"),
                                        ("straggler:rank=0,ms=inf", "finite"),
                                        ("faster_interconnect:k=nan", "finite")])
def test_whatif_refuses_a_bad_fix_before_the_baseline(monkeypatch, fix, words):
    """A fix that does not apply (or a non-finite argument) is refused before any simulation
    (it took 15-45 s of baseline draws on a real two-rank model before the one-line error)."""
    import stepsim
    import stepsim.scenarios.predict  # noqa: F401  (the module, which the package's name hides)
    from stepsim.simcore.errors import StepsimError

    def no_simulation(*a, **k):
        raise AssertionError("simulated before the ops were checked")

    monkeypatch.setattr(sys.modules["stepsim.scenarios.predict"], "predict", no_simulation)
    with pytest.raises(StepsimError, match=words):
        stepsim.whatif(_one_rank_model(), fix=[fix], steps=3, draws=0)
