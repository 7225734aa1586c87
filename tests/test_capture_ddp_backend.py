"""A user's own 2-rank gloo DDP job captured as the README says (``Capture.ddp``,
``Capture.steps``), recorded by the test: the capture measures what the DDP demo's harness
does (the backend threads' CPU over the profiled steps and per bucket, and, opted into, the
cold-resume probe), so calibration measures gloo's CPU, wake-ups and the cold resume where it
took stated priors before (issue 12, capddp12)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.utils.data as tud  # noqa: E402

from stepsim.calibration.capture import Capture  # noqa: E402
from stepsim.calibration.cold_capture import COLD_PAUSES_MS, COLD_ROUNDS  # noqa: E402
from stepsim.calibration.sidecar import load_sidecar  # noqa: E402
from tests.conftest import gloo_ranks, run_cli  # noqa: E402

WIDTH, ACTIVE = 512, 4


class Pairs(tud.Dataset):
    def __len__(self):
        return 16 * 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(WIDTH, generator=g), torch.randn(WIDTH, generator=g)


def _rank(rank: int, world: int, folder: str) -> None:
    torch.manual_seed(0)
    # 3 MiB of gradients: DDP's defaults make a 1 MiB first bucket and a 2 MiB one
    net = torch.nn.Sequential(*[m for _ in range(3)
                                for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cap = Capture(Path(folder) / "run")
    cap.ddp(model)
    loader = cap.dataloader(Pairs(), batch_size=16)
    for x, y in cap.steps(loader, active=ACTIVE, wait=1, warmup=1, skip_first=2,
                          cold_probe=True):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    sizes = model._get_ddp_logging_data().get("rebuilt_bucket_sizes")
    (Path(folder) / f"buckets{rank}.txt").write_text(str(sizes))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddpbackend")
    gloo_ranks(_rank, tmp)
    return tmp


def test_the_sidecar_holds_the_backend_cpu_and_the_cold_probe(job):
    for rank in (0, 1):
        side = load_sidecar(job / "run" / f"rank{rank}" / "sidecar.json")
        d = side.ddp
        # every non-training thread over the profiled steps: gloo's threads did the work
        assert d.threads and sum(t.cpu_us for t in d.threads) > 0
        assert any("gloo" in t.name for t in d.threads if t.cpu_us > 0), d.threads
        # one row per bucket DDP itself reports, each over every profiled step
        sizes = [int(v) for v in (job / f"buckets{rank}.txt").read_text().split(",")]
        assert [b.bytes for b in d.bucket_cpu] == sizes and len(sizes) == 2
        assert all(b.steps == ACTIVE and b.cpu_us > 0 for b in d.bucket_cpu)
        # the marks span a part of the profiled steps: their CPU is within the threads' total
        assert sum(b.cpu_us for b in d.bucket_cpu) <= sum(t.cpu_us for t in d.threads) * 1.001
        # the probe: one row per pause, its steps alternated, the optimizer's CPU read too
        assert [p.pause_us for p in d.cold_probe] == [ms * 1e3 for ms in COLD_PAUSES_MS]
        for p in d.cold_probe:
            assert p.steps == COLD_ROUNDS and p.hot_cpu_us > 0 and p.cold_cpu_us > 0
            assert p.hot_opt_cpu_us > 0 and p.cold_opt_cpu_us > 0
        # the probe's steps are not the window's: its rows are the schedule's alone
        assert len(side.steps) == 2 + 1 + 1 + ACTIVE and not side.warnings


def test_calibration_measures_what_it_took_as_priors(job, tmp_path):
    model = tmp_path / "m.json"
    r = run_cli("calibrate", str(job / "run"), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert "not in the capture sidecars" not in r.stderr
    assert "lack the backend threads' timeslices" not in r.stderr
    m = json.loads(model.read_text())
    src = m["meta"]["sources"]
    for k in ("host_cpu_us", "host_cpu_us_per_mb", "wakeups", "wakeups_per_mb",
              "wakeup_wait_us", "cold_resume", "cold_resume_opt"):
        assert src[f"comm.{k}"] == "measured", (k, src.get(f"comm.{k}"))
    assert [p[0] for p in m["comm"]["cold_resume"]] == [ms * 1e3 for ms in COLD_PAUSES_MS]


def test_cold_probe_needs_a_ddp_job(tmp_path):
    cap = Capture(tmp_path / "run")
    with pytest.raises(ValueError, match="cold_probe needs a distributed job"):
        next(iter(cap.steps(cap.dataloader(Pairs(), batch_size=4), cold_probe=True)))
