"""sweep gives the oversubscribed intra-op threads caveat (as whatif does for one setting)
once, naming every point that has it."""
from __future__ import annotations

from pathlib import Path

from stepsim import api

REPO = Path(__file__).resolve().parents[1]


def _two_threads(num_workers: int):
    """The reference input pipeline with its training step on 2 intra-op threads, on 2 cores
    at ``num_workers`` (one thread a worker)."""
    m = api.load_model(str(REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"))
    ops = [op.model_copy(update={"threads": 2}) if op.kind == "cpu" else op for op in m.host.ops]
    loader = m.loader.model_copy(update={"host_cores": 2, "num_workers": num_workers,
                                         "threads_per_worker": 1})
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops}), "loader": loader})


def test_sweep_warns_once_naming_each_oversubscribed_point():
    m = _two_threads(num_workers=0)
    r = api.sweep(m, "loader.num_workers=0,1,2", steps=10, warmup=2, draws=0, jobs=1)
    said = [w for w in r.warnings if "oversubscribed intra-op threads" in w]
    assert len(said) == 1
    assert said[0].startswith("at 2 of the sweep's points (loader.num_workers=1; "
                              "loader.num_workers=2), e.g. at loader.num_workers=1: ")
    one = api.sweep(m, "loader.num_workers=0,2", steps=10, warmup=2, draws=0, jobs=1)
    assert [w.split(":")[0] for w in one.warnings if "oversubscribed" in w] == [
        "at loader.num_workers=2"]


def test_sweep_from_an_oversubscribed_baseline_warns_once():
    """A model captured oversubscribed (2 threads beside 2 workers on 2 cores) is swept: the
    baseline's caveat and the points' caveat were two lines saying the same thing."""
    m = _two_threads(num_workers=2)
    r = api.sweep(m, "loader.num_workers=0,1,2,4", steps=10, warmup=2, draws=0, jobs=1)
    said = [w for w in r.warnings if "oversubscribed intra-op threads" in w]
    assert len(said) == 1
    assert said[0].startswith("at 3 of the sweep's points (loader.num_workers=1; ")
