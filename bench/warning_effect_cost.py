"""What the window-speed warning's effect costs a ``calibrate``: the two steady-state
simulations :func:`stepsim.models.window_effect.window_speed_effect` runs (the step at ``host.cpu_scale`` and
at the capture's own speed), only where the window-speed warning is; against the whole
:func:`stepsim.api.calibrate` of the same capture. Prints, per input and repeat, the calibrate
wall, the effect's wall and their ratio (run it alone: ``flock /tmp/cpu-timing.lock``). Use
``--repeats 1`` in fresh processes: within one process the calibrate's own steady-state run
is memoized after the first repeat (:mod:`models.run_memo`), the effect's are not.

    python bench/warning_effect_cost.py [--repeats N] [--sidecar S] [--replicate R] TRACE ...
"""
from __future__ import annotations

import argparse
import time

import stepsim
from stepsim.limits import DEFAULT_STEPS, DEFAULT_WARMUP
from stepsim.fit import calibrate as fit
from stepsim.models.window_effect import window_speed_effect


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="+")
    ap.add_argument("--replicate", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    for trace in a.trace:
        reps = a.replicate if trace == a.trace[0] else []
        for k in range(a.repeats):
            t0 = time.perf_counter()
            stepsim.calibrate(trace, replicates=reps)
            whole = time.perf_counter() - t0
            model = fit(trace, replicates=list(reps))
            t0 = time.perf_counter()
            sized = window_speed_effect(model, DEFAULT_STEPS, DEFAULT_WARMUP)
            effect = time.perf_counter() - t0
            e = [r.effect_us for r in sized.meta.warnings_ranked if r.kind == "window_speed"]
            print(f"{trace} repeat {k}: calibrate {whole:.2f} s, window-speed effect "
                  f"{effect:.3f} s ({100 * effect / whole:.1f} %), effect "
                  f"{e[0] / 1e3 if e and e[0] is not None else None} ms")


if __name__ == "__main__":
    main()
