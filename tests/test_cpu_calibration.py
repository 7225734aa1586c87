"""Calibration of CPU traces that the tests record themselves with torch and the harness."""
from __future__ import annotations

import json

import numpy as np
import pytest

from stepsim.fit import calibrate
from stepsim.calibration.measure import INPUT_BOUND_SHARE, measured_steps
from stepsim.calibration.sidecar import load_sidecar
from stepsim.models.host_speed import at_capture_speed
from stepsim.models.params import StepModel, load_model, save_model
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import InputError


@pytest.mark.parametrize("fixture,nw", [("cpu_run_nw0", 0), ("cpu_run_nw1", 1)])
def test_capture_then_calibrate(request, fixture, nw):
    run = request.getfixturevalue(fixture)
    trace, side = run / "trace.json.gz", run / "sidecar.json"
    assert trace.read_bytes()[:2] == b"\x1f\x8b", "the harness writes a gzipped trace"
    sc = load_sidecar(side)
    assert sc.loader.num_workers == nw and sc.loader.batch_size == 8
    assert sc.host_cores >= 1
    workers = {r.worker for r in sc.produce}
    assert workers == ({-1} if nw == 0 else {0}), "produce times come from where batches are made"
    assert all(r.cpu_us > 0 and r.wall_us >= r.cpu_us * 0.5 for r in sc.produce)

    model = calibrate(trace, sidecar=side)
    assert model.loader.num_workers == nw
    assert model.meta.sources["loader.produce"] == "measured"
    assert model.meta.sources["loader.host_cores"] == "measured"
    assert len(model.meta.measured_step_us) == 6
    assert [op.kind for op in model.host.ops] == ["next_batch", "cpu"]
    # the replay of the calibrated baseline reproduces the measured mean step (a 6-step window
    # on a shared machine: the demo's longer windows are held to 5 %)
    steps = np.asarray(model.meta.measured_step_us, dtype=float)
    measured = float(steps.mean())
    # at the capture's own speed: a prediction takes the whole run's (the window's produce CPU
    # against the run's, meta.notes['window_speed']), which a 6-step window can miss by 30 %
    replay = simulate(at_capture_speed(model), steps=200, warmup=5).mean_step_us
    # the bound holds the replay to the 6 measured steps' mean, which is itself uncertain by
    # its standard error: one slow step under outside load moves it (a clean-clone CI run read
    # 19.4 % off on 2026-12-06; quiet runs here read -1.0 to +0.4 %, loaded ones +0.2 to -4.6 %)
    sem = float(steps.std(ddof=1)) / np.sqrt(len(steps)) / measured
    tol = 0.15 + 2 * sem
    why = (f"replay {replay:.0f} us against the measured mean {measured:.0f} us of steps "
           f"{steps.round(0).tolist()} (standard error {100 * sem:.1f} %), "
           f"window_speed {model.meta.notes.get('window_speed')}")
    # A capture under outside load (its threads held less than 1 / (1 + LOAD_WARN) of the core
    # time they could have held: calibration.outside_load) is said so, and the model is of the
    # run's own work, not of the core time others took: its replay lies between the held
    # share of the measured step and the measured step (measured with taskset -c 0 beside a
    # spinner on that CPU, 1 worker: held 0.633 / 0.571 / 0.586, replay 0.630 / 0.566 / 0.577
    # of measured; 0 workers: held 0.48, replay 0.997, the step's walls are the model's).
    from stepsim.calibration.outside_load import LOAD_WARN

    held = model.meta.notes.get("outside_load_held")
    if held is not None and held < 1 / (1 + LOAD_WARN):
        assert any("the capture ran under outside load" in w for w in model.meta.warnings)
        assert held * (1 - tol) < replay / measured < 1 + tol, (held, why)
    else:
        assert abs(replay - measured) / measured < tol, why


def test_measured_steps_and_bottleneck(cpu_run_nw0, tmp_path):
    import shutil

    alone = tmp_path / "trace.json.gz"  # without its sidecar: no core-wait evidence
    shutil.copy(cpu_run_nw0 / "trace.json.gz", alone)
    ms = measured_steps(alone)
    assert len(ms.step_us) == 6
    assert all(w <= s for w, s in zip(ms.input_wait_us, ms.step_us))
    share = sum(ms.input_wait_us) / sum(ms.step_us)
    assert 0 < share < 1
    assert ms.bottleneck == ("input" if share >= INPUT_BOUND_SHARE else "host_compute")


def test_without_sidecar_infers_and_warns(cpu_run_nw0):
    model = calibrate(cpu_run_nw0 / "trace.json.gz")
    assert model.meta.sources["loader.produce"] == "inferred"
    assert model.meta.sources["loader.host_cores"] == "assumed"
    assert any("no sidecar" in w for w in model.meta.warnings)


