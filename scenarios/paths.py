"""Dotted paths into a :class:`models.params.StepModel`, the addresses that ``set``, sweeps and
prediction intervals use.

Grammar: segments separated by ``.``; a segment may be bracketed to hold dots
(``device.tasks[fwd.0].dur_us``). At each step:

* in a pydantic model the segment names a field (``loader``, ``num_workers``);
  ``device.tasks.<id>`` is a shortcut for the task of that id on whichever stream holds it;
* in a list it picks an element by its key: ``rank`` for ranks (``ranks.1`` is rank 1), ``id``
  for device tasks, else a unique ``name``; failing that, an index from 0 (``host.ops.3``);
* in a free dict (``meta.notes``, ``ranks.0.phase_extra_us``) it is a key; the last segment
  may be a new key.

:func:`resolve` turns a path into concrete keys and checks it; :func:`set_value` and
:func:`get_value` use it. Both are pure: the model is never changed.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ValidationError

from stepsim.models.param_base import error_parts
from stepsim.models.params import DeviceParams, DurationSpec, StepModel
from stepsim.simcore.errors import ModelError

_SEG = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")
Key = str | int


def split_path(path: str) -> list[str]:
    """The segments of a dotted path.

    Raises:
        ModelError: an empty path or an empty segment.
    """
    if not path or not path.strip():
        raise ModelError("empty parameter path")
    segs: list[str] = []
    pos = 0
    for m in _SEG.finditer(path):
        between = path[pos:m.start()]
        if between not in ("", "."):
            raise ModelError(f"bad parameter path {path!r} near {between!r}")
        segs.append(m.group(1) if m.group(1) is not None else m.group(2))
        pos = m.end()
    if pos != len(path) or any(s == "" for s in segs):
        raise ModelError(f"bad parameter path {path!r}")
    return segs


def _list_index(items: list, seg: str, where: str) -> int:
    if items and isinstance(items[0], BaseModel):
        for key in ("rank", "id"):
            if hasattr(items[0], key):
                for i, it in enumerate(items):
                    if str(getattr(it, key)) == seg:
                        return i
                if key == "rank":
                    raise ModelError(f"{where}: no rank {seg!r} (ranks: "
                                     f"{', '.join(str(r.rank) for r in items)})")
        if hasattr(items[0], "name"):
            hits = [i for i, it in enumerate(items) if it.name == seg]
            if len(hits) > 1:
                raise ModelError(f"{where}: name {seg!r} is ambiguous ({len(hits)} items); "
                                 f"use an index")
            if hits:
                return hits[0]
    try:
        i = int(seg)
    except ValueError:
        raise ModelError(f"{where}: no item {seg!r}") from None
    if not 0 <= i < len(items):   # -1 would silently pick the last item
        raise ModelError(f"{where}: index {i} out of range (list of {len(items)}, indices from 0)")
    return i


def resolve(model: StepModel, path: str, allow_new_key: bool = False) -> tuple[list[Key], Any]:
    """Concrete keys for ``path`` and the value there (``None`` for a new dict key).

    Args:
        allow_new_key: whether the last segment may name a key a free dict does not hold yet.

    Raises:
        ModelError: naming the first segment that does not exist.
    """
    segs = split_path(path)
    node: Any = model
    keys: list[Key] = []
    i = 0
    while i < len(segs):
        seg = segs[i]
        where = ".".join(segs[:i]) or "(model)"
        if isinstance(node, DeviceParams) and seg == "tasks":
            if i + 1 >= len(segs):
                raise ModelError(f"{path!r}: device.tasks needs a task id after it")
            tid = segs[i + 1]
            hit = next(((s, j, t) for s, ts in node.streams.items() for j, t in enumerate(ts)
                        if t.id == tid), None)
            if hit is None:
                raise ModelError(f"{path!r}: no device task with id {tid!r}")
            keys += ["streams", hit[0], hit[1]]
            node = hit[2]
            i += 2
            continue
        if isinstance(node, BaseModel):
            fields = type(node).model_fields
            if seg not in fields:
                raise ModelError(f"unknown parameter path {path!r}: {type(node).__name__} at "
                                 f"{where} has no field {seg!r}{_did_you_mean(node, seg, segs[:i])}"
                                 f" (fields: {', '.join(fields)})")
            keys.append(seg)
            node = getattr(node, seg)
        elif isinstance(node, list):
            j = _list_index(node, seg, f"{path!r} at {where}")
            keys.append(j)
            node = node[j]
        elif isinstance(node, dict):
            if seg not in node:
                if allow_new_key and i == len(segs) - 1:
                    keys.append(seg)
                    return keys, None
                raise ModelError(f"unknown parameter path {path!r}: {where} has no key {seg!r}"
                                 f" (keys: {', '.join(map(str, node)) or 'none'})")
            keys.append(seg)
            node = node[seg]
        else:
            raise ModelError(f"unknown parameter path {path!r}: {where} is a "
                             f"{type(node).__name__} value, it has no {seg!r}")
        i += 1
    return keys, node


def _did_you_mean(node: BaseModel, seg: str, before: list[str]) -> str:
    """``"; did you mean 'loader.num_workers'?"`` for a field ``seg`` that ``node`` lacks: a
    field of that name one section down (``num_workers`` given at the top), else a close
    spelling of one of its own fields (``loader.num_worker``); empty when neither."""
    import difflib

    fields = type(node).model_fields
    down = [f"{name}.{seg}" for name in fields
            if isinstance(getattr(node, name, None), BaseModel)
            and seg in type(getattr(node, name)).model_fields]
    near = down or difflib.get_close_matches(seg, list(fields), n=1, cutoff=0.8)
    return f"; did you mean {'.'.join(before + near[:1])!r}?" if near else ""


def get_value(model: StepModel, path: str) -> Any:
    """The value at ``path`` (a pydantic object, list, dict or scalar; not a copy).

    Raises:
        ModelError: the path does not exist.
    """
    return resolve(model, path)[1]


def telling_error(e: ValidationError) -> dict:
    """The most telling of a validation's errors: an unknown key or op, else the first."""
    errs = e.errors()
    return next((x for x in errs if x["type"] in ("extra_forbidden", "union_tag_invalid")),
                errs[0])


