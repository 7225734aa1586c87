"""Shared fixtures: where the real traces live, and a CPU trace recorded by the test itself."""
from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Seeded property tests (the house rule): every run draws the same examples, so CI cannot pass
# or fail by the luck of the draw. HYPOTHESIS_PROFILE=explore draws fresh examples locally.
# "The same" holds for the same set of loaded modules only: Hypothesis (6.13x on) also draws the
# literal constants of the local modules in sys.modules, so a test run after others that
# imported more of stepsim (the DDP tests) draws other examples; a comparison must hold at its
# own edges (tests.test_solo.real_span), not only on the full suite's draw.
hypothesis_settings.register_profile("seeded", derandomize=True, deadline=None)
hypothesis_settings.register_profile("explore", deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seeded"))

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"


@pytest.fixture(autouse=True)
def _fresh_run_memo():
    """Each test starts with an empty memo of whole simulations (models/run_memo.py): a test
    that patches the simulator's internals then simulates a run an earlier test made would be
    given that run instead."""
    from stepsim.models import run_memo

    run_memo.clear()
    yield


def shared_traces() -> Path:
    """``../shared/traces`` beside the repository, or skip the test with the reason."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not available: {SHARED_TRACES} is absent (CI provides ../shared)")
    return SHARED_TRACES


def run_cli(*args: str, cwd: Path | None = None):
    """Run ``stepsim`` as a user does (a subprocess), returning the CompletedProcess."""
    import os
    import subprocess

    # tables take COLUMNS (pytest sets 80): the width of a pipe without COLUMNS, 110
    return subprocess.run([sys.executable, "-m", "stepsim", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=600, env={**os.environ, "COLUMNS": "110"})


def overhead_readings(stderr: str, model: dict, ranks) -> dict[int, str]:
    """Each rank's profiler-overhead reading as ``calibrate`` said it, checked against what
    must hold whatever a short live capture's noise: every rank measured (the model's
    ``profiler_factor`` note) and named in exactly one warning, with the note's factor; scaled
    ("measured") at a factor of at most 1, else kept at 1 as "not measurable" where its range
    holds 1 and as drift ("cannot make a step faster") where it does not. Returns rank → kind."""
    import re

    notes = dict(k.split(":") for k in model["meta"]["notes"]["profiler_factor"].split(","))
    assert sorted(map(int, notes)) == sorted(ranks), notes
    lines = [ln for ln in stderr.splitlines() if "profiler overhead" in ln]
    kinds = {}
    for r in ranks:
        said = [(ln, m) for ln in lines
                for m in re.finditer(rf"rank {r}: ([\d.]+) \(P10–P90 ([\d.]+)–([\d.]+);", ln)]
        assert len(said) == 1, (r, lines)
        ln, m = said[0]
        f, lo = float(m.group(1)), float(m.group(2))
        assert abs(f - float(notes[str(r)])) < 6e-4, (r, f, notes)
        kinds[r] = ("measured" if "(measured)" in ln else "scatter" if "not measurable" in ln
                    else "drift" if "cannot make a step faster" in ln else ln)
        # (printed to 3 decimals: within 5e-4 of 1 either side may be said)
        side = lambda v, below, above: {below} if v < 0.9995 else {above} if v > 1.0005 \
            else {below, above}
        want = side(f, "measured", "kept") - {"kept"} | (
            side(lo, "scatter", "drift") if f > 0.9995 else set())
        assert kinds[r] in want, (r, f, lo, ln)
    return kinds


def gloo_ranks(rank_fn, folder: Path, world: int = 2) -> None:
    """Run ``rank_fn(rank, world, folder)`` in ``world`` forked processes (a gloo job on this
    host, its ranks starting with the modules already imported), each inside its process group
    (``file://`` rendezvous in ``folder``), which is destroyed when it returns or raises."""
    import torch.multiprocessing as mp

    mp.start_processes(_in_group, args=(world, str(folder), rank_fn), nprocs=world, join=True,
                       start_method="fork")


def _in_group(rank: int, world: int, folder: str, rank_fn) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                            world_size=world)
    try:
        rank_fn(rank, world, folder)
    finally:
        dist.destroy_process_group()


