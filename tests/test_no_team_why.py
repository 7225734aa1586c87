"""``--fix intra_op_threads`` on a model whose training step has no parallel part says which
cause held, with its numbers, and for ranks × threads over the host's cores the fix (threads
per rank = cores ÷ ranks): fresh8's 2-rank gloo job at torch's default 2 threads a rank on 2
cores (2026-12-07) was told "one intra-op thread, or a capture whose CPU time did not exceed
its wall time"."""
from __future__ import annotations

from pathlib import Path

import pytest

from stepsim.models.params import load_model
from stepsim.scenarios.host_threads import ThreadsArgs, intra_op_threads, no_team_why
from stepsim.simcore.errors import NotApplicable

MODEL = Path(__file__).parent / "data" / "ddp_demo_model.json"
"""2 ranks on host vm, 2 cores, every host op on one thread."""


def _with_threads(threads: int | None):
    m = load_model(MODEL)
    notes = {k: v for k, v in m.meta.notes.items() if k != "intra_op_threads"}
    notes |= {} if threads is None else {"intra_op_threads": threads}
    return m.model_copy(update={"meta": m.meta.model_copy(update={"notes": notes})})


def test_oversubscribed_ranks_are_told_threads_per_rank_is_cores_over_ranks():
    with pytest.raises(NotApplicable) as e:
        intra_op_threads(_with_threads(2), ThreadsArgs(threads=1))
    said = str(e.value)
    assert "its 2 ranks ran 2 intra-op threads each" in said
    assert "2 ranks × 2 threads = 4 on host vm's 2 cores are oversubscribed" in said
    assert "threads per rank = cores ÷ ranks = 2 ÷ 2 = 1" in said
    assert "or a capture whose" not in said


def test_each_cause_is_said_alone():
    """One thread: said so, and no fix; 2 ranks × 1 thread fit 2 cores: no oversubscription;
    one process at 2 threads: its CPU time within its wall time."""
    assert no_team_why(_with_threads(None)).endswith(
        "the capture ran one intra-op thread: its thread count changes nothing the model holds")
    m = load_model(MODEL)
    wide = m.model_copy(update={"loader": m.loader.model_copy(update={"host_cores": 4})})
    wide = wide.model_copy(update={"meta": _with_threads(2).meta})
    said = no_team_why(wide)
    assert "oversubscribed" not in said and "2 intra-op threads each" in said
    one = _with_threads(2).model_copy(update={"ranks": _with_threads(2).ranks[:1]})
    assert "the step's CPU time did not exceed its wall time" in no_team_why(one)
