"""A user's own 2-rank DDP job on the CPU (gloo), captured with the harness as the README
says (``Capture.ddp(model)`` on every rank, one ``rank<N>/`` folder each), recorded by the
test: calibrate, validate and the DDP what-ifs on it."""
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
from tests.conftest import run_cli  # noqa: E402


class Slow(tud.Dataset):
    """Samples that cost the main thread real CPU in next() (num_workers=0)."""

    def __len__(self):
        return 8 * 16

    def __getitem__(self, i):
        x = torch.arange(64, dtype=torch.float32) + i
        for _ in range(150):
            x = torch.tanh(x).sort().values + x
        return x, i % 2


def _rank(rank: int, world: int, folder: str, straggler_ms: float = 0.0) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                            world_size=world)
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                  torch.nn.Linear(128, 2))
        model = torch.nn.parallel.DistributedDataParallel(net)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        cap = Capture(Path(folder) / "run")
        cap.ddp(model)
        if straggler_ms:
            cap.straggler(1, straggler_ms)
        for x, y in cap.steps(tud.DataLoader(Slow(), batch_size=8), active=5, wait=1, warmup=1):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("userddp")
    mp.start_processes(_rank, args=(2, str(tmp)), nprocs=2, join=True, start_method="fork")
    run = tmp / "run"
    model = tmp / "m.json"
    r = run_cli("calibrate", str(run), "-o", str(model))
    assert r.returncode == 0, r.stderr
    return run, model


def test_validate_reads_the_harness_ddp_folder(job, tmp_path):
    """validate takes the rank<N>/ capture folder that calibrate takes."""
    run, model = job
    r = run_cli("validate", str(model), str(run), "--draws", "0", "--steps", "4",
                "--ledger", str(tmp_path / "l.jsonl"))
    assert r.returncode == 0, r.stderr
    assert "baseline" in r.stdout
    # at num_workers=0 the main thread makes each batch inside next(): the trace and the
    # prediction both count that time as input, by one rule (models.bottleneck, rule 2)
    rec = json.loads((tmp_path / "l.jsonl").read_text().splitlines()[0])
    assert rec["measured_bottleneck"] == "input", rec
    assert rec["bottleneck_agrees"] is True, rec


def test_a_jobs_rank_notes_name_their_rank(job):
    """Each rank's own notes (here: scored on the profiled steps, no ``after``) name the rank:
    validate prints them all under the job's folder, where a user's 2-rank run read the same
    folder twice with two different means."""
    from stepsim.calibration.measure import measured_steps

    run, _ = job
    said = [w for w in measured_steps(run).warnings if "profiled steps" in w]
    assert sorted(w.split(":")[0] for w in said) == ["rank0", "rank1"], said


def test_dataloader_next_is_calibrated_on_every_rank(job):
    """The main thread's next(DataLoader) is a next_batch op with the loader's produce time,
    not part of forward, so a loader what-if has something to act on."""
    run, model = job
    m = json.loads(model.read_text())
    kinds = [op["kind"] for op in m["host"]["ops"]]
    assert kinds.count("next_batch") == 1 and kinds.index("next_batch") < kinds.index("launch")
    produce = m["loader"]["produce"]["mean_us"]
    assert produce > 0 and m["loader"]["num_workers"] == 0
    nexts = []
    for rank in (0, 1):
        import gzip
        ev = json.load(gzip.open(run / f"rank{rank}" / "trace.json.gz"))["traceEvents"]
        nexts += [e["dur"] for e in ev if e.get("ph") == "X"
                  and e["name"].startswith("enumerate(DataLoader)")]
    assert min(nexts) * 0.5 < produce < max(nexts) * 1.5


def _edited(model: Path, out: Path, edit) -> Path:
    m = json.loads(model.read_text())
    edit(m)
    out.write_text(json.dumps(m))
    return out


def test_ddp_whatifs_on_a_model_with_unsized_allreduces(job, tmp_path):
    """A model calibrated before the all-reduces were sized (no bytes): the barrier works on
    the host-op phases, and a bucket what-if says what to do instead of naming device tasks."""
    def unsize(m):
        for t in m["device"]["streams"]["gloo"]:
            t["bytes"] = None

    old = _edited(job[1], tmp_path / "old.json", unsize)
    r = run_cli("whatif", str(old), "--fix", "barrier", "--draws", "0", "--steps", "4")
    assert r.returncode == 0, r.stderr
    for args in (["--set", "comm.bucket_cap_mb=0.001"],
                 ["--set", "comm.bus_gbps=1", "--set", "comm.bucket_cap_mb=0.001"]):
        r = run_cli("whatif", str(old), *args, "--draws", "0", "--steps", "4")
        assert r.returncode == 2 and "re-calibrate the capture" in r.stderr, r.stderr


def test_remove_straggler_and_simulate_agree_without_a_slow_rank(job, tmp_path):
    def even(m):
        for r in m["ranks"]:
            r["delay_us"], r["phase_extra_us"] = 0.0, {}

    m = _edited(job[1], tmp_path / "even.json", even)
    r = run_cli("whatif", str(m), "--fix", "remove_straggler", "--draws", "0", "--steps", "4")
    assert r.returncode == 2 and "step-to-step variation" in r.stderr, r.stderr
    r = run_cli("simulate", str(m), "--steps", "8")
    assert r.returncode == 0 and "; straggler rank" not in r.stdout


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    """The same job, rank 1 a 5 ms straggler through ``Capture.straggler``."""
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("userddp_straggler")
    mp.start_processes(_rank, args=(2, str(tmp), 5.0), nprocs=2, join=True,
                       start_method="fork")
    return tmp / "run"


