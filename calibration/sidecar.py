"""Reading the capture harness's sidecar JSON (schema in :mod:`calibration.capture`).

Raises :class:`simcore.errors.InputError` naming the file for a missing, empty, non-JSON or
foreign file; optional fields that are missing degrade to ``None`` (the fitter then warns about
what it could not calibrate).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, PrivateAttr, TypeAdapter, ValidationError

from stepsim.models.param_base import StrictScalars, error_at
from stepsim.models.params import (MAX_CORES, MAX_DURATION_US, MAX_PREFETCH, MAX_THREADS,
                                   MAX_WORKERS)
from stepsim.calibration.sidecar_cross import cross_check
# the DDP records live in sidecar_ddp; importers of this module find them here too
from stepsim.calibration.sidecar_ddp import (CFG as _CFG, US as _US, BucketCPU,  # noqa: F401
                                           ColdProbe, DDPParam, DDPRecord, ThreadCPU)
from stepsim.calibration.sidecar_records import drop_bad_records
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import read_input
from stepsim.simcore.parsing import parse_json


SIDECAR_VERSION = 1
"""The sidecar schema this stepsim writes and reads (``stepsim_sidecar``); a newer one is
refused, its fields may mean something else."""
MAX_INSTANT_US = 2.0 ** 52
"""The latest clock reading (µs) an instant may hold: past it a double's spacing passes 1 µs,
so an interval's end less its start no longer gives its wall (a step at 1e300 µs ended where it
began); 2^52 µs is the year 2112 on the Unix epoch, the harness's monotonic clock far less."""
_AT = Field(default=None, ge=-MAX_INSTANT_US, le=MAX_INSTANT_US)


class ProduceRecord(StrictScalars):
    """One batch produced: by ``worker`` (−1 = the main thread), wall and thread-CPU µs."""

    model_config = _CFG
    worker: int = Field(ge=-1)
    pid: int
    seq: int = 0
    wall_us: float = _US
    cpu_us: float = _US
    proc_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    t_end_us: float | None = _AT
    run_wait_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """The producing thread's run-queue wait over the batch (runnable, no core free; µs): the
    rest of ``wall_us − cpu_us`` it was blocked. None in sidecars written before it was
    recorded, or where the OS does not say."""
    gap_wall_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    gap_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    gap_run_wait_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """A worker's time since its previous batch ended (µs): wall, its process's CPU (taking
    the indices, its queue's feeder thread pickling the previous batch) and its thread's
    run-queue wait. None for a worker's first batch, the main thread's, and older sidecars."""
    bytes: int = Field(default=0, ge=0)

    @property
    def work_us(self) -> float:
        """CPU work of the batch (µs): the worker process's CPU time (all its threads), or the
        thread's for batches made on the main thread (whose process runs other threads)."""
        if self.worker >= 0 and self.proc_cpu_us is not None:
            return self.proc_cpu_us
        return self.cpu_us


