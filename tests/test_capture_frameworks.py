"""The Lightning and Hugging Face Trainer callbacks, each on the CPU with the real library: a
tiny model, a few steps, then the capture folder calibrated and a what-if run with the CLI."""
from __future__ import annotations

import gzip
import importlib.util
import json

import pytest
import torch
import torch.utils.data as tud

from stepsim.calibration.sidecar import load_sidecar
from tests.conftest import overhead_readings, run_cli
from tests.test_capture_attach import Squares

SCHED = dict(active=4, wait=1, warmup=1, skip_first=2)   # 8 steps, the last 4 profiled


def _needs(module: str, extra: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install 'stepsim[{extra}]'; CI installs it)")


def _check_capture_folder(out, via: str, tmp_path, num_workers: int, warnings=()) -> dict:
    """The sidecar's fields, the trace's profiled steps, and the CLI on the folder."""
    side = json.loads((out / "sidecar.json").read_text())
    assert side["capture"] == via
    assert side["loader"]["num_workers"] == num_workers and side["loader"]["batch_size"] == 8
    assert side["schedule"] == {"skip_first": 2, "wait": 1, "warmup": 1, "active": 4}
    assert len(side["steps"]) == 8 and [s["profiled"] for s in side["steps"]] == [False] * 4 + [True] * 4
    assert all(s["wall_us"] >= s["next_wall_us"] >= 0 for s in side["steps"])
    assert side["warnings"] == list(warnings) and "ddp" not in side
    if num_workers:
        prod = side["produce"]
        assert {r["worker"] for r in prod} == set(range(num_workers))
        assert len(prod) >= 8 and all(r["wall_us"] > 0 and r["bytes"] > 0 for r in prod)
    load_sidecar(out / "sidecar.json")  # the reader takes it
    with gzip.open(out / "trace.json.gz", "rt") as f:
        names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
    assert sum(n.startswith("ProfilerStep#") for n in names) == 4
    model = tmp_path / "model.json"
    r = run_cli("calibrate", str(out), "-o", str(model))
    assert r.returncode == 0, r.stderr
    m = json.loads(model.read_text())
    assert m["loader"]["num_workers"] == num_workers
    if num_workers:
        assert m["meta"]["sources"]["loader.produce"] == "measured"
    r = run_cli("whatif", str(model), "--set", f"loader.num_workers={num_workers + 2}")
    assert r.returncode == 0, r.stderr
    return side


def _lightning(tmp_path, train_loader=None, after=0, **trainer_kw):
    """A tiny LightningModule (its own ``train_dataloader`` when ``train_loader`` is given)
    and a quiet CPU Trainer with the callback; returns (module, trainer, capture folder)."""
    _needs("lightning", "lightning")
    import lightning.pytorch as pl

    from stepsim.calibration.lightning import StepsimCallback

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 2)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    if train_loader is not None:
        Net.train_dataloader = lambda self: train_loader()
    out = tmp_path / "run"
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[StepsimCallback(out, after=after, **SCHED)], **trainer_kw)
    return Net(), trainer, out


def test_lightning_callback(tmp_path):
    # built by the user, workers already started by Lightning before any callback hook
    loader = tud.DataLoader(Squares(8 * 40), batch_size=8, num_workers=2, persistent_workers=True)
    torch.manual_seed(0)
    net, trainer, out = _lightning(tmp_path, devices=1, max_steps=10)
    trainer.fit(net, train_dataloaders=loader)
    assert trainer.global_step == 10, "training went on past the window"
    side = _check_capture_folder(out, "lightning", tmp_path, num_workers=2)
    assert side["loader"]["persistent_workers"] is True
    assert loader.collate_fn is tud.default_collate, "the loader was given back its collate_fn"


def test_lightning_callback_without_workers(tmp_path):
    net, trainer, out = _lightning(tmp_path, lambda: tud.DataLoader(Squares(8 * 12), batch_size=8),
                                   devices=1, max_steps=8)
    trainer.fit(net)
    _check_capture_folder(out, "lightning", tmp_path, num_workers=0)


