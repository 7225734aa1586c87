"""stepsim: a discrete-event step simulator and what-if planner for deep-learning training.

The verbs of the command line are functions here, with the same names and defaults
(:mod:`stepsim.api`): ``calibrate``, ``simulate``, ``whatif``, ``sweep``, ``ceiling``, ``plan``,
``validate``, ``diagnose``. They are imported on first use, so ``import stepsim.calibration.capture`` inside a
training script loads no simulator.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["calibrate", "simulate", "whatif", "sweep", "ceiling", "plan", "validate", "diagnose",
           "load_model"]


def __getattr__(name: str):
    if name in __all__:
        from stepsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'stepsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The verbs (loaded on first use) beside the module's own names, for ``dir(stepsim)``
    and tab completion."""
    return sorted({*globals(), *__all__} - {"annotations"})