class StepRecord(StrictScalars):
    """One loop iteration on the main thread (µs): whole step and its ``next()`` call."""

    model_config = _CFG
    t_start_us: float | None = _AT
    wall_us: float = Field(gt=0, le=MAX_DURATION_US)
    """The step's wall time: a step always takes some (a profiled window of steps of 0 µs
    divided by zero in :func:`calibration.step_tail.step_tail`, a traceback)."""
    cpu_us: float = _US
    proc_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    next_wall_us: float = _US
    next_cpu_us: float = _US
    next_proc_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    vcsw: int | None = Field(default=None, ge=0)
    ivcsw: int | None = Field(default=None, ge=0)
    """The main thread's voluntary / involuntary context switches outside ``next()``: it
    blocked, or it was preempted while runnable (it waited for a core)."""
    next_vcsw: int | None = Field(default=None, ge=0)
    next_ivcsw: int | None = Field(default=None, ge=0)
    """The same inside ``next()`` (None in sidecars written before 2026-12-05 10:55 UTC)."""
    minflt: int | None = Field(default=None, ge=0)
    next_minflt: int | None = Field(default=None, ge=0)
    sys_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """The main thread's minor page faults outside / inside ``next()`` and its system CPU time
    outside it (:mod:`calibration.page_faults`; None before 2026-12-05 12:10 UTC)."""
    run_wait_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    next_run_wait_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """The main thread's run-queue wait (runnable, no core free; µs) outside and inside
    ``next()``: the rest of its wall time short of its CPU it was blocked. None in sidecars
    written before they were recorded, or where the OS does not say."""
    profiled: bool = False
    """Whether the step is one of the trace's recorded (active) steps."""
    profiler_on: bool | None = None
    """Whether the profiler ran during the step (its warm-up or active steps): the steps with
    ``False`` are the unprofiled ones :mod:`calibration.profiler_overhead` compares the
    profiled ones with; None in sidecars written before this was recorded."""

    @property
    def compute_cpu_us(self) -> float:
        """CPU time (µs) of the step outside ``next()``: the main process's when recorded
        (it counts torch's intra-op threads), else the main thread's."""
        if self.proc_cpu_us is not None and self.next_proc_cpu_us is not None:
            return max(self.proc_cpu_us - self.next_proc_cpu_us, 0.0)
        return max(self.cpu_us - self.next_cpu_us, 0.0)


class LoaderSettings(StrictScalars):
    model_config = _CFG
    num_workers: int = Field(ge=0, le=MAX_WORKERS)
    prefetch_factor: int | None = Field(default=None, ge=1, le=MAX_PREFETCH)
    pin_memory: bool = False
    batch_size: int | None = Field(default=None, ge=1)
    persistent_workers: bool = False
    in_order: bool | None = None
    drop_last: bool = False
    dataset_len: int | None = Field(default=None, ge=0)


class Probe(StrictScalars):
    """A few extra steps recorded by the harness with the same dataset and training step: at
    a second ``num_workers`` (``probe_workers``: what co-run interference is fitted from), or
    at a second ``batch_size`` (``probe_batch_size``: what the batch-size what-if measures its
    per-batch and per-step parts from, :mod:`calibration.batch_probe`)."""

    model_config = _CFG
    num_workers: int = Field(ge=0, le=MAX_WORKERS)
    batch_size: int | None = Field(default=None, ge=1)
    """The probe's batch size when it differs from the capture's (None: the same)."""
    produce: list[ProduceRecord] = []
    steps: list[StepRecord] = []


class MachineCPU(StrictScalars):
    """The whole machine's CPU over the profiled steps (:mod:`calibration.machine_stat`):
    its busy time less ``proc_cpu_us`` is what other processes used (µs)."""

    model_config = _CFG
    wall_us: float = Field(gt=0, le=MAX_DURATION_US)
    busy_us: float = Field(ge=0)
    """Every core's busy CPU (``/proc/stat``: user, nice, system, irq, softirq, steal)."""
    steal_us: float = Field(default=0.0, ge=0)
    cores: int = Field(ge=1, le=MAX_CORES)
    proc_cpu_us: float = Field(ge=0)
    """This process's CPU over the same span (all its threads)."""
    tick_us: float = Field(default=1e4, gt=0, le=1e6)
    """``/proc/stat``'s unit (``SC_CLK_TCK``): the busy time is a count of these."""