def validated(data: dict, what: str) -> StepModel:
    """Build a StepModel from a plain dict, turning a validation error into a ModelError that
    names the first bad field and says which operation produced it."""
    try:
        return StepModel.model_validate(data)
    except ValidationError as e:
        where, msg = error_parts(telling_error(e))
        loc = ".".join(str(x) for x in where) or "(model)"
        raise ModelError(f"{what}: gives an invalid model: {loc}: {msg}") from None


def set_value(model: StepModel, path: str, value: Any) -> StepModel:
    """A copy of ``model`` with ``value`` at ``path``; the input is not changed.

    Two settings keep the model consistent: setting ``mean_us`` of a duration that holds
    ``samples_us`` rescales the samples to the new mean (the shape of the distribution is
    kept); setting ``loader.num_workers`` when ``loader.produce_by_worker`` is given trims that
    list or extends it with ``loader.produce`` for the new workers.

    Raises:
        ModelError: unknown path, or a value the model rejects (the message names the field).
    """
    keys, node = resolve(model, path, allow_new_key=True)
    _keeps_fields(node, value, path)
    data = model.model_dump()
    parent = _walk(data, keys[:-1])
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if keys[-1] == "mean_us" and isinstance(_walk(model, keys[:-1]), DurationSpec):
        if parent.get("samples_us") and isinstance(value, (int, float)) and parent["mean_us"] > 0:
            parent["samples_us"] = [v * value / parent["mean_us"] for v in parent["samples_us"]]
    if keys == ["loader", "num_workers"] and parent["produce_by_worker"] is not None \
            and isinstance(value, int) and value >= 0:
        per = parent["produce_by_worker"][:value]
        parent["produce_by_worker"] = per + [parent["produce"]] * (value - len(per))
    parent[keys[-1]] = value
    return validated(data, f"set {path}={value!r}")