class _Tiny(torch.nn.Module):
    """A model as the Trainer calls it: keyword inputs, a dict with the loss."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))

    def forward(self, x, labels):
        logits = self.net(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class _Dicts(tud.Dataset):
    def __init__(self, n):
        self.inner = Squares(n)

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return {"x": x, "labels": y}


def test_hf_trainer_callback(tmp_path):
    _needs("transformers", "hf")
    _needs("accelerate", "hf")
    from transformers import Trainer, TrainingArguments

    from stepsim.calibration.hf import StepsimTrainerCallback

    out = tmp_path / "run"
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=10, per_device_train_batch_size=8,
                             dataloader_num_workers=2, report_to="none", save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
                             eval_strategy="steps", eval_steps=5, per_device_eval_batch_size=8)
    trainer = Trainer(model=_Tiny(), args=args, train_dataset=_Dicts(8 * 40), eval_dataset=_Dicts(8),
                      callbacks=[StepsimTrainerCallback(out, **SCHED)])
    trainer.train()
    assert trainer.state.global_step == 10
    # the evaluation after optimizer step 5 runs before the 6th step's batch: step index 5
    _check_capture_folder(out, "transformers", tmp_path, num_workers=2,
                          warnings=["evaluation ran inside the profiled window: step 5's time includes it"])


@pytest.mark.slow
def test_lightning_callback_under_ddp(tmp_path):
    """Two CPU ranks (gloo) forked by Lightning's ``ddp_fork`` strategy: each rank writes its
    own folder, whose sidecar records the DDP module Lightning wrapped the model in."""
    import socket

    net, trainer, out = _lightning(tmp_path, lambda: tud.DataLoader(Squares(8 * 24), batch_size=8),
                                   devices=2, strategy="ddp_fork", max_steps=8)
    trainer.fit(net)
    for rank in (0, 1):
        sc = load_sidecar(out / f"rank{rank}" / "sidecar.json")
        d = sc.ddp
        assert sc.capture == "lightning" and (d.world_size, d.rank, d.backend) == (2, rank, "gloo")
        assert d.wrapped and d.bucket_cap_mb == 25.0 and d.hosts == [socket.gethostname()] * 2
        assert [(p.name, p.shape, p.dtype) for p in d.params] == [
            ("lin.weight", [2, 64], "float32"), ("lin.bias", [2], "float32")]
        assert len(sc.steps) == 8 and (out / f"rank{rank}" / "trace.json.gz").is_file()
    _bucket_whatif(tmp_path, out, cap_mb=8 / 2 ** 20, buckets=2)   # lin.bias, then lin.weight


def _bucket_whatif(tmp_path, out, cap_mb: float, buckets: int) -> dict:
    """Calibrate the job's rank folders into one model and price a ``bucket_cap_mb`` what-if
    on it: the captured all-reduces carry their sizes (the profiler records shapes under DDP),
    the profiler's cost is read on every rank, and the what-if rebuilds ``buckets`` all-reduces
    per rank from the recorded parameters. Returns the model (JSON)."""
    model = tmp_path / "m.json"
    r = run_cli("calibrate", str(out), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert "no Input Dims" not in r.stderr
    m = json.loads(model.read_text())
    # 2 unprofiled steps beside 4 profiled of a tiny model: the profiler's cost (a tenth of a
    # 2 ms step) is within the steps' scatter, so a reading may be scaled or not measurable
    # (one clean-clone CI run read a rank faster profiled); each rank is read and said once
    overhead_readings(r.stderr, m, ranks=(0, 1))
    assert m["device"]["streams"]["gloo"] and all(t["bytes"] for t in m["device"]["streams"]["gloo"])
    r = run_cli("whatif", str(model), "--set", f"comm.bucket_cap_mb={cap_mb!r}", "--draws", "0",
                "--steps", "4", "--json")
    assert r.returncode == 0, r.stderr
    comm = json.loads(r.stdout)["scenario"]["rank_comm"]
    assert {x["rank"]: x["count"] for x in comm if x["group"] == "collective"} == \
        {0: buckets, 1: buckets}
    return m


_HF_RANK = """
import sys
from transformers import Trainer, TrainingArguments
from stepsim.calibration.hf import StepsimTrainerCallback
from tests.test_capture_frameworks import SCHED, _Dicts, _Tiny

args = TrainingArguments(output_dir=sys.argv[2], max_steps=8, per_device_train_batch_size=8,
                         dataloader_num_workers=0, report_to="none", save_strategy="no",
                         logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
                         ddp_backend="gloo")
trainer = Trainer(model=_Tiny(), args=args, train_dataset=_Dicts(8 * 40),
                  callbacks=[StepsimTrainerCallback(sys.argv[1], **SCHED)])
