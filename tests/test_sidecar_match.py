"""A trace calibrated with a sidecar of another run is refused with one line naming the
sidecar (calibration/sidecar_match.py); the capture's own sidecar still calibrates."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_cli
from tests.kineto_gen import Gen

EW = "void at::native::vectorized_elementwise_kernel<4>(int)"


def _refused(trace, sidecar, tmp_path, *words):
    r = run_cli("calibrate", str(trace), "--sidecar", str(sidecar), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and str(sidecar) in r.stderr and "not of the run" in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "m.json").exists()


def _edited(run, tmp_path, edit):
    side = json.loads((run / "sidecar.json").read_text())
    edit(side)
    out = tmp_path / "other_sidecar.json"
    out.write_text(json.dumps(side))
    return out


def test_own_sidecar_calibrates(cpu_run_nw0, tmp_path):
    r = run_cli("calibrate", str(cpu_run_nw0 / "trace.json.gz"), "--sidecar",
                str(cpu_run_nw0 / "sidecar.json"), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 0, r.stderr


def test_sidecar_of_another_run_is_refused(cpu_run_nw0, cpu_run_nw1, tmp_path):
    # the same test process recorded both: one host, one pid, one schedule; the trace's
    # DataLoader ran in the main process, the sidecar's with a worker
    _refused(cpu_run_nw0 / "trace.json.gz", cpu_run_nw1 / "sidecar.json", tmp_path,
             "another run", "num_workers=1", "main process")
    _refused(cpu_run_nw1 / "trace.json.gz", cpu_run_nw0 / "sidecar.json", tmp_path,
             "num_workers=0", "worker processes")


def test_other_host_is_refused(cpu_run_nw0, tmp_path):
    host = json.loads((cpu_run_nw0 / "sidecar.json").read_text())["host_name"]
    side = _edited(cpu_run_nw0, tmp_path, lambda s: s.update(host_name=host + "-other"))
    _refused(cpu_run_nw0 / "trace.json.gz", side, tmp_path, "host", host + "-other")


def test_other_process_is_refused(cpu_run_nw0, tmp_path):
    def edit(s):
        for r in s["produce"]:
            r["pid"] = 4_000_000 + r["pid"] % 7
    side = _edited(cpu_run_nw0, tmp_path, edit)
    _refused(cpu_run_nw0 / "trace.json.gz", side, tmp_path, "pid")


def test_other_steps_are_refused(cpu_run_nw0, tmp_path):
    side = _edited(cpu_run_nw0, tmp_path, lambda s: s.update(steps=s["steps"][1:]))
    _refused(cpu_run_nw0 / "trace.json.gz", side, tmp_path, "ProfilerStep#")


@pytest.mark.parametrize("host_name", [None, "somewhere"])
def test_cpu_sidecar_beside_a_gpu_trace_is_refused(cpu_run_nw0, tmp_path, host_name):
    g = Gen()
    for k in range(3, 8):
        s0 = g.t
        g.launch(EW, 200.0)
        g.stream_sync()
        g.op(f"ProfilerStep#{k}", s0, g.t, cat="user_annotation")
    trace = g.dump(tmp_path / "gpu.json", **({"host_name": host_name} if host_name else {}))
    side = tmp_path / "sidecar.json"
    shutil.copy(cpu_run_nw0 / "sidecar.json", side)
    _refused(trace, side, tmp_path, "host" if host_name else "GPU activity")
