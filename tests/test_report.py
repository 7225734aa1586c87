"""Pictures, the Kineto-named simulated trace and the tables of report/: files are written,
non-empty and of their type; the exported trace calibrates back to its model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepsim.models.metrics import summarize
from stepsim.models.params import load_model
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import InputError
from tests.conftest import REPO, shared_traces

REF = REPO / "scenarios" / "reference"
PNG = b"\x89PNG\r\n\x1a\n"


def _sim(name: str, steps: int = 4, warmup: int = 2):
    model = load_model(REF / f"{name}.yaml")
    res = simulate(model, steps=steps, warmup=warmup)
    return model, res, summarize(res)


def _is_png(p: Path) -> bool:
    return p.stat().st_size > 1000 and p.read_bytes()[:8] == PNG


def test_lanes_png_and_svg(tmp_path):
    from stepsim.report.lanes import plot_lanes, sim_timeline

    _, res, s = _sim("unhealthy_step")
    tl = sim_timeline(res, s, steps=2)
    assert len(tl.marks_us) == 3 and tl.scarce          # two steps, a scarce lane to shade
    plot_lanes([tl], tmp_path / "lanes.png")
    plot_lanes([tl, tl], tmp_path / "lanes.svg")
    assert _is_png(tmp_path / "lanes.png")
    svg = (tmp_path / "lanes.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "step 0" in svg
    with pytest.raises(ValueError):
        plot_lanes([], tmp_path / "none.png")


def test_lane_roles_order_host_first_then_copy_compute_comm():
    from stepsim.report.lanes import _key, lane_role

    _, res, _ = _sim("unhealthy_step")
    by: dict[str, list] = {}
    for sp in res.spans:
        by.setdefault(sp.lane, []).append(sp)
    roles = {ln: lane_role(ln, sps) for ln, sps in by.items()}
    assert roles["rank0.stream:comm"] == "comm" and roles["rank0.stream:compute"] == "compute"
    order = [roles[ln] for ln in sorted(by, key=lambda ln: _key(ln, roles[ln]))]
    assert order[0] == "host" and order.index("comm") > order.index("compute")


def test_queue_plot_and_its_refusal_without_workers(tmp_path):
    from stepsim.report.charts import has_queue, plot_queue

    _, res, _ = _sim("input_pipeline_a", steps=6)
    assert has_queue(res)
    plot_queue(res, tmp_path / "queue.png")
    assert _is_png(tmp_path / "queue.png")
    _, res0, _ = _sim("case_study", steps=2, warmup=1)
    with pytest.raises(ValueError, match="no prefetch queue"):
        plot_queue(res0, tmp_path / "q0.png")


def test_plan_chart(tmp_path):
    from stepsim.report.charts import plot_plan
    from stepsim.scenarios.plan import plan

    p = plan(load_model(REF / "case_study.yaml"), steps=6, warmup=3, draws=0, max_moves=2)
    plot_plan(p, tmp_path / "plan.png")
    assert _is_png(tmp_path / "plan.png") and p.moves


def test_readable_kernel_names():
    from stepsim.report.names import readable_kernel

    assert readable_kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_"
                           "align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)"
                           ) == "cutlass_80_tensorop_s16…emm_64x64_16x6_nn_align4"
    assert readable_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                           "ncclWork*)") == "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert readable_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::"
                           "CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)"
                           ) == "vectorized_elementwise_kernel"
    assert readable_kernel("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


def test_collective_table_groups_and_never_shows_unmeasured_bandwidth():
    from rich.console import Console

    from stepsim.models.metrics import CollectiveStat
    from stepsim.report.tables import collective_table

    stats = [CollectiveStat(f"c{i}", f"ncclKernel_K{i % 12}(ncclDevComm*)", 0, 100.0 + i, 0.0,
                            100.0 + i, 0.0, 0.0) for i in range(400)]
    con = Console(width=120, record=True)
    con.print(collective_table(stats, top=8))
    text = con.export_text()
    assert "400 in 12 kinds" in text and "... 4 more kinds" in text
    assert len(text.splitlines()) < 20 and "0.0 " not in text.split("busbw", 1)[1]


def _round_trip(model, tmp_path, steps: int = 6) -> tuple[float, float]:
    from stepsim.fit import calibrate
    from stepsim.report.chrome import write_chrome_trace

    res = simulate(model, steps=steps, warmup=3)
    write_chrome_trace(res, tmp_path / "sim.json.gz")
    again = calibrate(tmp_path / "sim.json.gz")
    return (simulate(model, steps=10, warmup=3).mean_step_us,
            simulate(again, steps=10, warmup=3).mean_step_us)


@pytest.mark.parametrize("name", ["unhealthy_step", "input_pipeline_a"])
def test_exported_trace_calibrates_back_to_its_model(tmp_path, name):
    a, b = _round_trip(load_model(REF / f"{name}.yaml"), tmp_path)
    assert b == pytest.approx(a, rel=0.01)


def test_exported_trace_of_a_real_calibration_round_trips(tmp_path):
    from stepsim.fit import calibrate

    trace = shared_traces() / "kineto" / "515e6115_rec2020-12-02" / "resnet50_num_workers_0" \
        / "worker0.pt.trace.json.gz"
    a, b = _round_trip(calibrate(trace), tmp_path, steps=4)
    assert b == pytest.approx(a, rel=0.01)


def test_exported_trace_names_lanes_as_kineto(tmp_path):
    import gzip
    import json

    from stepsim.report.chrome import write_chrome_trace

    _, res, _ = _sim("unhealthy_step")
    write_chrome_trace(res, tmp_path / "t.json.gz")
    doc = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    meta = {(e["name"], e["args"].get("name") or e["args"].get("labels"))
            for e in doc["traceEvents"] if e["ph"] == "M"}
    assert ("process_labels", "CPU") in meta and ("process_labels", "GPU 0") in meta
    assert ("thread_name", "thread 100000 (python)") in meta
    cats = {e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X"}
    assert {"kernel", "gpu_memcpy", "cuda_runtime", "user_annotation"} <= cats


def test_measured_lanes_of_a_real_trace():
    from stepsim.calibration.lanes import measured_lanes

    trace = shared_traces() / "hta" / "trace_diff" / "control" / "control.json.gz"
    m = measured_lanes(trace, steps=2)
    assert m.rank == 3 and len(m.marks_us) == 3 and m.marks_us[0] == 0.0
    lanes = {s.lane for s in m.spans}
    assert "rank3.host" in lanes and {"rank3.stream:7", "rank3.stream:21"} <= lanes
    assert all(0 <= s.start_us and s.end_us <= m.marks_us[-1] + 1e-6 for s in m.spans)
    comm = [s for s in m.spans if s.category == "communication"]
    assert comm and all(s.lane == "rank3.stream:21" for s in comm)
    assert m.steps[1] == m.steps[0] + 1 and 70_000 < m.marks_us[1] < 85_000  # steps of ~77 ms
    one = measured_lanes(trace, steps=1, first=1011)
    assert one.steps == [1011] and np.isclose(one.marks_us[1], 76256.0)   # ProfilerStep#1011
    with pytest.raises(InputError, match="no step 5"):
        measured_lanes(trace, first=5)
