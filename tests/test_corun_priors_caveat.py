"""A verdict across co-runner settings that rests on stated priors says so (issue 10, fresh13
2026-12-07: sweep's knee and diagnose's more_workers verdict were inverted by a bound fit and
the team stall's prior, and said nothing)."""
import gzip
from pathlib import Path

import pytest

from stepsim.models.params import load_model
from stepsim.report.diagnose import _whatif_line
from stepsim.scenarios.corun_priors import corun_path, priors_caveat
from stepsim.scenarios.diagnose import WhatIf

DATA = Path(__file__).parent / "data"


@pytest.fixture
def fresh13_model(tmp_path):
    """fresh13's model (calibrated from cap1a + 2 replicates with its probe at 2 workers)."""
    p = tmp_path / "model.json"
    p.write_text(gzip.open(DATA / "fresh13_cnn2t_nw1.model.json.gz", "rt").read())
    return load_model(p)


def test_caveat_names_the_priors_and_only_them(fresh13_model):
    m = fresh13_model
    src = {**m.meta.sources, "host.interference": "assumed", "host.team_stall": "inferred"}
    host = m.host.model_copy(update={"interference_range": (0.0, 0.16)})
    m = m.model_copy(update={"host": host, "meta": m.meta.model_copy(update={"sources": src})})
    text = priors_caveat(m)
    assert "interference 0–0.16" in text and "team_stall" not in text
    src2 = {k: ("inferred" if k.startswith("host.") else v) for k, v in src.items()}
    m2 = m.model_copy(update={"meta": m.meta.model_copy(update={"sources": src2})})
    assert priors_caveat(m2) == ""
    line = _whatif_line(WhatIf("more_workers:workers=2", step_us=1064.0), 1000.0, m)
    assert line.startswith("no fix") and "stated priors: interference" in line
    assert "stated priors" not in _whatif_line(WhatIf("pin_memory", step_us=900.0), 1000.0, m)
    assert corun_path("loader.num_workers") and not corun_path("loader.batch_size")
