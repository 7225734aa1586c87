"""One answer per question (issue 10): the plan names each step's bottleneck as ``whatif`` and
``simulate`` name it (:func:`models.bottleneck.name_bottleneck`), and the largest simulated
ceiling (:mod:`scenarios.ceiling`, what the chain relieves next) under its own name.

The model: the case study after ``more_workers(workers=1)``, where the two disagree (the host's
launches hold 77 % of the critical path, so ``launch`` is the bottleneck; freeing the
host-to-device copy would shorten the step most, 1.25x, so ``h2d`` has the largest ceiling).
"""
from __future__ import annotations

import json

import pytest

from stepsim import api
from stepsim.models.params import load_model, save_model
from stepsim.scenarios import REFERENCE
from stepsim.scenarios.transforms import FixOp, apply_ops
from tests.conftest import run_cli

QUICK = ("--steps", "10", "--warmup", "3", "--seed", "0", "--jobs", "1")
KW = {"steps": 10, "warmup": 3, "seed": 0, "draws": 0, "jobs": 1}


@pytest.fixture(scope="module")
def launch_bound(tmp_path_factory):
    m = apply_ops(load_model(REFERENCE / "case_study.yaml"),
                  [FixOp(name="more_workers", args={"workers": 1})])
    path = tmp_path_factory.mktemp("plan") / "after_workers.json"
    save_model(m, path)
    return path


def test_the_model_makes_the_two_rules_disagree(launch_bound):
    c = api.ceiling(launch_bound, steps=10, warmup=3, seed=0, jobs=1).report
    assert c.baseline.bottleneck == "launch" and c.top.key == "h2d"


def test_plan_row_0_names_the_bottleneck_whatif_names(launch_bound):
    w = api.whatif(launch_bound, set=["loader.num_workers=2"], **KW)
    p = api.plan(launch_bound, **KW)
    doc = p.to_dict()
    assert doc["first_bottleneck"] == w.baseline.bottleneck == "launch"
    assert doc["first_bottleneck_label"] == w.baseline.bottleneck_label
    assert doc["first_largest_ceiling_component"] == "h2d"
    assert doc["first_largest_ceiling"] == pytest.approx(p.plan.largest_ceiling.ceiling)


def test_each_move_names_the_bottleneck_whatif_names_after_the_chain_so_far():
    case = REFERENCE / "case_study.yaml"
    r = api.plan(case, max_moves=2, **KW)
    p = r.to_dict()
    assert len(p["moves"]) == 2
    for i, mv in enumerate(p["moves"]):
        w = api.whatif(case, r.plan.ops[:i + 1], **KW)
        assert mv["next_bottleneck"] == mv["bottleneck"] == w.scenario.bottleneck
        assert mv["next_label"] == w.scenario.bottleneck_label
    # after more_workers the two rules part: launch is the bottleneck, h2d the top ceiling
    first = p["moves"][0]
    assert (first["next_bottleneck"], first["largest_ceiling_component"]) == ("launch", "h2d")


def test_cli_plan_and_whatif_agree_on_the_baseline(launch_bound):
    r = run_cli("plan", str(launch_bound), *QUICK, "--draws", "0", "--json")
    assert r.returncode == 0, r.stderr
    plan_doc = json.loads(r.stdout)
    r = run_cli("whatif", str(launch_bound), "--set", "loader.num_workers=2", *QUICK,
                "--draws", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert plan_doc["first_bottleneck"] == json.loads(r.stdout)["baseline"]["bottleneck"]
    text = run_cli("plan", str(launch_bound), *QUICK, "--draws", "0").stdout
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "(baseline)" in line)
    row0 = " ".join(lines[start:start + 2])     # a cell may wrap onto the next line
    assert "host launch" in row0 and "host-to-device" in row0
    assert "largest ceiling" in text and "bottleneck after it" not in text


def test_html_report_plan_row_0_names_both(launch_bound, tmp_path):
    out = tmp_path / "report.html"
    r = run_cli("report", str(launch_bound), *QUICK, "--draws", "0", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    plan = page[page.index("<h2>Plan</h2>"):]
    row0 = plan[plan.index("(baseline)"):plan.index("</tr>", plan.index("(baseline)"))]
    assert "host launch overhead" in row0 and "host-to-device copy (1.25×)" in row0
    assert "bottleneck after it" not in page


def test_each_plan_row_names_its_bottleneck_once():
    """A row named three components (the fix's target, the bottleneck, the largest ceiling)
    where a user looks for one bottleneck: the fix's target is the row above's next, and a
    largest ceiling that is the bottleneck is said as "same"."""
    from stepsim.report.plan_table import PLAN_COLUMNS, plan_rows

    p = api.plan(REFERENCE / "case_study.yaml", max_moves=3, **KW).plan
    rows = plan_rows(p)
    assert PLAN_COLUMNS[-1] == "next: largest ceiling"
    labels = {r.label for r in p.final.rows} | {m.relieves.label for m in p.moves} | {
        p.baseline.bottleneck_label} | {m.prediction.bottleneck_label for m in p.moves}
    for row in rows:
        fix, neck, nxt = row[1], row[5], row[6]
        assert " -> " not in fix            # each move relieves the row above's next
        assert sum(lab in " ".join((fix, neck, nxt)) for lab in labels) <= 2, row
        assert neck not in nxt
    assert rows[0][6] == "same (1.33x)"   # input: the bottleneck and the largest ceiling
    assert rows[1][5] == "host launch overhead" and rows[1][6].startswith("host-to-device")
