"""Bad input found by the tenth breaker (2026-12-06) in DDP (gloo) inputs: a sidecar's
parameter sizes that cannot be a tensor's, and comm values that make a collective infinite or
its CPU work millions of events. Each is refused in one line (exit 2, no traceback) or
bounded; inputs never changed."""
from __future__ import annotations

import hashlib
import json
import math

import pytest

from tests.test_gloo import _copy_capture, gloo_run  # noqa: F401  (the module's real job)
from tests.test_quirks import cli, one_line_error


def _digest(folder) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def gloo_model(gloo_run, tmp_path_factory):  # noqa: F811
    """The real 2-rank gloo job's model, saved."""
    out = tmp_path_factory.mktemp("gloo_model") / "m.json"
    rc, err, _ = cli("calibrate", gloo_run[0], "-o", out)
    assert rc == 0, err
    return out


def _edit_params(edit):
    def side(data):
        for p in data["ddp"]["params"]:
            edit(p)
    return side


@pytest.mark.parametrize("edit, says", [
    (lambda p: p.update(bytes=2 ** 60), "not its bytes 1152921504606846976"),
    (lambda p: p.update(bytes=p["bytes"] * 10), "B, not its bytes"),
    (lambda p: p.update(numel=7), "elements, but numel 7"),
])
def test_a_ddp_parameter_that_is_no_tensor_refuses_the_sidecar(
        gloo_run, tmp_path, edit, says):  # noqa: F811
    """A parameter of 2^60 bytes (numel 65,536 float32) calibrated (exit 0) into buckets of
    2^60 bytes, and ``whatif --set comm.bucket_cap_mb=1`` was then a pydantic traceback
    (a bucket's cost past 1e12 µs); bytes 10x the elements', or a numel that is not the
    shape's product, calibrated silently."""
    d = _copy_capture(gloo_run[0], tmp_path / "job", edit_sidecar=_edit_params(edit))
    before = _digest(d)
    rc, err, _ = cli("calibrate", d, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "rank0.sidecar.json", "ddp.params.0", "'0.weight'", says)
    assert _digest(d) == before and not (tmp_path / "m.json").exists()


def test_the_check_is_the_tensors_arithmetic():
    """Closed form: bytes = numel x the dtype's size, numel = the shape's product; a dtype
    the table lacks is not checked; an empty shape (an older sidecar) is not either."""
    from pydantic import ValidationError

    from stepsim.calibration.sidecar_ddp import DDPParam

    ok = dict(name="w", shape=[3, 5], numel=15, dtype="bfloat16", bytes=30)
    assert DDPParam(**ok).bytes == 30
    assert DDPParam(**{**ok, "dtype": "float4_e2m1", "bytes": 7}).bytes == 7
    assert DDPParam(**{**ok, "shape": [], "numel": 4, "bytes": 8}).numel == 4
    for bad in ({"bytes": 60}, {"numel": 16, "bytes": 32}, {"shape": [3, 4]}):
        with pytest.raises(ValidationError):
            DDPParam(**{**ok, **bad})


def test_a_model_gradient_past_16_tib_is_refused(gloo_model, tmp_path):
    """A hand-edited ``comm.grad_params`` of 2^60 bytes loaded; its bucket what-if then failed
    inside pydantic (a traceback). 2^44 bytes (16 TiB) is the bound a GPU copy has too."""
    data = json.loads(gloo_model.read_text())
    data["comm"]["grad_params"][0]["bytes"] = 2 ** 60
    m = tmp_path / "m.json"
    m.write_text(json.dumps(data))
    rc, err, _ = cli("whatif", m, "--set", "comm.bucket_cap_mb=1")
    one_line_error(rc, err, "m.json", "comm.grad_params.0.bytes", str(2 ** 44))


@pytest.mark.parametrize("extra", [(), ("--set", "comm.bucket_cap_mb=1")])
def test_a_bandwidth_that_makes_a_collective_infinite_is_one_line(gloo_model, extra):
    """``--set comm.bus_gbps=1e-300`` gave each all-reduce 1e302 µs and an OverflowError from
    the step count's arithmetic (a traceback); with a bucket cap the rebuilt bucket's
    DeviceTask refused it inside pydantic (a traceback too)."""
    rc, err, _ = cli("whatif", gloo_model, "--set", "comm.bus_gbps=1e-300", *extra, "--draws", "2")
    line = one_line_error(rc, err, "comm.bus_gbps")
    assert "1e+12 µs" in line or "less than or equal to 1000000000000" in line


