"""A host-reduced (gloo) all-reduce larger than any measured: the line's time at the largest
measured size plus the extra bytes' CPU work (:func:`models.ddp.comm_time_us`), closed forms."""
from __future__ import annotations

import pytest

from stepsim.models.ddp import comm_time_us, set_bucket_caps
from stepsim.models.params import CommParams, StepModel
from stepsim.models.plans import task_durations

MIB = 2 ** 20


def line(c: CommParams, nbytes: float) -> float:
    """The transfer line (µs): latency + ring bytes (2(n-1)/n × b = b on 2 ranks) / bus."""
    return c.latency_us + nbytes / (c.bus_gbps * 1e3)


def test_past_the_measured_size_each_mib_costs_its_cpu_work():
    c = CommParams(world_size=2, bus_gbps=1.5, latency_us=600.0, host_cpu_us=600.0,
                   host_cpu_us_per_mb=450.0, line_bytes=7 * MIB)
    for b in (MIB, 7 * MIB):
        assert comm_time_us(c, b) == pytest.approx(line(c, b))
    assert comm_time_us(c, 8 * MIB) == pytest.approx(line(c, 7 * MIB) + 450.0)
    assert comm_time_us(c, 9.5 * MIB) == pytest.approx(line(c, 7 * MIB) + 2.5 * 450.0)
    # NCCL (no host CPU work) and a model that names no measured size keep the line
    for cc in (c.model_copy(update={"host_cpu_us": 0.0, "host_cpu_us_per_mb": 0.0}),
               c.model_copy(update={"line_bytes": None})):
        assert comm_time_us(cc, 8 * MIB) == pytest.approx(line(cc, 8 * MIB))


def _two_buckets() -> StepModel:
    """A CPU DDP step as calibrated from gloo: a 1 MiB all-reduce enqueued mid-backward and a
    3 MiB one after it, gradients of 4 × 1 MiB, the line through the per-collective CPU."""
    return StepModel.model_validate({
        "loader": {"num_workers": 0, "host_cores": 2},
        "host": {"ops": [
            {"kind": "cpu", "name": "forward", "dur_us": 3000, "phase": "forward"},
            {"kind": "cpu", "name": "backward", "dur_us": 1000, "phase": "backward"},
            {"kind": "launch", "task": "ar0", "phase": "backward"},
            {"kind": "cpu", "name": "backward", "dur_us": 3000, "phase": "backward"},
            {"kind": "launch", "task": "ar1", "phase": "backward"},
            {"kind": "sync", "task": "ar1", "phase": "backward"},
            {"kind": "cpu", "name": "optimizer", "dur_us": 1000, "phase": "optimizer"}]},
        "device": {"streams": {"gloo": [
            {"id": f"ar{i}", "stream": "gloo", "kind": "collective", "phase": "backward",
             "category": "communication", "dur_us": 1000.0 * (1 + 2 * i), "bytes": b}
            for i, b in enumerate((MIB, 3 * MIB))]}},
        "comm": {"world_size": 2, "comm_stream": "gloo", "bus_gbps": 1.5, "latency_us": 600.0,
                 "host_cpu_us": 600.0, "host_cpu_us_per_mb": 450.0,
                 "grad_params": [{"name": f"w{k}", "bytes": MIB} for k in range(4)]},
        "ranks": [{"rank": 0, "host": "h"}, {"rank": 1, "host": "h"}]})


def test_one_bucket_of_every_gradient_adds_the_extra_mib_cpu_work():
    """bucket_cap_mb=25 puts the 4 MiB in one bucket, 1 MiB past the largest measured (3 MiB):
    it costs the line at 3 MiB + 450 µs, where the line alone gave 3 MiB's + 1 MiB / bus
    (699 µs at 1.5 GB/s); smaller caps stay on the line."""
    m = _two_buckets()
    c = m.comm
    one = set_bucket_caps(m, bucket_cap_mb=25)
    assert one.comm.line_bytes == 3 * MIB
    (t,) = one.device.streams["gloo"]
    assert t.bytes == 4 * MIB
    want = line(c, 3 * MIB) + 450.0
    assert t.dur_us == pytest.approx(want)
    assert task_durations(one, 0)[t.id] == pytest.approx(want)
    # applied twice (what-ifs chain), the measured size is still the captured one
    again = set_bucket_caps(one, bucket_cap_mb=25)
    assert task_durations(again, 0)[again.device.streams["gloo"][0].id] == pytest.approx(want)
    small = set_bucket_caps(m, bucket_cap_mb=1)
    assert [task_durations(small, 0)[t.id] for t in small.device.streams["gloo"]] == \
        pytest.approx([line(c, MIB)] * 4)


def test_the_measured_size_is_saved_only_once_set(tmp_path):
    """A model whose line size is unset writes no ``line_bytes`` (its JSON as before the field
    existed: calibrated outputs unchanged); a rebuilt one keeps it through a save and load."""
    from stepsim.models.params import load_model, save_model

    m = _two_buckets()
    assert "line_bytes" not in m.model_dump_json()
    one = set_bucket_caps(m, bucket_cap_mb=25)
    save_model(one, tmp_path / "m.json")
    back = load_model(tmp_path / "m.json")
    assert back.comm.line_bytes == 3 * MIB
    t = back.device.streams["gloo"][0]
    assert task_durations(back, 0)[t.id] == pytest.approx(line(m.comm, 3 * MIB) + 450.0)
