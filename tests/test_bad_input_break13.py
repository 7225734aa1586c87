"""Bad input found by the thirteenth breaker (2026-12-06) in what landed at stop 30: a scenario
file whose fix named its arguments after a colon and gave ``args`` as text (a traceback); a
DDP rank whose unprofiled steps read next to no CPU scaled every host duration of that rank
to 0.0006x (said as a measured profiler overhead); a probe across ``num_workers=0`` whose
batches cost 100x fitted a same-thread cost past ``HostParams``' bound (a traceback from
calibrate); a cold-resume probe whose optimizer read 0 µs without the pause priced its whole
CPU as the pause's extra. Each is refused in one line, or left out and said."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from stepsim.calibration.gloo_cold import cold_opt_params, cold_params
from stepsim.calibration.profiler_overhead import MAX_STEP_FACTOR, rank_factors
from stepsim.calibration.sidecar_ddp import ColdProbe
from stepsim.models.param_types import MAX_SAME_THREAD, HostParams
from stepsim.models.params import save_model
from stepsim.scenarios.op_text import load_scenario
from stepsim.simcore.errors import InputError
from tests.test_ddp_ranks import cpu_ddp
from tests.test_profiler_edges import _side
from tests.test_quirks import cli, one_line_error


# 1: a scenario's fix with arguments after a colon and ``args`` that is not a mapping

@pytest.mark.parametrize("args", ['"ms=30"', "[1, 2]", "5"])
def test_fix_args_that_are_not_a_mapping_are_one_line(args, tmp_path):
    """``name: "straggler:rank=1"`` beside ``args: "ms=30"`` (the --fix text split in two) was
    ``TypeError: 'str' object is not a mapping`` from the colon form's merge, a traceback from
    every verb that reads a scenario; now the file is refused, naming the op."""
    f = tmp_path / "s.yaml"
    f.write_text(f'ops:\n- op: fix\n  name: "straggler:rank=1,phase=forward"\n  args: {args}\n')
    with pytest.raises(InputError, match=r"s\.yaml: not a valid scenario: ops\.0\.fix: args "
                                         r"must map each argument to its value"):
        load_scenario(f)
    m = tmp_path / "m.json"
    save_model(cpu_ddp(2), m)
    rc, err, _ = cli("whatif", m, "--scenario", f, "--steps", "5", "--draws", "0")
    one_line_error(rc, err, "s.yaml", "args must map")
    f.write_text('ops:\n- op: fix\n  name: "straggler:rank=1,phase=forward"\n  args: {ms: 30}\n')
    assert load_scenario(f).ops[0].args == {"rank": 1, "phase": "forward", "ms": 30}


# 2: a DDP rank's profiler factor far below any profiler's cost

def test_a_rank_factor_below_a_quarter_keeps_the_profiled_durations():
    """Rank 1's unprofiled steps read 10 µs of CPU beside 17 ms profiled: its factor 0.0006
    scaled every host duration of that rank to 0.0006x, with only the 'measured' warning.
    As the single-process step factor (1/4 to 4), it is not the profiler's cost: factor 1,
    said; the other rank keeps its measured factor."""
    bad = _side([0.01] * 8, [17.0] * 8, [0.01] * 8, warmup_ms=())
    ok = _side([20.0] * 8, [25.0] * 8, [20.0] * 8, warmup_ms=())
    warnings: list[str] = []
    fac, notes, half = rank_factors([0, 1], {0: ok, 1: bad}, warnings)
    assert fac == {0: pytest.approx(0.8), 1: 1.0}
    said = [w for w in warnings if "not removed on rank(s) 1:" in w]
    assert len(said) == 1 and f"below 1/{MAX_STEP_FACTOR:g}" in said[0]
    assert notes["profiler_factor"] == "0:0.8000"
    scaled = [w for w in warnings if w.startswith("profiler overhead (measured)")]
    assert len(scaled) == 1 and "rank 1" not in scaled[0]
    fac, notes, half = rank_factors([1], {1: bad}, warnings)     # alone: nothing measured
    assert (fac, notes, half) == ({1: 1.0}, {}, 0.0)
    # at the bound it is still a profiler's cost
    edge = _side([4.3] * 8, [17.0] * 8, [4.3] * 8, warmup_ms=())
    assert rank_factors([0], {0: edge}, [])[0][0] == pytest.approx(4.3 / 17.0)


# 3: a probe across num_workers=0 whose fit passes host.same_thread's bound

def test_a_same_thread_fit_past_its_bound_keeps_the_prior_and_says_why(monkeypatch):
    """Closed form (tests.test_same_thread): a probe at 0 workers whose batch and step take
    ``r``x the capture's CPU fits ``r − 1``. At 1.5x it is taken; at 100x (99) it passed
    ``HostParams.same_thread``'s bound of 10, and the model calibration built from it raised a
    pydantic ValidationError (a traceback from calibrate). Now the prior is kept and said."""
    import stepsim.calibration.same_thread as st
    from tests.test_same_thread import _acts

    side = SimpleNamespace(loader=SimpleNamespace(num_workers=1), host_cores=2,
                           batch_probe=False, probe=SimpleNamespace(num_workers=0))
    for r, fitted in ((1.5, True), (100.0, False)):
        monkeypatch.setattr(st, "probe_activities", lambda s, r=r: (
            _acts(40_000.0, 50_000.0, 12, workers=True),
            _acts(40_000.0 * r, 50_000.0 * r, 12, workers=False, t0=5e6)))
        host, src, warn = st.same_thread_from_sidecar(side, 0.0)
        if fitted:
            assert host["same_thread"] == pytest.approx(r - 1, rel=0.02)
            assert src == {"host.same_thread": "inferred"}
        else:
            assert (host["same_thread"], host["same_thread_range"]) == (
                st.SAME_THREAD_POINT, st.SAME_THREAD_PRIOR)
            assert src == {"host.same_thread": "assumed"}
            assert "fits a batch and step 100x their CPU with workers" in warn[0]
            assert f"the most {1 + MAX_SAME_THREAD:g}x" in warn[0]
        HostParams(**host)      # what calibration builds from them


# 4: a cold-resume probe record whose CPU without the pause reads 0 µs

def _probe(**kw):
    base = {"pause_us": 2e4, "hot_cpu_us": 6000.0, "cold_cpu_us": 6600.0, "steps": 4,
            "hot_opt_cpu_us": 2000.0, "cold_opt_cpu_us": 2100.0}
    return SimpleNamespace(ddp=SimpleNamespace(cold_probe=[ColdProbe(**{**base, **kw})]))


def test_a_probe_record_with_no_hot_cpu_is_left_out_and_said():
    """The optimizer's hot CPU at 0 on both ranks priced its whole cold CPU (2.2-3.4 ms on the
    DDP demo's capture) as the cold resume's extra, added to every rank by a straggler what-if,
    where the backward's share already skipped such a pause. Such a record is now left out of
    the pool (the other rank's record still counts) and said."""
    ok, zero = _probe(), _probe(hot_opt_cpu_us=0.0)
    said: list[str] = []
    assert cold_opt_params([zero, zero], said) == []
    assert len(said) == 1 and "2 record(s) read the optimizer's CPU without the pause as 0 µs " \
        "(first at a 20 ms pause)" in said[0]
    assert cold_opt_params([ok, zero]) == [(2e4, pytest.approx(100.0))]
    # the backward: one record at 0 no longer pulls the pooled share up
    said = []
    assert cold_params([_probe(), _probe(hot_cpu_us=0.0)], said) == [(2e4, pytest.approx(0.1))]
    assert len(said) == 1 and "the backward's CPU" in said[0]


# 5: a fix's number written as a switch (``workers=true``) read as 1

@pytest.mark.parametrize("text, named", [
    ("more_workers:workers=true", "workers: must be an integer, not bool True"),
    ("straggler:rank=true,phase=forward,ms=40", "rank: must be an integer, not bool True"),
    ("pin_memory:speedup=false", "speedup: must be a number, not bool False"),
])
def test_a_fix_argument_written_as_a_switch_is_refused(text, named, tmp_path):
    """Pydantic's lax mode read ``true`` as 1: ``plan --fix-arg more_workers:workers=true``
    planned with 1 worker and a scenario's ``rank: true`` put the straggler on rank 1, with no
    word. Fix arguments now hold their kinds as the model's and the sidecar's numbers do
    (models.param_base.StrictScalars)."""
    from stepsim.scenarios.op_text import parse_fix
    from stepsim.simcore.errors import ModelError

    with pytest.raises(ModelError, match=named):
        parse_fix(text)
    name, _, rest = text.partition(":")
    f = tmp_path / "s.yaml"
    f.write_text(f'ops:\n- op: fix\n  name: "{text}"\n')
    with pytest.raises(InputError, match=named):
        load_scenario(f)
    assert parse_fix("more_workers:workers=4").args == {"workers": 4}
    assert parse_fix("straggler:rank=1,phase=forward,ms=40").args["rank"] == 1
