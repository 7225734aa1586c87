"""A capture whose training ended before its profiler's schedule ran out (fresh11, 2026-12-07:
an HF Trainer at ``max_steps=6`` against the default 3+1+2+8 steps wrote a stub trace of one
1.04 ms step, which calibrate took as the step while the real ones took ~800 ms): no trace
without a complete profiled step, one line at train end naming the steps to set, calibrate
refusing such a folder (exit 2) and warning on a window shorter than asked."""
from __future__ import annotations

import json

import pytest
import torch
import torch.utils.data as tud

from stepsim.calibration.capture import Capture
from stepsim.calibration.hooks import HookCapture
from stepsim.calibration.sidecar import Sidecar, load_sidecar
from stepsim.calibration.short_capture import short_capture_note
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli

SCHED = dict(skip_first=1, wait=1, warmup=1, active=4, after=2)
"""3 steps before the profiled window, 4 profiled, 2 after: 9 in all."""


def _hooked(out, steps: int, via="transformers", setting="TrainingArguments.max_steps"):
    """A framework's hooks driving a capture for ``steps`` training steps, then train end."""
    hc = HookCapture(out, via=via, steps_setting=setting, **SCHED)
    loader = tud.DataLoader(tud.TensorDataset(torch.randn(64, 8)), batch_size=4)
    net = torch.nn.Linear(8, 2)
    hc.begin(loader, net)
    for _, (x,) in zip(range(steps), loader):
        hc.batch_ready()
        net(x).sum().backward()
        hc.step_end()
    hc.end(f"training ended after {steps} optimizer steps")
    return hc


def test_stopped_as_the_profiled_window_began_writes_no_stub_trace(tmp_path, capsys):
    # 3 steps: the profiler has entered its first active step when training ends, and its
    # exit exported that step's stub (before: a trace of one short ProfilerStep#3)
    _hooked(tmp_path / "c", 3)
    assert not (tmp_path / "c" / "trace.json.gz").exists()
    side = load_sidecar(tmp_path / "c" / "sidecar.json")
    assert any("never completed its active steps" in w for w in side.warnings)
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "training ended after 3 steps, short of the schedule's 9" in line
    assert line.endswith("set TrainingArguments.max_steps >= 9")
    with pytest.raises(InputError, match=r"c: its profiled window holds no complete step: "
                                         r"training ended after 3 step\(s\).*"
                                         r"TrainingArguments.max_steps \(or its epochs\) >= 9"):
        from stepsim.api import calibrate
        calibrate(tmp_path / "c")


def test_a_complete_capture_says_what_it_captured(tmp_path, capsys):
    _hooked(tmp_path / "c", 20, via="lightning", setting="Trainer(max_steps=...)")
    err = capsys.readouterr().err.strip()
    assert err == (f"stepsim capture {tmp_path / 'c'}: 9 steps, 4 of 4 profiled, 2 of 2 after; "
                   f"next: stepsim calibrate {tmp_path / 'c'}")


def test_a_partial_window_keeps_its_trace_and_calibrate_warns(tmp_path, capsys):
    _hooked(tmp_path / "c", 5)
    assert (tmp_path / "c" / "trace.json.gz").is_file()
    side = load_sidecar(tmp_path / "c" / "sidecar.json")
    assert "the profiled window holds 2 of its 4 active steps (run at least 7 steps)" in side.warnings
    assert "2 of 4 profiled, 0 of 2 after, fewer profiled steps than asked" in capsys.readouterr().err
    note = short_capture_note(side, tmp_path / "c" / "sidecar.json")
    assert note.startswith("capture: the profiled window holds 2 of its 4 active steps "
                           "(training ended after 5 step(s))") and note.endswith(">= 9")


def test_the_harness_stopped_in_its_first_active_step(tmp_path):
    """Capture.steps cut at the same place: the same refusal, and its warning at the end."""
    cap = Capture(tmp_path / "c")
    loader = cap.dataloader(tud.TensorDataset(torch.zeros(40, 4)), batch_size=4)
    with pytest.warns(UserWarning, match="never completed its active steps"):
        for i, _ in enumerate(cap.steps(loader, **SCHED)):
            if i == 3:    # the 4th step's batch in hand: 3 steps ended
                break
    assert not (tmp_path / "c" / "trace.json.gz").exists()
    r = run_cli("calibrate", str(tmp_path / "c"), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "holds no complete step" in r.stderr and "the loader Capture.steps iterates >= 9" in r.stderr


def _sidecar(n_steps: int, schedule: dict) -> Sidecar:
    row = {"t_start_us": 0.0, "wall_us": 10.0, "cpu_us": 5.0, "next_wall_us": 1.0,
           "next_cpu_us": 1.0}
    steps = [dict(row, t_start_us=20.0 * k) for k in range(n_steps)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0, "batch_size": 4},
                                   "steps": steps, "schedule": schedule, "capture": "harness"})


SCHED_DEFAULT = {"skip_first": 3, "wait": 1, "warmup": 2, "active": 8}


@pytest.mark.parametrize("n, held", [(6, 0), (7, 1), (9, 3), (13, 7), (14, None), (20, None)])
def test_the_profiled_steps_are_counted_from_the_schedule(tmp_path, n, held):
    at = tmp_path / "sidecar.json"
    if held == 0:
        with pytest.raises(InputError, match=rf"{tmp_path.name}: its profiled window holds no "
                                             r"complete step.*before the first profiled step "
                                             r"\(step 7\)"):
            short_capture_note(_sidecar(n, SCHED_DEFAULT), at)
        return
    note = short_capture_note(_sidecar(n, SCHED_DEFAULT), at)
    assert note is None if held is None else note.startswith(
        f"capture: the profiled window holds {held} of its 8 active steps")


def test_a_sidecar_without_its_schedule_is_not_judged(tmp_path):
    assert short_capture_note(_sidecar(2, {}), tmp_path / "sidecar.json") is None


def test_hf_trainer_short_of_the_schedule_says_the_max_steps(tmp_path, capsys):
    """The real Trainer at ``max_steps=3`` (fresh11's case, scaled down): one line naming
    ``TrainingArguments.max_steps``, no stub trace."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    from stepsim.calibration.hf import StepsimTrainerCallback
    from tests.test_capture_frameworks import _Dicts, _Tiny

    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=3, report_to="none",
                             per_device_train_batch_size=8, save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    Trainer(model=_Tiny(), args=args, train_dataset=_Dicts(8 * 10),
            callbacks=[StepsimTrainerCallback(tmp_path / "run", **SCHED)]).train()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("stepsim capture")]
    assert len(err) == 1 and err[0].endswith(
        "no trace written, nothing to calibrate; set TrainingArguments.max_steps >= 9"), err
    assert not (tmp_path / "run" / "trace.json.gz").exists()
