"""Validation: a prediction against re-measured step times, and the ledger that keeps score.

:func:`validate` compares a :class:`scenarios.predict.Prediction` with measured step times
(µs, start to next start, as calibration measures them) and returns a :class:`LedgerRecord`:
predicted vs measured mean step (the primary number: with more workers than cores the median
can be half the mean) and median beside it, the error in percent, whether the measured mean
falls inside the prediction interval, and whether the bottlenecks agree
(:func:`bottlenecks_agree`).

The ledger is a JSON-lines file, one record per line, that the user names;
:func:`append_ledger` adds a record (rewriting the file atomically), :func:`read_ledger` reads
it back and :func:`summarize_ledger` (:mod:`scenarios.ledger_score`) scores it (median and
max |error|, interval coverage, bottleneck agreement), leaving out in-sample records and runs
re-measured under outside load slower than predicted (each counted on its own). This module
never reads traces: the CLI measures them with
``calibration`` and passes the numbers in.
"""
from __future__ import annotations

import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
import orjson
from pydantic import ValidationError

from stepsim.models.param_base import error_at
from stepsim.scenarios.ledger_record import LedgerRecord
from stepsim.scenarios.ledger_score import LedgerSummary, summarize_ledger  # noqa: F401 (re-export)
from stepsim.scenarios.fixes import get_fix
from stepsim.scenarios.predict import Prediction
from stepsim.scenarios.transforms import FixOp
from stepsim.scenarios.validate_ddp import barrier_mismatch, bucket_mismatch, threads_mismatch
from stepsim.simcore.atomic import atomic_path, updating, write_atomic
from stepsim.simcore.errors import InputError, ModelError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.files import MAX_INPUT_BYTES, read_latest_lines
from stepsim.simcore.parsing import BOM, json_type, parse_json

_COARSE = {"input": "input", "cpu_cores": "cores", "host_compute": "host", "launch": "host",
           "sync": "host", "h2d": "device", "d2h": "device", "d2d": "device", "comm": "device",
           "arrival_skew": "device"}
_NOT_INPUT = ("compute", "host_compute", "device")   # "device": ledgers written before "compute"
"""What ``calibration.measure`` reports when waiting for input is not the largest share: it
cannot split host from device on a GPU trace, so these mean only "not the input pipeline"."""


def coarse_bottleneck(key: str) -> str | None:
    """``input``, ``host`` or ``device`` for a predicted bottleneck key (``compute:*`` is
    device); None for an unknown key."""
    return "device" if key.startswith("compute:") else _COARSE.get(key)


def bottlenecks_agree(predicted: str, measured: str) -> bool:
    """Whether a predicted bottleneck key agrees with a measured one, at the measurement's
    own resolution (docs/reference.md): a measured ``input`` agrees with a predicted
    ``input`` or ``cpu_cores`` (without a sidecar a trace cannot show core waits); a measured
    ``compute`` / ``host_compute`` (not input-bound) with anything but ``input``; a measured
    ``cpu_cores`` (workers ran and the training step waited for a core, read from the
    sidecar) only with ``cpu_cores``; any other measured key with the same key or one of its
    coarse group (``host``, ``device``)."""
    p = coarse_bottleneck(predicted)
    if measured == "input":
        return p == "input" or predicted == "cpu_cores"
    if measured in _NOT_INPUT:
        return p is not None and p != "input"
    return predicted == measured or (p is not None and p == coarse_bottleneck(measured))


SETTINGS = ("num_workers", "prefetch_factor", "pin_memory", "batch_size")
"""The DataLoader settings a re-measured capture must share with the predicted model."""


def setting_mismatch(loader, stated: dict | None) -> str | None:
    """The first DataLoader setting a capture's sidecar states (``stated``, LoaderParams
    fields) that differs from the predicted model's ``loader``, as ``"loader.NAME is X in the
    capture, Y in the prediction (--set loader.NAME=X would match)"``; None when they match
    (``prefetch_factor`` only counts with workers on both sides; a setting either side leaves
    unstated is not compared)."""
    for name in SETTINGS if stated else ():
        mine, theirs = getattr(loader, name), stated.get(name)
        if name == "prefetch_factor" and not (loader.num_workers and stated["num_workers"]):
            continue
        if mine is not None and theirs is not None and mine != theirs:
            return (f"loader.{name} is {theirs} in the capture, {mine} in the prediction "
                    f"(--set loader.{name}={theirs} would match)")
    return None


