"""A what-if operation given to the API in a form its keyword does not take (``scale=(0.5,)``,
``set=5``) is an ArgumentError naming the keyword and what it takes, not a raw TypeError from
unpacking; the forms it takes still give their operations."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.limits import ArgumentError
from stepsim.scenarios.transforms import FixOp, ScaleOp, SetOp


@pytest.mark.parametrize("kw", [
    {"scale": (0.5,)}, {"scale": 0.5}, {"scale": [(0.5,)]}, {"scale": (0.5, "a", "b")},
    {"scale": "0.5"}, {"scale": (0.5, 3)}, {"scale": (True, "category=gemm")},
    {"set": 5}, {"set": [("a",)]}, {"set": {3: 4}},
    {"remove": 3}, {"fix": 3}, {"fix": [None]}, {"scenario": 3},
    {"ops": [("scale", 0.5)]}, {"ops": [("set", 5)]},
])
def test_a_misshapen_operation_names_its_keyword(kw):
    kind = next(iter(kw)) if "ops" not in kw else kw["ops"][0][0]
    with pytest.raises(ArgumentError, match=f"^{kind}: .* is not .*"):
        api.operations(**kw)


def test_the_forms_each_keyword_takes():
    assert api.operations(scale=(0.5, "category=gemm")) == api.operations(
        scale=[("0.5", "category=gemm")]) == api.operations(ops=[("scale", ["0.5",
                                                                             "category=gemm"])])
    assert isinstance(api.operations(scale=(0.5, "category=gemm"))[0], ScaleOp)
    want = [SetOp(path="loader.num_workers", value=2)]
    assert api.operations(set={"loader.num_workers": 2}) == want
    assert api.operations(set=[("loader.num_workers", 2)]) == want
    assert api.operations(set="loader.num_workers=2") == want
    assert api.operations(set=("loader.num_workers=2", "loader.pin_memory=true"))[1].path \
        == "loader.pin_memory"
    assert api.operations(fix=["pin_memory"]) == [FixOp(name="pin_memory", args={})]


def test_a_verb_refuses_it():
    from tests.test_planner import cpu_model

    with pytest.raises(ArgumentError, match=r"^scale: \(0.5,\) is not a \(factor, selector\) pair"):
        api.whatif(cpu_model(), scale=(0.5,), draws=0, steps=5)


def test_a_scenario_files_fix_takes_the_fix_flags_text(tmp_path):
    """``{op: fix, name: "straggler:rank=1,ms=30"}`` (what ``--fix`` takes) in a scenario
    file is that fix with those arguments, as ``args:`` would give them (before, "unknown fix
    'straggler:rank=1,...'"); an argument in both is refused, a misspelt one named."""
    from stepsim.simcore.errors import InputError
    from stepsim.scenarios.op_text import load_scenario

    f = tmp_path / "s.yaml"
    f.write_text('ops:\n  - {op: fix, name: "straggler:rank=1,phase=forward,ms=30"}\n'
                 '  - {op: fix, name: barrier}\n')
    ops = list(load_scenario(f).ops)
    assert ops == [FixOp(name="straggler", args={"rank": 1, "phase": "forward", "ms": 30}),
                   FixOp(name="barrier")]
    f.write_text('ops:\n  - {op: fix, name: "straggler:rank=1,ms=30", args: {ms: 3}}\n')
    with pytest.raises(InputError, match="ms given in name and in args"):
        load_scenario(f)
    f.write_text('ops:\n  - {op: fix, name: "straggler:rank=1,msx=30"}\n')
    with pytest.raises(InputError, match="msx: unknown argument"):
        load_scenario(f)
