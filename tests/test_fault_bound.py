"""The re-faulted CPU of a batch-size what-if is bounded by the pages the step touches
(scenarios.batch_size.refault_at): a step cannot fault in again more pages than it touches,
and what it touches grows at most linearly with the samples, so at r times the samples the
capture's most re-faulted CPU F·r^q is at most T·r, T the CPU of faulting in every page the
step touches once (its first step's faults, measured). A drawn growth exponent at batch
100,000 pushed F·r^q past the model's 1e12 µs bound and failed the interval's draws with a
message that blamed the op (break13)."""
from __future__ import annotations

import pytest

from stepsim.calibration.page_faults import FAULT_GROWTH_EXPONENT, refault_fit
from stepsim.models.params import StepModel
from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.predict import predict
from stepsim.scenarios.transforms import SetOp, apply_ops
from stepsim.simcore.errors import NotApplicable
from tests.test_batch_size_whatif import cpu_model, mean_ms
from tests.test_page_faults import C_US, FREE, MIXED, F, _side

P_MS, T_MS, F_MS, TOUCH_MS = 40.0, 20.0, 40.0, 60.0


def _model(q: float = 1.0, rng=FAULT_GROWTH_EXPONENT, touched_ms: float = TOUCH_MS) -> StepModel:
    data = cpu_model(0, produce_ms=P_MS, train_ms=T_MS).model_dump()
    data["host"]["ops"][1].update(refault_us=F_MS * 1e3, touched_us=touched_ms * 1e3)
    data["host"].update(refault_share_range=(0.0, 1.0), refault_growth=q,
                        refault_growth_range=rng)
    return StepModel.model_validate(data)


def _batch(n: int) -> list:
    return [SetOp(path="loader.batch_size", value=n)]


@pytest.mark.parametrize("r, q", [(2.0, 1.0), (2.0, 1.5), (2.0, 2.5), (4.0, 1.2), (16.0, 2.0),
                                  (0.5, 2.5)])
def test_closed_form(r, q):
    """Batch 8 -> 8r, no workers: the re-faulted CPU is min(F·r^q, T·r) above the captured
    batch (F·r below it, which T·r bounds too, since T >= F), the touched pages' CPU × r, and
    the step r(P + T_step) + 0.5 of it."""
    fr = F_MS * (r ** q if r > 1 else r)
    want = min(fr, TOUCH_MS * r)
    got = apply_ops(_model(q), _batch(int(8 * r)))
    op = got.host.ops[1]
    assert op.refault_us == pytest.approx(want * 1e3)
    assert op.touched_us == pytest.approx(TOUCH_MS * r * 1e3)
    assert (want < fr) == (r > 1 and F_MS * r ** (q - 1) > TOUCH_MS)
    assert mean_ms(got) == pytest.approx(r * (P_MS + T_MS) + 0.5 * want, rel=1e-6)


def test_batch_100000_draws_inside_the_bound():
    """Batch 8 -> 100,000 (r = 12,500) with q drawn over 0-2.5: F·r^2.5 = 7e11 ms would pass
    the model's bound; every draw stays at most T·r = 750 s, so the interval is drawn, its
    P90 at most the point's step with every page re-faulted: r(P + T_step) + T·r."""
    r = 100_000 / 8
    pred = predict(_model(), _batch(100_000), steps=20, warmup=5, seed=0, intervals=32)
    top_ms = r * (P_MS + T_MS) + TOUCH_MS * r
    assert pred.p90_step_us is not None and pred.p90_step_us / 1e3 <= top_ms * (1 + 1e-6)
    assert pred.mean_step_us / 1e3 == pytest.approx(r * (P_MS + T_MS) + 0.5 * F_MS * r,
                                                    rel=1e-6)   # q 1: F·r below T·r
    note = [w for w in caveats(_model(), _batch(100_000)) if "page faults" in w]
    assert len(note) == 1 and "never past the pages the step touches x1.25e+04, 750000.0 ms" \
        in note[0]


def test_without_the_touched_pages_an_out_of_range_batch_is_refused_in_one_line():
    """A model calibrated before the pages were recorded (touched_us 0): a batch whose
    re-faulted CPU at the prior's top passes the bound is refused, one line naming the what-if
    and the batch sizes in range (F·(N/8)^2.5 <= 1e12 µs: N <= 8 × (1e12 / 4e4)^0.4); one
    inside it is predicted."""
    m = _model(touched_ms=0.0)
    with pytest.raises(NotApplicable) as e:
        apply_ops(m, _batch(100_000))
    top = int(8 * (1e12 / (F_MS * 1e3)) ** (1 / 2.5))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("set loader.batch_size=100000 cannot be predicted")
    assert f"(1-{top} are in range)" in msg and "q up to 2.5" in msg
    assert apply_ops(m, _batch(top)).host.ops[1].refault_us <= 1e12


def test_calibration_measures_the_pages_touched_from_the_first_step():
    """The first step faults in every page the step touches (its 3 F here): the bound, at the
    measured cost per fault; a first step that faulted fewer than a later one (pages the
    set-up had freed) is bounded by the most instead."""
    rf = refault_fit(_side(FREE, MIXED))
    assert rf.touched_faults == 3 * F
    assert rf.touched_us == pytest.approx(3 * F * C_US, rel=0.02)
    side = _side(FREE, MIXED)
    side.steps[0].minflt = 10
    assert refault_fit(side).touched_us == pytest.approx(F * C_US, rel=0.02)


@pytest.mark.parametrize("r, q, said", [
    (2.0, 1.2, "x2.3 = (N/B)^q, q 1.2"),      # F·2^1.2 = 91.9 ms < T·2 = 120 ms
    (2.0, 2.5, "x3: (N/B)^q = x5.66, bounded by the pages the step touches x2, 120.0 ms"),
    (4.0, 2.0, "x6: (N/B)^q = x16, bounded by the pages the step touches x4, 240.0 ms"),
])
def test_the_note_gives_the_bounded_factor(r, q, said):
    """The whatif note on the re-faulted CPU gives the factor the what-if applied,
    min(F·r^q, T·r) / F (T·r / F = 1.5 r here), not the unbounded r^q (x5.66 at r 2, q 2.5,
    where 3 was applied)."""
    got = apply_ops(_model(q), _batch(int(8 * r)))
    note = got.meta.notes["refault_growth"]
    assert said in note, note
    assert got.host.ops[1].refault_us == pytest.approx(F_MS * 1e3 * min(r ** q, 1.5 * r))
