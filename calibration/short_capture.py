"""A capture whose training ended before its profiler's schedule ran out, read from its
sidecar: the steps recorded against ``skip_first + wait + warmup + active`` (the profiled
window) and the ``after`` steps beyond it.

The profiler records steps ``skip_first + wait + warmup`` to ``skip_first + wait + warmup +
active − 1``; a step is recorded in the sidecar when it ended, so ``n`` recorded steps hold
``min(max(n − skip_first − wait − warmup, 0), active)`` complete profiled steps. With none, the
trace holds at most a stub of the step in progress when the profiler stopped (a fresh user's
``max_steps=6`` against the default 3+1+2+8 gave one ProfilerStep of 1.04 ms, which calibrate
took as the step, where the real steps took ~800 ms: 2026-12-07), so calibrate refuses it;
with fewer than ``active``, it warns that the model rests on those.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stepsim.simcore.errors import InputError

if TYPE_CHECKING:   # (calibrate imports this; a trace alone does not load the sidecar modules)
    from stepsim.calibration.sidecar import Sidecar

__all__ = ["short_capture_note"]

STEPS_SETTING = {"transformers": "TrainingArguments.max_steps (or its epochs)",
                 "lightning": "the Trainer's max_steps (or its epochs' batches)",
                 "harness": "the batches of the loader Capture.steps iterates"}
"""What bounds a capture's steps, by framework, in words."""


def short_capture_note(side: Sidecar, path: Path) -> str | None:
    """A warning when the capture ``side`` (its sidecar at ``path``) holds fewer complete
    profiled steps than its schedule asked for, else None (also when the sidecar did not record
    its schedule).

    Raises:
        InputError: the profiled window holds no complete step (naming the capture folder and
            the steps its schedule needs)."""
    sch = side.schedule
    if "active" not in sch:
        return None
    before = sum(sch.get(k, 0) for k in ("skip_first", "wait", "warmup"))
    active, after = sch["active"], sch.get("after", 0)
    ran = len(side.steps) + len(side.gone_steps)
    held = min(max(ran - before, 0), active)
    if held >= active:
        return None
    need = (f"its schedule needs {before + active + after} = {sch.get('skip_first', 0)} "
            f"skip_first + {sch.get('wait', 0)} wait + {sch.get('warmup', 0)} warmup + {active} "
            f"active + {after} after; capture again with "
            f"{STEPS_SETTING.get(side.capture or '', 'the training steps')} >= "
            f"{before + active + after}")
    folder = path.parent if path.name == "sidecar.json" else path
    if held == 0:
        raise InputError(folder, f"its profiled window holds no complete step: training ended "
                                 f"after {ran} step(s), before the first profiled step "
                                 f"(step {before + 1}); {need}")
    return (f"capture: the profiled window holds {held} of its {active} active steps "
            f"(training ended after {ran} step(s)): the model rests on those {held}; {need}")
