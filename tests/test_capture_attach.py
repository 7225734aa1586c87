"""Capture attached to what a training script already built: a DataLoader and a DDP model."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud

from stepsim.calibration.capture import Capture
from stepsim.calibration.sidecar import load_sidecar
from tests.conftest import overhead_readings, run_cli


class Squares(tud.Dataset):
    """A map-style dataset with a little CPU work per sample."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.arange(64, dtype=torch.float32) + i
        for _ in range(20):
            x = torch.tanh(x).sort().values + x
        return x, i % 2


def pair_collate(samples):
    """A user's own collate_fn: stacks and tags the batch (the tag shows it ran)."""
    xs, ys = zip(*samples)
    return {"x": torch.stack(xs), "y": torch.tensor(ys), "tag": "mine"}


class MarkInit:
    """A user's own worker_init_fn: leaves a file per worker (shows it still runs)."""

    def __init__(self, folder: str):
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        Path(self.folder, f"init-{worker_id}").write_text(type(tud.get_worker_info().dataset).__name__)


def _train(cap, loader, model, **sched):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for batch in cap.steps(loader, **sched):
        seen.append(batch["tag"])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
        opt.step()
    return seen


def test_attach_to_an_existing_dataloader(tmp_path):
    torch.manual_seed(0)
    ds = Squares(8 * 30)
    loader = tud.DataLoader(ds, batch_size=8, num_workers=2, prefetch_factor=3,
                            collate_fn=pair_collate, worker_init_fn=MarkInit(str(tmp_path)),
                            persistent_workers=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    out = tmp_path / "run"
    seen = _train(Capture(out), loader, model, active=4, wait=1, warmup=1, skip_first=2)
    assert seen == ["mine"] * 8, "the user's collate_fn made every batch"
    # the user's worker_init_fn ran in both workers; the main process's dataset is untouched
    assert sorted(p.name for p in tmp_path.glob("init-*")) == ["init-0", "init-1"]
    assert type(ds) is Squares and type(loader.dataset) is Squares
    side = json.loads((out / "sidecar.json").read_text())
    assert side["capture"] == "harness"
    assert side["loader"] == {"num_workers": 2, "prefetch_factor": 3, "pin_memory": False,
                              "batch_size": 8, "persistent_workers": True, "in_order": True,
                              "drop_last": False, "dataset_len": 240}
    prod = side["produce"]
    assert {r["worker"] for r in prod} == {0, 1} and len({r["pid"] for r in prod}) == 2
    assert len(prod) >= 8 and all(r["wall_us"] > 0 and r["bytes"] == 8 * 64 * 4 + 8 * 8 for r in prod)
    assert sum(s["profiled"] for s in side["steps"]) == 4 and len(side["steps"]) == 8
    assert side["warnings"] == []
    sc = load_sidecar(out / "sidecar.json")
    assert sc.capture == "harness" and sc.ddp is None and sc.loader.prefetch_factor == 3

    r = run_cli("calibrate", str(out), "-o", str(tmp_path / "model.json"))
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "model.json").read_text())
    assert m["loader"]["num_workers"] == 2 and m["loader"]["prefetch_factor"] == 3
    assert m["meta"]["sources"]["loader.produce"] == "measured"
    r = run_cli("whatif", str(tmp_path / "model.json"), "--set", "loader.num_workers=4")
    assert r.returncode == 0, r.stderr


def test_attach_after_persistent_workers_started_warns(tmp_path):
    loader = tud.DataLoader(Squares(64), batch_size=8, num_workers=1, persistent_workers=True)
    next(iter(loader))  # the workers run now, with the loader's own collate_fn
    cap = Capture(tmp_path)
    with pytest.warns(UserWarning, match="already running"):
        cap.attach(loader)
    for _ in cap.steps(loader, active=1, wait=0, warmup=1, skip_first=0):
        pass
    side = load_sidecar(tmp_path / "sidecar.json")
    assert side.produce == [] and any("already running" in w for w in side.warnings)


