"""The batch-size probe (``Capture.steps(..., probe_batch_size=N)``): a few steps at a second
batch size measure the parts of the training step and of a batch's produce time that do not
grow with the batch (:mod:`calibration.batch_probe`), which a ``loader.batch_size`` what-if
keeps instead of assuming the whole step linear in samples."""
from __future__ import annotations

import time

import orjson
import pytest
import torch

from stepsim.calibration.batch_probe import batch_probe, fixed_fraction, superlinear_exponent
from stepsim.fit import calibrate
from stepsim.calibration.capture import Capture
from stepsim.calibration.sidecar import load_sidecar
from stepsim.scenarios.batch_size import batch_size_note, set_batch_size
from tests.conftest import steps_in_turn

B, N = 4, 8
STEP_FIXED_MS, STEP_PER_SAMPLE_MS = 6.0, 1.0
COLLATE_MS, FETCH_MS = 2.0, 1.0


def _spin(ms: float) -> None:
    """Burn ``ms`` of this thread's CPU time."""
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass


class Spinning(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        _spin(FETCH_MS)
        return torch.zeros(4)


def _collate(samples):
    _spin(COLLATE_MS)
    return torch.stack(samples)


def _capture(out, probe_batch_size=N) -> None:
    """A loop at batch size B whose step costs 6 ms of CPU plus 1 ms per sample, and whose
    batch costs 1 ms per sample plus a 2 ms collate: at B = 4 the step's part per step is
    6 / 10 and the batch's part per batch 2 / 6."""
    cap = Capture(out)
    loader = cap.dataloader(Spinning(), batch_size=B, collate_fn=_collate)
    for batch in cap.steps(loader, active=3, wait=1, warmup=1, skip_first=3, after=6,
                           probe_batch_size=probe_batch_size, probe_steps=6):
        _spin(STEP_FIXED_MS + STEP_PER_SAMPLE_MS * len(batch))


def test_fixed_fraction_closed_form():
    # a cost of 6 + 1 per sample: 10 at 4 samples, 14 at 8 -> 6 / 10 stays
    assert fixed_fraction(14 / 10, 2.0) == pytest.approx(0.6)
    assert fixed_fraction(2.0, 2.0) == 0.0 and fixed_fraction(1.0, 2.0) == 1.0
    assert fixed_fraction(2.5, 2.0) == 0.0 and fixed_fraction(0.9, 2.0) == 1.0   # clipped
    assert fixed_fraction(6 / 10, 0.5) == pytest.approx(0.2)   # a smaller probe batch


def test_superlinear_exponent_closed_form():
    """3.37x for 2x the samples (a user's CNN): samples^1.75 through both points; within
    [1, r] (or shrinking) no exponent: the fixed part explains it."""
    assert superlinear_exponent(3.37, 2.0) == pytest.approx(1.7528, abs=1e-3)
    assert superlinear_exponent(0.25, 0.5) == pytest.approx(2.0)   # a smaller probe batch
    assert superlinear_exponent(1.5, 2.0) is None and superlinear_exponent(0.9, 2.0) is None


def test_a_superlinear_step_is_kept_as_measured(tmp_path):
    """A step whose CPU grows as samples² (8 ms at 4 samples, 32 ms at 8): the probe's
    4x for 2x the samples is kept (samples^2, measured), not clipped to 2x, so the what-if
    at the probe's batch predicts its measured step (was 2x: −50 %)."""
    cap = Capture(tmp_path / "c")
    loader = cap.dataloader(Spinning(), batch_size=B, collate_fn=_collate)
    for batch in cap.steps(loader, active=3, wait=1, warmup=1, skip_first=3, after=6,
                           probe_batch_size=N, probe_steps=6):
        _spin(8.0 * (len(batch) / B) ** 2)
    m = calibrate(tmp_path / "c")
    op = m.host.ops[1]
    assert m.meta.sources["host.ops[1].sample_exponent"] == "measured"
    assert op.sample_exponent == pytest.approx(2.0, abs=0.35)
    got = set_batch_size(m, N).host.ops[1].dur_us / op.dur_us
    assert got == pytest.approx(4.0, rel=0.2)
    assert "samples^" in batch_size_note(m, N)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe") / "c"
    _capture(out)
    return out


def test_the_probe_is_recorded_at_its_batch_size(probed):
    side = orjson.loads((probed / "sidecar.json").read_bytes())
    assert side["probe"]["batch_size"] == N and side["probe"]["num_workers"] == 0
    assert len(side["probe"]["steps"]) == 6
    assert side["probe"]["produce"]


def test_the_probe_measures_the_parts_that_do_not_grow(probed):
    bp = batch_probe(load_sidecar(probed / "sidecar.json"))
    assert bp.batch_size == N
    # CPU time, so a loaded machine changes little: 0.6 and 0.33 by construction
    assert bp.step_fixed == pytest.approx(0.6, abs=0.1)
    assert bp.produce_fixed == pytest.approx(1 / 3, abs=0.1)
    assert bp.step_range[0] <= bp.step_fixed <= bp.step_range[1]


def test_a_batch_size_what_if_keeps_the_measured_parts(probed):
    m = calibrate(probed)
    assert m.meta.sources["host.ops[1].per_step_fraction"] == "measured"
    assert m.meta.sources["loader.produce_per_batch_fraction"] == "measured"
    f = m.host.ops[1].per_step_fraction
    g = m.loader.produce_per_batch_fraction
    assert "interference" not in "".join(w for w in m.meta.warnings if "fitted" in w)
    got = set_batch_size(m, 16)              # r = 4
    assert got.host.ops[1].dur_us == pytest.approx(m.host.ops[1].dur_us * (f + (1 - f) * 4))
    assert got.loader.produce.mean_us == pytest.approx(m.loader.produce.mean_us * (g + (1 - g) * 4))
    # kept parts stay what they were in µs: their share of the grown cost shrinks
    assert got.host.ops[1].per_step_fraction * got.host.ops[1].dur_us == \
        pytest.approx(f * m.host.ops[1].dur_us)
    note = batch_size_note(m, 16)
    assert "measured by the batch-size probe" in note and "assumed linear" not in note
    # the probe measured the step's growth, faults and all: no fault-growth prior
    assert m.host.refault_growth == 1.0 and m.host.refault_growth_range is None


def test_both_probes_at_once_and_the_own_batch_size_are_refused(tmp_path):
    cap = Capture(tmp_path / "a")
    loader = cap.dataloader(Spinning(), batch_size=B, collate_fn=_collate)
    with pytest.raises(ValueError, match="two probes"):
        next(iter(cap.steps(loader, probe_workers=1, probe_batch_size=N)))
    cap = Capture(tmp_path / "b")
    loader = cap.dataloader(Spinning(), batch_size=B, collate_fn=_collate)
    with pytest.raises(ValueError, match="other than the loader's batch_size"):
        next(iter(cap.steps(loader, probe_batch_size=B)))


def test_without_a_probe_the_step_stays_assumed_linear(tmp_path):
    from stepsim.calibration.batch_probe import probe_fields

    _capture(tmp_path / "c", probe_batch_size=None)
    side = load_sidecar(tmp_path / "c" / "sidecar.json")
    assert batch_probe(side) is None and probe_fields(side) is None
    m = calibrate(tmp_path / "c")
    assert m.loader.produce_per_batch_fraction == 0.0
    assert "assumed linear" in batch_size_note(m, 16)


def test_a_host_that_changed_speed_within_the_run_is_said(probed, tmp_path):
    """The probe runs after the window: the capture's own unprofiled steps 30 % slower after
    the window than before it are read as drift the probe's ratios hold too."""
    side = orjson.loads((probed / "sidecar.json").read_bytes())
    last = max(i for i, r in enumerate(side["steps"]) if r["profiled"])
    for r in side["steps"][last + 1:]:
        for k in ("wall_us", "cpu_us", "proc_cpu_us"):
            r[k] = r[k] * 1.3
    steps_in_turn(side["steps"])       # the longer walls move the later steps' starts
    path = tmp_path / "sidecar.json"
    path.write_bytes(orjson.dumps(side))
    bp = batch_probe(load_sidecar(path))
    assert any("more CPU after the profiled window" in n for n in bp.notes)
    assert not batch_probe(load_sidecar(probed / "sidecar.json")).notes
