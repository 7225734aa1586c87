"""diagnose uses "ceiling" as `stepsim ceiling` does (the simulated step with a component
free): its per-gap arithmetic is the subtraction that verb shows as ``subtracted``, named so,
and no step time is called a ceiling."""
from __future__ import annotations

import re

from stepsim import api
from stepsim.scenarios.ceiling import ceilings
from tests.test_host_physics import host_model


def test_diagnose_gap_arithmetic_is_the_ceiling_verbs_subtraction():
    m = host_model(0, 2, 30.0, 10.0, threads=1, parallel=0.9)
    r = api.diagnose(m, steps=20, warmup=5, draws=0, jobs=1)
    rows = {x.key: x for x in ceilings(m, steps=20, warmup=5).rows}
    ariths = [(f.key, w.arithmetic) for f in r.diagnosis.findings for w in f.whatifs
              if f.key in rows and w.arithmetic]
    assert ariths, "an input-bound model has a priced gap"
    for key, arith in ariths:
        assert f"at most {rows[key].subtracted:.2f}x if it all went (subtracted, " in arith
        assert not re.search(r"ceiling \d", arith)   # the old wording: "ceiling 1.45x"
    text = " ".join(str(r.to_dict()).split())
    assert "gap's ceiling" not in text