class _SlowDataset:
    """Map-style dataset with real CPU work per sample (a few ms of numpy)."""

    def __init__(self, n: int, work: int):
        self.n, self.work = n, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        a = rng.random((self.work, self.work))
        for _ in range(4):  # single-threaded numpy work (no BLAS threads)
            a = np.sort(np.tanh(a) + a[::-1], axis=1)
        return torch.from_numpy(a[:8, :8].astype("float32").ravel()), i % 2


def record_cpu_run(out: Path, num_workers: int, active: int = 6, work: int = 400,
                   probe_workers: int | None = None, threads: int | None = 1,
                   schedule: dict | None = None) -> Path:
    """Record a real torch CPU training loop with the capture harness (then a probe at
    ``probe_workers``; ``threads``: torch's intra-op threads, None for its default;
    ``schedule``: ``wait``, ``warmup``, ``skip_first`` other than 1, 2, 3); returns ``out``."""
    import torch

    from stepsim.calibration.capture import Capture

    torch.manual_seed(0)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads)
    model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cap = Capture(out)
    kw = dict(batch_size=8, num_workers=num_workers)
    loader = cap.dataloader(_SlowDataset(8 * 40, work), **kw)
    sched = {"wait": 1, "warmup": 2, "skip_first": 3, **(schedule or {})}
    for x, y in cap.steps(loader, active=active, probe_workers=probe_workers, probe_steps=6,
                          **sched):
        for _ in range(4):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x.repeat(16, 1)), y.repeat(16)).backward()
            opt.step()
    torch.set_num_threads(default_threads)
    return out


@pytest.fixture(scope="session")
def cpu_run_nw0(tmp_path_factory) -> Path:
    return record_cpu_run(tmp_path_factory.mktemp("nw0"), num_workers=0)


@pytest.fixture(scope="session")
def cpu_run_nw1(tmp_path_factory) -> Path:
    return record_cpu_run(tmp_path_factory.mktemp("nw1"), num_workers=1)


def wall_holds_cpu(rec: dict) -> None:
    """Lengthen a sidecar record's wall times (in place) to hold its thread's CPU times, as a
    slower host's would: an edit that scales CPU times alone past the walls makes a record
    that cannot be right (``calibration.sidecar_cross``: a thread's CPU past its wall)."""
    for cpu, wall in (("cpu_us", "wall_us"), ("next_cpu_us", "next_wall_us")):
        if isinstance(rec.get(cpu), (int, float)) and isinstance(rec.get(wall), (int, float)):
            rec[wall] = max(rec[wall], min(rec[cpu], 1e12))   # a CPU out of range stays so


def steps_in_turn(steps: list) -> None:
    """Move (in place) each timed step's ``t_start_us`` later where the step before it now ends
    after it starts (its wall was lengthened in place), and every step after it by as much: a
    loop runs its steps in turn, and a step whose wall runs into the next cannot be right
    (``calibration.sidecar_records.drop_overrunning_steps``)."""
    shift, prev = 0.0, None
    for s in steps:
        if not isinstance(s, dict) or not isinstance(s.get("t_start_us"), (int, float)):
            continue
        s["t_start_us"] += shift
        if prev is not None and isinstance(prev.get("wall_us"), (int, float)):
            over = prev["t_start_us"] + prev["wall_us"] - s["t_start_us"]
            if 0 < over < 1e12:             # a wall out of range stays so (refused)
                s["t_start_us"] += over
                shift += over
        prev = s


