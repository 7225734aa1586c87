"""The what-if planner: pure ``StepModel -> StepModel`` transforms declared in YAML/JSON,
named fixes, predictions with intervals, sweeps, simulated Amdahl ceilings, the greedy fix
chain, and validation against re-measured runs. Imports only ``models`` and ``simcore``.

Stable interfaces (times in µs):

* ``transforms.apply_ops(model, ops) -> StepModel``: apply operations in order (pure).
  ``op_text.parse_set("loader.num_workers=4") -> SetOp``; also ``parse_scale``,
  ``parse_remove``, ``parse_fix``, ``load_scenario(path) -> Scenario`` (``.ops``).
* ``predict.predict(model, ops, steps=30, warmup=20, seed=0, intervals=False|int, jobs=1)
  -> Prediction`` with ``mean_step_us``, ``median_step_us``, ``p10/p50/p90_step_us`` (when
  asked), ``bottleneck``, ``bottleneck_label``, ``summary``.
* ``validate.validate(prediction, measured_step_us, measured_bottleneck, label)
  -> LedgerRecord``; ``append_ledger(path, record)``, ``read_ledger(path)``,
  ``summarize_ledger(records) -> LedgerSummary``.
* ``sweep.sweep(model, {path: values}, base=...) -> SweepResult`` (``parse_axis`` for
  ``PATH=V1,V2``); ``ceiling.ceilings(model, base) -> CeilingReport``;
  ``plan.plan(model, base) -> Plan``; ``fixes.FIXES`` (name → Fix, with ``changes``).
* ``options.operations(ops, scenario=, set=, scale=, remove=, fix=) -> list[Operation]``: the
  operations as the CLI and the Python API take them; ``options.sweep_grid(axes)``.
* ``REFERENCE``: the folder of reference models and scenarios (``case_study.yaml``).
"""
from pathlib import Path

from stepsim.scenarios.ceiling import CeilingReport, CeilingRow, ceilings
from stepsim.scenarios.fixes import FIXES, Fix, get_fix
from stepsim.scenarios.plan import Move, Plan, plan
from stepsim.scenarios.predict import Prediction, predict
from stepsim.scenarios.select import Selector
from stepsim.scenarios.sweep import Knee, SweepPoint, SweepResult, parse_axis, sweep
from stepsim.scenarios.transforms import (FixOp, Operation, RemoveOp, ScaleOp, Scenario, SetOp,
                                          apply_ops, describe_ops)
from stepsim.scenarios.op_text import (load_scenario, parse_fix, parse_remove, parse_scale,
                                       parse_selector, parse_set)
from stepsim.scenarios.validate import (LedgerRecord, LedgerSummary, append_ledger, read_ledger,
                                summarize_ledger, validate)

REFERENCE = Path(__file__).parent / "reference"

__all__ = [
    "apply_ops", "describe_ops", "Operation", "SetOp", "ScaleOp", "RemoveOp", "FixOp",
    "Scenario", "load_scenario", "parse_set", "parse_scale", "parse_remove", "parse_fix",
    "parse_selector", "Selector",
    "FIXES", "Fix", "get_fix",
    "predict", "Prediction",
    "sweep", "parse_axis", "SweepResult", "SweepPoint", "Knee",
    "ceilings", "CeilingReport", "CeilingRow",
    "plan", "Plan", "Move",
    "validate", "LedgerRecord", "LedgerSummary", "append_ledger", "read_ledger",
    "summarize_ledger", "REFERENCE",
]
