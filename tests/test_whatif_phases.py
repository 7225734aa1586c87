"""``whatif`` on a DDP model says where a what-if lands, per rank and phase (issue 12): the
phases are the DDP demo's own reader's (:mod:`models.phases`, :func:`demo.ddp_phases.
simulated_phases`), the job's step is the one ``whatif`` reports, and a model of one rank
prints no phase table."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from stepsim.demo.ddp_phases import simulated_phases
from stepsim.models.params import load_model, save_model
from stepsim.models.phases import PHASES
from stepsim.models.simulate import simulate
from stepsim.scenarios.op_text import parse_fix
from stepsim.scenarios.transforms import apply_ops
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp
from tests.test_quirks import cli
from tests.test_whatif_host_noise import _model as one_rank

DEMO_MODEL = Path(__file__).parent / "data" / "ddp_demo_model.json"
"""``model.json`` of a ``stepsim demo --ddp`` on this project's 2-core machine (2 gloo
ranks, 3 replicates: ``host.wall_runs`` wider than ``host.speed_runs``)."""

STRAGGLER = f"straggler:rank=1,phase=forward,ms={S / 1e3:g}"


def ddp(cores: int = 2):
    """:func:`tests.test_ddp_ranks.cpu_ddp` with each cpu op's category its phase, as a
    calibrated model's ops have (the phases are read off the spans' categories)."""
    m = cpu_ddp(cores)
    ops = [op.model_copy(update={"category": op.phase}) if op.kind == "cpu" else op
           for op in m.host.ops]
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


def _whatif(path: Path, *args: str) -> tuple[str, dict]:
    common = (path, *args, "--draws", "0", "--steps", "12", "--warmup", "3", "--jobs", "1")
    rc, err, text = cli("whatif", *common)
    assert rc == 0, err
    rc, err, doc = cli("whatif", *common, "--json")
    assert rc == 0, err
    return text, json.loads(doc)


def _ms_rows(doc: dict) -> dict[int, dict[str, float]]:
    return {r["rank"]: {c: r[f"{c}_ms"] for c in PHASES} for r in doc["rank_phases"]}


def test_a_straggler_shows_in_its_forward_and_in_the_other_ranks_wait(tmp_path):
    """Two ranks with a free core each (:func:`ddp`): forward F, backward B, the
    all-reduce C, optimizer O. A 40 ms straggler in rank 1's forward lands in rank 1's
    ``fwd`` (F + S) and, as arrival skew, in rank 0's ``wait`` (C + S); both steps and the
    job's become F + B + C + O + S."""
    save_model(ddp(), tmp_path / "m.json")
    text, doc = _whatif(tmp_path / "m.json", "--fix", STRAGGLER)
    ms = 1e-3
    base = {"fwd": F, "barrier": 0, "bwd": B, "bwd_cpu": B, "wait": C, "opt": O, "tail": 0,
            "post": C + O, "step": F + B + C + O}
    want = {0: {**base, "wait": C + S, "post": C + S + O, "step": F + B + C + O + S},
            1: {**base, "fwd": F + S, "step": F + B + C + O + S}}
    assert _ms_rows(doc["baseline"]) == {r: pytest.approx({c: v * ms for c, v in base.items()})
                                         for r in (0, 1)}
    assert _ms_rows(doc["scenario"]) == {r: pytest.approx({c: v * ms for c, v in p.items()})
                                         for r, p in want.items()}
    assert doc["scenario"]["mean_step_ms"] == pytest.approx((F + B + C + O + S) * ms)
    assert doc["scenario"]["over_ranks_ms"] == pytest.approx(0.0, abs=1e-9)
    flat = " ".join(text.split())
    assert "per rank and phase" in flat
    assert re.search(r"rank 0 change │ \+0\.00 │ \+0\.00 │ \+0\.00 │ \+0\.00 │ \+40\.00 │",
                     flat), flat
    assert re.search(r"rank 1 change │ \+40\.00 │", flat), flat
    assert (f"job step (each step the slowest rank's): {(F + B + C + O) * ms:.2f} -> "
            f"{(F + B + C + O + S) * ms:.2f} ms (+{S * ms:.2f})") in flat


@pytest.mark.parametrize("fix", [STRAGGLER, "barrier"])
def test_on_the_demos_model_the_rows_are_the_demos_simulated_phases(fix):
    """The demo's model: each rank's phases in ``whatif --json`` are, to the bit, those the
    DDP demo's breakdown reads off the same simulation (one reader); the job's step printed
    under the table is the step ``whatif`` reports in its first table."""
    model = load_model(DEMO_MODEL)
    text, doc = _whatif(DEMO_MODEL, "--fix", fix)
    for name, ops in (("baseline", []), ("scenario", [parse_fix(fix)])):
        sim = simulate(apply_ops(model, ops), steps=12, warmup=3, seed=0)
        demo = simulated_phases(sim)
        assert sorted(demo) == [0, 1]
        assert _ms_rows(doc[name]) == {r: {c: v for c, v in p.items()} for r, p in demo.items()}
        assert doc[name]["mean_step_ms"] == sim.mean_step_us / 1e3
        assert doc[name]["over_ranks_ms"] == pytest.approx(
            (sim.mean_step_us - float(sim.step_us.mean())) / 1e3, abs=1e-9)
    flat = " ".join(text.split())
    first = re.search(r"baseline │ (\d+\.\d) │ .*? scenario │ (\d+\.\d) │", flat)
    job = re.search(r"job step \(each step the slowest rank's\): (\d+\.\d\d) -> (\d+\.\d\d) ms",
                    flat)
    assert first and job, flat
    for shown, got in zip(first.groups(), job.groups()):
        assert float(shown) == pytest.approx(float(got), abs=0.051)
    for name in ("baseline", "scenario"):
        got = job.group(1 if name == "baseline" else 2)
        assert got == f"{doc[name]['mean_step_ms']:.2f}"
        for r, p in _ms_rows(doc[name]).items():
            assert np.isfinite(list(p.values())).all()
            assert p["post"] == pytest.approx(p["wait"] + p["opt"] + p["tail"], abs=1e-6)


def test_a_model_of_one_rank_prints_no_phase_table(tmp_path):
    save_model(one_rank(), tmp_path / "one.json")
    text, doc = _whatif(tmp_path / "one.json", "--set", "loader.num_workers=1")
    assert "per rank and phase" not in text and "job step" not in text
    assert doc["baseline"]["rank_phases"] == [] and doc["scenario"]["rank_phases"] == []
    assert doc["scenario"]["over_ranks_ms"] is None


def test_simulate_json_carries_each_ranks_phases_in_ms(tmp_path):
    """``simulate --json`` writes the summary's ``rank_phases_us`` as ``rank_phases_ms``,
    every phase of every rank converted (a dict of dicts)."""
    save_model(ddp(), tmp_path / "m.json")
    rc, err, out = cli("simulate", tmp_path / "m.json", "--json", "--steps", "8", "--warmup",
                       "3")
    assert rc == 0, err
    phases = json.loads(out)["rank_phases_ms"]
    assert phases["1"] == pytest.approx({"fwd": F / 1e3, "barrier": 0.0, "bwd": B / 1e3,
                                         "bwd_cpu": B / 1e3, "wait": C / 1e3, "opt": O / 1e3,
                                         "tail": 0.0, "post": (C + O) / 1e3,
                                         "step": (F + B + C + O) / 1e3})
