"""diagnose says a leaf's arithmetic once: a fix and the look-ahead pair that prices it beside
intra_op_threads (scenarios.diagnose: both priced with the leaf's arithmetic) printed it twice,
word for word, under one gap in a user's diagnosis (a 2-thread CNN, 2026-12-05)."""
from __future__ import annotations

from dataclasses import replace

from stepsim import api
from stepsim.report.diagnose import print_diagnosis
from tests.test_host_physics import host_model


def test_each_leaf_says_its_arithmetic_once(capsys):
    m = host_model(0, 2, 30.0, 10.0, threads=2, parallel=0.9)
    d = api.diagnose(m, steps=20, warmup=5, draws=0, jobs=1).diagnosis
    i, leaf = next((i, f) for i, f in enumerate(d.findings) if f.whatifs)
    w = leaf.whatifs[0]
    assert w.arithmetic
    pair = replace(w, fix=f"{w.fix} --fix intra_op_threads:threads=1")   # the look-ahead's
    other = replace(w, fix="pin_memory", arithmetic="another leaf's sum")
    findings = list(d.findings)
    findings[i] = replace(leaf, whatifs=[w, pair, other])
    print_diagnosis(replace(d, findings=findings))
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines()]
    assert lines.count(f"arithmetic: {w.arithmetic}") == 1
    assert lines.count("arithmetic: another leaf's sum") == 1
    # each what-if keeps its own line
    assert sum(ln.startswith("stepsim whatif MODEL --fix") for ln in lines) >= 2
