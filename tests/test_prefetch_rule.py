"""``prefetch_factor`` without workers (issue 9 §4): PyTorch's DataLoader raises ValueError for
``num_workers=0`` with a ``prefetch_factor``, so every way of reaching that state through what-ifs
follows it: an op that sets one for a loader left without workers is refused (one line, exit
2); a model's own prefetch_factor goes with its workers when ``--set loader.num_workers=0``
takes them, with a warning; a sweep leaves out the grid points PyTorch refuses."""
from __future__ import annotations

import json

import pytest
from torch.utils.data import DataLoader

from stepsim.models.params import load_model
from stepsim.scenarios.plan import plan
from stepsim.scenarios.sweep import sweep
from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.transforms import (FixOp, PrefetchWithoutWorkers, SetOp, apply_ops,
                                          apply_with_notes)
from tests.conftest import REPO
from tests.test_quirks import cli, one_line_error

A = REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"   # 1 worker, prefetch_factor 4
FAST = ("--draws", "0", "--steps", "5", "--warmup", "2", "--jobs", "1")
FAST_KW = {"steps": 5, "warmup": 2, "jobs": 1}


def _loader_kwargs(model) -> dict:
    """The DataLoader arguments a model stands for (prefetch_factor 2 without workers is
    PyTorch's None, the model's default; any other is passed as it is)."""
    lo = model.loader
    pf = lo.prefetch_factor
    return {"num_workers": lo.num_workers,
            "prefetch_factor": None if lo.num_workers == 0 and pf == 2 else pf}


def test_pytorch_refuses_prefetch_without_workers():
    """The rule as torch 2.13 states it (dataloader.py), which the what-ifs follow."""
    with pytest.raises(ValueError, match="prefetch_factor option could only be specified"):
        DataLoader(range(4), num_workers=0, prefetch_factor=4)
    assert DataLoader(range(4), num_workers=0, prefetch_factor=None).prefetch_factor is None


def test_setting_no_workers_drops_the_models_prefetch_factor_and_says_so(tmp_path):
    model = load_model(A)
    assert (model.loader.num_workers, model.loader.prefetch_factor) == (1, 4)
    ops = [SetOp(path="loader.num_workers", value=0)]
    out = apply_ops(model, ops)
    assert (out.loader.num_workers, out.loader.prefetch_factor) == (0, 2)
    DataLoader(range(4), **_loader_kwargs(out))             # PyTorch accepts what it stands for
    (note,) = [c for c in caveats(model, ops) if "prefetch_factor" in c]
    assert "prefetch_factor=4 is dropped with the workers" in note
    assert model.loader.prefetch_factor == 4                 # pure: the input is unchanged
    # the CLI: exit 0, the warning, and a saved model that loads
    rc, err, _ = cli("whatif", A, "--set", "loader.num_workers=0", *FAST,
                     "--save-model", tmp_path / "nw0.json")
    assert rc == 0 and "warning: loader.num_workers=0: prefetch_factor=4 is dropped" in err
    assert load_model(tmp_path / "nw0.json").loader.prefetch_factor == 2
    # gone with the workers, it stays gone when they return (PyTorch's default, 2)
    again = ops + [SetOp(path="loader.num_workers", value=2)]
    assert apply_ops(model, again).loader.prefetch_factor == 2
    assert any("is dropped" in c for c in caveats(model, again))
    # set explicitly to the default (PyTorch's None) at no workers: nothing is dropped
    assert not apply_with_notes(model, ops + [SetOp(path="loader.prefetch_factor",
                                                    value=2)])[1]


@pytest.mark.parametrize("ops", [
    [("set", "loader.num_workers=0"), ("set", "loader.prefetch_factor=4")],
    [("set", "loader.prefetch_factor=8"), ("set", "loader.num_workers=0")],
    [("fix", "prefetch_factor:prefetch_factor=8"), ("set", "loader.num_workers=0")],
])
def test_an_op_that_sets_prefetch_without_workers_is_refused_in_any_order(ops):
    model = load_model(A)
    todo = [SetOp(path=v.split("=")[0], value=int(v.split("=")[1])) if k == "set"
            else FixOp(name="prefetch_factor", args={"prefetch_factor": 8}) for k, v in ops]
    with pytest.raises(PrefetchWithoutWorkers, match="PyTorch's DataLoader raises ValueError"):
        apply_ops(model, todo)
    args = [a for k, v in ops for a in (f"--{k}", v)]
    one_line_error(*cli("whatif", A, *args, *FAST)[:2], "with loader.num_workers=0",
                   "PyTorch's DataLoader raises ValueError")