class Sidecar(StrictScalars):
    """The sidecar's content (times in µs)."""

    model_config = _CFG
    stepsim_sidecar: int
    torch_version: str | None = None
    device: str | None = None
    host_cores: int | None = Field(default=None, ge=1, le=MAX_CORES)
    cpu_count: int | None = Field(default=None, ge=1, le=MAX_CORES)
    torch_num_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    host_name: str | None = None
    loader: LoaderSettings
    produce: list[ProduceRecord] = []
    steps: list[StepRecord] = []
    warnings: list[str] = []
    capture: str | None = None
    """What wrote it: ``harness``, ``lightning`` or ``transformers`` (absent in older files)."""
    ddp: DDPRecord | None = None
    probe: Probe | None = None
    machine: MachineCPU | None = None
    """The machine's busy CPU over the profiled steps (absent in older sidecars)."""
    schedule: dict[str, Annotated[int, Field(ge=0)]] = {}
    """The profiler's schedule the capture asked for (``skip_first``, ``wait``, ``warmup``,
    ``active`` and, when asked, ``after`` steps); :mod:`calibration.short_capture` holds the
    steps recorded against it."""
    iter_start_us: float | None = Field(default=None, ge=0, le=MAX_INSTANT_US)
    """The instant (µs, the steps' and batches' clock) just before the harness called
    ``iter(loader)``, where a multi-process loader starts its workers: the worker start-up
    (``loader.worker_startup_us``) runs from it to a worker's first sample fetch (absent in
    older sidecars and in the Lightning and Hugging Face captures)."""
    _dropped: list[str] = PrivateAttr(default_factory=list)
    _gone_steps: frozenset[int] = PrivateAttr(default=frozenset())

    @property
    def gone_steps(self) -> frozenset[int]:
        """The numbers (places in the file) of the step records :func:`load_sidecar` dropped
        because they cannot be right (:func:`calibration.sidecar_records.
        drop_overrunning_steps`): step ``k`` of :attr:`steps` is the ``k``-th number not in
        it."""
        return self._gone_steps

    @property
    def dropped(self) -> list[str]:
        """Warnings for the ``produce`` records :func:`load_sidecar` dropped because they
        cannot be right (a negative time, one past :data:`models.params.MAX_DURATION_US`, a
        field of the wrong type)."""
        return self._dropped

    @property
    def batch_probe(self) -> bool:
        """Whether the probe is at a second batch size (``probe_batch_size``), not at a second
        ``num_workers``."""
        return (self.probe is not None and self.probe.batch_size is not None
                and self.probe.batch_size != self.loader.batch_size)


_RECORDS = {"produce": ProduceRecord}
"""The lists whose records stand alone (a batch each), so one that cannot be right is dropped
(:func:`calibration.sidecar_records.drop_bad_records`); ``steps`` are not: a step record's
place is its step's number, so a field that cannot be right refuses the file (a step whose wall
runs into the next step's start is dropped, its number kept: :attr:`Sidecar.gone_steps`)."""


_WAITS = {"produce": (ProduceRecord, {"run_wait_us": "wall_us", "gap_wall_us": None,
                                      "gap_cpu_us": None, "gap_run_wait_us": "gap_wall_us"}),
          "steps": (StepRecord, {"run_wait_us": "wall_us", "next_run_wait_us": "next_wall_us"}),
          "threads": (ThreadCPU, {"runqueue_us": None, "timeslices": None}),
          "bucket_cpu": (BucketCPU, {"runqueue_us": None, "timeslices": None})}
"""Per list, the optional scheduler measurements a record may lack (sidecars before they were
recorded) and the wall time (µs) each cannot exceed: one that cannot be right (negative, not
a number, past its wall) is taken as not recorded, the record kept (what the record counts for
then degrades as for an older sidecar)."""


_CPU_OF = {("produce", "run_wait_us"): "cpu_us", ("steps", "run_wait_us"): "cpu_us",
           ("steps", "next_run_wait_us"): "next_cpu_us"}
"""The thread CPU (µs) read beside each wait: wall − CPU − wait is the time the thread blocked,
so the two cannot exceed the wall (break22: a batch whose wait and CPU each equalled its wall
was read as waiting the whole time it ran)."""

WAIT_SLACK_US = 20.0
"""µs a wait may exceed its wall and still be taken (clipped to the wall): the capture's clock
reads take 12 µs (measured, 2-core host, load 1.3), so the wall and wait reads of an instant
are that far apart."""
WAIT_SLACK_SHARE = 5e-4
"""And this share of the wall: the monotonic clock may be slewed by NTP up to 500 ppm against
the scheduler's clock (assumed: the kernel's largest slew rate)."""


