"""break17's leftovers (tidy18): a given count bounded by what it costs to simulate
(:func:`models.sim_work.time_problem`), one step's standard error said to be unknown
(:class:`models.stepcount.StepCount`), and a GPU trace's collective sizes read exactly
(:func:`calibration.gpu_kinds.dims_numel`)."""
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from stepsim.calibration.gpu_kinds import MAX_NUMEL, MAX_NUMEL_WORDS, dims_numel
from stepsim.models.params import load_model
from stepsim.models.sim_work import (ALWAYS_STEPS, MAX_RUN_WORK, PIECE_US, PROCESS_PIECE_US,
                                     THREAD_PIECE_US, WAKE_PIECE_US, chosen_reach,
                                     collective_wakes, runs_as_processes, step_cost_us,
                                     step_work, thread_pieces, time_problem, work_problem)
from stepsim.models.stepcount import StepCount
from tests.conftest import shared_traces
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli, one_line_error

DATA = Path(__file__).parent / "data"
MODEL = DATA / "ddp_demo_model.json"


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def test_a_huge_warmup_of_the_ddp_model_is_refused_before_simulating():
    """``simulate ddp_demo_model.json --warmup 100000`` ran past 100 s at 0.9 GB (the work
    bound allowed 208 k steps of its 24 pieces); now one line, exit 2, at once."""
    before = _md5(MODEL)
    rc, err, _ = cli("simulate", MODEL, "--warmup", "100000")
    one_line_error(rc, err, "ddp_demo_model.json", "100,000 warm-up steps",
                   "as SimPy processes", "about 99 s", "13,608 steps", "--warmup")
    assert _md5(MODEL) == before


def test_the_time_bound_in_closed_form():
    """2 ranks × (8 ops + 2 tasks + 2 quanta) at 14 µs and (11 + 30) wake-ups past each
    collective's first at 8 µs (break18): 992 µs a step; 13.5 s is 13,608 steps, warm-up
    included. A count the verbs may choose is never refused."""
    m = load_model(MODEL)
    assert runs_as_processes(m) and thread_pieces(m) == 0 and step_work(m) == 24
    assert collective_wakes(m) == 11 + 30
    assert step_cost_us(m) == pytest.approx(24 * PROCESS_PIECE_US + 2 * 41 * WAKE_PIECE_US)
    most = int(MAX_RUN_WORK * PIECE_US // step_cost_us(m))
    assert most == 13_608 > chosen_reach(m) + ALWAYS_STEPS == 10_060
    assert time_problem(m, most - 20, 20) is None and work_problem(m, most - 20, 20) is None
    assert "13,608 steps" in work_problem(m, most - 19, 20)


def test_thread_pieces_cost_more_and_a_chosen_count_still_runs():
    """A model whose threads wait for a core (1 worker, a 4-thread team on 2 cores) runs as
    SimPy processes at :data:`THREAD_PIECE_US` a thread piece; its bound is then the chosen
    count's reach (10,000 steps and a warm-up), not the 13.5 s."""
    m = cpu_model(1, produce_ms=1, train_ms=1, cores=2)
    ops = [o.model_copy(update={"threads": 4, "parallel_fraction": 0.5})
           if o.kind == "cpu" else o for o in m.host.ops]
    m = m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})
    t = thread_pieces(m)
    assert t > 0 and runs_as_processes(m)
    rest = step_work(m) - t
    assert step_cost_us(m) == pytest.approx(rest * PROCESS_PIECE_US + t * THREAD_PIECE_US)
    reach = chosen_reach(m) + ALWAYS_STEPS
    assert reach > MAX_RUN_WORK * PIECE_US // step_cost_us(m)
    assert time_problem(m, reach - 20, 20) is None
    assert f"{reach:,} steps of this model" in time_problem(m, reach - 19, 20)


def test_an_event_free_model_keeps_the_work_bound():
    """A model the event-free engine solves is bounded by :data:`MAX_RUN_WORK` alone."""
    m = cpu_model(0, produce_ms=1, train_ms=1)
    assert not runs_as_processes(m)
    assert step_cost_us(m) == pytest.approx(step_work(m) * PIECE_US)
    assert time_problem(m, 99_980, 20) is None


def test_one_step_has_no_standard_error_to_report():
    """``--steps 1`` said "the mean's standard error is 0.0 % of it"; one step cannot
    estimate it."""
    rc, err, out = cli("simulate", MODEL, "--steps", "1")
    assert rc == 0, err
    assert "cannot be estimated from one step" in out and "0.0 % of it" not in out
    rc, _, out = cli("simulate", MODEL, "--steps", "1", "--json")
    doc = json.loads(out)
    d = doc
    assert d["steps"] == 1 and d["std_error_pct"] is None and d["std_error_ms"] is None
    assert not d["std_error_met"]
    two = StepCount(2, 10.0, 0.0, False)
    assert two.estimated and "0.0 % of it" in two.describe()


@pytest.mark.parametrize("dims, numel", [
    ([3037000500, 3037000500], None),     # int64 wrapped it negative
    ([2**62 + 1, 4], None),               # int64 wrapped it to 4
    ([2**30, 2**30], 2**60), ([2**30, 2**30, 2], None), ([-5, 4], None), ([True, 4], None),
    ([1.5, 2], None), ([0, 4], 0), ([], 1), ([384], 384)])
def test_dims_numel_is_exact(dims, numel):
    assert MAX_NUMEL_WORDS == "2**60" and MAX_NUMEL == 2**60
    assert dims_numel(dims) == numel


@pytest.fixture(scope="module")
def nccl_trace():
    return shared_traces() / "hta" / "trace_filter" / "sampled_rank-0.json.gz"