def replaced(model: StepModel, path: str, value: Any) -> StepModel:
    """:func:`set_value` without a model-wide dump and validation: a copy of ``model`` that
    shares every part off ``path``, the field set by validated assignment on a copy of the
    model that holds it (its own checks run), then the model-wide checks (references between
    tasks, ops and ranks) run on the result. A path through a free dict, a captured window's
    values, and the settings :func:`set_value` keeps consistent go through :func:`set_value`.

    Raises:
        ModelError: as :func:`set_value`.
    """
    keys, node = resolve(model, path, allow_new_key=True)
    _keeps_fields(node, value, path)
    nodes = [model]
    for k in keys[:-1]:
        nodes.append(getattr(nodes[-1], k) if isinstance(nodes[-1], BaseModel) else nodes[-1][k])
    holder = nodes[-1]
    if (not isinstance(holder, BaseModel) or keys[-1] == "mean_us" or len(keys) < 2
            or keys == ["loader", "num_workers"] and model.loader.produce_by_worker is not None
            or any(isinstance(n, dict) for n in nodes)
            or any(isinstance(k, str) and "replay" in k for k in keys)):
        return set_value(model, path, value)
    new = holder.model_copy()
    try:
        setattr(new, keys[-1], _fresh(value))
    except ValidationError as e:
        where, msg = error_parts(telling_error(e))
        loc = ".".join(str(x) for x in [*keys[:-1], *where])
        raise ModelError(f"set {path}={value!r}: gives an invalid model: {loc}: {msg}") from None
    for node, k in zip(reversed(nodes[:-1]), reversed(keys[:-1])):
        if isinstance(node, BaseModel):
            new = node.model_copy(update={k: new})
        else:
            new = node[:k] + [new] + node[k + 1:]
    if not _holds_refs(keys):
        return new
    try:
        StepModel._check_refs(new)
    except ValueError as e:
        raise ModelError(f"set {path}={value!r}: gives an invalid model: (model): {e}") from None
    return new


def _keeps_fields(node: Any, value: Any, path: str) -> None:
    """Refuse a mapping ``value`` set on a section ``node`` that leaves out a field the section
    holds at other than its default: the mapping replaces the whole section, so that field
    would silently go back to its default (``--set loader={}`` dropped every calibrated
    loader figure and predicted 44 against 78 ms). A :class:`DurationSpec` is a value, not a
    section: a mapping gives a whole new distribution (``{mean_us: 10, samples_us: [5, 15]}``)."""
    if not (isinstance(node, BaseModel) and isinstance(value, dict)) \
            or isinstance(node, DurationSpec):
        return
    lost = [n for n, f in type(node).model_fields.items()
            if n not in value and not f.is_required()
            and getattr(node, n) != f.get_default(call_default_factory=True)]
    if lost:
        raise ModelError(f"set {path}={value!r}: a mapping replaces the whole "
                         f"{type(node).__name__}, and this one leaves out {', '.join(lost)}, "
                         f"which the model sets (they would go back to their defaults): set "
                         f"each field on its own ({path}.FIELD=VALUE), or give them all")


def _holds_refs(keys: list[Key]) -> bool:
    """Whether a value at ``keys`` can take part in the model-wide checks
    (``StepModel._check_refs`` reads only the device's streams, the host's ops, the ranks and
    the captured window): a scalar elsewhere (``loader.*``, ``comm.*``, ``device.gap_scale``)
    cannot break them."""
    return keys[0] in ("ranks", "replay") or tuple(keys[:2]) in (
        ("device", "streams"), ("host", "ops"))


def _fresh(value: Any) -> Any:
    """``value`` with each pydantic object in it validated anew (an assignment takes an object
    of the field's type as it is)."""
    if isinstance(value, BaseModel):
        return type(value).model_validate(value.model_dump())
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _walk(node: Any, keys: list[Key]) -> Any:
    """Follow concrete keys through pydantic objects, lists and dicts (a model or its dump)."""
    for k in keys:
        node = getattr(node, k) if isinstance(node, BaseModel) else node[k]
    return node

