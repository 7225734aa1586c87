"""The two structural transforms, ``scale`` and ``remove``, on what a selector picks.

Both are pure ``StepModel -> StepModel`` functions: they work on a dump of the model and
validate the result, so the input is never changed and the output is a valid StepModel.

``scale(model, selector, factor)`` multiplies durations by ``factor`` (≥ 0):

* device task: ``dur_us`` (and ``breakdown_us``); with a category filter on a coarsened task,
  only the matching parts of ``breakdown_us`` (``dur_us`` becomes their new sum). A collective
  priced by the cost model (``comm.bus_gbps`` set and ``bytes`` known) has its ``bytes``
  scaled instead, since its duration is computed from them (``comm.latency_us`` is kept);
* host op: ``dur_us`` (and ``samples_us``);
* loader: ``produce``, ``produce_by_worker`` (every sample) and ``worker_handover_us``,
  ``pin`` (``pin_gbps`` divided by the factor; a factor of 0, or so small the rate overflows, sets
  ``batch_bytes`` to 0: nothing to pin), ``unpickle_us``;
* rank skew: ``delay_us``, ``phase_extra_us`` and ``phase_wall_us``.

``remove(model, selector)`` takes picked work out of the step:

* device task: deleted. Tasks that waited for it wait for what it waited for; its launch op
  goes with it (removing a kernel removes its launch); a sync on it waits instead for the task
  before it on its stream (if none, only the call's own CPU cost is kept); a gradient made
  ready by it is ready after that same task. With a category filter on a coarsened task,
  only those parts of ``breakdown_us`` are deleted (the task goes when nothing is left);
* host op: ``cpu`` and ``sync`` ops are deleted; a ``launch`` op cannot go without its task,
  so it is made free (``dur_us`` = 0);
* loader cost and rank skew: set to zero (as ``scale`` by 0).
"""
from __future__ import annotations

import math

from stepsim.models.params import DurationSpec, StepModel
from stepsim.scenarios.paths import validated
from stepsim.scenarios.select import Selection, Selector, select
from stepsim.simcore.errors import ModelError


def _selection(model: StepModel, sel: Selector, what: str) -> Selection:
    picked = select(model, sel)
    if picked.empty():
        raise ModelError(f"{what}: selector {sel.describe()} selects nothing in this model")
    return picked


def _scale_task(t: dict, cats: frozenset[str] | None, f: float, cost_model: bool) -> None:
    if t["kind"] == "collective" and cost_model and t.get("bytes") is not None:
        b = t["bytes"] * f     # past a double (x1e308): left inf, which validation refuses
        t["bytes"] = int(round(b)) if math.isfinite(b) else b
    if cats is None:
        t["dur_us"] *= f
        t["breakdown_us"] = {k: v * f for k, v in t["breakdown_us"].items()}
    elif t["breakdown_us"]:
        t["breakdown_us"] = {k: v * f if k in cats else v for k, v in t["breakdown_us"].items()}
        t["dur_us"] = sum(t["breakdown_us"].values())


def _scaled_spec(spec: dict, f: float) -> dict:
    """``spec`` (a DurationSpec's dict) with every value × ``f``, not validated: the
    transform's :func:`validated` names a value past its bound as the what-if's (a batch of 10⁸
    samples raised pydantic's error from here)."""
    d = DurationSpec.model_validate(spec).model_dump()
    d["mean_us"] *= f
    if d["samples_us"] is not None:
        d["samples_us"] = [v * f for v in d["samples_us"]]
    return d


def _scale_host_op(op: dict, f: float) -> None:
    op["dur_us"] *= f
    if op["samples_us"] is not None:
        op["samples_us"] = [v * f for v in op["samples_us"]]


def _scale_loader(ld: dict, parts: set[str], f: float) -> None:
    if "produce" in parts:
        ld["produce"] = _scaled_spec(ld["produce"], f)
        if ld["produce_by_worker"] is not None:
            ld["produce_by_worker"] = [_scaled_spec(d, f) for d in ld["produce_by_worker"]]
        ld["worker_handover_us"] *= f     # a worker's own work per batch, beside producing it
    if "pin" in parts:
        if f == 0 or not math.isfinite(ld["pin_gbps"] / f):
            ld["batch_bytes"] = 0
        else:
            ld["pin_gbps"] /= f
    if "unpickle" in parts:
        ld["unpickle_us"] *= f