def same_setting(loader, runs) -> None:
    """Refuse a re-measured run (``calibration.measure.MeasuredSteps``) whose sidecar states
    other DataLoader settings than the predicted ``loader``: it would score a prediction of
    another setting.

    Raises:
        InputError: naming the run, the differing setting and the ``--set`` that matches.
    """
    for r in runs:
        why = setting_mismatch(loader, r.loader)
        if why:
            raise InputError(r.path, f"not a run of the predicted setting: {why}")


def job_mismatch(model, run) -> str | None:
    """What a re-measured run (``calibration.measure.MeasuredSteps``) states of the job that
    differs from the predicted ``model`` (after its ops) and that the prediction does not
    change: the world size, torch's intra-op threads (a multi-rank model's as its capture
    recorded them, else when the model's ops' were measured) and DDP's buckets (the cap and
    the first bucket's, :mod:`scenarios.validate_ddp`; the run's sidecar stating them); None
    when nothing differs."""
    world = model.comm.world_size
    if run.world_size != world:
        return (f"world size is {run.world_size} in the capture, {world} in the prediction "
                "(validate with the same job's ranks)")
    if world > 1 and isinstance(model.meta.notes.get("intra_op_threads"), int):
        # a multi-rank model's host ops run one thread each: the capture's count is its note
        why = threads_mismatch(model, run)
    else:
        why = _op_threads_mismatch(model, run)
    if why:
        return why
    return bucket_mismatch(model, run) if world > 1 else None


def _op_threads_mismatch(model, run) -> str | None:
    cpu = [(i, op.threads) for i, op in enumerate(model.host.ops) if op.kind == "cpu"]
    measured = any(k.endswith(".threads") and v == "measured"
                   for k, v in model.meta.sources.items())
    mine = max((t for _, t in cpu), default=1)
    if measured and run.torch_threads is not None and cpu and run.torch_threads != mine:
        i = max(cpu, key=lambda c: c[1])[0]
        return (f"torch's intra-op threads are {run.torch_threads} in the capture, {mine} in the "
                f"prediction (--set host.ops.{i}.threads={run.torch_threads} would match)")
    return None


def straggler_mismatch(ops, run) -> str | None:
    """A straggler the run's sidecar records (``Capture.straggler``) that no ``--fix
    straggler`` among ``ops`` predicts (the same rank, phase and ms), said with the ``--fix``
    that matches; None when one does, or the run records none (a spin hook of the user's own
    is not recorded, so a prediction's straggler is not checked against the run)."""
    s = run.straggler
    if s is None:
        return None
    fix = get_fix("straggler")
    given = [fix.parse_args(op.args) for op in ops
             if isinstance(op, FixOp) and op.name == "straggler"]
    if any(a.rank == s.rank and a.phase == s.phase
           and abs(a.ms * 1e3 - s.spin_us) <= 1e-9 * s.spin_us for a in given):
        return None
    said = ", ".join(f"rank {a.rank} {a.ms:g} ms in {a.phase}" for a in given) or "none"
    return (f"rank {s.rank} is a straggler in the capture ({s.spin_us / 1e3:g} ms spin at its "
            f"{s.phase}'s end, Capture.straggler), {said} in the prediction "
            f"(--fix {s.fix_text()} would match)")


def same_job(model, runs, ops=()) -> None:
    """Refuse a re-measured run of another job than the predicted ``model`` (after its
    ``ops``): :func:`same_setting` for its DataLoader, :func:`job_mismatch`,
    :func:`straggler_mismatch` and a barrier (:func:`scenarios.validate_ddp.barrier_mismatch`)
    for the rest.

    Raises:
        InputError: naming the run and the first difference.
    """
    same_setting(model.loader, runs)
    for r in runs:
        why = job_mismatch(model, r) or straggler_mismatch(ops, r) or barrier_mismatch(model, r)
        if why:
            raise InputError(r.path, f"not a run of the predicted setting: {why}")


