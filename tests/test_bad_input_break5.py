"""Bad input, breaker session 5 (left open by session 4).

* A sidecar list's elements were read loosely (``shape: [true]`` as ``[1]``, a boolean in
  ``bucket_cap_mb_list``): :class:`models.param_base.StrictScalars` checks them as its scalars.
* ``--set host.ops.-1.dur_us=…`` meant the last op: an index counts from 0, a negative one is
  refused.
* A trace event whose ``args`` is not an object, or whose ``pid``/``tid`` is an object or an
  array, is dropped and counted (all kernels with list ``args`` gave "none of the GPU
  activities links to a launch call", naming no ``args``; an object ``pid`` was taken silently).
* ``report --ledger DIR`` said the ledger "is appended to and rewritten" (report only reads it).
* ``stepsim ledger L | head -1`` exited 1 (rich's way), ``--json`` 2 with "Broken pipe": now
  quietly with 141 (128 + SIGPIPE), as a Unix tool killed by SIGPIPE.
* ``Capture.steps`` of a list wrote a trace and no sidecar without a word; ``probe_steps=0``
  was taken; ``Capture.ddp`` outside a distributed job returned silently.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.utils.data as tud

from stepsim.calibration.capture import Capture
from stepsim.calibration.events import build_table
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.trace_io import load_trace
from stepsim.models.params import save_model
from stepsim.scenarios.paths import set_value
from stepsim.simcore.errors import InputError, ModelError
from tests.kineto_gen import one_rank_trace
from tests.test_bad_input_session import _edited
from tests.test_batch_size_whatif import cpu_model
from tests.test_events import cpu_op
from tests.test_ledger import _rec
from tests.test_quirks import cli, one_line_error

_PARAM = {"name": "w", "shape": [2, 3], "numel": 6, "dtype": "float32", "bytes": 24}


@pytest.mark.parametrize("ddp,says", [
    ({"params": [{**_PARAM, "shape": [True, 3]}]},
     "ddp.params.0.shape: must hold only integers, not bool True"),
    ({"params": [{**_PARAM, "shape": [2.0, 3]}]}, "shape: must hold only integers, not float 2.0"),
    ({"bucket_cap_mb_list": [25.0, True]},
     "bad sidecar field ddp.bucket_cap_mb_list: must hold only numbers, not bool True"),
    ({"bucket_cap_mb_list": ["25"]}, "bucket_cap_mb_list: must hold only numbers, not str '25'"),
])
def test_a_list_element_of_another_json_type_refuses_the_sidecar(tmp_path, cpu_run_nw1, ddp,
                                                                 says):
    rec = {"world_size": 1, "rank": 0, "backend": "gloo", **ddp}
    d = _edited(cpu_run_nw1, tmp_path / "run", lambda data: data.update(ddp=rec))
    with pytest.raises(InputError) as e:
        load_sidecar(d / "sidecar.json")
    assert says in str(e.value) and str(d / "sidecar.json") in str(e.value)


def test_a_negative_index_in_a_path_is_refused(tmp_path):
    m = cpu_model(1, 5, 10, opt_ms=2)
    with pytest.raises(ModelError, match=r"index -1 out of range \(list of 3, indices from 0\)"):
        set_value(m, "host.ops.-1.dur_us", 5.0)
    assert set_value(m, "host.ops.2.dur_us", 5.0).host.ops[2].dur_us == 5.0
    save_model(m, tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", "--set", "host.ops.-1.dur_us=5")[:2],
                   "host.ops.-1.dur_us", "index -1 out of range")


def test_events_with_an_object_pid_or_tid_are_dropped_and_counted(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps([cpu_op(0, pid={"a": 1}), cpu_op(1, tid=[1]), cpu_op(2),
                             cpu_op(3, args={"correlation": 7})]))
    t = build_table(load_trace(p))
    assert t.index.tolist() == [2, 3]
    assert t.warnings == ["t.json: dropped 2 of 4 event(s) whose args, pid or tid cannot be "
                          "right (first: pid is an object at event 0)"]
    p.write_text(json.dumps([cpu_op(0, args=[1]), cpu_op(1, pid=[1])]))
    with pytest.raises(InputError, match="no event left: all 2 are events whose args, pid or "
                                         r"tid cannot be right \(first: args is an array\)"):
        build_table(load_trace(p))


def test_kernels_whose_args_is_a_list_are_named_in_the_refusal(tmp_path):
    def listify(ev):
        for e in ev:
            if e["cat"] == "kernel":
                e["args"] = list(e["args"].values())
    p = one_rank_trace(tmp_path / "args_list.json", change=listify)
    line = one_line_error(*cli("calibrate", p, "-o", tmp_path / "m.json")[:2], str(p))
    assert "whose args, pid or tid cannot be right (first: args is an array" in line


def test_report_reads_its_ledger_it_does_not_rewrite_it(tmp_path):
    save_model(cpu_model(1, 5, 10), tmp_path / "m.json")
    (tmp_path / "L").mkdir()
    line = one_line_error(*cli("report", tmp_path / "m.json", "-o", tmp_path / "r.html",
                               "--ledger", tmp_path / "L", "--no-plan", "--draws", "2")[:2],
                          str(tmp_path / "L"), "is a directory")
    assert "appended" not in line and "rewritten" not in line
    ledger = tmp_path / "l.jsonl"
    ledger.write_text("")
    one_line_error(*cli("report", tmp_path / "m.json", "-o", ledger, "--ledger", ledger)[:2],
                   "that is an input file")


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_output_into_a_closed_pipe_ends_quietly(tmp_path, json_flag):
    import importlib
    V = importlib.import_module("stepsim.scenarios.validate")
    ledger = tmp_path / "l.jsonl"
    ledger.write_bytes(b"".join(V.ledger_line(_rec(float(i), True)) for i in range(3)))
    r, w = os.pipe()
    os.close(r)    # the reader has left before the first write: that write fails
    try:
        p = subprocess.run([sys.executable, "-m", "stepsim", "ledger", *json_flag, str(ledger)],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (141, "")


class _Squares(tud.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def test_capture_steps_of_a_list_warns_that_no_sidecar_is_written(tmp_path):
    cap = Capture(tmp_path / "run")
    with pytest.warns(UserWarning, match="a list, not a torch DataLoader .* no sidecar"):
        n = sum(1 for _ in cap.steps([torch.zeros(1)] * 6, active=1, wait=0, warmup=1,
                                     skip_first=0))
    assert n == 2 and not (tmp_path / "run" / "sidecar.json").exists()


@pytest.mark.parametrize("steps", [0, -1, 2.5, True])
def test_capture_probe_steps_must_be_a_positive_whole_number(tmp_path, steps):
    cap = Capture(tmp_path / "run")
    loader = cap.dataloader(_Squares(), batch_size=4)
    with pytest.raises(ValueError, match=f"probe_steps={steps!r}: expected a whole number"):
        next(cap.steps(loader, probe_workers=0, probe_steps=steps))


def test_capture_ddp_outside_a_distributed_job_warns(tmp_path):
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    net = torch.nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="outside a distributed job"):
        assert Capture(tmp_path / "run").ddp(net) is net