def test_attach_refuses_what_is_not_a_dataloader(tmp_path):
    with pytest.raises(TypeError, match="DataLoader"):
        Capture(tmp_path).attach([1, 2, 3])


def _ddp_rank(rank: int, world: int, folder: str) -> None:
    """One rank of a 2-process gloo DDP job on the CPU, captured with the harness."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
        net[2].bias.requires_grad_(False)
        model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=1)
        cap = Capture(Path(folder) / "run")
        cap.ddp(model)
        loader = tud.DataLoader(Squares(8 * 12), batch_size=8, collate_fn=pair_collate)
        _train(cap, loader, model, active=3, wait=1, warmup=1, skip_first=2)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without distributed")
def test_ddp_job_is_recorded_per_rank(tmp_path):
    import torch.multiprocessing as mp

    # fork: the ranks start with the modules already imported (a DataLoader worker starts so too)
    mp.start_processes(_ddp_rank, args=(2, str(tmp_path)), nprocs=2, join=True, start_method="fork")
    for rank in (0, 1):
        sc = load_sidecar(tmp_path / "run" / f"rank{rank}" / "sidecar.json")
        d = sc.ddp
        assert (d.world_size, d.rank, d.backend, d.wrapped) == (2, rank, "gloo", True)
        assert d.hosts == [socket.gethostname()] * 2
        assert d.bucket_cap_mb == 1.0 and d.first_bucket_bytes == 1024 * 1024
        assert [p.name for p in d.params] == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert [p.numel for p in d.params] == [64 * 128, 128, 128 * 2, 2]
        assert all(p.dtype == "float32" and p.bytes == 4 * p.numel for p in d.params)
        assert [p.requires_grad for p in d.params] == [True, True, True, False]
        assert d.grad_bytes == 4 * (64 * 128 + 128 + 256)
        assert d.find_unused_parameters is False and d.gradient_as_bucket_view is False
        # the skip_first + wait steps ran without the profiler, the warm-up step with it
        assert [s.profiler_on for s in sc.steps] == [False] * 3 + [True] * 4
        assert [s.profiled for s in sc.steps] == [False] * 4 + [True] * 3
    r = run_cli("calibrate", str(tmp_path / "run" / "rank0"), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 0, r.stderr
    # the job: both ranks, its all-reduce sized from Input Dims (the profiler records shapes
    # under DDP), the profiler's cost measured per rank against the unprofiled steps
    job = tmp_path / "job.json"
    r = run_cli("calibrate", str(tmp_path / "run"), "-o", str(job))
    assert r.returncode == 0, r.stderr
    # measured on every rank: scaled where it reads below 1, else kept at 1 and named as within
    # the steps' scatter or as drift (calibration.profiler_overhead.rank_factors; one CI run
    # read both ranks above 1)
    assert "the capture sidecar records no unprofiled" not in r.stderr
    assert "no Input Dims" not in r.stderr
    m = json.loads(job.read_text())
    assert len(m["ranks"]) == 2
    overhead_readings(r.stderr, m, ranks=(0, 1))
    grads = 4 * (64 * 128 + 128 + 256)
    assert [t["bytes"] for t in m["device"]["streams"]["gloo"]] == [grads]
    # a bucket what-if rebuilds the all-reduces from the recorded parameters: a 1 KiB cap
    # (the first bucket's too, as DDP(bucket_cap_mb=...) does) closes one bucket at 2.weight
    # (1 KiB) and one with 0.bias + 0.weight
    r = run_cli("whatif", str(job), "--set", f"comm.bucket_cap_mb={1 / 1024}", "--draws", "0",
                "--steps", "4", "--json")
    assert r.returncode == 0, r.stderr
    comm = json.loads(r.stdout)["scenario"]["rank_comm"]
    assert {x["rank"]: x["count"] for x in comm if x["group"] == "collective"} == {0: 2, 1: 2}


def test_bad_ddp_section_is_one_line(tmp_path):
    side = {"stepsim_sidecar": 1, "loader": {"num_workers": 0},
            "ddp": {"world_size": 2, "rank": 2, "backend": "gloo"}}
    (tmp_path / "sidecar.json").write_text(json.dumps(side))
    from stepsim.simcore.errors import InputError

    with pytest.raises(InputError, match="rank 2 is not below world_size 2"):
        load_sidecar(tmp_path / "sidecar.json")
    assert os.path.exists(tmp_path / "sidecar.json")


class Stream(tud.IterableDataset):
    """An iterable dataset; each worker yields every other sample (its own shard)."""

    def __iter__(self):
        info = tud.get_worker_info()
        for i in range(info.id, 400, info.num_workers):
            yield torch.full((16,), float(i)).tanh()


def test_attach_times_an_iterable_dataset_in_its_workers(tmp_path):
    loader = tud.DataLoader(Stream(), batch_size=4, num_workers=2)
    n = sum(1 for _ in Capture(tmp_path).steps(loader, active=2, wait=0, warmup=1, skip_first=1))
    assert n == 4
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert {r.worker for r in sc.produce} == {0, 1} and all(r.bytes == 4 * 16 * 4 for r in sc.produce)
    assert sc.loader.dataset_len is None and sc.warnings == []


def test_a_dataset_whose_class_cannot_be_swapped_is_reported(tmp_path):
    """A plain list (a built-in type) cannot take a timing subclass in the worker: no produce
    records, and a warning that says why (calibration then infers produce time)."""
    loader = tud.DataLoader([torch.ones(8) * i for i in range(64)], batch_size=4, num_workers=1)
    for _ in Capture(tmp_path).steps(loader, active=1, wait=0, warmup=1, skip_first=0):
        pass
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert sc.produce == []
    assert any("could not time its batches (list" in w for w in sc.warnings), sc.warnings


@pytest.mark.parametrize("module, blocked, extra", [
    ("stepsim.calibration.lightning", ("lightning.pytorch", "pytorch_lightning"), "lightning"),
    ("stepsim.calibration.hf", ("transformers",), "hf"),
])
def test_a_missing_extra_is_named(monkeypatch, module, blocked, extra):
    import importlib
    import sys

    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # import of it raises ImportError
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'stepsim\[{extra}\]'"):
        importlib.import_module(module)


@pytest.mark.slow
def test_attach_with_spawned_workers(tmp_path):
    """Under the spawn start method (macOS's default) the wrapped collate_fn and worker_init_fn
    travel to the workers by pickling, and the timing subclass is made there."""
    loader = tud.DataLoader(Squares(8 * 8), batch_size=8, num_workers=1, collate_fn=pair_collate,
                            multiprocessing_context="spawn")
    model = torch.nn.Linear(64, 2)
    assert _train(Capture(tmp_path), loader, model, active=2, wait=0, warmup=1, skip_first=1) == ["mine"] * 4
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert {r.worker for r in sc.produce} == {0} and len(sc.produce) >= 4 and sc.warnings == []


def test_hooks_stopped_early_write_what_they_have(tmp_path):
    """The callbacks' common driver, stopped by the framework before the window is complete:
    the sidecar holds the steps that ran and says why the rest is missing."""
    from stepsim.calibration.hooks import HookCapture

    hc = HookCapture(tmp_path, via="lightning", active=4, wait=0, warmup=1, skip_first=1)
    loader = tud.DataLoader(Squares(64), batch_size=8)
    hc.begin({"main": loader}, torch.nn.Linear(64, 2))
    for _, batch in zip(range(1), loader):  # the skipped step only: the profiler never recorded
        hc.batch_ready()
        hc.step_end()
    hc.end("training ended after 1 optimizer steps")
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert sc.capture == "lightning" and len(sc.steps) == 1 and sc.ddp is None
    assert sc.warnings[0] == "training ended after 1 optimizer steps"
    assert any("no trace was written (run at least 6 steps)" in w for w in sc.warnings)
    assert not (tmp_path / "trace.json.gz").exists() and not list(tmp_path.glob(".partial*"))
    with pytest.raises(ValueError, match="active must be a whole number >= 1"):
        HookCapture(tmp_path, via="lightning", active=0)
