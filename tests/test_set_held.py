"""A parameter the user sets (``--set``) is the user's value, not drawn: the interval holds it
and says so (scenarios.draws.uncertain_params, report.pred_text.refault_line). fresh10's
``whatif --set host.refault_share=0`` moved the point while the listing still drew the share
over 0–1."""
from __future__ import annotations

import re

import pytest

from stepsim.models.params import StepModel, save_model
from stepsim.scenarios.draws import SET_WHY, uncertain_params
from stepsim.scenarios.predict import predict
from stepsim.scenarios.transforms import SetOp
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli

FAULT_MS = 8.0


def _model() -> StepModel:
    """num_workers=0: a step makes its batch (P = 5 ms, assumed: drawn ×0.5–1.5), trains on it
    (T = 20 ms) and re-faults a share s of 8 ms (drawn 0–1): step = P + T + 8 s."""
    data = cpu_model(0, produce_ms=5, train_ms=20,
                     sources={"loader.batch_size": "measured",
                              "loader.produce": "assumed"}).model_dump()
    data["host"]["ops"][1]["refault_us"] = FAULT_MS * 1e3
    data["host"]["refault_share_range"] = (0.0, 1.0)
    return StepModel.model_validate(data)


def test_both_drawn_without_a_set():
    varied, _ = uncertain_params(_model(), ())
    assert set(varied) == {"loader.produce", "host.refault_share"}


@pytest.mark.parametrize("path,value", [("host.refault_share", 0.0),
                                        ("loader.produce.mean_us", 5000.0)])
def test_a_set_path_is_not_drawn(path, value):
    varied, skipped = uncertain_params(_model(), [SetOp(path=path, value=value)])
    drawn = path.rsplit(".mean_us", 1)[0]
    assert drawn not in varied and skipped[drawn] == SET_WHY
    assert len(varied) == 1     # the other one still is


def _interval_ms(ops) -> tuple[float, float, float, float]:
    p = predict(_model(), ops, steps=20, warmup=5, intervals=8)
    return tuple(v / 1e3 for v in (p.mean_step_us, p.p10_step_us, p.p50_step_us,
                                    p.p90_step_us))


def test_the_draws_hold_the_set_share():
    """Set s = 0 and s = 1: every draw (the same factors of P) differs by the 8 ms exactly,
    and with P set too nothing is left to draw: P10 = P50 = P90 = 5 + 20 + 8 = 33 ms."""
    at0 = _interval_ms([SetOp(path="host.refault_share", value=0.0)])
    at1 = _interval_ms([SetOp(path="host.refault_share", value=1.0)])
    assert at0[1] < at0[3]                  # P still drawn
    for a, b in zip(at0, at1):
        assert b - a == pytest.approx(FAULT_MS, abs=1e-6)
    both = _interval_ms([SetOp(path="host.refault_share", value=1.0),
                         SetOp(path="loader.produce.mean_us", value=5000.0)])
    assert both == pytest.approx((33.0,) * 4, abs=1e-6)


def test_whatif_says_the_share_is_held(tmp_path):
    save_model(_model(), tmp_path / "m.json")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--set", "host.refault_share=0",
                       "--draws", "4", "--steps", "20")
    assert rc == 0, err
    flat = re.sub(r"\s+", " ", out)
    assert "baseline: page faults: the training step holds 0.50" in flat
    assert "scenario: page faults: the training step holds 0.00" in flat
    assert flat.count("drawn 0–1 per run in the interval") == 1     # the baseline's alone
    assert "as set, held in the interval" in flat
    assert "host.refault_share x[" not in flat.split("scenario: page faults")[1]