def test_model_json_round_trip(tmp_path, cpu_run_nw1):
    model = calibrate(cpu_run_nw1 / "trace.json.gz", sidecar=cpu_run_nw1 / "sidecar.json")
    path = tmp_path / "m.json"
    save_model(model, path)
    again = load_model(path)
    assert again == model
    assert StepModel.model_validate_json(path.read_text()) == model


@pytest.mark.parametrize("content,msg", [
    (b"", "empty"),
    (b"{not json", "not valid JSON"),
    (b'{"traceEvents": []}', "not a stepsim sidecar"),
    (b'{"stepsim_sidecar": 1, "loader": {"num_workers": "many"}}',
     "loader.num_workers: must be an integer"),
])
def test_bad_sidecar(tmp_path, content, msg):
    p = tmp_path / "side.json"
    p.write_bytes(content)
    with pytest.raises(InputError, match=msg) as e:
        load_sidecar(p)
    assert str(p) in str(e.value)
    assert p.read_bytes() == content


def test_sidecar_json_is_plain(cpu_run_nw1):
    data = json.loads((cpu_run_nw1 / "sidecar.json").read_text())
    assert data["stepsim_sidecar"] == 1
    assert {"num_workers", "prefetch_factor", "pin_memory", "batch_size",
            "persistent_workers"} <= set(data["loader"])


def test_every_loader_parameter_has_a_source(cpu_run_nw1):
    from stepsim.models.params import LoaderParams

    model = calibrate(cpu_run_nw1 / "trace.json.gz", sidecar=cpu_run_nw1 / "sidecar.json")
    for k in LoaderParams.model_fields:
        assert model.meta.sources[f"loader.{k}"] in ("measured", "inferred", "assumed")
    assert model.meta.sources["loader.num_workers"] == "measured"


def test_iterable_dataset_is_timed(tmp_path):
    import torch

    from stepsim.calibration.capture import Capture

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            for i in range(200):
                yield torch.full((4,), float(i))

    cap = Capture(tmp_path)
    loader = cap.dataloader(Stream(), batch_size=4, num_workers=0)
    n = sum(1 for _ in cap.steps(loader, active=2, wait=0, warmup=1, skip_first=0))
    assert n == 3
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert len(sc.produce) >= 3 and all(r.bytes == 4 * 4 * 4 for r in sc.produce)
    assert (tmp_path / "trace.json.gz").exists()


def test_loop_stopped_early_still_writes_sidecar(tmp_path):
    import torch

    from stepsim.calibration.capture import Capture

    cap = Capture(tmp_path)
    loader = cap.dataloader(list(range(64)), batch_size=2, num_workers=0)
    for i, _ in enumerate(cap.steps(loader, active=4, wait=0, warmup=1, skip_first=0)):
        torch.ones(4).sum()
        if i == 2:
            break
    sc = load_sidecar(tmp_path / "sidecar.json")
    assert any("stopped after 2 of 5 steps" in w for w in sc.warnings)  # the 3rd never ended
    # the profiler, stopped inside its active window, exports what it recorded
    assert (tmp_path / "trace.json.gz").exists() or any("no trace" in w for w in sc.warnings)
    assert not list(tmp_path.glob(".partial*")), "no temporary file left behind"


def test_capture_warnings_reach_the_model(cpu_run_nw0, tmp_path):
    import shutil

    d = tmp_path / "run"
    shutil.copytree(cpu_run_nw0, d)
    data = json.loads((d / "sidecar.json").read_text())
    data["warnings"] = ["the DataLoader ran out after 6 of 14 steps"]
    (d / "sidecar.json").write_text(json.dumps(data))
    model = calibrate(d / "trace.json.gz", sidecar=d / "sidecar.json")
    assert any("capture: the DataLoader ran out" in w for w in model.meta.warnings)


def test_capture_folder_calibrates_with_its_sidecar(cpu_run_nw1):
    model = calibrate(cpu_run_nw1)
    assert model.loader.num_workers == 1
    assert model.meta.sources["loader.produce"] == "measured"


def test_no_cpu_cores_bottleneck_without_workers(cpu_run_nw0, tmp_path):
    """The training step's wall time far over its CPU time (a busy machine) names the cores
    only when DataLoader workers competed for them: at num_workers=0 the next rules decide."""
    import shutil

    side = json.loads((cpu_run_nw0 / "sidecar.json").read_text())
    for s in side["steps"]:
        s["cpu_us"], s["next_cpu_us"] = 1.0, 0.0
        s["proc_cpu_us"] = s["next_proc_cpu_us"] = None
    for nw, want in ((0, {"input", "host_compute"}), (1, {"cpu_cores"})):
        run = tmp_path / f"nw{nw}"
        run.mkdir()
        shutil.copy(cpu_run_nw0 / "trace.json.gz", run / "trace.json.gz")
        side["loader"]["num_workers"] = nw
        (run / "sidecar.json").write_text(json.dumps(side))
        assert measured_steps(run).bottleneck in want, nw
