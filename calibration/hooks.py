"""What the framework callbacks (:mod:`calibration.lightning`, :mod:`calibration.hf`) share:
find the training DataLoader, attach to it, record the DDP job, drive one :class:`Window`.

A framework calls :meth:`HookCapture.begin` once before the first training batch is asked for,
:meth:`batch_ready` when a batch is in hand, :meth:`step_end` when its step is done, and
:meth:`end` when training stops. The capture folder is the same as the harness's.
"""
from __future__ import annotations

import sys
import tempfile
import warnings as _warnings

import torch.utils.data as tud

from stepsim.calibration.capture import rank_dir
from stepsim.calibration.ddp_info import ddp_record
from stepsim.calibration.produce import attach_loader, detach_loader, loader_settings
from stepsim.calibration.window import Window, check_schedule


def find_dataloaders(obj) -> list[tud.DataLoader]:
    """The DataLoaders in what a framework holds as its training data (a DataLoader, or a
    list, tuple or dict of them, nested), in order."""
    if isinstance(obj, tud.DataLoader):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [dl for item in obj for dl in find_dataloaders(item)]
    return []


class HookCapture:
    """One profiled window driven by a framework's hooks (arguments as :class:`Window`'s:
    ``after`` steps follow the window unprofiled, timed in the sidecar for a validation).
    ``steps_setting``: the framework's setting that bounds the steps training runs (named in
    :meth:`end`'s line when training ended before the schedule's steps ran).

    Raises:
        ValueError: for a non-positive ``active`` or negative schedule counts.
    """

    def __init__(self, out_dir, *, via: str, active: int = 8, wait: int = 1, warmup: int = 2,
                 skip_first: int = 3, after: int = 0, steps_setting: str = "max_steps"):
        self.out_dir, self.via, self.steps_setting = out_dir, via, steps_setting
        self.schedule = dict(active=active, wait=wait, warmup=warmup, skip_first=skip_first)
        check_schedule(**self.schedule, after=after)
        self.after = after
        self.window: Window | None = None
        self.loader: tud.DataLoader | None = None
        self._said = False

    def begin(self, train_data, model, restart_workers=None) -> None:
        """Attach to the training DataLoader found in ``train_data`` and to ``model`` (a DDP
        module or a plain one), and start the window. ``restart_workers``, when given, is called
        after attaching if the loader's workers already run (the framework made its iterator
        before any hook): it must make the framework take a new iterator."""
        if self.window is not None:
            return
        records = tempfile.mkdtemp(prefix="stepsim-capture-")
        warnings: list[str] = []
        loaders = find_dataloaders(train_data)
        settings = None
        if not loaders:
            _warnings.warn(f"stepsim: no torch DataLoader in the training data ({type(train_data).__name__}): "
                           "only the trace is written, no sidecar", stacklevel=3)
        else:
            self.loader = loaders[0]
            if len(loaders) > 1:
                warnings.append(f"{len(loaders)} training DataLoaders: only the first is recorded")
            started = self.loader.num_workers > 0 and restart_workers is not None
            warnings += attach_loader(self.loader, records, restart=started)
            if started:
                restart_workers()
            settings = loader_settings(self.loader)
        ddp = ddp_record(model)
        self.window = Window(rank_dir(self.out_dir, ddp), records, settings, via=self.via,
                             ddp=ddp, warnings=warnings, after=self.after, **self.schedule,
                             ddp_model=model)
        self.window.start()

    def batch_ready(self) -> None:
        if self.window is not None and self.window.running:
            self.window.batch_ready()

    def step_end(self) -> None:
        if self.window is not None and self.window.running and self.window.step_end():
            self._detach()

    def note(self, what: str) -> None:
        """Something other than training (validation, a checkpoint) ran: inside the window it
        is part of the next step's time, which the sidecar's warnings then say."""
        if self.window is not None and self.window.running:
            self.window.warnings.append(f"{what} ran inside the profiled window: step "
                                        f"{len(self.window.rows)}'s time includes it")

    def end(self, reason: str | None = None) -> None:
        """Training stopped: write what was recorded (``reason`` goes into the warnings when
        the window is incomplete), and say on stderr, once, in one line, what was captured
        (:meth:`Window.summary`: when short, the ``steps_setting`` that covers the schedule).
        A fresh user's ``max_steps=6`` against the default 14 steps ended silently, and the
        folder calibrated into a 1.04 ms step (2026-12-07)."""
        if self.window is None:
            return
        if not self.window.finished:
            self.window.finish(reason)
            self._detach()
        if not self._said:
            self._said = True
            print(self.window.summary(self.steps_setting), file=sys.stderr, flush=True)

    def _detach(self) -> None:
        if self.loader is not None:
            detach_loader(self.loader)