def _scale_ranks(data: dict, idx: list[int], phases, f: float) -> None:
    for i in idx:
        r = data["ranks"][i]
        if phases is None:
            r["delay_us"] *= f
        for key in ("phase_extra_us", "phase_wall_us"):
            picked = {p for p in r[key] if phases is None or p in phases}
            r[key] = {p: v * f if p in picked else v for p, v in r[key].items()
                      if p not in picked or f > 0}


def scale(model: StepModel, sel: Selector, factor: float) -> StepModel:
    """Durations of what ``sel`` picks, multiplied by ``factor`` (see the module docstring).

    Raises:
        ModelError: a negative factor, a selector that picks nothing, or an invalid result.
    """
    what = f"scale {sel.describe()} x{factor:g}"
    if not factor >= 0:
        raise ModelError(f"{what}: factor must be >= 0, got {factor!r}")
    picked = _selection(model, sel, what)
    data = model.model_dump()
    cost_model = model.comm.bus_gbps is not None
    for ts in data["device"]["streams"].values():
        for t in ts:
            if t["id"] in picked.device:
                _scale_task(t, picked.device[t["id"]], factor, cost_model)
    for i in picked.host:
        _scale_host_op(data["host"]["ops"][i], factor)
    _scale_loader(data["loader"], picked.loader, factor)
    _scale_ranks(data, picked.ranks, sel.phase, factor)
    return validated(data, what)


def remove(model: StepModel, sel: Selector) -> StepModel:
    """The model without what ``sel`` picks (see the module docstring for how references to
    removed tasks are rewired).

    Raises:
        ModelError: a selector that picks nothing, or an invalid result.
    """
    what = f"remove {sel.describe()}"
    picked = _selection(model, sel, what)
    data = model.model_dump()
    drop_host = {i for i in picked.host if data["host"]["ops"][i]["kind"] != "launch"}
    for i in picked.host:
        _scale_host_op(data["host"]["ops"][i], 0.0)
    data["host"]["ops"] = [op for i, op in enumerate(data["host"]["ops"]) if i not in drop_host]
    gone: set[str] = set()
    for ts in data["device"]["streams"].values():
        for t in ts:
            if t["id"] not in picked.device:
                continue
            cats = picked.device[t["id"]]
            if cats is None:
                gone.add(t["id"])
                continue
            left = {k: v for k, v in t["breakdown_us"].items() if k not in cats}
            t["breakdown_us"] = left
            t["dur_us"] = sum(left.values())
            if t["category"] in cats:
                t["category"] = max(left, key=left.get)
    _drop_tasks(data, gone)
    _scale_loader(data["loader"], picked.loader, 0.0)
    _scale_ranks(data, picked.ranks, sel.phase, 0.0)
    return validated(data, what)


def _drop_tasks(data: dict, gone: set[str]) -> None:
    """Delete tasks ``gone`` from a dumped model and rewire every reference to them."""
    if not gone:
        return
    streams = data["device"]["streams"]
    waits = {t["id"]: t["waits"] for ts in streams.values() for t in ts}
    before: dict[str, str | None] = {}
    for ts in streams.values():
        prev = None
        for t in ts:
            before[t["id"]] = prev
            if t["id"] not in gone:
                prev = t["id"]

    def resolved(ws: list[str], seen: frozenset = frozenset()) -> list[str]:
        out: list[str] = []
        for w in ws:
            for r in (resolved(waits[w], seen | {w}) if w in gone and w not in seen else [w]):
                if r not in out and r not in gone:
                    out.append(r)
        return out

    for s, ts in streams.items():
        streams[s] = [t for t in ts if t["id"] not in gone]
        for t in streams[s]:
            t["waits"] = resolved(t["waits"])
            t["prev_waits"] = resolved(t["prev_waits"])
    ops = []
    for op in data["host"]["ops"]:
        if op["task"] in gone:
            if op["kind"] == "launch":
                continue
            op["task"] = before[op["task"]]
            if op["task"] is None:   # nothing left to wait for: keep the call's own cost
                op.update(kind="cpu", category="sync")
        ops.append(op)
    data["host"]["ops"] = ops
    for g in data["comm"]["grad_params"]:
        if g["ready_task"] in gone:
            g["ready_task"] = before[g["ready_task"]]
