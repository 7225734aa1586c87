"""A Hugging Face ``transformers.Trainer`` callback that captures a window of training steps.

::

    from stepsim.calibration.hf import StepsimTrainerCallback
    trainer = transformers.Trainer(..., callbacks=[StepsimTrainerCallback("runs/baseline")])
    trainer.train()
    # then: stepsim calibrate runs/baseline -o model.json

It profiles ``skip_first + wait + warmup + active`` optimizer steps from the start of training
with ``torch.profiler`` (schedule + one ``step()`` per step) and writes the harness's
``trace.json.gz`` + ``sidecar.json`` (:mod:`calibration.capture`), with ``"capture":
"transformers"``. Needs the ``hf`` extra (``pip install 'stepsim[hf]'``).

Hook timing (``Trainer._inner_training_loop`` / ``_run_epoch``): ``on_train_begin`` comes
before ``iter(train_dataloader)``, so the callback attaches to the prepared DataLoader
(accelerate's ``DataLoaderShard``, a ``DataLoader``) before its workers start. A step runs from
the previous ``on_step_end`` to this one's; its ``next()`` part, up to ``on_step_begin``, holds
``get_batch_samples`` (the DataLoader's ``next()`` for each of the step's
``gradient_accumulation_steps`` batches) and the Trainer's logging of the previous step.

DDP: the Trainer hands callbacks its unwrapped ``self.model``; the
``DistributedDataParallel`` that ``accelerator.prepare`` wrapped it in is kept only by the
Trainer (``model_wrapped``) and the Accelerator (``_models``), neither of which a callback is
given. By ``on_train_begin`` it exists (``_inner_training_loop`` prepares the model first), so
the callback finds it as the live ``DistributedDataParallel`` whose ``module`` is the model
(:func:`wrapped_ddp`) and records its buckets (``wrapped: true``); without one (a single
process) the plain model is recorded as before.
"""
from __future__ import annotations

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("stepsim.calibration.hf needs transformers: pip install 'stepsim[hf]'") from None

import gc

import torch

from stepsim.calibration.hooks import HookCapture

__all__ = ["StepsimTrainerCallback", "wrapped_ddp"]


def wrapped_ddp(model):
    """The ``DistributedDataParallel`` module that wraps ``model`` (the one accelerate made for
    the Trainer), else ``model`` itself. Found among the objects the garbage collector tracks
    (the only way from the unwrapped model to its wrapper: the model does not refer to it),
    once per training run."""
    if model is None or isinstance(model, torch.nn.parallel.DistributedDataParallel) \
            or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return model
    ddp = torch.nn.parallel.DistributedDataParallel
    found = [o for o in gc.get_objects() if isinstance(o, ddp) and o.module is model]
    return found[0] if found else model


class StepsimTrainerCallback(TrainerCallback):
    """Capture ``skip_first + wait + warmup + active`` optimizer steps into ``out_dir``.

    ``after`` more steps follow unprofiled, timed in the sidecar: the steps ``stepsim
    validate`` scores when this run is a re-measurement (without them it scores the profiled
    window, which carries the profiler's cost); take ``after`` at least ``num_workers ×
    prefetch_factor + 20``, as ``Capture.steps``'s. Training goes on after them;
    ``TrainingArguments.max_steps`` (or its epochs) must cover ``skip_first + wait + warmup +
    active + after``: at train end one line on stderr says what was captured, and the steps to
    set when short.

    Raises:
        ValueError: for a non-positive ``active`` or negative schedule counts.
    """

    def __init__(self, out_dir, active: int = 8, wait: int = 1, warmup: int = 2, skip_first: int = 3,
                 after: int = 0):
        self.capture = HookCapture(out_dir, via="transformers", active=active, wait=wait,
                                   warmup=warmup, skip_first=skip_first, after=after,
                                   steps_setting="TrainingArguments.max_steps")

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self.capture.begin(train_dataloader, wrapped_ddp(model))
        if args.gradient_accumulation_steps > 1 and self.capture.window is not None:
            self.capture.window.warnings.append(
                f"gradient_accumulation_steps={args.gradient_accumulation_steps}: each step "
                "consumed that many DataLoader batches")

    def on_step_begin(self, args, state, control, **kwargs):
        self.capture.batch_ready()

    def on_step_end(self, args, state, control, **kwargs):
        self.capture.step_end()

    def on_evaluate(self, args, state, control, **kwargs):
        self.capture.note("evaluation")

    def on_save(self, args, state, control, **kwargs):
        self.capture.note("a checkpoint save")

    def on_train_end(self, args, state, control, **kwargs):
        self.capture.end(f"training ended after {state.global_step} optimizer steps")