def test_prefetch_on_a_model_without_workers_is_refused_and_workers_first_is_not(tmp_path):
    rc, _, _ = cli("whatif", A, "--set", "loader.num_workers=0", *FAST,
                   "--save-model", tmp_path / "nw0.json")
    assert rc == 0
    one_line_error(*cli("whatif", tmp_path / "nw0.json", "--set", "loader.prefetch_factor=4",
                        *FAST)[:2], "set loader.prefetch_factor=4 with loader.num_workers=0")
    # the order of the ops does not matter, only where they end: workers, then prefetch
    rc, err, out = cli("whatif", tmp_path / "nw0.json", "--set", "loader.prefetch_factor=4",
                       "--set", "loader.num_workers=2", *FAST, "--save-model", tmp_path / "w2.json")
    assert rc == 0, err
    assert load_model(tmp_path / "w2.json").loader.prefetch_factor == 4
    # --fix prefetch_factor says it does not apply without workers
    one_line_error(*cli("whatif", tmp_path / "nw0.json", "--fix", "prefetch_factor",
                        *FAST)[:2], "num_workers is 0")


def test_a_sweep_leaves_out_the_points_pytorch_refuses():
    model = load_model(A)
    r = sweep(model, {"loader.num_workers": [0, 1, 2], "loader.prefetch_factor": [2, 4]},
              **FAST_KW)
    assert [tuple(p.values.values()) for p in r.points] == [(0, 2), (1, 2), (1, 4), (2, 2),
                                                            (2, 4)]
    (note,) = r.notes                 # (0, 2) sets the default: nothing dropped there
    assert note.startswith("1 grid point(s) left out") and \
        "loader.num_workers=0, loader.prefetch_factor=4" in note
    # one axis of workers on a model with a prefetch_factor: point 0 drops it, said once
    r = sweep(model, {"loader.num_workers": [0, 2]}, **FAST_KW)
    assert len(r.points) == 2 and len(r.notes) == 1 and "prefetch_factor=4 is dropped" in r.notes[0]
    assert r.points[0].prediction.model.loader.prefetch_factor == 2
    assert r.points[1].prediction.model.loader.prefetch_factor == 4
    # every point refused: the sweep is, in one line
    nw0 = apply_ops(model, [SetOp(path="loader.num_workers", value=0)])
    with pytest.raises(PrefetchWithoutWorkers):
        sweep(nw0, {"loader.prefetch_factor": [4, 8]}, **FAST_KW)


def test_the_sweep_cli_warns_and_refuses_in_one_line(tmp_path):
    rc, err, out = cli("sweep", A, "loader.num_workers=0,1", "loader.prefetch_factor=2,4", *FAST,
                       "--json")
    assert rc == 0, err
    assert "warning: 1 grid point(s) left out, which PyTorch's DataLoader refuses" in err
    assert len(json.loads(out)["points"]) == 3
    cli("whatif", A, "--set", "loader.num_workers=0", *FAST, "--save-model", tmp_path / "m.json")
    one_line_error(*cli("sweep", tmp_path / "m.json", "loader.prefetch_factor=4,8", *FAST)[:2],
                   "with loader.num_workers=0: PyTorch's DataLoader raises ValueError")


def test_a_plan_from_no_workers_never_proposes_a_prefetch_factor():
    """The plan's chain from ``num_workers=0`` (the model's prefetch_factor dropped) stays a
    DataLoader PyTorch accepts at every move: the prefetch_factor fix does not apply without
    workers."""
    model = load_model(A)
    p = plan(model, [SetOp(path="loader.num_workers", value=0)], draws=0, max_moves=3,
             **FAST_KW)
    assert p.baseline.model.loader.prefetch_factor == 2 and p.moves
    for m in [p.baseline.model, *(mv.prediction.model for mv in p.moves)]:
        DataLoader(range(4), **_loader_kwargs(m))
    tried = dict(p.moves[0].tried)
    assert [v for k, v in tried.items() if "prefetch_factor" in k] in ([], [None] * sum(
        "prefetch_factor" in k for k in tried))
