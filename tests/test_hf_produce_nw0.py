"""A Hugging Face Trainer run at ``dataloader_num_workers=0`` (its default) records each
batch's produce time, as the harness does (fresh11, 2026-12-07: the callback wrote
``produce == []`` at 0 workers). Why it did not: ``calibration.produce.attach_loader``
returned at ``num_workers=0`` before wrapping anything, so that the user's dataset object in
the main process would not be touched (a worker's copy is what gets the timed class). Not
accelerate: its ``DataLoaderShard`` (accelerate/data_loader.py) iterates its
``base_dataloader``, the loader the callback attaches to, one batch ahead, so each batch is
still made inside a ``next()`` of that loader on the main thread."""
from __future__ import annotations

from stepsim.calibration.sidecar import load_sidecar
from tests.test_capture_frameworks import SCHED, _Dicts, _needs, _Tiny


def test_hf_trainer_at_zero_workers_records_produce(tmp_path):
    _needs("transformers", "hf")
    _needs("accelerate", "hf")
    from transformers import Trainer, TrainingArguments

    from stepsim.calibration.hf import StepsimTrainerCallback

    out = tmp_path / "run"
    data = _Dicts(8 * 40)
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=12,
                             per_device_train_batch_size=8, dataloader_num_workers=0,
                             report_to="none", save_strategy="no", logging_strategy="no",
                             use_cpu=True, disable_tqdm=True, seed=0)
    Trainer(model=_Tiny(), args=args, train_dataset=data,
            callbacks=[StepsimTrainerCallback(out, after=4, **SCHED)]).train()
    sc = load_sidecar(out / "sidecar.json")
    assert sc.loader.num_workers == 0
    # one record a batch made on the main thread (worker -1), each with its wall and CPU;
    # accelerate fetches one batch ahead, so up to one more than the 12 steps
    assert 12 <= len(sc.produce) <= 13 and {p.worker for p in sc.produce} == {-1}
    assert all(p.wall_us > 0 and p.cpu_us >= 0 for p in sc.produce)
    assert type(data) is _Dicts          # the user's dataset has its own class back
