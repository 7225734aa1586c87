"""Bad input to what landed in session 3 (break14): the DDP capture API, the sidecar's DDP
records, replicates of a DDP job and what-if values. Each break: one line naming what is
wrong (an exception naming the argument for the Python API; exit 2 naming the file at the
CLI), no traceback, inputs unchanged."""
import pytest

from stepsim.calibration.capture import Capture
from tests.test_gloo import gloo_run  # noqa: F401  (a real 2-rank job)


def test_capture_ddp_refuses_what_is_not_a_module(tmp_path):
    """``Capture.ddp(optimizer)`` (the wrong object) read its parameters inside a process
    group: an AttributeError from deep in ddp_info."""
    cap = Capture(tmp_path / "c")
    with pytest.raises(TypeError, match=r"Capture.ddp\(model\): expected the "
                                        r"DistributedDataParallel module .*got a str"):
        cap.ddp("model")


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_cold_probe_is_a_bool(tmp_path, bad):
    """``cold_probe="no"`` is truthy: it asked for 36 steps of the probe."""
    cap = Capture(tmp_path / "c")
    with pytest.raises(ValueError, match=r"cold_probe=.*: expected True or False"):
        next(cap.steps([1, 2, 3], cold_probe=bad))


def test_a_replicates_impossible_wakeups_are_refused(gloo_run, tmp_path):  # noqa: F811
    """A replicate whose buckets' records say 2^62 wake-ups a step: pooled over the runs
    (model_copy, which checks no bound), the model held ``comm.wakeups`` 2.3e17 past its bound
    of 1e6, was written (exit 0) and every verb that loaded it failed; it is refused when
    calibrated, one line naming the capture, as the capture's own are. (The capture's marks
    are set to 7 + 12/MiB wake-ups a step, so its fit is measured on any kernel.)"""
    import json

    from stepsim.fit import calibrate
    from stepsim.simcore.errors import InputError
    from tests.test_ddp_replicate_load import _runs

    cap, rep = _runs(gloo_run[0], tmp_path, [0.0, 0.0])
    mib = 2 ** 20

    def marks(folder, per_step):
        for f in sorted(folder.glob("rank*.sidecar.json")):
            data = json.loads(f.read_text())
            data["ddp"]["bucket_cpu"] = [
                {"bytes": b, "cpu_us": 1e3, "steps": 4, "timeslices": per_step(b),
                 "runqueue_us": 150.0 * per_step(b) if per_step(b) < 2 ** 40 else 1e6}
                for b in (mib // 4, mib // 2)]      # (the job's gradients: 1 MiB)
            f.write_text(json.dumps(data))

    marks(cap, lambda b: 4 * (7 + 3 * b // (mib // 4)))
    marks(rep, lambda b: 2 ** 62)
    assert calibrate(cap).meta.sources["comm.wakeups"] == "measured"
    before = {f: f.read_bytes() for f in sorted(cap.glob("*")) + sorted(rep.glob("*"))}
    with pytest.raises(InputError, match=r"impossible model \(CommParams\.wakeups"):
        calibrate(cap, replicates=[rep])
    assert {f: f.read_bytes() for f in before} == before


def _ddp_sidecar(tmp_path, **ddp):
    import json

    p = tmp_path / "rank0.sidecar.json"
    p.write_text(json.dumps({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                             "ddp": {"world_size": 2, "rank": 0, "backend": "gloo",
                                     "params": [{"name": "w", "shape": [256, 256],
                                                 "numel": 65536, "dtype": "float32",
                                                 "bytes": 262144}], **ddp}}))
    return p


@pytest.mark.parametrize("ddp, said", [
    # a copied record: counted twice, or (the barrier probe) taken for a second rank's
    ({"threads": [{"tid": 5, "cpu_us": 1.0}, {"tid": 5, "cpu_us": 2.0}]},
     r"threads records thread 5 twice"),
    ({"cold_probe": [{"pause_us": 1e4, "hot_cpu_us": 5e3, "cold_cpu_us": 6e3, "steps": 6}] * 2},
     r"cold_probe records the 10000 µs pause twice"),
    ({"barrier_probe": [{"wait_us": 4e4, "barrier_us": 1e3, "steps": 6}] * 2},
     r"barrier_probe records the 40000 µs wait twice"),
    # a bucket of 2^62 B beside 256 KiB of gradients was fitted (a per-MiB cost of ~0)
    ({"bucket_cpu": [{"bytes": 2 ** 62, "cpu_us": 1e3, "steps": 4}]},
     r"bucket_cpu has a bucket of 4611686018427387904 B, more than the job's gradients "
     r"\(262144 B\)"),
])
def test_impossible_ddp_records_are_refused(tmp_path, ddp, said):
    from stepsim.calibration.sidecar import load_sidecar

    refused(_ddp_sidecar(tmp_path, **ddp), said)
    load_sidecar(_ddp_sidecar(tmp_path))     # the same record without them reads


def refused(p, said: str) -> None:
    """Reading the sidecar ``p`` raises one line naming it and matching ``said``; ``p`` is
    left as it was."""
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.simcore.errors import InputError

    before = p.read_bytes()
    with pytest.raises(InputError, match=said) as got:
        load_sidecar(p)
    assert str(p) in str(got.value) and "\n" not in str(got.value)
    assert p.read_bytes() == before


def test_a_replicate_without_the_ddp_record_is_not_of_the_job(tmp_path):
    """A DDP capture's replicate whose rank sidecars had no ``ddp`` record passed the setting
    check (an absent field is not compared), and, the capture being loaded, became the job's
    capture (exit 0)."""
    import json

    from stepsim.calibration.host_noise import _same_setting
    from stepsim.calibration.sidecar import load_sidecar

    job = load_sidecar(_ddp_sidecar(tmp_path))
    d = json.loads(_ddp_sidecar(tmp_path).read_text())
    d.pop("ddp")
    (tmp_path / "plain.json").write_text(json.dumps(d))
    plain = load_sidecar(tmp_path / "plain.json")
    assert _same_setting(job, plain) == ("it has no DDP record (ddp), the capture has")
    assert _same_setting(plain, job) == ("it has a DDP record (ddp), the capture has none")
    assert _same_setting(job, job) is None


def test_calibrate_on_a_script_says_what_a_trace_is(tmp_path):
    """``stepsim calibrate train.py`` (a new user's first try, newuser3 2026-12-06) said only
    "not valid JSON": the line now says what calibrate reads; the script is unchanged."""
    from tests.conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text("import torch\nprint(torch.__version__)\n")
    before = script.read_bytes()
    p = run_cli("calibrate", str(script), "-o", str(tmp_path / "m.json"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = [l for l in p.stderr.splitlines() if l.strip()]
    assert "train.py: not valid JSON" in line and "torch.profiler writes" in line
    assert script.read_bytes() == before and not (tmp_path / "m.json").exists()


def test_a_huge_set_value_is_not_echoed_whole(tmp_path):
    """``--set comm.world_size=<5,000 digits>`` was refused in one line of 10 kB (the digits
    twice); the line now cuts the value to its ends and its length."""
    from pathlib import Path

    from tests.conftest import run_cli

    model = Path(__file__).parent / "data" / "ddp_demo_model.json"
    p = run_cli("whatif", str(model), "--set", "comm.world_size=" + "9" * 5000)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = [l for l in p.stderr.splitlines() if l.strip()]
    assert "comm.world_size" in line and "(5,000 characters)" in line and len(line) < 600
