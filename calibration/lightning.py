"""A PyTorch Lightning callback that captures a window of training steps for stepsim.

::

    from stepsim.calibration.lightning import StepsimCallback
    trainer = lightning.Trainer(..., callbacks=[StepsimCallback("runs/baseline", active=8)])
    trainer.fit(model, datamodule)
    # then: stepsim calibrate runs/baseline -o model.json

It profiles ``skip_first + wait + warmup + active`` training batches from the start of
``fit`` with ``torch.profiler`` (schedule + one ``step()`` per batch) and writes the harness's
``trace.json.gz`` + ``sidecar.json`` (:mod:`calibration.capture`), with ``"capture":
"lightning"``. Needs the ``lightning`` extra (``pip install 'stepsim[lightning]'``; the older
``pytorch_lightning`` package works too).

Hook timing (Lightning 2.x, ``loops/fit_loop.py`` and ``training_epoch_loop.py``): a step runs
from the previous ``on_train_batch_end`` to this one's, its ``next()`` part up to
``on_train_batch_start`` (the data fetcher's ``next()`` and Lightning's bookkeeping).
``FitLoop.setup_data`` creates the training DataLoader's iterator, and so starts its workers,
before ``on_train_start``: the callback attaches to the loader there and, when it has workers,
has the fit loop take a fresh iterator (``iter(trainer.fit_loop._data_fetcher)``), so the
workers that make the profiled batches time them. That iterator restarts the first epoch's
sampler, so a shuffled first epoch sees a different order than without the callback. Under a
DDP strategy each rank writes ``OUT/rank<R>`` and the sidecar records the job
(:mod:`calibration.ddp_info`).
"""
from __future__ import annotations

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise ImportError("stepsim.calibration.lightning needs PyTorch Lightning: "
                          "pip install 'stepsim[lightning]'") from None

from stepsim.calibration.hooks import HookCapture

__all__ = ["StepsimCallback"]


class StepsimCallback(pl.Callback):
    """Capture ``skip_first + wait + warmup + active`` training batches into ``out_dir``.

    ``after`` more steps follow unprofiled, timed in the sidecar: the steps ``stepsim
    validate`` scores when this run is a re-measurement (without them it scores the profiled
    window, which carries the profiler's cost); take ``after`` at least ``num_workers ×
    prefetch_factor + 20``, as ``Capture.steps``'s. Training goes on after them; ``Trainer``'s
    ``max_steps`` (or its epochs' batches) must cover ``skip_first + wait + warmup + active +
    after``: at train end one line on stderr says what was captured, and the steps to set when
    short.

    Raises:
        ValueError: for a non-positive ``active`` or negative schedule counts.
    """

    def __init__(self, out_dir, active: int = 8, wait: int = 1, warmup: int = 2, skip_first: int = 3,
                 after: int = 0):
        self.capture = HookCapture(out_dir, via="lightning", active=active, wait=wait,
                                   warmup=warmup, skip_first=skip_first, after=after,
                                   steps_setting="Trainer(max_steps=...)")

    def on_train_start(self, trainer, pl_module) -> None:
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
        restart = (lambda: iter(fetcher)) if fetcher is not None else None
        self.capture.begin(trainer.train_dataloader, trainer.strategy.model, restart)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.capture.batch_ready()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.capture.step_end()

    def on_validation_start(self, trainer, pl_module) -> None:
        self.capture.note("validation")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.capture.note("a checkpoint save")

    def on_train_end(self, trainer, pl_module) -> None:
        self.capture.end(f"training ended after {trainer.global_step} optimizer steps")

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.capture.end(f"training stopped by {type(exception).__name__}: {exception}")