def validate(prediction: Prediction, measured_step_us: Sequence[float],
             measured_bottleneck: str | None, label: str, traces: Sequence[str] = (),
             model_name: str = "", time: str | None = None, in_sample: bool = False,
             baseline_check: bool = False,
             startup: Sequence[tuple[float, float, float]] = (),
             startup_capture: str | None = None,
             outside_load_slowdown: float | None = None) -> LedgerRecord:
    """Score ``prediction`` against measured step times.

    Args:
        prediction: what was predicted (point estimate, and interval if it has one).
        measured_step_us: every measured step (µs), pooled over the re-measured traces.
        measured_bottleneck: the measured run's bottleneck key (``input``, ``host_compute``,
            ``device`` or a finer key), or None.
        label: the user's name for this check.
        traces: the re-measured traces, for the record.
        model_name: the model's name, for the record.
        time: ISO timestamp (default: now, UTC).
        in_sample: the measured runs are the calibration setting's own (scored apart).
        baseline_check: the measured runs are fresh runs of the calibration setting (scored
            apart, on their own line: the baseline's level).
        startup: per run that had one, its worker start-up step as (step, its ``next()``, the
            median ``next()`` after it) in µs, left out of ``measured_step_us`` and recorded
            on its own.
        startup_capture: what made those runs (their sidecars' ``capture``; None: unsaid).
        outside_load_slowdown: the runs' outside load, ``1 / held − 1`` (None: unmeasured).

    Raises:
        ModelError: no measured steps, or a non-positive or non-finite one.
    """
    m = np.asarray(list(measured_step_us), dtype=float)
    if m.size == 0 or not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise ModelError("validation needs at least one measured step, every one > 0 µs")
    mean, median = float(m.mean()), float(np.median(m))
    agrees = None if measured_bottleneck is None else \
        bottlenecks_agree(prediction.bottleneck, measured_bottleneck)
    return LedgerRecord(
        time=time or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        label=label, model=model_name, scenario=prediction.what, traces=[str(t) for t in traces],
        steps_measured=int(m.size), predicted_mean_us=prediction.mean_step_us,
        predicted_median_us=prediction.median_step_us, p10_us=prediction.p10_step_us,
        p50_us=prediction.p50_step_us, p90_us=prediction.p90_step_us,
        measured_mean_us=mean, measured_median_us=median,
        error_pct=100 * (prediction.mean_step_us - mean) / mean,
        median_error_pct=100 * (prediction.median_step_us - median) / median,
        inside=_bool(prediction.covers(mean)), predicted_bottleneck=prediction.bottleneck,
        measured_bottleneck=measured_bottleneck, bottleneck_agrees=_bool(agrees),
        in_sample=bool(in_sample), baseline_check=bool(baseline_check) and not in_sample,
        runs=prediction.runs, width_sources_pct=dict(prediction.width_sources),
        outside_load_slowdown=outside_load_slowdown,
        **_startup_fields(startup, startup_capture))


def _bool(v) -> bool | None:
    """``v`` as a Python bool (numpy's compares give ``numpy.bool_``, which a record refuses),
    None kept."""
    return None if v is None else bool(v)


def _startup_fields(startup: Sequence[tuple[float, float, float]],
                    capture: str | None) -> dict:
    if not startup:
        return {}
    step, nxt, later = (float(v) for v in np.mean(np.asarray(startup, dtype=float), axis=0))
    return {"startup_us": step, "startup_next_us": nxt, "startup_later_next_us": later,
            "startup_runs": len(startup), "startup_capture": capture}


MAX_LEDGER_RECORDS = 20_000
"""Most lines of a ledger read, its latest (each is parsed and validated: 200,000 lines took
10 s and 1.3 GB, 2026-12-05, load 1.5); earlier ones are said, not read or scored."""


