"""The StepModel: one calibrated (or hand-written) model of a rank's training step.

It is the single intermediate representation between calibration, the what-if planner and the
simulator. It round-trips through JSON (``model_dump_json`` / :func:`load_model`) and can be
hand-written in YAML. Every time is in **µs**, every size in **bytes**, every rate in **GB/s**.

Structure (see ``../shared/DESIGN.md``)::

    StepModel
      loader   LoaderParams     DataLoader settings and costs (torch/utils/data/dataloader.py)
      host     HostParams       the host thread's per-step sequence of HostOps
      device   DeviceParams     per stream, the ordered DeviceTasks
      comm     CommParams       collective cost model and DDP buckets
      ranks    [RankParams]     the ranks simulated, with their skew
      meta     Meta             sources, steps used, measured step times, warnings

``meta.sources`` maps a dotted parameter path (``loader.produce``) to how it was obtained:
``measured`` (read from a trace or the capture sidecar), ``inferred`` (derived from measured
values by a stated rule) or ``assumed`` (a default nobody measured).
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from stepsim.models.param_base import (CATEGORIES, LAUNCH_QUEUE_DEPTH, MAX_CORES,
                                       MAX_DURATION_US, MAX_LAUNCH_QUEUE_DEPTH, MAX_OUTSTANDING,
                                       MAX_PREFETCH, MAX_RANK_ID, MAX_RANKS, MAX_THREADS,
                                       MAX_WORKERS, PHASES, SCHEMA_VERSION, Category,
                                       DurationSpec, Micros, Phase, Source, StepMicros,
                                       StrictModel, error_at)
from stepsim.models.param_meta import Meta, ReplayWindow
from stepsim.models.param_types import (CommParams, DeviceParams, DeviceTask, GradParam,
                                        HostKind, HostOp, HostParams, LoaderParams, RankParams,
                                        TaskKind)
from stepsim.models.schema import upgrade
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import read_input

__all__ = [
    "CATEGORIES", "LAUNCH_QUEUE_DEPTH", "MAX_CORES", "MAX_DURATION_US", "MAX_LAUNCH_QUEUE_DEPTH",
    "MAX_OUTSTANDING", "MAX_PREFETCH", "MAX_RANK_ID", "MAX_RANKS", "MAX_THREADS", "MAX_WORKERS",
    "PHASES", "SCHEMA_VERSION", "Category", "CommParams", "DeviceParams", "DeviceTask",
    "DurationSpec", "GradParam", "HostKind", "HostOp", "HostParams", "LoaderParams", "Meta",
    "Micros", "Phase", "RankParams", "ReplayWindow", "Source", "StepMicros", "StepModel",
    "TaskKind", "load_model", "save_model",
]


class StepModel(StrictModel):
    """A rank's training step. See the module docstring for the structure and units.

    Raises (on construction): pydantic ``ValidationError`` for bad values; ``ModelError`` is
    raised by :func:`load_model` for files.
    """

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    loader: LoaderParams = Field(default_factory=LoaderParams)
    host: HostParams = Field(default_factory=HostParams)
    device: DeviceParams = Field(default_factory=DeviceParams)
    comm: CommParams = Field(default_factory=CommParams)
    ranks: list[RankParams] = Field(default_factory=lambda: [RankParams(rank=0)])
    meta: Meta = Field(default_factory=Meta)
    replay: ReplayWindow | None = None
    """The captured window, for a step-by-step replay of the baseline (trace calibration of a
    single rank only; what-if transforms drop it, see :meth:`without_replay`)."""

    @model_validator(mode="before")
    @classmethod
    def _incomplete_window(cls, data):
        """A captured window whose section or per-step values were (partly) deleted is
        dropped, with a warning in ``meta.warnings``: it is optional, the steady state does
        not need it."""
        if not isinstance(data, dict):
            return data
        have = [h.get(k) is not None for h, keys in _window_holders(data) for k in keys]
        window = data.get("replay") is not None
        if not any(have) or (window and all(have)):
            return data
        why = ("the captured window's section is missing" if not window
               else "some ops or tasks lack their captured per-step values")
        data = copy.deepcopy(data)   # the caller's dict stays as it was
        data["replay"] = None
        for h, keys in _window_holders(data):
            for k in keys:
                h.pop(k, None)
        meta = dict(data.get("meta") or {})
        meta["warnings"] = list(meta.get("warnings") or []) + [
            f"captured window dropped ({why}): no window replay; the steady state is unchanged"]
        data["meta"] = meta
        return data

    @model_validator(mode="before")
    @classmethod
    def _centre_past_walls(cls, data):
        """``host.centre_runs`` of more runs than ``host.wall_runs`` holds beside them (the
        timed runs are the last ``centre_runs`` of them, after at least one of the other
        phase: :func:`demo.ddp_noise.with_remeasured_walls`) cannot be right: dropped, with a
        warning (break19: 999 of 3 runs narrowed the interval as the mean of 999 runs)."""
        host = data.get("host") if isinstance(data, dict) else None
        walls = host.get("wall_runs") if isinstance(host, dict) else None
        centre = host.get("centre_runs") if isinstance(host, dict) else None
        if not isinstance(walls, list) or not walls or isinstance(centre, bool) \
                or not isinstance(centre, int) or not len(walls) <= centre <= 1000:
            return data
        meta = dict(data.get("meta") or {})
        meta["warnings"] = list(meta.get("warnings") or []) + [
            f"host.centre_runs {centre} dropped: host.wall_runs holds {len(walls)} runs, and "
            "the centre's runs are the last of them after another phase's; the interval's "
            "centre is every run's"]
        return {**data, "host": {k: v for k, v in host.items() if k != "centre_runs"},
                "meta": meta}

    @model_validator(mode="after")
    def _check_refs(self):
        tasks: dict[str, DeviceTask] = {}
        for stream, ts in self.device.streams.items():
            for t in ts:
                if t.stream != stream:
                    raise ValueError(f"task {t.id!r} lists stream {t.stream!r} but is under {stream!r}")
                if t.id in tasks:
                    raise ValueError(f"device task id {t.id!r} repeats")
                tasks[t.id] = t
        for t in tasks.values():
            for w in t.waits + t.prev_waits:
                if w not in tasks:
                    raise ValueError(f"task {t.id!r} waits for unknown task {w!r}")
        _check_no_wait_cycle(self.device.streams)
        launched: set[str] = set()
        for i, op in enumerate(self.host.ops):
            if op.kind in ("launch", "sync") and op.task is not None and op.task not in tasks:
                raise ValueError(f"host op {i} ({op.kind}) names unknown task {op.task!r}")
            if op.kind == "launch":
                if op.task is None:
                    raise ValueError(f"host op {i} is a launch without a task")
                if op.task in launched:
                    raise ValueError(f"task {op.task!r} is launched twice")
                launched.add(op.task)
        for g in self.comm.grad_params:
            if g.ready_task is not None and g.ready_task not in tasks:
                raise ValueError(f"comm.grad_params: {g.name!r} is ready after unknown task "
                                 f"{g.ready_task!r}")
        if not self.ranks:
            raise ValueError("ranks must list at least one rank")
        if len(self.ranks) > MAX_RANKS:
            raise ValueError(f"{len(self.ranks)} ranks to simulate; at most {MAX_RANKS} (a large "
                             "job is modelled by a few representative ranks)")

        if len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("rank numbers repeat")
        self._check_replay_lengths(tasks)
        return self

    def _check_replay_lengths(self, tasks: dict[str, DeviceTask]) -> None:
        # the places are named only for a message: (kind, index or id, value), formatted by
        # _where when one is raised (a model holds tens of thousands of them)
        arrays = [(0, i, op.replay_us) for i, op in enumerate(self.host.ops)]
        arrays += [(1, t.id, v) for t in tasks.values() for v in (t.replay_us, t.replay_gap_us)]
        given = [a for a in arrays if a[2] is not None]
        if self.replay is None:
            if given:
                raise ValueError(f"{_where(given[0])} has replay values but the model has no "
                                 "replay window")
            return
        n = len(self.replay.steps)
        for a in given:
            if len(a[2]) != n:
                raise ValueError(f"{_where(a)}: {len(a[2])} replay values for a window of {n} "
                                 "steps")
        if len(given) != len(arrays):
            missing = next(a for a in arrays if a[2] is None)
            raise ValueError(f"{_where(missing)} has no replay values but the model has a "
                             "replay window")
        for s in self.replay.stream_busy_us:
            if s not in self.device.streams:
                raise ValueError(f"replay.stream_busy_us names unknown stream {s!r}")

    def task_map(self) -> dict[str, DeviceTask]:
        return self.device.tasks()

    def on_device(self) -> bool:
        """Whether the model runs work on a device (GPU): a device task other than a
        collective. A CPU run has none, gloo's collectives (CPU work on the ``gloo`` stream)
        included."""
        return any(t.kind != "collective" for t in self.device.tasks().values())

    def pins_memory(self) -> bool:
        """Whether the DataLoader pins its batches: ``loader.pin_memory`` on a model with a
        device (:meth:`on_device`). torch pins only where an accelerator is available
        (``_BaseDataLoaderIter``: ``loader.pin_memory and torch.accelerator.is_available()``,
        warning otherwise), so a CPU run's DataLoader (gloo DDP's included) runs no pin-memory
        thread and copies nothing, whatever the setting."""
        return self.loader.pin_memory and self.on_device()

    def team_threads(self) -> int:
        """The intra-op threads of the training step's parallel part, as the simulator counts
        them among the host's runnable threads: the most ``threads`` of a ``cpu`` op with a
        parallel part (``parallel_fraction`` > 0); 1 when none has one."""
        return max([op.threads for op in self.host.ops
                    if op.kind == "cpu" and op.parallel_fraction > 0] or [1])

    def without_replay(self) -> "StepModel":
        """This model without its captured window (what a what-if changes no longer matches
        the capture). Pure."""
        if self.replay is None:
            return self
        streams = {s: [t.model_copy(update={"replay_us": None, "replay_gap_us": None})
                       for t in ts] for s, ts in self.device.streams.items()}
        ops = [op.model_copy(update={"replay_us": None}) for op in self.host.ops]
        return self.model_copy(update={
            "replay": None, "host": self.host.model_copy(update={"ops": ops}),
            "device": self.device.model_copy(update={"streams": streams})})


def _window_holders(data: dict) -> list[tuple[dict, tuple[str, ...]]]:
    """In a StepModel given as a dict, every host op and device task (as dicts) with the keys
    that hold its captured per-step values."""
    host, device = data.get("host"), data.get("device")
    ops = host.get("ops") if isinstance(host, dict) else None
    streams = device.get("streams") if isinstance(device, dict) else None
    out = [(o, ("replay_us",)) for o in (ops if isinstance(ops, list) else [])
           if isinstance(o, dict)]
    for ts in streams.values() if isinstance(streams, dict) else []:
        out += [(t, ("replay_us", "replay_gap_us")) for t in (ts if isinstance(ts, list) else [])
                if isinstance(t, dict)]
    return out


def _where(a: tuple) -> str:
    """``host op I`` or ``task 'ID'`` of a ``(kind, index or id, values)`` triple of
    :meth:`StepModel._check_replay_lengths`."""
    return f"host op {a[1]}" if a[0] == 0 else f"task {a[1]!r}"


def _check_no_wait_cycle(streams: dict[str, list[DeviceTask]]) -> None:
    """Raise ValueError if the tasks of one step can never all run: a task that (through its
    waits and the in-order rule of its stream) waits for itself."""
    deps: dict[str, list[str]] = {}
    for ts in streams.values():
        for i, t in enumerate(ts):
            deps[t.id] = list(t.waits) + ([ts[i - 1].id] if i else [])
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in deps:
        if root in state:
            continue
        stack = [(root, iter(deps[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise ValueError(f"task {nxt!r} waits, through {node!r}, for itself: the step "
                                 "can never finish (a wait on a later task of the same stream?)")
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))


def load_model(path: str | Path) -> StepModel:
    """Read a StepModel from JSON or YAML (by suffix ``.yaml``/``.yml``).

    Raises:
        InputError: missing/unreadable file, a device, a file over
            ``simcore.files.MAX_INPUT_BYTES``, not UTF-8, not JSON/YAML (with the line and
            column; a duplicate YAML key, nesting too deep), saved by a stepsim whose schema
            differs in what the file holds (:func:`models.schema.upgrade`), or not a valid
            StepModel (the message names the first invalid field).
    """
    from stepsim.simcore.parsing import parse_json, parse_yaml

    p = Path(path)
    raw = read_input(p, "StepModel")
    if raw[:2] == b"\x1f\x8b":
        raise InputError(p, "this is a gzip file (a profiler trace?), not a StepModel; run "
                            "'stepsim calibrate' on a trace first")
    data = parse_yaml(p, raw, "StepModel") if p.suffix.lower() in (".yaml", ".yml") else \
        parse_json(p, raw, "StepModel", unique_keys=True)
    if not isinstance(data, dict):
        raise InputError(p, f"expected a StepModel object, got {type(data).__name__}")
    if "traceEvents" in data:
        raise InputError(p, "this is a profiler trace, not a StepModel; run 'stepsim calibrate' on it first")
    if "ops" in data and not ({"host", "loader", "device"} & set(data)):
        raise InputError(p, "this is a scenario file, not a StepModel; use it with "
                            "'stepsim whatif MODEL --scenario FILE'")
    if "stepsim_sidecar" in data:
        raise InputError(p, "this is a capture sidecar, not a StepModel; pass it to "
                            "'stepsim calibrate TRACE --sidecar FILE'")
    if not set(data) & set(StepModel.model_fields):
        keys = ", ".join(sorted(map(str, data))[:6]) or "none"
        raise InputError(p, "not a StepModel: it has none of a StepModel's sections "
                            f"({', '.join(StepModel.model_fields)}); its keys: {keys}")
    host = data.get("host")
    if not host or (isinstance(host, dict) and not host.get("ops")):
        # any other kind of "host" is left to the schema's one-line error below
        raise InputError(p, "the model's host thread has no ops (host.ops): nothing to simulate")
    data = upgrade(p, data)
    try:
        model = StepModel.model_validate(data)
    except ValidationError as e:
        loc, msg = error_at(e)
        raise InputError(p, f"not a valid StepModel: {loc or '(top level)'}: {msg}") from None
    if (why := _runs_problem(model.host.refault_share, model.host.refault_share_runs)):
        raise InputError(p, f"not a valid StepModel: {why}")
    if model.loader.num_workers == 0 and model.loader.prefetch_factor != 2:
        # what-ifs and sweeps may still vary it: the simulated loader ignores it without workers
        raise InputError(p, f"not a valid StepModel: loader.prefetch_factor="
                            f"{model.loader.prefetch_factor} needs num_workers > 0 (PyTorch's "
                            "DataLoader raises ValueError for it; 2 stands for its default)")
    return model


def _runs_problem(share: float, runs: list[float]) -> str | None:
    """Why measured per-run ``runs`` (``host.refault_share_runs``) cannot be those the point
    ``share`` is the mean of (calibration writes their mean, :mod:`calibration.refault_runs`),
    or None. A hand-edited point beside the calibration's runs otherwise centred the
    interval's draws on the runs' mean (:mod:`models.run_share`), away from the point
    (break21: a point of 0.95 beside runs of mean 0.55 drew the baseline's P10-P90 unchanged)."""
    if not runs:
        return None
    m = math.fsum(runs) / len(runs)
    if abs(m - share) > 1e-6:
        return (f"host.refault_share_runs: their mean {m:.4g} is not host.refault_share "
                f"{share:.4g} (the share is the mean of the runs it was measured over; "
                "drop the runs to set the share by hand)")
    return None


def save_model(model: StepModel, path: str | Path) -> None:
    """Write ``model`` as indented JSON, atomically (temp file in the same folder + rename)."""
    from stepsim.simcore.atomic import write_atomic

    write_atomic(Path(path), model.model_dump_json(indent=1).encode())
