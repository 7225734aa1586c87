"""How many steps to simulate: :mod:`stepsim.models.stepcount`, where it lives so that
``stepsim calibrate`` simulates its steady state without importing every scenario module
(this package's ``__init__`` imports them all: about 40 ms of a calibrate's start-up)."""
from stepsim.models.stepcount import (BATCHES, DRAW_STEPS, FIRST_STEPS, MAX_STEPS,  # noqa: F401
                                      MAX_WORK, SE_TARGET, StepCount, draw_bound,
                                      mean_std_error_us, simulate_counted, step_bound,
                                      thread_pieces, whole_cycles)

__all__ = ["SE_TARGET", "FIRST_STEPS", "MAX_STEPS", "MAX_WORK", "DRAW_STEPS", "BATCHES",
           "StepCount", "mean_std_error_us", "simulate_counted", "step_bound", "thread_pieces",
           "draw_bound", "whole_cycles"]
