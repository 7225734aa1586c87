"""The cold-resume probe of a user's DDP job (``Capture.steps(cold_probe=True)``): what a
backward and an optimizer step cost in CPU after the rank was off its data for a while, for
the sidecar's ``ddp.cold_probe`` (:class:`calibration.sidecar_ddp.ColdProbe`), which
calibration pools into ``comm.cold_resume`` and ``comm.cold_resume_opt``
(:mod:`calibration.gloo_cold`) and the straggler and barrier what-ifs price.

The user's own training steps run the probe, with no change to their code: for each pause of
:data:`COLD_PAUSES_MS`, :data:`COLD_ROUNDS` steps in which every rank spins that pause of
wall-clock time at its DDP module's forward's end (a forward hook), alternated with as many
steps without, as the DDP demo's job does (:func:`demo.ddp_job.cold_probe`). Per step it reads
the training thread's CPU (``time.thread_time``) at the forward's end (after the spin), at the
last parameter's gradient hook (backward's compute done) and around the optimizer's step
(torch's global optimizer step hooks; a step with no ``torch.optim`` optimizer has no
optimizer figure). Every rank runs the same plan, so the pause adds no skew. The steps train
as usual: 2 × 3 × 6 = 36 steps and 6 × (10 + 20 + 40) ms = 0.42 s of spin on every rank
(about 1.3 s on the demo's MLP).
"""
from __future__ import annotations

import statistics
import time

__all__ = ["COLD_PAUSES_MS", "COLD_ROUNDS", "ColdSteps", "cold_row", "spin"]

COLD_PAUSES_MS = (10.0, 20.0, 40.0)
"""The cold-resume probe's pauses (ms): a backward that follows a pause costs more CPU than
one right after its forward (the rank's data leave the caches while it is off them:
``bench/ddp_cold_resume.py`` measured on this 2-vCPU host, 2026-12-06, the backward's
thread CPU ×0.97-1.01 after 10 ms, ×1.03-1.07 after 20 ms, ×1.11-1.14 after 40 ms, the same
after a spin as after a sleep). The straggler what-if prices the straggler's resume from them
(:mod:`calibration.gloo_cold`)."""
COLD_ROUNDS = 6
"""Steps per pause with it and as many without, interleaved (about 1.3 s a capture)."""


def spin(ms: float) -> None:
    """Busy work for ``ms`` ms of wall-clock time (the thread keeps its core busy)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class ColdSteps:
    """The probe over a user's steps: :meth:`begin` before step ``k`` of :attr:`plan` (its
    pause in ms, 0 for none), :meth:`end` after it, :meth:`close` at the end (always: it
    removes the hooks), then :meth:`rows`."""

    def __init__(self, model, pauses_ms=COLD_PAUSES_MS, rounds: int = COLD_ROUNDS):
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        self.plan = [p for pause in pauses_ms for _ in range(rounds) for p in (0.0, pause)]
        self.pauses = list(pauses_ms)
        self.pause, self.marks = 0.0, {}
        # per pause, [hot steps, cold steps]: (backward CPU µs, optimizer CPU µs or None)
        self.got: dict[float, list[list]] = {p: [[], []] for p in pauses_ms}
        self._owner: float | None = None
        module = getattr(model, "module", model)
        self._handles = [model.register_forward_hook(self._forward_end)]
        self._handles += [p.register_hook(self._grad) for p in module.parameters()
                          if p.requires_grad]
        self._handles += [register_optimizer_step_pre_hook(self._opt_pre),
                          register_optimizer_step_post_hook(self._opt_post)]

    @staticmethod
    def _now() -> float:
        return time.thread_time() * 1e6

    def _forward_end(self, module, args, out) -> None:
        if "fwd" in self.marks:        # the step's first forward only
            return
        if self.pause:
            spin(self.pause)
        self.marks["fwd"] = self._now()

    def _grad(self, grad) -> None:
        self.marks["grad"] = self._now()

    def _opt_pre(self, opt, args, kwargs) -> None:
        self.marks.setdefault("opt0", self._now())

    def _opt_post(self, opt, args, kwargs) -> None:
        self.marks["opt1"] = self._now()

    def begin(self, k: int) -> None:
        """Step ``k`` of the plan starts: its pause, fresh marks."""
        self.pause, self.marks = self.plan[k], {}
        # a hot step belongs to the pause whose cold steps it alternates with
        self._owner = self.plan[k + 1] if self.pause == 0 else self.pause

    def end(self, k: int) -> None:
        """Step ``k`` is done: keep its backward's (and optimizer's) CPU when it has them."""
        m = self.marks
        if "fwd" in m and "grad" in m and m["grad"] >= m["fwd"]:
            opt = m["opt1"] - m["opt0"] if "opt0" in m and "opt1" in m else None
            self.got[self._owner][1 if self.pause else 0].append((m["grad"] - m["fwd"], opt))
        self.pause, self.marks = 0.0, {}

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def rows(self, warnings: list[str]) -> list[dict]:
        """The sidecar's ``ddp.cold_probe``: per pause with both kinds of step, the medians
        (µs); a pause without them is said in ``warnings``."""
        out = []
        for pause in self.pauses:
            hot, cold = self.got[pause]
            if not hot or not cold:
                warnings.append(f"the cold-resume probe's {pause:g} ms pause recorded no "
                                "backward (no forward of the module Capture.ddp was given, or "
                                "no gradient): left out")
                continue
            out.append(cold_row(pause, hot, cold))
        return out


def cold_row(pause_ms: float, hot: list, cold: list) -> dict:
    """One row of the sidecar's ``ddp.cold_probe`` (:class:`calibration.sidecar_ddp.ColdProbe`)
    from the steps without the pause (``hot``) and with it (``cold``), each a list of
    (backward CPU µs, optimizer CPU µs or None): the medians, the optimizer's only where both
    kinds of step have one; ``steps`` the fewer of the two. Shared by :class:`ColdSteps` and
    the DDP demo's job (:func:`demo.ddp_job.cold_probe`)."""
    row = {"pause_us": pause_ms * 1e3, "steps": min(len(hot), len(cold)),
           "hot_cpu_us": statistics.median(v for v, _ in hot),
           "cold_cpu_us": statistics.median(v for v, _ in cold)}
    hot_o, cold_o = ([o for _, o in s if o is not None] for s in (hot, cold))
    if hot_o and cold_o:
        row.update(hot_opt_cpu_us=statistics.median(hot_o),
                   cold_opt_cpu_us=statistics.median(cold_o))
    return row
