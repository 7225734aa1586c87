"""What a verb's baseline line holds that its number does not say: the outside load the
capture ran under (kept in the model, so in the baseline) and, where the bottleneck named by
the rules (:func:`models.bottleneck.name_bottleneck`) is not the largest share of the step's
critical path, both views, so a user does not read "the input pipeline" as where the step's
time goes (fresh11, 2026-12-07: "input pipeline (DataLoader)" beside host compute's 85 % and
a 6.45x ceiling)."""
from __future__ import annotations

from stepsim.models.bottleneck import INPUT_WAIT_SHARE, label
from stepsim.models.load_bound import capture_load_phrase
from stepsim.scenarios.predict import Prediction

__all__ = ["baseline_notes", "bottleneck_views"]


def bottleneck_views(p: Prediction) -> str:
    """One line where ``p``'s bottleneck is not the largest critical-path share (empty where
    it is, or without shares): the rule that named it and the share that is largest."""
    shares = p.summary.shares
    if not shares or p.bottleneck not in ("input", "cpu_cores"):
        return ""
    top = max(shares, key=lambda k: shares[k])
    if top == p.bottleneck:
        return ""
    rule = (f"the step spends {100 * INPUT_WAIT_SHARE:g} % or more in next()"
            if p.bottleneck == "input" else "the cores are saturated and threads wait for one")
    own = shares.get(p.bottleneck, 0.0)
    return (f"bottleneck {label(p.bottleneck)}: named because {rule} ({100 * own:.0f} % of the "
            f"critical path); the largest share is {label(top)} ({100 * shares[top]:.0f} %): "
            "`stepsim ceiling` ranks what freeing each would buy (docs/reference.md, two views "
            "of the bottleneck)")


def baseline_notes(base: Prediction) -> list[str]:
    """The lines said under a baseline: the capture's outside load
    (:func:`models.load_bound.capture_load_phrase`) and :func:`bottleneck_views`."""
    load = capture_load_phrase(base.model) if base.model is not None else ""
    return [x for x in (f"baseline: {load}" if load else "", bottleneck_views(base)) if x]
