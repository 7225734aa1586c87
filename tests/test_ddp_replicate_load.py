"""``stepsim calibrate RANK_FOLDER --replicate R1 --replicate R2`` on a real 2-rank gloo job
(:mod:`tests.test_gloo`'s recording) leaves out a profiled run its own sidecars say ran under
outside load (:mod:`calibration.ddp_runs`), with a warning naming it and the figure, as
``stepsim demo --ddp`` does: the machine's busy CPU over its profiled steps (the sidecar's
``machine``, ``/proc/stat``) less its ranks' own CPU, past ``LOAD_WARN`` of the cores' time."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from stepsim.fit import calibrate  # noqa: E402
from tests.conftest import later_run  # noqa: E402
from tests.test_gloo import _copy_capture, gloo_run  # noqa: E402,F401  (a real 2-rank job)

WALL_US, OWN_US, CORES = 1e6, 0.8e6, 2


def _busy(share: float, offset_us: float = 0.0):
    """A sidecar edit: a ``machine`` record over 1 s of a 2-core machine where each rank's
    process used 0.8 s of CPU and other processes ``share`` of the cores' time (closed form:
    busy = 2 ranks x 0.8 s + share x 2 cores x 1 s); ``offset_us``: another run's instants."""
    def edit(side):
        side["machine"] = {"wall_us": WALL_US, "busy_us": 2 * OWN_US + share * CORES * WALL_US,
                           "steal_us": 0.0, "cores": CORES, "proc_cpu_us": OWN_US}
        if offset_us:
            later_run(side, offset_us)
    return edit


def _runs(src, root, shares):
    """The recorded capture copied as the capture and as each replicate, other processes busy
    ``shares`` of the cores over each."""
    out = [_copy_capture(src, root / "cap", edit_sidecar=_busy(shares[0]))]
    out += [_copy_capture(src, root / f"r{k}", edit_sidecar=_busy(s, 6e7 * (k + 1)))
            for k, s in enumerate(shares[1:])]
    return out


def test_the_harness_records_the_machines_busy_cpu(gloo_run):  # noqa: F811
    """Every rank's sidecar holds the machine's CPU over its profiled steps, within what the
    kernel's counters allow (busy and the process's own CPU at most every core's time, plus
    one tick a core for ``/proc/stat``'s whole ticks), and the run's reading follows
    :data:`MIN_TICKS` in closed form: none where rank 0's span (the first rank's record is
    the host's) holds fewer ticks over its cores, else a share of the cores' time. The 4
    profiled steps span ~50 ms on a quiet host (no reading); under load they took 274-340 ms,
    past the 250 ms that 50 ticks over 2 cores are, and read: both branches are the model's,
    so the test holds whatever the load (it asserted the short span, and failed at load ~10)."""
    from stepsim.calibration.ddp_runs import run_readings
    from stepsim.calibration.machine_stat import MIN_TICKS
    from stepsim.calibration.sidecar import load_sidecar

    src, _ = gloo_run
    ms = [load_sidecar(f).machine for f in sorted(src.glob("rank*.sidecar.json"))]
    assert len(ms) == 2
    for m in ms:
        assert m is not None and m.wall_us > 0 and m.busy_us > 0 and m.proc_cpu_us > 0
        assert m.busy_us <= m.cores * (m.wall_us + m.tick_us)
        assert m.proc_cpu_us <= m.cores * (m.wall_us + m.tick_us)
    busy = run_readings([src])[2]
    if ms[0].cores * ms[0].wall_us < MIN_TICKS * ms[0].tick_us:
        assert busy == [None]
    else:
        assert busy[0] is not None and 0.0 <= busy[0] <= 1.0 + ms[0].tick_us / ms[0].wall_us


