"""What ``torch.set_num_threads(k)`` would do to a step whose intra-op threads are
oversubscribed, over what the model knows of their parallel efficiency.

Fewer threads end the spinning at the barriers (:mod:`models.cpu`), but run the parallel part
on fewer threads: whether that is a gain depends on the parallel efficiency ``e`` (the share of
the parallel part's CPU that was work, :func:`models.plans.threads_ratio`). One capture's CPU
and wall time cannot measure it (the spinning threads burn CPU as working ones do), so unless
it was measured (a capture's ``probe_threads`` or the fix's ``efficiency=``) it spans the
prior 1/T..1 (the model's ``meta.ranges`` factor on it): at 1/T one thread loses nothing, at 1
it doubles the parallel part. Measured on this project's 2-core machine (a user's CNN, torch's
2 threads, calibrated at num_workers=0, loads ~2): one thread beside one worker took
106.6 ms against 92.0 ms at num_workers=0 on two threads (0.86x), its efficiency 0.94
(116 ms on one thread against 62 ms on two), where the prior's middle (0.75) predicted 1.14x.
"""
from __future__ import annotations

from dataclasses import dataclass

from stepsim.models.params import StepModel
from stepsim.scenarios.host_threads import ThreadsArgs, intra_op_threads
from stepsim.scenarios.stepcount import simulate_counted, whole_cycles
from stepsim.simcore.errors import ModelError

__all__ = ["ThreadsOutcome", "efficiency_bounds", "threads_outcome"]

_STEPS, _WARMUP, _SEED = 40, 10, 0


@dataclass(frozen=True)
class ThreadsOutcome:
    """Speed-up of the step on ``threads`` intra-op threads against it as it is (>1: faster),
    at the worst (``low``) and best (``high``) parallel efficiency the model allows;
    ``measured``: the efficiency was measured (then ``low`` == ``high``)."""
    threads: int
    low: float
    high: float
    measured: bool

    def phrase(self) -> str:
        """``"0.82x-1.41x"`` (or one figure when measured)."""
        if self.measured or abs(self.high - self.low) < 0.005:
            return f"{self.low:.2f}x"
        return f"{self.low:.2f}x-{self.high:.2f}x"


def efficiency_bounds(m: StepModel) -> tuple[float, float, bool]:
    """``(worst, best, measured)`` parallel efficiency of the training step's intra-op team:
    the measured one at both ends, else the model's range on it (default 1/T..1). The worst for
    fewer threads is the highest efficiency (the other threads were working, not spinning)."""
    ops = [(i, op) for i, op in enumerate(m.host.ops)
           if op.kind == "cpu" and op.parallel_fraction > 0 and op.capture_threads]
    if not ops:
        return 1.0, 1.0, True
    i, op = ops[0]
    key = f"host.ops[{i}].parallel_efficiency"
    e = op.parallel_efficiency
    if m.meta.sources.get(key) == "measured":
        return e, e, True
    lo_f, hi_f = m.meta.ranges.get(key, ((1 / op.capture_threads) / e, 1 / e))
    return min(e * hi_f, 1.0), max(e * lo_f, 1 / op.capture_threads, 1e-3), False


def _mean_us(m: StepModel) -> float:
    # whole optimizer steps under gradient accumulation (models.stepcount.whole_cycles)
    return simulate_counted(m, whole_cycles(m, _STEPS), _WARMUP, _SEED,
                            keep="brief")[0].mean_step_us


def threads_outcome(m: StepModel, threads: int) -> ThreadsOutcome | None:
    """The step's speed-up on ``threads`` intra-op threads (the fix ``intra_op_threads``) at
    both ends of :func:`efficiency_bounds`, each simulated (40 steps, seed 0); None when the
    fix does not apply."""
    worst, best, measured = efficiency_bounds(m)
    try:
        now = _mean_us(m)
        ends = [_mean_us(intra_op_threads(m, ThreadsArgs(threads=threads, efficiency=e)))
                for e in ((worst,) if measured else (worst, best))]
    except ModelError:
        return None
    ratios = [now / t for t in ends if t > 0]
    if not ratios or now <= 0:
        return None
    return ThreadsOutcome(threads, min(ratios), max(ratios), measured)