def _check(model: type[BaseModel], field: str) -> TypeAdapter:
    info = model.model_fields[field]
    # strict: a wait written as true or "5" is not a measurement (lax mode read 1 and 5)
    return TypeAdapter(Annotated[info.annotation, info], config={**_CFG, "strict": True})


_CHECKS = {(key, f): _check(model, f) for key, (model, fs) in _WAITS.items() for f in fs}


def _null_bad_waits(p: Path, data: dict) -> list[str]:
    """Set to None (in place) each optional scheduler measurement of :data:`_WAITS` that
    cannot be right, and each step's fault count its CPU cannot hold
    (:func:`_null_bad_faults`); one warning counting each kind, naming the first."""
    lists = [(k, data.get(k)) for k in ("produce", "steps")]
    probe, ddp = data.get("probe"), data.get("ddp")
    if isinstance(probe, dict):
        lists += [(k, probe.get(k), "probe.") for k in ("produce", "steps")]
    if isinstance(ddp, dict):
        lists += [(k, ddp.get(k), "ddp.") for k in ("threads", "bucket_cpu")]
    bad = []
    for key, items, *where in lists:
        if not isinstance(items, list):
            continue
        for i, rec in enumerate(items):
            if not isinstance(rec, dict):
                continue
            for f, wall in _WAITS[key][1].items():
                if rec.get(f) is None:
                    continue
                why = None
                try:
                    v = _CHECKS[key, f].validate_python(rec[f])
                    w = rec.get(wall) if wall else None
                    # one clock read's error against a wall of w µs (None: no wall to check)
                    slack = WAIT_SLACK_US + WAIT_SLACK_SHARE * w if type(w) in (int, float) \
                        else None
                    if slack is not None and v > w:
                        if v <= w + slack:
                            rec[f] = v = w   # within the clocks' own error: as long as its wall
                        else:
                            why = f"{v:g} µs past its {wall} of {w:g} µs"
                    c = rec.get(_CPU_OF.get((key, f), ""))
                    if why is None and slack is not None and type(c) in (int, float) \
                            and c >= 0 and v > max(w - c, 0.0) + 2 * slack:
                        # a thread runs or waits for a core or blocks: its wait cannot exceed
                        # the wall its CPU leaves (two reads, so twice one read's error; a CPU
                        # a little past its wall, as a real 0-worker probe's next() read, is
                        # the CPU's own reading and leaves a wait of 0 standing)
                        why = f"{v:g} µs with {c:g} µs of CPU past its {wall} of {w:g} µs"
                    if why is None:
                        continue
                except ValidationError as e:
                    why = e.errors()[0]["msg"]
                if why:
                    rec[f] = None
                    bad.append(f"{''.join(where)}{key}.{i}.{f}: {why}")
    faults = [f"{''.join(where)}{key}.{i}.{why}" for key, items, *where in lists
              if key == "steps" and isinstance(items, list)
              for i, rec in enumerate(items) if isinstance(rec, dict)
              for why in _null_bad_faults(rec)]
    return ([f"{p.name}: ignored {len(bad)} scheduler measurement(s) that cannot be right, "
             f"taken as not recorded (first: {bad[0]})"] if bad else []) + (
        [f"{p.name}: ignored {len(faults)} page-fault count(s) that cannot be right, taken as "
         f"not recorded (first: {faults[0]})"] if faults else [])


MIN_FAULT_CPU_US = 0.02
"""Least CPU µs of its thread a minor page fault takes (assumed): a kernel entry and exit take
more (0.1 µs and up); the least fault cost calibration fits is 10x this
(:data:`calibration.page_faults.PER_FAULT_US`; 1.3-3.3 µs measured here). A step record
whose thread faulted more often than once per this much of its CPU cannot be right: a
replicate whose steps said 1.8e19 faults each read as a host 0.50x the capture's (its step's
work all priced as faults), with no word. Plus :data:`FAULT_SLACK`: the CPU clocks and the
fault counter are read one after the other."""
FAULT_SLACK = 1000
"""Faults past ``CPU / MIN_FAULT_CPU_US`` still taken (:data:`MIN_FAULT_CPU_US`)."""


