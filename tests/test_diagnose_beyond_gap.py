"""A fix priced faster than removing its whole gap could make the step says what else it
moves: on the real ResNet trace (pageable copies), pinning halves the 22 ms host-to-device copy
(a 1.08x ceiling for that gap) and also frees the host thread from waiting on each pageable
copy, so the next batch's work overlaps the device (1.26x)."""
from __future__ import annotations

import re

from stepsim import api
from stepsim.scenarios import diagnose as d
from stepsim.scenarios.predict import predict
from tests.conftest import shared_traces

KW = {"steps": 300, "warmup": 20, "seed": 0}


def test_pinning_says_it_also_frees_the_host_wait_on_pageable_copies(tmp_path):
    trace = shared_traces() / "param" / "resnet_kineto.json.gz"
    model = api.calibrate(str(trace)).model
    base = predict(model, [], **KW)
    leaf = [f for f in d.diagnose(model, draws=0, **KW).findings if f.key == "h2d"]
    assert len(leaf) == 1 and [w.fix for w in leaf[0].whatifs] == ["pin_memory"]
    w = leaf[0].whatifs[0]
    gap = base.summary.critical_path_us["h2d"]
    assert w.step_us < base.mean_step_us - gap   # beyond removing the whole gap
    said = [c for c in w.caveats if c.startswith("priced beyond removing this whole gap")]
    wait = base.summary.host_split_us["wait:h2d"]
    assert wait > gap and said and re.search(
        rf"waiting on each pageable copy \({wait / 1e3:.2f} ms per step\)", said[0])


def test_a_fix_within_its_gap_says_nothing_more():
    w = d.WhatIf("more_workers", step_us=90.0)
    summary = type("S", (), {"host_split_us": {}})()
    assert d._beyond_gap(w, 100.0, 10.0, summary) is w
    assert d._beyond_gap(d.WhatIf("more_workers", step_us=80.0), 100.0, 10.0,
                         summary).caveats == (
        "priced beyond removing this whole gap (0.09 ms per step if it all went): it changes more "
        "than this gap",)
