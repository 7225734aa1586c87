"""The window-speed warning's effect on the step, simulated (the calibration that writes the
warning, :func:`calibration.host_noise.at_window_speed`, runs no simulator; its caller,
:func:`stepsim.api.calibrate`, calls this)."""
from __future__ import annotations

from stepsim.models.host_speed import capture_cpu_scale
from stepsim.models.params import StepModel
from stepsim.models.warning_record import records, with_effect

__all__ = ["window_speed_effect"]


def window_speed_effect(model: StepModel, steps: int | None, warmup: int) -> StepModel:
    """``model`` with its window-speed warning's effect (kind ``window_speed``) set: the
    steady step at ``host.cpu_scale`` less at the capture's own speed (µs; two steady-state
    simulations of ``steps`` (None: as many as pin the mean) after ``warmup``, seed 0, only where that warning is and ``meta.notes['window_speed']`` is
    measured; else ``model`` as it is)."""
    from stepsim.models.stepcount import simulate_counted

    window = model.meta.notes.get("window_speed")
    if not isinstance(window, (int, float)) or window <= 0 or not any(
            r.kind == "window_speed" for r in records(model.meta)):
        return model
    own = capture_cpu_scale(model)
    at_own = model.model_copy(update={"host": model.host.model_copy(update={"cpu_scale": own})})
    means = [simulate_counted(m, steps, warmup, 0, keep="brief")[0].mean_step_us
             for m in (model, at_own)]
    return with_effect(model, "window_speed", means[0] - means[1])