def test_capture_straggler_is_recorded_and_validate_asks_for_its_fix(job, straggler_run,
                                                                      tmp_path):
    """fresh12 validated straggler runs without --fix and had them scored as the baseline: a
    straggler injected through Capture.straggler is in every rank's sidecar, and validate
    refuses the run without the --fix that predicts it, in one line saying which."""
    for r in (0, 1):
        side = json.loads((straggler_run / f"rank{r}" / "sidecar.json").read_text())
        assert side["ddp"]["straggler"] == {"rank": 1, "phase": "forward", "spin_us": 5000.0}
    _, model = job
    ledger = tmp_path / "l.jsonl"
    r = run_cli("validate", str(model), str(straggler_run), "--draws", "0", "--steps", "4",
                "--ledger", str(ledger))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "rank 1 is a straggler in the capture" in r.stderr
    assert "--fix straggler:rank=1,phase=forward,ms=5 would match" in r.stderr
    assert not ledger.exists()
    r = run_cli("validate", str(model), str(straggler_run), "--draws", "0", "--steps", "4",
                "--fix", "straggler:rank=1,phase=forward,ms=5")
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """The same job at the same setting, captured again: a run the model never saw."""
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("userddp_fresh")
    mp.start_processes(_rank, args=(2, str(tmp)), nprocs=2, join=True, start_method="fork")
    return tmp / "run"


def test_a_fresh_run_of_the_calibration_setting_is_a_baseline_check(job, fresh_run, tmp_path):
    """fresh12's fresh re-runs of the default setting were marked in-sample ("a replay of the
    capture") while the same output said a ledger kept them in the score: the capture itself
    stays in-sample, a run the model was not calibrated on is a check of the baseline's level,
    on its own line with its error, and neither is in the what-ifs' score."""
    run, model = job
    ledger = tmp_path / "l.jsonl"
    for folder in (run, fresh_run):
        r = run_cli("validate", str(model), str(folder), "--draws", "0", "--steps", "4",
                    "--ledger", str(ledger))
        assert r.returncode == 0, r.stderr
        assert "keeps it in the score" not in r.stdout
    recs = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert [(x["in_sample"], x["baseline_check"]) for x in recs] == [(True, False),
                                                                    (False, True)]
    assert "baseline †" in r.stdout and "† baseline check" in r.stdout
    assert f"baseline check (fresh runs of the calibration setting): the model's baseline " \
           f"is {recs[1]['error_pct']:+.1f}%" in " ".join(r.stdout.split())
    r = run_cli("ledger", str(ledger))
    text = " ".join(r.stdout.split())
    assert "1 in-sample record (the calibration setting itself) left out of the score" in text
    assert (f"1 baseline check (the calibration setting against fresh runs) left out of the "
            f"score: median error {recs[1]['error_pct']:+.1f}%") in text
    assert "the ledger has no out-of-sample prediction" in text


def test_the_jobs_held_share_counts_the_threads_whose_cpu_it_counts(job):
    """The held share of a real 2-rank gloo job (:func:`calibration.job_load.job_load`, the
    reading behind validate's "threads held" and its ‡ rule) counts each training step's
    process CPU, which holds gloo's worker and TCP threads, and counted as runnable only the
    training thread, which blocks while gloo runs the all-reduce: fresh12's 0-worker run read
    1.072, a share of the core time the job's threads could hold past 1 (tidy22). A thread
    that ran was runnable while it ran, so every interval's runnable threads are at least its
    CPU over its wall (:func:`calibration.outside_load.busy_spans`), and with the job's threads
    within the cores the share is at most 1 by construction."""
    import numpy as np

    from stepsim.calibration.job_load import job_load, threads_per_worker
    from stepsim.calibration.outside_load import STEP, busy_spans
    from stepsim.calibration.sidecar import load_sidecar

    run, _ = job
    sides = [load_sidecar(f) for f in sorted(run.glob("rank*/sidecar.json"))]
    assert len(sides) == 2
    # the case: steps whose process CPU passes the training thread's own (gloo's threads)
    assert any(s.compute_cpu_us > s.cpu_us - s.next_cpu_us for side in sides
               for s in side.steps)
    spans = []
    for side in sides:
        a = busy_spans(side, 0, threads_per_worker(side), side.torch_num_threads or 1)
        wall = a[:, 1] - a[:, 0]
        assert (a[:, 3] <= a[:, 2] * wall * (1 + 1e-9)).all()   # (fails on main)
        assert (a[:, 4] == STEP).any()
        spans.append(a)
    # so the job's CPU is at most the time its threads were runnable, and where they stayed
    # within the cores that is the core time they could hold: held <= 1 (past the cores, on a
    # loaded CI machine, each interval's CPU spread over its wall may read a hair over 1)
    a = np.concatenate(spans)
    t = np.concatenate([a[:, 0], a[:, 1]])
    order = np.argsort(t, kind="stable")
    runnable = np.maximum(np.cumsum(np.concatenate([a[:, 2], -a[:, 2]])[order])[:-1], 0.0)
    assert a[:, 3].sum() <= (runnable * np.diff(t[order])).sum() * (1 + 1e-9)
    load = job_load(sides)
    assert load is not None and np.isfinite(load.slowdown) and load.held > 0
    if runnable.max() <= load.cores:
        assert load.held <= 1 + 1e-9
