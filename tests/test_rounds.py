"""``scenarios.rounds.drive``: generators' rounds run side by side, one ``run_many`` call a
round, each generator given its own results in order; errors raised in the generators' order,
as running them one after the other would."""
from __future__ import annotations

import pytest

import stepsim.scenarios.rounds as rounds
from stepsim.scenarios.rounds import drive, got
from stepsim.simcore.errors import ModelError


def square(x: int) -> int:
    return x * x


def fails(text: str) -> None:
    raise ModelError(text)


def squares(xs: list[list[int]], log: list):
    """Rounds of squares; returns every round's results."""
    out = []
    for r in xs:
        res = yield [(square, (x,), 1) for x in r]
        log.append(r)
        out.append([got(v) for v in res])
    return out


def failing(after: list[int], text: str):
    yield [(square, (x,), 0) for x in after]
    got((yield [(fails, (text,), 0)])[0])
    return "never"


@pytest.mark.parametrize("jobs", [1, 2])
def test_rounds_side_by_side(jobs, monkeypatch):
    calls = []
    real = rounds.run_many
    monkeypatch.setattr(rounds, "run_many", lambda fn, items, **kw: (
        calls.append(len(items)), real(fn, items, **kw))[1])
    log: list = []
    a = squares([[1, 2], [3]], log)
    b = squares([[4], [5, 6], [7]], log)
    assert drive([a, b], jobs) == [[[1, 4], [9]], [[16], [25, 36], [49]]]
    assert calls == [3, 3, 1]   # a round of both, then of both, then b's last alone


def test_progress_counts_draws_of_a_round():
    seen = []
    drive([squares([[1, 2, 3]], [])], 1, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_first_generators_error_wins():
    log: list = []
    # the second fails in its second round; the first fails later: the first's error is
    # raised, as running them one after the other would
    with pytest.raises(ModelError, match="first"):
        drive([failing([1, 2, 3], "first"), failing([], "second"), squares([[1]], log)], 1)
    # the first finishes; the second's error is raised, the third is not run past it
    log.clear()
    with pytest.raises(ModelError, match="second"):
        drive([squares([[1], [2], [3]], log), failing([], "second"), squares([[9]] * 3, log)],
              1)
    assert [1] in log and [3] in log and log.count([9]) <= 1
