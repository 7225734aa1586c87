"""Input quirks (issue 9 §4): one small synthetic fixture per quirk, built here and named after
it; each gives the right value, or one line naming the file with exit code 2."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest

from stepsim.fit import calibrate
from stepsim.cli import main
from tests.kineto_gen import Gen, measured_median, one_rank_trace, part1, part2


def cli(*args: str) -> tuple[int, str, str]:
    """``stepsim ARGS`` run in this process: (exit code, stderr, stdout)."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:   # argparse
            rc = e.code
    return rc, err.getvalue(), out.getvalue()


def one_line_error(rc: int, err: str, *named: str) -> str:
    """The one stderr line of a refusal (exit 2), checked to name each of ``named``."""
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("stepsim: error: "), err
    assert "Traceback" not in err
    for n in named:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The standard synthetic trace's model, to compare the quirky ones with."""
    return calibrate(one_rank_trace(tmp_path_factory.mktemp("whole") / "whole.json"))


# ------------------------------------------------------------------ valid traces refused --
def test_profiler_step_numbers_out_of_time_order(tmp_path, whole):
    def renumber(ev):
        steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
        for e, n in zip(steps, (5, 3, 6, 4)):
            e["name"] = f"ProfilerStep#{n}"
    m = calibrate(one_rank_trace(tmp_path / "steps_out_of_order.json", change=renumber))
    assert m.meta.steps_used == [0, 1, 2, 3]
    assert any("ProfilerStep numbers are not increasing in time order (5, 3, 6, 4)" in w
               for w in m.meta.warnings)
    assert measured_median(m) == pytest.approx(measured_median(whole))


def test_kernels_linked_through_external_id(tmp_path, whole):
    """No correlation ids; every launch call shares its ``External id`` with its kernel and
    with the other calls of the same CPU op (two ops, as in Kineto)."""
    def external_only(ev):
        calls = [e for e in ev if e["cat"] in ("cuda_runtime",)]
        op_of = {}
        for i, e in enumerate(calls):   # pairs of calls belong to one CPU op
            op_of[e["args"].pop("correlation")] = 50_000 + i // 2
            e["args"]["External id"] = op_of[next(reversed(op_of))]
        for e in ev:
            if e["cat"] in ("kernel", "gpu_memcpy"):
                e["args"]["External id"] = op_of[e["args"].pop("correlation")]
    m = calibrate(one_rank_trace(tmp_path / "external_id_only.json", change=external_only))
    assert any("36 of 36 GPU activities linked to their launch by 'External id'" in w
               for w in m.meta.warnings)
    assert measured_median(m) == pytest.approx(measured_median(whole))
    assert m.meta.notes["kernel_sum_us"] == pytest.approx(whole.meta.notes["kernel_sum_us"])