def later_run(data: dict, offset_us: float = 6e7, quiet: bool = False) -> dict:
    """A sidecar's JSON ``data`` with every instant (steps' ``t_start_us``, batches'
    ``t_end_us``, the probe's too) ``offset_us`` later, in place, as if captured a minute after
    the original: a replicate made by editing a copy must also be another run, since
    calibration refuses one whose instants are a copy's (``calibration.host_noise``).
    ``quiet``: its threads never waited for a core (run-queue waits 0), so it is a run without
    outside load whatever load the copied capture ran under: calibration leaves a replicate
    under outside load out of the host's noise (``calibration.host_noise.drop_loaded``)."""
    for part in (data, data.get("probe") or {}):
        for rec in part.get("produce", []) + part.get("steps", []):
            wall_holds_cpu(rec)
        steps_in_turn(part.get("steps", []))
    if quiet:
        for rec in data.get("produce", []) + data.get("steps", []):
            for k in ("run_wait_us", "next_run_wait_us", "gap_run_wait_us"):
                if rec.get(k) is not None:
                    rec[k] = 0.0
    for part in (data, data.get("probe") or {}):
        for s in part.get("steps", []):
            if s.get("t_start_us") is not None:
                s["t_start_us"] += offset_us
        for r in part.get("produce", []):
            if r.get("t_end_us") is not None:
                r["t_end_us"] += offset_us
    return data


def replicate_copy(src: Path, dst: Path, factor: float, **loader) -> Path:
    """A copy of capture ``src`` whose every CPU time is ``factor``× (a slower host), captured
    later without outside load (:func:`later_run` with ``quiet``); ``loader``: fields of its
    ``loader`` section changed (a ``num_workers`` of N > 0 hands the workers' batches round
    robin to N workers, in time order, as that DataLoader would: a sidecar whose batches come
    from fewer workers than its loader's round robin allows is refused)."""
    import json
    import shutil

    shutil.copytree(src, dst)
    data = json.loads((dst / "sidecar.json").read_text())
    for rec in data["produce"] + data["steps"]:
        for k in ("cpu_us", "proc_cpu_us", "next_cpu_us", "next_proc_cpu_us",
                  "sys_cpu_us"):
            if rec.get(k) is not None:
                rec[k] *= factor
    data["loader"].update(loader)
    if loader.get("num_workers"):
        made = sorted((r for r in data["produce"] if r["worker"] >= 0),
                      key=lambda r: r.get("t_end_us") or 0.0)
        for k, rec in enumerate(made):
            rec["worker"] = k % loader["num_workers"]
    (dst / "sidecar.json").write_text(json.dumps(later_run(data, quiet=True)))
    return dst


PROBE0_RUNS = Path(__file__).parent / "data" / "probe0_runs"
"""Five real runs of the plain demo's calibration setting (``num_workers=1``, each with a probe
at ``num_workers=0``; 2026-12-07 08:47–08:52 UTC, zero20): sidecars, and the first run's trace;
``nw1-r5`` ran under outside load (its threads held 58 % of the core time they could have)."""


PROBE0_QUIET = Path(__file__).parent / "data" / "probe0_quiet"
"""Five runs of a quiet ``--probe`` demo (2026-12-07 09:25–09:30 UTC, zero20; 96–99 % of their
core time held): ``nw1-r7`` (with its trace), whose own probe fit fell below 0 (−0.070), and
``nw1-r0``–``r3``."""


def _unpacked(src: Path, out: Path) -> Path:
    """The capture folders under ``src`` unpacked into ``out`` (``sidecar.json``, and the
    ``trace.json.gz`` where one is kept)."""
    for d in sorted(src.iterdir()):
        (out / d.name).mkdir()
        (out / d.name / "sidecar.json").write_bytes(gzip.decompress(
            (d / "sidecar.json.gz").read_bytes()))
        if (d / "trace.json.gz").is_file():
            (out / d.name / "trace.json.gz").write_bytes((d / "trace.json.gz").read_bytes())
    return out


@pytest.fixture(scope="session")
def probe0_runs(tmp_path_factory) -> Path:
    """:data:`PROBE0_RUNS` unpacked (the trace in ``nw1-r0``)."""
    return _unpacked(PROBE0_RUNS, tmp_path_factory.mktemp("probe0_runs"))


@pytest.fixture(scope="session")
def probe0_quiet(tmp_path_factory) -> Path:
    """:data:`PROBE0_QUIET` unpacked (the trace in ``nw1-r7``)."""
    return _unpacked(PROBE0_QUIET, tmp_path_factory.mktemp("probe0_quiet"))
