"""diagnose gives the oversubscribed intra-op threads caveat (as whatif and sweep do): under
each priced fix that adds workers beside a multi-threaded training step, and for a baseline
captured so, in the text and in --json."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.report.diagnose import print_diagnosis
from tests.test_host_physics import host_model


def _whatifs(doc):
    return [w for f in doc["findings"] for w in f["whatifs"]]


@pytest.mark.parametrize("threads,named", [(2, True), (1, False)])
def test_diagnose_names_the_threads_caveat(threads, named, capsys):
    m = host_model(0, 2, 30.0, 10.0, threads=threads, parallel=0.9)
    r = api.diagnose(m, steps=20, warmup=5, draws=0, jobs=1)
    doc = r.to_dict()
    more = [w for w in _whatifs(doc) if w["fix"].startswith("more_workers")]
    assert more, "an input-bound model is offered more workers"
    assert doc["caveats"] == []                       # no workers at the baseline
    said = [c for w in more for c in w["caveats"] if "oversubscribed intra-op threads" in c]
    assert bool(said) == named
    print_diagnosis(r.diagnosis)
    text = capsys.readouterr().out
    assert ("caveat: oversubscribed intra-op threads: the training step's 2 beside" in text) \
        == named


def test_diagnose_names_an_oversubscribed_baseline():
    m = host_model(2, 2, 30.0, 10.0, threads=2, parallel=0.9)
    doc = api.diagnose(m, steps=20, warmup=5, draws=0, jobs=1).to_dict()
    assert any("oversubscribed intra-op threads" in c for c in doc["caveats"])