@pytest.mark.parametrize("dims", [[[3037000500, 3037000500]], [[2**62 + 1, 4]], [[-5, 4]]])
def test_a_gpu_traces_impossible_input_dims_leave_its_size_unknown(nccl_trace, tmp_path, dims):
    """HTA's sampled rank 0 (a copy) with its first ``nccl:all_reduce``'s Input Dims
    ([[19618307]] float: 78,473,228 bytes) edited: numpy's int64 product refused the whole
    trace ([3037000500]² and [-5, 4]: "DeviceTask.bytes ... records that cannot be right") or
    gave a 16-byte all-reduce ([2**62 + 1, 4]); now that collective's bytes are unknown and
    the rest are as before."""
    before = _md5(nccl_trace)
    d = json.load(gzip.open(nccl_trace))
    hit = [e for e in d["traceEvents"] if e.get("name") == "nccl:all_reduce"
           and e.get("args", {}).get("Input Dims") == [[19618307]]]
    assert len(hit) == 1
    hit[0]["args"]["Input Dims"] = dims
    edited = tmp_path / "rank0.json.gz"
    with gzip.open(edited, "wt") as f:
        json.dump(d, f)
    shutil.copy(nccl_trace, tmp_path / "orig.json.gz")
    sizes = []
    for src in (tmp_path / "orig.json.gz", edited):
        out = tmp_path / f"{src.name}.model.json"
        rc, err, _ = cli("calibrate", src, "-o", out)
        assert rc == 0, err
        m = load_model(out)
        sizes.append([t.bytes for ts in m.device.streams.values() for t in ts
                      if t.kind == "collective"])
    orig, got = sizes
    assert 78_473_228 in orig and 16 not in got
    assert got == [None if b == 78_473_228 else b for b in orig]
    assert _md5(nccl_trace) == before


def test_the_keep_and_engine_messages_list_their_tuples(monkeypatch):
    """simulate's refusals name every value of ``KEEPS`` / ``ENGINES`` (the message spelled
    them out, so a new value would have been missing from it)."""
    from stepsim.models import simulate as sim
    from stepsim.simcore.errors import SimulationError

    m = load_model(MODEL)
    with pytest.raises(SimulationError, match=r"keep must be 'all', 'steps', 'brief' or 'runs', "
                                              r"got 'x'"):
        sim.simulate(m, steps=2, keep="x")
    monkeypatch.setattr(sim, "KEEPS", sim.KEEPS + ("more",))
    monkeypatch.setattr(sim, "ENGINES", sim.ENGINES + ("other",))
    with pytest.raises(SimulationError, match=r"'brief', 'runs' or 'more', got 'x'"):
        sim.simulate(m, steps=2, keep="x")
    with pytest.raises(SimulationError, match=r"'events', 'quanta' or 'other', got 'y'"):
        sim.simulate(m, steps=2, engine="y")


def test_finish_checks_a_stopped_run_in_one_place(monkeypatch):
    """``Processes.finish`` repeated ``_run``'s RuntimeError check; it now runs its hosts
    through ``_run`` too, whose message names the stuck ranks once the run stopped."""
    from stepsim.models import processes as pr

    calls = []
    run = pr.Processes._run

    def spy(self, evs, why):
        calls.append(len(evs))
        return run(self, evs, why)

    monkeypatch.setattr(pr.Processes, "_run", spy)
    from stepsim.models.simulate import simulate
    simulate(load_model(MODEL), steps=3, warmup=1)
    assert calls[0] == 2, calls      # the 2 ranks' host threads, then the device


@pytest.mark.parametrize("capture, cores", [(1, 2), (2, 2), (1, 4), (3, 4), (5, 4), (0, 2),
                                            (0, 8)])
def test_every_probe_note_gives_the_one_rule(capture, cores):
    """fresh7 (2026-12-07): beside a 1-worker capture on 2 cores the 2-worker probe's note
    asked for a probe at 0 workers, and the 0-worker probe's (interference fitted 1.000)
    for one at a second num_workers > 0. Every note now ends with the same rule: a probe on
    the capture's side of num_workers=0 calibrates interference alone (none on 2 cores),
    one across it the main thread's own cost with the interference."""
    from stepsim.calibration.same_thread import probe_rule, same_side_workers

    rule = probe_rule(capture, cores)
    same = same_side_workers(capture, cores)
    assert same is None if capture == 0 or cores < 3 else same not in (0, capture)
    assert (f"a probe at num_workers={same} calibrates co-run interference alone" in rule
            if same is not None else "no probe calibrates co-run interference alone" in rule)
    across = 0 if capture else cores - 1
    assert f"a probe at num_workers={across} calibrates the main thread's own cost" in rule
    assert "second num_workers > 0" not in rule


def test_the_demos_probe_notes_agree():
    """The demo's synthetic capture at 1 worker on 2 cores: with its probe at 2 workers the
    interference note no longer asks for a probe at 0 (which moves the batches onto the main
    thread); with its probe at 0 and an interference past the prior, the note no longer asks
    for a second num_workers > 0 (none on 2 cores has another load). Both give the rule."""
    from stepsim.calibration.same_thread import probe_rule
    from stepsim.calibration.sidecar_fit import interference_from_sidecar
    from tests.test_demo_probe import _side

    rule = probe_rule(1, 2)
    _, _, _, near = interference_from_sidecar(_side(2, 0.1))
    _, src, _, far = interference_from_sidecar(_side(0, 0.3))
    assert src["host.interference"] == "inferred"
    notes = [w for w in near + far if w.startswith(("co-run interference not calibrated",
                                                    "co-run interference fitted at"))]
    assert len(notes) == 2, near + far
    for w in notes:
        assert rule in w and "would measure it" not in w and "second num_workers" not in w
