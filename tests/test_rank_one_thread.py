"""One intra-op thread per DDP rank priced from a capture at torch's default threads
(calibration.rank_team, scenarios.rank_one_thread): fresh8's 2-rank gloo job on 2 cores, 2
threads a rank, 584 ms a step measured against 92 ms at one thread a rank (2026-12-07)."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.calibration.gloo_steps import GlooCollective, GlooRank
from stepsim.calibration.gloo_cpu import gloo_own_cost
from stepsim.calibration.rank_team import one_thread_cpu, one_thread_notes
from stepsim.calibration.sidecar import ThreadCPU, load_sidecar
from stepsim.models.params import StepModel
from stepsim.models.rank_threads import HEAVY_TAIL
from stepsim.scenarios.draws import perturb, uncertain_params
from stepsim.scenarios.fix_types import NotApplicable
from stepsim.scenarios.fixes import FIXES
from stepsim.scenarios.host_threads import ThreadsArgs, intra_op_threads, threads_candidates
from stepsim.scenarios.rank_one_thread import CAPTURE_LINE, one_thread_ranks, rank_threads

DATA = Path(__file__).parent / "data"
JOB = DATA / "fresh8_b100_job"
MIB = 2 ** 20


def _sidecars(tmp_path: Path) -> dict:
    out = {}
    for r in (0, 1):
        p = tmp_path / f"rank{r}.json"
        p.write_bytes(gzip.open(JOB / f"rank{r}" / "sidecar.json.gz").read())
        out[r] = load_sidecar(p)
    return out


def test_the_team_thread_burns_what_the_training_thread_burns(tmp_path):
    """The premise, measured on the fixture's profiled steps: the thread named like the
    training thread (torch's second OpenMP thread) used as much CPU as the training thread
    (the team spins whenever it runs), so the process's CPU is T × the training thread's."""
    for side in _sidecars(tmp_path).values():
        prof = [s for s in side.steps if s.profiled]
        main = sum(s.cpu_us for s in prof)
        team = max(t.cpu_us for t in side.ddp.threads if t.name == "python")
        assert 0.95 < team / main < 1.1, (team, main)


def test_the_one_thread_bracket_is_the_least_spun_steps(tmp_path):
    """Low end: the quickest tenth of the unprofiled steps' training-thread CPU; high end:
    the mean of the fast mode (steps within HEAVY_TAIL × the low end), each the ranks' mean;
    the slow mode (4-6x) is out of both."""
    sides = _sidecars(tmp_path)
    low, high = one_thread_cpu(sides)
    cpu = [np.sort([s.cpu_us for s in side.steps[1:] if not s.profiled])
           for side in sides.values()]
    assert low == pytest.approx(np.mean([c[:len(c) // 10].mean() for c in cpu]))
    assert low < high <= HEAVY_TAIL * low
    assert high < np.mean([c.mean() for c in cpu]) / 2      # the spun steps are left out
    # fewer than 10 unprofiled steps: nothing read
    few = {0: SimpleNamespace(steps=sides[0].steps[:5])}
    assert one_thread_cpu(few) is None


def _rank(r: int, team_us: float) -> tuple[GlooRank, object]:
    small, big = 262144, 7 * 262144          # float32 elements: 1 MiB and 7 MiB
    colls = [GlooCollective("all_reduce", n, "float", (0, 0), (0, 0), tid)
             for _ in range(8) for n, tid in ((small, 11), (big, 12))]
    threads = [ThreadCPU(tid=11, name="pt_gloo_runloop", cpu_us=8 * (300 + 1e-4 * MIB)),
               ThreadCPU(tid=12, name="pt_gloo_runloop", cpu_us=8 * (300 + 7e-4 * MIB)),
               ThreadCPU(tid=10, name="gloo_tcp_loop", cpu_us=5e-4 * 64 * MIB),
               ThreadCPU(tid=13, name="python", cpu_us=team_us)]
    return (GlooRank(r, 2, "h", Path(f"rank{r}.json"), 0, colls=colls),
            SimpleNamespace(ddp=SimpleNamespace(threads=threads)))


def test_gloos_own_cpu_leaves_the_team_out():
    """a + k × bytes of gloo's named threads alone: the team thread's CPU (any amount) does
    not move it; the workers' a and k, and the TCP loop per byte."""
    for team in (0.0, 5e6):
        ranks, sides = zip(*(_rank(r, team) for r in (0, 1)))
        a, k = gloo_own_cost(dict(enumerate(ranks)), dict(enumerate(sides)))
        assert a == pytest.approx(300.0) and k == pytest.approx((1e-4 + 5e-4) * MIB)
    assert gloo_own_cost(dict(enumerate(ranks)), {}) is None


def test_notes_only_where_the_ranks_oversubscribe(tmp_path):
    sides = _sidecars(tmp_path)
    ranks, rsides = zip(*(_rank(r, 1e6) for r in (0, 1)))
    for r in (0, 1):
        sides[r].ddp.threads = rsides[r].ddp.threads
    rk = dict(enumerate(ranks))
    notes, ranges = one_thread_notes(rk, sides, 2, True, (0.94, 1.06))
    low, high = (float(x) for x in notes["one_thread_cpu_bracket_us"].split(","))
    mid = notes["one_thread_cpu_us"]
    assert mid == pytest.approx(math.sqrt(low * high), rel=1e-3)
    lo, hi = ranges["meta.notes.one_thread_cpu_us"]
    assert lo * mid == pytest.approx(low * 0.94, rel=1e-3)
    assert hi * mid == pytest.approx(high * 1.06, rel=1e-3)
    assert one_thread_notes(rk, sides, 1, True, (0.94, 1.06)) == ({}, {})
    assert one_thread_notes(rk, sides, 2, False, (0.94, 1.06)) == ({}, {})


def _spun(**notes) -> StepModel:
    """The DDP demo's model (2 ranks on host vm, 2 cores) as if captured at 2 threads a rank."""
    data = json.loads((DATA / "ddp_demo_model.json").read_text())
    data["meta"]["notes"].update({"intra_op_threads": 2, **notes})
    data["ranks"][1]["phase_extra_us"] = {"forward": 20000.0}
    return StepModel.model_validate(data)


W1, COMM = 50000.0, "150.0,600.0"


def test_one_thread_a_rank_in_closed_form():
    """The ops' per-step CPU is W1, shared as their least-spun samples; gloo's own CPU; no
    spin skew; the host speed at 1 with no spun runs."""
    m = _spun(one_thread_cpu_us=W1, one_thread_comm_cpu=COMM)
    assert rank_threads(m) == ("vm", 2, 2, 2)
    out = intra_op_threads(m, ThreadsArgs())
    cpu = [(a, b) for a, b in zip(m.host.ops, out.host.ops) if a.kind == "cpu"]
    least = [min(a.samples_us or [a.dur_us]) for a, _ in cpu]
    assert sum(b.dur_us for _, b in cpu) == pytest.approx(W1)
    for (_, b), s in zip(cpu, least):
        assert b.dur_us == pytest.approx(W1 * s / sum(least)) and b.samples_us is None
    assert (out.comm.host_cpu_us, out.comm.host_cpu_us_per_mb) == (150.0, 600.0)
    assert all(not r.phase_extra_us for r in out.ranks)
    assert out.host.cpu_scale == 1.0 and not out.host.speed_runs
    assert out.meta.notes["intra_op_threads"] == 1 and rank_threads(out) is None
    assert threads_candidates(m) == [{"threads": 1}] and threads_candidates(out) == []
    assert "host_compute" in FIXES["intra_op_threads"].relieves_for(m)
    assert "host_compute" not in FIXES["intra_op_threads"].relieves_for(out)
    assert "host_compute" not in FIXES["intra_op_threads"].relieves     # diagnose's as before


def test_the_interval_draws_w1():
    """The range calibration writes on W1 is drawn, and the fixed model's CPU moves with it."""
    m = _spun(one_thread_cpu_us=W1, one_thread_comm_cpu=COMM)
    m = m.model_copy(update={"meta": m.meta.model_copy(update={
        "ranges": {**m.meta.ranges, "meta.notes.one_thread_cpu_us": (0.8, 1.2)}})})
    assert uncertain_params(m)[0]["meta.notes.one_thread_cpu_us"] == (0.8, 1.2)
    out = intra_op_threads(perturb(m, {"meta.notes.one_thread_cpu_us": 1.2}), ThreadsArgs())
    assert sum(op.dur_us for op in out.host.ops if op.kind == "cpu") == pytest.approx(1.2 * W1)


def test_what_cannot_be_priced_says_what_to_capture():
    bare = _spun()       # a model calibrated before the readings, or without ddp.threads
    with pytest.raises(NotApplicable, match="threads per rank = cores ÷ ranks") as e:
        intra_op_threads(bare, ThreadsArgs())
    assert CAPTURE_LINE in str(e.value)
    with pytest.raises(NotApplicable, match="one_thread_cpu_us"):
        one_thread_ranks(bare, None)
    assert threads_candidates(bare) == []
    m = _spun(one_thread_cpu_us=W1, one_thread_comm_cpu=COMM)
    with pytest.raises(NotApplicable, match="only one thread per rank"):
        one_thread_ranks(m, 2)
    plain = StepModel.model_validate(json.loads((DATA / "ddp_demo_model.json").read_text()))
    assert rank_threads(plain) is None and threads_candidates(plain) == []


def test_the_warning_says_whether_this_capture_prices_it():
    from stepsim.models.rank_threads import model_rank_threads

    heavy = {"measured_step_us": [190e3, 200e3, 210e3, 800e3]}
    m = _spun(one_thread_cpu_us=W1, one_thread_comm_cpu=COMM)
    m = m.model_copy(update={"meta": m.meta.model_copy(update=heavy)})
    assert "prices one thread a rank" in model_rank_threads(m)[0]
    bare = _spun()
    bare = bare.model_copy(update={"meta": bare.meta.model_copy(update=heavy)})
    assert "cannot price one thread a rank" in model_rank_threads(bare)[0]