trainer.train()
assert type(trainer.model_wrapped).__name__ == "DistributedDataParallel"
# as a torchrun script should: without it gloo's threads may be torn down at interpreter exit
# while still joinable ("terminate called without an active exception", SIGABRT; seen once
# under load)
import os
import torch.distributed as dist
dist.barrier()
dist.destroy_process_group()
# The DDP module the Trainer keeps still holds the gloo process group, so its C++ worker threads
# are destroyed during interpreter finalization, where they can abort the process (SIGABRT seen
# again in a clean-clone CI run on 2026-12-06, after this barrier: rank 0 exited 0; the abort at
# finalization is pytorch/pytorch#179291's). What this test checks is done by here, so the rank
# leaves without finalization and says how far it got.
print("RANK-DONE", flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_hf_trainer_callback_under_ddp(tmp_path):
    """Two CPU ranks (gloo) of a real ``Trainer`` launched as torchrun does (RANK, WORLD_SIZE,
    MASTER_ADDR in the environment): the callback, handed the unwrapped model, records the
    ``DistributedDataParallel`` accelerate wrapped it in (its bucket settings, not nulls), and
    the calibrated model of both ranks takes them as measured."""
    _needs("transformers", "hf")
    _needs("accelerate", "hf")
    import os
    import socket
    import subprocess
    import sys

    from tests.conftest import REPO

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(_HF_RANK)
    out = tmp_path / "run"
    procs = [subprocess.Popen(
        [sys.executable, str(script), str(out), str(tmp_path / "hf")], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
             "PYTHONPATH": str(REPO)})
        for r in (0, 1)]
    for p in procs:
        log = p.communicate(timeout=300)[0]
        assert p.returncode == 0 and "RANK-DONE" in log, log[-3000:]
    for rank in (0, 1):
        sc = load_sidecar(out / f"rank{rank}" / "sidecar.json")
        d = sc.ddp
        assert sc.capture == "transformers" and (d.world_size, d.rank, d.backend) == (2, rank, "gloo")
        assert d.wrapped and d.bucket_cap_mb == 25.0 and d.first_bucket_bytes == 1024 * 1024
        assert d.gradient_as_bucket_view is not None and d.find_unused_parameters is not None
        assert [(p.name, p.shape) for p in d.params] == [
            ("net.0.weight", [256, 64]), ("net.0.bias", [256]), ("net.2.weight", [2, 256]),
            ("net.2.bias", [2])]
    # net.2.bias + net.2.weight + net.0.bias pass a 2 KiB + 49 B cap, net.0.weight alone
    m = _bucket_whatif(tmp_path, out, cap_mb=2097 / 2 ** 20, buckets=2)
    assert len(m["ranks"]) == 2 and m["comm"]["bucket_cap_mb"] == 25.0
    assert m["meta"]["sources"]["comm.bucket_cap_mb"] == "measured"
    assert len(m["comm"]["grad_params"]) == 4


def test_lightning_callback_after_steps(tmp_path):
    """``after`` unprofiled steps follow the window in the sidecar (what validate scores), as
    ``Capture.steps(after=)`` records them; the callback had no ``after`` (a fresh user's
    Lightning re-measurements had 0 unprofiled steps after the window, 2026-12-05)."""
    net, trainer, out = _lightning(tmp_path, lambda: tud.DataLoader(Squares(8 * 30), batch_size=8),
                                   after=6, devices=1, max_steps=20)
    trainer.fit(net)
    assert trainer.global_step == 20, "training went on past the after steps"
    side = json.loads((out / "sidecar.json").read_text())
    assert side["schedule"] == dict(skip_first=2, wait=1, warmup=1, active=4, after=6)
    assert [s["profiled"] for s in side["steps"]] == [False] * 4 + [True] * 4 + [False] * 6
    assert [s["profiler_on"] for s in side["steps"]][8:] == [False] * 6
    assert side["warnings"] == []
    load_sidecar(out / "sidecar.json")
    from stepsim.calibration.lightning import StepsimCallback
    with pytest.raises(ValueError):
        StepsimCallback(out, after=-1)


def test_lightning_callback_after_steps_cut_short(tmp_path):
    """Training that ends inside the after steps writes what it recorded, and says so."""
    net, trainer, out = _lightning(tmp_path, lambda: tud.DataLoader(Squares(8 * 30), batch_size=8),
                                   after=6, devices=1, max_steps=10)
    trainer.fit(net)
    side = json.loads((out / "sidecar.json").read_text())
    assert len(side["steps"]) == 10 and side["schedule"]["after"] == 6
    assert any("10 optimizer steps" in w for w in side["warnings"]), side["warnings"]


def test_hf_callback_takes_after(tmp_path):
    """The HF callback passes ``after`` to the same window as Lightning's (the shared
    ``HookCapture``, driven end to end by the Lightning test above)."""
    _needs("transformers", "hf")
    from stepsim.calibration.hf import StepsimTrainerCallback

    assert StepsimTrainerCallback(tmp_path / "run", after=5, **SCHED).capture.after == 5
    with pytest.raises(ValueError):
        StepsimTrainerCallback(tmp_path / "run", after=-1)