def legacy_trace(path: Path, gpu: bool = False) -> Path:
    """What the pre-Kineto autograd profiler's ``export_chrome_trace`` writes: a bare array,
    no ``cat``, string pids, float ``ts``; with ``gpu``, kernels on ``"CUDA functions"``
    linked to their CPU op by ``cpu_to_cuda`` flows (no launch calls)."""
    ev, t, g = [], 1606910596297023.125, 0.0
    for n in range(5, 11):
        s0 = t
        ev.append({"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                   "ph": "X", "ts": t, "dur": 800.5, "tid": 1, "pid": "CPU functions", "args": {}})
        t += 810.25
        for k in range(3):
            ev.append({"name": f"aten::conv{k}", "ph": "X", "ts": t, "dur": 300.75, "tid": 1,
                       "pid": "CPU functions", "args": {}})
            if gpu:
                fid, g = len(ev), max(g, t + 20)
                ev += [{"name": "conv", "ph": "s", "ts": t, "tid": 1, "pid": "CPU functions",
                        "id": fid, "cat": "cpu_to_cuda", "args": {}},
                       {"name": "kern", "ph": "f", "ts": g, "tid": 0, "pid": "CUDA functions",
                        "id": fid, "cat": "cpu_to_cuda", "args": {}},
                       {"name": "kern", "ph": "X", "ts": g, "dur": 250.0, "tid": 0,
                        "pid": "CUDA functions", "args": {}}]
                g += 250
            t += 310.5
        ev.append({"name": f"ProfilerStep#{n}", "ph": "X", "ts": s0, "dur": t - s0, "tid": 1,
                   "pid": "CPU functions", "args": {}})
        t += 12.0
    path.write_text(json.dumps(ev))
    return path


def test_legacy_bare_array_with_string_pids_and_float_ts(tmp_path):
    m = calibrate(legacy_trace(tmp_path / "legacy_bare_array.json"))
    assert m.meta.steps_used == [5, 6, 7, 8, 9, 10]
    step = 810.25 + 3 * 310.5 + 12.0
    assert measured_median(m) == pytest.approx(step)
    assert m.loader.produce.mean_us == pytest.approx(800.5)


def test_legacy_trace_with_kernels_is_refused_not_made_cpu_only(tmp_path):
    p = legacy_trace(tmp_path / "legacy_with_kernels.json", gpu=True)
    line = one_line_error(*cli("calibrate", p, "-o", tmp_path / "m.json")[:2], str(p))
    assert "none of the 18 GPU activities links to a launch call" in line


def test_a_few_negative_durations_are_dropped_not_the_trace(tmp_path, whole):
    def neg(ev):
        ks = [i for i, e in enumerate(ev) if e["cat"] == "kernel"]
        ev[ks[0]]["dur"], ev[ks[-1]]["dur"] = -50, -0.5
    p = one_rank_trace(tmp_path / "negative_durations.json", change=neg)
    rc, err, out = cli("calibrate", p, "-o", tmp_path / "m.json")
    assert rc == 0, err
    assert err.count("whose dur cannot be right") == 1 and "dropped 2 of" in err
    assert "calibrated 2 steps" in out


# ------------------------------------------------------------------ silent wrong values --
def test_graph_launches_whose_kernels_were_dropped(tmp_path):
    def drop_kernels(ev):
        ev[:] = [e for e in ev if e["cat"] not in ("kernel", "gpu_memcpy")]
        for e in ev:
            if e["name"] == "cudaLaunchKernel":
                e["name"] = "cudaGraphLaunch"
    p = one_rank_trace(tmp_path / "graph_kernels_dropped.json", change=drop_kernels)
    m = calibrate(p)
    assert m.meta.notes["gpu_busy_pct"] == "unknown"
    assert any("28 GPU launch call(s) (cudaGraphLaunch ×28) but no GPU activity" in w
               and "GPU busy time is unknown" in w for w in m.meta.warnings)
    rc, err, _ = cli("calibrate", p, "-o", tmp_path / "m.json")
    assert rc == 0 and "GPU busy time is unknown" in err


def test_two_kernels_overlapping_on_one_stream_are_unioned(tmp_path, whole):
    """Each step's second kernel on stream 7 is written 20 µs earlier and 20 µs longer (same
    end): it overlaps the one before it, which a stream cannot do."""
    def overlap(ev):
        for e in ev:
            if e["name"].startswith("void at::native::vectorized_elementwise_kernel<4>"):
                e["ts"] -= 20
                e["dur"] += 20
    m = calibrate(one_rank_trace(tmp_path / "overlap_on_one_stream.json", change=overlap))
    assert m.meta.notes["kernel_sum_us"] == pytest.approx(whole.meta.notes["kernel_sum_us"])
    assert measured_median(m) == pytest.approx(measured_median(whole))
    assert any("overlap the one before them on the same stream" in w for w in m.meta.warnings)


def test_optimizer_marker_steps_are_not_one_short(tmp_path, whole):
    def no_step_markers(ev):
        ev[:] = [e for e in ev if not e["name"].startswith("ProfilerStep#")]
        for e in ev:
            if e["name"].startswith("enumerate(DataLoader)"):
                e["name"] = "load_batch"
    m = calibrate(one_rank_trace(tmp_path / "optimizer_markers_only.json",
                                 change=no_step_markers))
    assert len(m.meta.measured_step_us) == 4
    assert m.meta.measured_step_us[:3] == pytest.approx(whole.meta.measured_step_us[:3])


# ------------------------------------------------------------------ ranks --------------
def test_two_rank_files_without_rank_info_are_two_ranks(tmp_path):
    from tests.kineto_gen import two_rank_dir

    d = two_rank_dir(tmp_path)
    for f, name in zip(sorted(d.iterdir()), ("a_first.json", "b_second.json.gz")):
        raw = f.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        data.pop("distributedInfo")
        f.unlink()
        (d / name).write_bytes(json.dumps(data).encode())
    m = calibrate(d)
    assert sorted(r.rank for r in m.ranks) == [0, 1]
    assert any("a_first.json, b_second.json.gz: no rank in distributedInfo or file name; taken "
               "as rank(s) 0, 1" in w for w in m.meta.warnings)


def test_a_rank_of_10_to_the_30_gives_a_loadable_model(tmp_path):
    from stepsim.models.params import load_model

    p = one_rank_trace(tmp_path / "huge_distributed_rank.json",
                       distributedInfo={"rank": 10**30, "world_size": 10**30 + 1})
    rc, err, _ = cli("calibrate", p, "-o", tmp_path / "m.json")
    assert rc == 0 and "distributedInfo gives rank 1" in err and "cannot be right" in err
    assert load_model(tmp_path / "m.json").ranks[0].rank == 0


# ------------------------------------------------------------------ model, scenario files --
MODEL = "host:\n  ops:\n    - {kind: cpu, dur_us: 100}\n"


def _simulate(tmp_path, text: str | bytes, name: str = "m.yaml"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p, cli("simulate", p, "--steps", "2", "--warmup", "0")


@pytest.mark.parametrize("quirk,text,says", [
    ("duplicate_yaml_key", MODEL + "loader: {num_workers: 1}\nloader: {num_workers: 2}\n",
     "duplicate key 'loader' (at line 5, column 1, byte 69)"),
    ("deeply_nested_yaml", MODEL + "meta: {notes: {a: " + "[" * 5000 + "]" * 5000 + "}}\n",
     "nested deeper than 64 levels"),
    ("string_count", MODEL + "loader: {num_workers: '4'}\n",
     "loader.num_workers: must be an integer, not str '4'"),
    ("bool_count", MODEL + "loader: {num_workers: true}\n",
     "loader.num_workers: must be an integer, not bool True"),
    ("string_duration", MODEL.replace("100", "'100'"),
     "host.ops.0.dur_us: must be a number, not str"),
    ("prefetch_without_workers", MODEL + "loader: {num_workers: 0, prefetch_factor: 4}\n",
     "loader.prefetch_factor=4 needs num_workers > 0 (PyTorch's DataLoader raises"),
    ("not_utf8", MODEL.encode() + b"meta: {name: \xff}\n", "not valid UTF-8 (invalid start "
     "byte, byte 0xff) (at line 4, column 14, byte 57)"),
])
def test_model_file_quirks_give_one_line(tmp_path, quirk, text, says):
    p, (rc, err, _) = _simulate(tmp_path, text, f"{quirk}.yaml")
    one_line_error(rc, err, str(p), says)


def test_json_model_errors_give_line_and_column(tmp_path):
    p, (rc, err, _) = _simulate(tmp_path, '{"host": {"ops": [\n  {"kind": "cpu",, }]}}',
                                "bad.json")
    one_line_error(rc, err, str(p), "not valid JSON", "(at line 2, column 18, byte 36)")


@pytest.mark.parametrize("verb", ["simulate", "ceiling"])
def test_a_device_is_refused_not_read_forever(verb):
    one_line_error(*cli(verb, "/dev/zero")[:2], "/dev/zero: is a device, expected a "
                                                "StepModel file")


def test_a_device_as_scenario_or_sidecar_is_refused(tmp_path):
    p, _ = _simulate(tmp_path, MODEL)
    one_line_error(*cli("whatif", p, "--scenario", "/dev/zero")[:2], "/dev/zero: is a device")
    trace = one_rank_trace(tmp_path / "t.json")
    one_line_error(*cli("calibrate", trace, "--sidecar", "/dev/urandom", "-o",
                        tmp_path / "o.json")[:2], "/dev/urandom: is a device")


def test_an_oversized_model_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import stepsim.simcore.files as files

    monkeypatch.setattr(files, "MAX_INPUT_BYTES", 64)
    p, (rc, err, _) = _simulate(tmp_path, MODEL + "meta: {name: " + "x" * 100 + "}\n")
    one_line_error(rc, err, str(p), "larger than 0 MiB, the limit on a StepModel file")


def test_set_true_for_a_count_is_refused(tmp_path):
    p, _ = _simulate(tmp_path, MODEL)
    one_line_error(*cli("whatif", p, "--set", "loader.num_workers=true", "--draws", "0")[:2],
                   "loader.num_workers: must be an integer, not bool True")


# ------------------------------------------------------------------ arguments ----------
@pytest.mark.parametrize("args,says", [
    (("simulate", "m.yaml", "--steps", "10000000000"), "argument --steps: 10000000000 is above"),
    (("whatif", "m.yaml", "--draws", "99999999"), "argument --draws: 99999999 is above"),
    (("calibrate", "t.json"), "the following arguments are required: -o/--output"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
])
def test_argument_errors_are_one_line_with_a_hint(args, says):
    rc, err, out = cli(*args)
    assert rc == 2 and not out
    (line,) = err.strip().splitlines()
    assert says in line and line.endswith("--help')") and "usage:" not in err


# ------------------------------------------------------------------ outputs -------------
def test_a_full_disk_names_the_output(tmp_path):
    p, _ = _simulate(tmp_path, MODEL)
    one_line_error(*cli("whatif", p, "--set", "loader.num_workers=1", "--draws", "0",
                        "--save-model", "/dev/full")[:2],
                   "stepsim: error: /dev/full: No space left on device")


def test_a_full_disk_while_writing_the_temporary_file_names_the_output(tmp_path, monkeypatch):
    import errno

    import stepsim.simcore.atomic as atomic

    class Full:
        def __init__(self, fd, mode):
            import os
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fdopen", Full)
    out = tmp_path / "out" / "model.json"
    trace = one_rank_trace(tmp_path / "t.json")
    one_line_error(*cli("calibrate", trace, "-o", out)[:2],
                   f"stepsim: error: {out}: No space left on device")
    assert list(out.parent.iterdir()) == []   # the temporary file is gone


def test_a_read_only_folder_names_the_output_not_the_temporary_file(tmp_path):
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):   # root writes anywhere: a folder under a file instead
            out = tmp_path / "t.json" / "model.json"
        else:
            out = ro / "model.json"
        trace = one_rank_trace(tmp_path / "t.json")
        line = one_line_error(*cli("calibrate", trace, "-o", out)[:2], str(out))
        assert ".tmp" not in line
    finally:
        ro.chmod(0o755)


def test_communication_kernels_without_a_launch_are_not_silently_left_out(tmp_path):
    """Simulated as device tasks of their step (more in ``tests/test_unlaunched_comm.py``)."""
    def unlaunch(ev):   # the launch calls of the NCCL kernels were not recorded
        nccl = {e["args"]["correlation"] for e in ev if e["name"].startswith("ncclDevKernel")}
        ev[:] = [e for e in ev if not (e["cat"] == "cuda_runtime"
                                       and e["args"]["correlation"] in nccl)]
    m = calibrate(one_rank_trace(tmp_path / "comm_without_launch.json", change=unlaunch))
    assert any("4 communication kernel(s) have no launching call" in w for w in m.meta.warnings)
    assert [t.kind for t in m.device.streams["20"]] == ["collective"]