def test_a_collectives_cpu_quanta_are_counted_and_bounded(gloo_model):
    """``--set comm.host_cpu_us_per_mb=1e12`` made each of the model's 4 all-reduces 256
    wake-up pieces of 1,000 quanta each (about 1 s a simulated step) and a whatif that ran
    past an hour. Now a collective's CPU runs in at most MAX_QUANTA quanta over all its pieces,
    and the step count's work counts them: closed forms."""
    from stepsim.models.cpu import DEFAULT_QUANTUM_US, MAX_QUANTA
    from stepsim.models.params import load_model
    from stepsim.models.sim_work import collective_quanta, step_work
    from stepsim.models.stepcount import FIRST_STEPS, MAX_WORK, draw_bound, step_bound
    from stepsim.scenarios.transforms import SetOp

    m = load_model(gloo_model)
    c = m.comm
    colls = [t for t in m.device.streams[c.comm_stream] if t.kind == "collective"]
    cpu = [c.host_cpu_us + c.host_cpu_us_per_mb * t.bytes / 2 ** 20 for t in colls]
    assert collective_quanta(m) == sum(math.ceil(us / DEFAULT_QUANTUM_US) - 1 for us in cpu)
    assert collective_quanta(m) <= len(colls) * 3     # a measured all-reduce: 1-3 quanta
    big = SetOp(path="comm.host_cpu_us_per_mb", value=1e12).apply(m)
    assert collective_quanta(big) == len(colls) * (MAX_QUANTA - 1)
    base = len(big.host.ops) + sum(len(ts) for ts in big.device.streams.values())
    assert step_work(big) == len(big.ranks) * (base + len(colls) * (MAX_QUANTA - 1))
    assert step_bound(big) == max(FIRST_STEPS, MAX_WORK // step_work(big)) < step_bound(m)
    assert draw_bound(big, 16) == FIRST_STEPS


def test_cpu_work_is_cut_in_at_most_the_quanta_given():
    """Two threads' work on one core: each piece of 1e9 µs runs in ``quanta`` timeouts (the
    round robin) and both end by the pieces' sum."""
    import simpy

    from stepsim.models.cpu import CpuPool

    for quanta in (1, 10, 1000):
        env = simpy.Environment()
        pool = CpuPool(env, cores=1, contended=True)
        steps = []

        def thread(env=env, pool=pool):
            yield from pool.work(1e9, quanta=quanta)
            steps.append(env.now)

        env.process(thread())
        env.process(thread())
        n = 0
        while env.peek() != simpy.core.Infinity:
            env.step()
            n += 1
        assert max(steps) == pytest.approx(2e9)
        assert n <= 8 * quanta + 8


def test_a_sub_range_of_a_capture_calibrates_with_its_sidecar(cpu_run_nw1, tmp_path):
    """``calibrate trace --sidecar s --steps 7:10`` of a harness capture was refused ("this
    sidecar is not of the run in trace.json.gz: it profiled steps 6-11 (6), the trace holds
    ProfilerStep#6-#10"): the check compared the sidecar's whole window with the range and
    its neighbours. Now the steps of the range are compared; a sidecar whose profiled steps
    differ there is still refused."""
    trace, side = cpu_run_nw1 / "trace.json.gz", cpu_run_nw1 / "sidecar.json"
    rc, err, out = cli("calibrate", trace, "--sidecar", side, "--steps", "7:10",
                       "-o", tmp_path / "m.json")
    assert rc == 0, err
    assert "calibrated 3 steps" in out
    data = json.loads(side.read_text())
    profiled = [i for i, s in enumerate(data["steps"]) if s.get("profiled")]
    assert profiled == list(range(6, 12))
    data["steps"][8]["profiled"] = False
    bad = tmp_path / "sidecar.json"
    bad.write_text(json.dumps(data))
    rc, err, _ = cli("calibrate", trace, "--sidecar", bad, "--steps", "7:10",
                     "-o", tmp_path / "m2.json")
    one_line_error(rc, err, "sidecar.json", "not of the run", "ProfilerStep#7-#9")


def test_swapped_rank_sidecars_are_refused(gloo_run, tmp_path):  # noqa: F811
    """rank0's sidecar relabelled rank 1 and rank1's rank 0 (each other's ``ddp.rank``)
    calibrated, exit 0: rank 0 took rank 1's profiler factor (0.654 for its own 0.750) and
    backend CPU. The threads a sidecar records must include those that ran its rank's
    ``gloo:*`` collectives; the job's own sidecars pass (test_gloo)."""
    d = tmp_path / "swapped"
    d.mkdir()
    for f in gloo_run[0].iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    a, b = (json.loads((gloo_run[0] / f"rank{r}.sidecar.json").read_text()) for r in (0, 1))
    a["ddp"]["rank"], b["ddp"]["rank"] = 1, 0
    (d / "rank0.sidecar.json").write_text(json.dumps(b))
    (d / "rank1.sidecar.json").write_text(json.dumps(a))
    before = _digest(d)
    rc, err, _ = cli("calibrate", d, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "rank0.sidecar.json", "none of which ran the gloo:* collectives",
                   "rank0.json", "another rank or run")
    assert _digest(d) == before and not (tmp_path / "m.json").exists()


def _append_many(path, n):
    from stepsim.scenarios.validate import append_ledger
    from tests.test_ledger import _rec

    for i in range(n):
        append_ledger(path, _rec(float(i), True))


def test_processes_appending_to_one_ledger_at_once_keep_every_record(tmp_path):
    """4 processes appending 25 records each to one ledger left 29 of the 101 lines: each
    copied the file and renamed its copy over the others'. The rewrite now holds the
    ledger folder's lock (``simcore.atomic.updating``)."""
    import multiprocessing as mp

    from stepsim.scenarios.validate import append_ledger, read_ledger
    from tests.test_ledger import _rec

    path = tmp_path / "ledger.jsonl"
    append_ledger(path, _rec(1.0, True))
    procs = [mp.get_context("fork").Process(target=_append_many, args=(path, 10))
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    assert len(read_ledger(path)) == 41
    assert not [f for f in tmp_path.iterdir() if f.name != "ledger.jsonl"]   # no stray file


@pytest.mark.parametrize("flag", ["--replicate", "--sidecar"])
def test_a_trace_given_as_a_sidecar_says_so(cpu_run_nw1, tmp_path, flag):
    """``--replicate run/trace.json.gz`` (the trace, not the folder) said "the sidecar file
    is not valid UTF-8 (invalid start byte, byte 0x8b)": gzip's magic number read as text."""
    trace = cpu_run_nw1 / "trace.json.gz"
    args = (trace, "--sidecar", cpu_run_nw1 / "sidecar.json") if flag == "--replicate" else (trace,)
    rc, err, _ = cli("calibrate", *args, flag, trace, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "trace.json.gz", "is gzip-compressed (a trace?)")