@gc_paused   # a record is a few objects that live on: 200,000 of them collected 1.4 s more
def read_ledger(path: str | Path, skipped: list[str] | None = None) -> list[LedgerRecord]:
    """Every record of a ledger file (a missing file is an empty ledger), of its latest
    :data:`MAX_LEDGER_RECORDS` lines. ``skipped``: a list to receive one warning counting the
    lines that are not records (a line cut short, a hand edit), which are then left out, and
    one saying the earlier lines not read; without it such a line is an error.

    Raises:
        InputError: a directory, an unreadable file, or (without ``skipped``) a line that is
            not a valid record (the message gives the line number); with ``skipped``, a file
            none of whose lines is a record.
    """
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    t = read_latest_lines(p, "ledger", MAX_LEDGER_RECORDS)
    if t.before and skipped is not None:
        skipped.append(f"{p.name}: " + (
            f"holds more than {MAX_LEDGER_RECORDS:,} records; the latest {MAX_LEDGER_RECORDS:,} "
            "are read and scored" if t.by_count else f"is larger than {MAX_INPUT_BYTES >> 20} "
            f"MiB; the records in its last {MAX_INPUT_BYTES >> 20} MiB are read and scored")
            + (f", lines 1 to {t.first - 1} are not" if t.first else
               f", the {t.before:,} bytes before them are not")
            + " (scenarios.validate.MAX_LEDGER_RECORDS)")
    out, bad, lines = [], [], 0
    for j, line in enumerate(t.lines):
        if not line.strip():
            continue
        lines += 1
        try:
            out.append(_record(p, line, f"line {t.first + j}" if t.first else
                               f"line {len(t.lines) - j} from the end"))
        except InputError as e:
            if skipped is None:
                raise
            bad.append(e)
    if bad:
        if not out:
            raise (_one_document(p, t.whole) if not t.before and len(bad) > 1 else None) or bad[0]
        first = bad[0]
        skipped.append(f"{p.name}: skipped {len(bad)} of {lines} line(s) that are not ledger "
                       f"records (first: {first.where}: {first.problem})")
    return out


def _one_document(p: Path, raw: bytes) -> InputError | None:
    """The error for a ledger file that is one JSON document over several lines (a StepModel
    passed as the ledger was refused as "line 1: not valid JSON"); None if it is not one."""
    try:
        data = orjson.loads(raw.removeprefix(BOM))   # (parse_json's reading of the mark)
    except orjson.JSONDecodeError:
        return None
    what = "a StepModel" if isinstance(data, dict) and "schema_version" in data else \
        f"one JSON document ({json_type(data)})"
    return InputError(p, f"{what} over several lines, not a ledger (JSON lines: one validation "
                         "record a line, as 'stepsim validate --ledger' writes them)")


def _record(p: Path, line: bytes, where: str) -> LedgerRecord:
    """The line of ledger ``p`` at ``where`` as a record; InputError saying why it is not one."""
    try:
        data = parse_json(p, line, "ledger", unique_keys=True)
    except InputError as e:
        raise InputError(p, e.problem, where=f"{where}; in it {e.where}" if e.where
                         else where) from None
    try:
        return LedgerRecord.model_validate(data)
    except ValidationError as e:
        loc, msg = error_at(e)
        raise InputError(p, f"not a ledger record: {loc or '(record)'}: {msg}",
                         where=where) from None


def ledger_line(record: LedgerRecord) -> bytes:
    """One record as a ledger line (JSON, newline-terminated)."""
    return orjson.dumps(record.model_dump()) + b"\n"


def append_ledger(path: str | Path, record: LedgerRecord,
                  skipped: list[str] | None = None) -> list[LedgerRecord]:
    """Append ``record`` as one JSON line; the file is rewritten atomically, so a failure
    leaves the old ledger whole. ``skipped``: as :func:`read_ledger`'s (its lines that are not
    records are kept as they are, and counted there). Returns the records the ledger held
    before (read to check it).

    Raises:
        InputError: the existing file is not a ledger (checked before writing).
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        raise InputError(p, "a ledger is appended to and rewritten: it must be a regular file")
    earlier = read_ledger(p, skipped)
    with updating(p):   # another process's append is not renamed over (simcore.atomic)
        if not p.exists():
            write_atomic(p, ledger_line(record))
            return earlier
        with open(p, "rb") as src, atomic_path(p) as tmp, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)   # a long ledger is copied, not held whole
            if dst.tell():
                src.seek(-1, os.SEEK_END)
                dst.write(b"" if src.read(1) == b"\n" else b"\n")
            dst.write(ledger_line(record))
    return earlier
