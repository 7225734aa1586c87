"""Outside load of runs pooled into one validation record: the runs' slowdowns weighted by
their share of the pooled step time (``models.load_bound.pooled_load``), so one run just past
the 10 % bound among quiet re-measured runs keeps the record in the score, said in one note,
where it set the whole pool apart (the most loaded run's slowdown was the record's)."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.fit import calibrate
from stepsim.models.load_bound import LOAD_WARN, pooled_load
from stepsim.models.params import save_model
from tests.test_outside_load import _cpu_times


@pytest.mark.parametrize("runs,pool,noted", [
    ([(0.12, 100.0), (0.0, 100.0), (0.0, 100.0)], 0.04, True),     # borderline among quiet
    ([(0.12, 300.0), (0.0, 100.0)], 0.09, True),                    # weighted by step time
    ([(1.5, 100.0), (0.0, 100.0), (0.0, 100.0)], 0.5, False),       # clearly loaded: apart
    ([(0.12, 100.0)], 0.12, False),                                  # one run: as before
    ([(0.05, 100.0), (None, 100.0)], 0.05, False),                  # over the runs that tell
    ([(None, 100.0)], None, False),
])
def test_pooled_load_closed_forms(runs, pool, noted):
    got, note = pooled_load(runs)
    assert got == (None if pool is None else pytest.approx(pool))
    assert bool(note) == noted
    if noted:
        assert note.startswith("1 of ") and "1.12x slower" in note and "scored" in note


def test_a_borderline_run_in_a_pool_keeps_the_record_scored(cpu_run_nw0, cpu_run_nw1,
                                                            tmp_path):
    model = tmp_path / "m.json"
    save_model(calibrate(cpu_run_nw0), model)
    quiet = [_cpu_times(cpu_run_nw1, tmp_path / f"q{k}", 1.0) for k in range(2)]
    border = _cpu_times(cpu_run_nw1, tmp_path / "border", 1 / 1.15)    # 15 % slower
    kw = dict(set=["loader.num_workers=1"], steps=10, warmup=3, draws=0, jobs=1)
    r = api.validate(str(model), [*(str(d / "trace.json.gz") for d in (*quiet, border))], **kw)
    assert r.record.outside_load_slowdown == pytest.approx(0.05, abs=0.02)
    assert not r.record.outside_load
    assert any(w.startswith("1 of 3 pooled runs ran under outside load (up to 1.15x")
               for w in r.warnings)
    alone = api.validate(str(model), str(border / "trace.json.gz"), **kw)
    assert alone.record.outside_load and alone.record.outside_load_slowdown > LOAD_WARN