def _null_bad_faults(rec: dict) -> list[str]:
    """Set to None (in place) a step record's fault counts (``minflt`` outside ``next()``,
    ``next_minflt`` inside it) that its thread's CPU time there cannot hold
    (:data:`MIN_FAULT_CPU_US`); ``"field: why"`` of each. Counts or clocks of the wrong type
    are left to the record's validation."""
    out = []
    cpu, nxt = rec.get("cpu_us"), rec.get("next_cpu_us")
    if type(cpu) not in (int, float) or type(nxt) not in (int, float):
        return out
    for f, us in (("minflt", max(cpu - nxt, 0.0)), ("next_minflt", max(nxt, 0.0))):
        n = rec.get(f)
        if type(n) is int and n > us / MIN_FAULT_CPU_US + FAULT_SLACK:
            rec[f] = None
            out.append(f"{f}: {n:.3g} faults in {us:.6g} µs of the thread's CPU, more than one "
                       f"per {MIN_FAULT_CPU_US:g} µs")
    return out


def sidecar_beside(trace: Path) -> Path | None:
    """The harness's ``sidecar.json`` beside ``trace``, else a DDP job's ``rank<N>.sidecar.json``
    beside its ``rank<N>.json`` (as calibrate reads the job's folder); None without either. A
    name that is there but is no file (a directory, a broken link) is returned, for its reader
    to say so (taken as no sidecar, a DDP rank's was then measured without it, unsaid)."""
    return next((f for f in (trace.parent / "sidecar.json",
                             trace.parent / f"{trace.name.split('.')[0]}.sidecar.json")
                 if os.path.lexists(f)), None)


def load_sidecar(path: str | Path) -> Sidecar:
    """Read and validate a sidecar file.

    A ``produce`` record that cannot be right is dropped and counted
    (:attr:`Sidecar.dropped`).

    Raises:
        InputError: missing/empty/unreadable file, not JSON, not a stepsim sidecar, or a
            field of the wrong type or out of range (named).
    """
    p = Path(path)
    raw = read_input(p, "sidecar")
    if raw[:2] == b"\x1f\x8b":   # was "not valid UTF-8 (invalid start byte, byte 0x8b)"
        raise InputError(p, "is gzip-compressed (a trace?), expected a capture sidecar's JSON "
                            "(the capture folder's sidecar.json)")
    data = parse_json(p, raw, "sidecar", unique_keys=True)
    del raw     # (not held while the records are validated: a 191 MB sidecar's bytes)
    if not isinstance(data, dict) or "stepsim_sidecar" not in data:
        raise InputError(p, "not a stepsim sidecar (no 'stepsim_sidecar' key); "
                            "it is written by calibration.capture.Capture")
    v = data["stepsim_sidecar"]
    if type(v) is not int or not 1 <= v <= SIDECAR_VERSION:
        newer = type(v) is int and v > SIDECAR_VERSION
        raise InputError(p, f"sidecar version (stepsim_sidecar) is {v!r}; this stepsim reads "
                            f"version {SIDECAR_VERSION}" + (" (a newer stepsim wrote it)"
                                                            if newer else ""))
    notes = _null_bad_waits(p, data)
    given = len(data["produce"]) if isinstance(data.get("produce"), list) else 0
    notes += drop_bad_records(p, data, _RECORDS)
    if isinstance(data.get("probe"), dict):
        notes += drop_bad_records(p, data["probe"], _RECORDS, "probe.")
    try:
        side = Sidecar.model_validate(data)
    except ValidationError as e:
        loc, msg = error_at(e)
        raise InputError(p, f"bad sidecar field {loc}: {msg}" if loc else
                         f"bad sidecar field: {msg}") from None
    side._dropped = notes + cross_check(p, side, given)
    return side

