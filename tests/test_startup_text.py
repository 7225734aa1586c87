"""validate says what it left out of the measured steps truthfully (report.validation.
startup_text): a worker start-up only where the first ``next()`` held most of the step.
fresh10's Lightning captures left out a 364.5 ms first step whose ``next()`` took 9.4 ms
(the workers had started long before it) and were told it was the worker start-up."""
from __future__ import annotations

from stepsim.report.validation import startup_text


def test_a_lightning_first_step_is_not_said_to_spawn_in_next():
    said = startup_text(364.5e3, 9.4e3, 2.11e3, 2)
    assert said.startswith("the first step (a multi-process DataLoader's start-up) is left out "
                           "of the measured steps: 364.5 ms, its next() 9.4 ms against a "
                           "median 2.11 ms after it: its next() waited for no start-up")
    assert "spawned" not in said
    assert "the other 355.1 ms lie outside next()" in said and said.endswith("(2 runs)")


def test_a_spawn_in_next_is_still_named():
    said = startup_text(1200e3, 1150e3, 2.0e3, 1)
    assert "its next() spawned the workers and waited for their first batch (1 run)" in said