def test_a_loaded_replicate_is_left_out_with_a_warning(gloo_run, tmp_path):  # noqa: F811
    """r1 ran while other processes were busy 30 % of the cores' time (quiet runs: 0 %): the
    model is calibrated from the capture and r0 (two host speeds, the same work: 1.0 and 1.0),
    and one warning names r1 and the 30 %; the old calibration kept it (three speeds), silent."""
    src, _ = gloo_run
    cap, r0, r1 = _runs(src, tmp_path, [0.0, 0.0, 0.30])
    model = calibrate(cap, replicates=[r0, r1])
    assert model.host.speed_runs == pytest.approx([1.0, 1.0])
    said = [w for w in model.meta.warnings if "left out of the calibration" in w]
    assert len(said) == 1 and f"replicate {r1} ran under outside load" in said[0]
    assert "busy 30 % of the machine's cores' time" in said[0]
    assert str(r0) not in said[0]
    # below LOAD_WARN (10 %) nothing is left out and nothing said
    cap2, *reps2 = _runs(src, tmp_path / "b", [0.0, 0.0, 0.08])
    model2 = calibrate(cap2, replicates=reps2)
    assert len(model2.host.speed_runs) == 3
    assert not [w for w in model2.meta.warnings if "left out of the calibration" in w]
    # one replicate, loaded: the capture is calibrated alone, and that is said
    alone = calibrate(cap, replicates=[r1])
    assert alone.host.speed_runs != pytest.approx([1.0, 1.0])
    assert any(f"replicate {r1} ran under outside load" in w for w in alone.meta.warnings)
    # every run loaded: all kept (no quiet run to calibrate from), and that is said
    cap3, *reps3 = _runs(src, tmp_path / "c", [0.3, 0.3, 0.3])
    every = calibrate(cap3, replicates=reps3)
    assert len(every.host.speed_runs) == 3
    assert any("every one of the 3 profiled runs" in w for w in every.meta.warnings)


def test_a_loaded_capture_gives_way_on_the_command_line(gloo_run, tmp_path, capsys):  # noqa: F811
    """``stepsim calibrate CAP --replicate R0 --replicate R1`` with the capture loaded (25 %):
    the first quiet replicate is the capture, the line says which run and the figure."""
    from stepsim.cli import main

    src, _ = gloo_run
    cap, r0, r1 = _runs(src, tmp_path, [0.25, 0.0, 0.0])
    out = tmp_path / "model.json"
    assert main(["calibrate", str(cap), "--replicate", str(r0), "--replicate", str(r1),
                 "-o", str(out)]) == 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert f"the capture {cap} ran under outside load" in " ".join(text.split())
    assert "busy 25 %" in text and f"the first quiet replicate {r0} is the capture" in \
        " ".join(text.split())
    from stepsim.models.params import load_model

    assert load_model(out).host.speed_runs == pytest.approx([1.0, 1.0])


def test_a_reading_of_too_few_ticks_says_nothing():
    """/proc/stat counts whole 10 ms ticks: a span of 2 cores x 0.2 s (40 ticks, under
    MIN_TICKS = 50) gives no reading, 2 cores x 0.25 s (50) does (closed form: 0.3 s busy
    less 0.1 s own over 0.5 s of core time = 0.4)."""
    from stepsim.calibration.machine_stat import busy_share, run_busy_share

    m = {"wall_us": 2e5, "busy_us": 4e5, "cores": 2, "proc_cpu_us": 1e5, "tick_us": 1e4}
    assert busy_share(m, 1e5) is None and run_busy_share([("h", m)]) is None
    m = dict(m, wall_us=2.5e5, busy_us=3e5)
    assert busy_share(m, 1e5) == pytest.approx(2e5 / 5e5)
    # two ranks on one host: the first's busy CPU less both ranks' own, each at its rate
    m2 = dict(m, wall_us=5e5, proc_cpu_us=1e5)     # 0.2 of a core over its own span
    assert run_busy_share([("h", m), ("h", m2)]) == pytest.approx((3e5 - 1e5 - 0.5e5) / 5e5)
    # on two hosts: each host's own ranks, the busier host's share
    assert run_busy_share([("a", m), ("b", dict(m, busy_us=1e5))]) == pytest.approx(2e5 / 5e5)
    assert run_busy_share([("h", m), ("h", None)]) is None
