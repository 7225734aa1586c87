"""One normalised, columnar event table for every Kineto dialect.

:func:`build_table` turns a :class:`calibration.trace_io.RawTrace` into an :class:`EventTable`:
numpy arrays of equal length ``n``, one row per trace event, in file order. Fitters read only
this table; the raw events are never changed.

Columns (all numpy arrays, shape ``(n,)``):

=================  ========  ===============================================================
column             dtype     meaning
=================  ========  ===============================================================
``names``          object    event name (str; ``""`` when absent)
``cat``            object    normalised category (see ``CATEGORY_ALIASES``; current Kineto
                             names: ``cpu_op``, ``user_annotation``, ``gpu_user_annotation``,
                             ``cuda_runtime``, ``cuda_driver``, ``kernel``, ``gpu_memcpy``,
                             ``gpu_memset``, ``ac2g`` (launch flows), ``fwdbwd``,
                             ``python_function``, ``instant``, ``metadata``, ``trace_span``,
                             ``other``)
``raw_cat``        object    the category as written in the file (str or None)
``ph``             object    Chrome phase: ``X`` complete, ``i`` instant, ``s``/``f`` flow,
                             ``M`` metadata, …
``pid``, ``tid``   int64     process / thread ids; numeric strings become ints, ``"stream 7"``
                             becomes 7, other strings get negative codes (``str_ids`` maps
                             them back)
``ts_ns``          int64     start, **ns relative to the earliest ``ts`` in the trace**,
                             parsed exactly from the ``ts`` text
``dur_ns``         int64     duration (ns); 0 for instants, flows, metadata and a missing
                             ``dur``; an event whose ``dur`` is not a finite number in
                             [0, 30 days] cannot be right: it is left out of the table and
                             counted in one warning (an InputError naming the first when no
                             event with a ``dur`` is left)
``correlation``    int64     CUPTI/roctracer correlation id (runtime call ↔ GPU activity), −1
``external_id``    int64     ``External id`` / ``external id`` (CPU op ↔ runtime), −1
``flow_id``        int64     ``id`` of a flow event (``s``/``f``), −1
``stream``         int64     GPU stream (``args.stream``, else the ``stream N`` tid), −1
``device``         int64     GPU device (``args.device``), −1
``bytes``          int64     bytes moved/set (``args.bytes``), −1
``gbps``           float64   ``memory bandwidth (GB/s)``, NaN
``coll_name``      object    ``Collective name`` (``record_param_comms`` / NCCL kernels), ""
``in_nelems``      int64     ``In msg nelems``, −1
``out_nelems``     int64     ``Out msg nelems``, −1
``group_size``     int64     ``Group size``, −1
``dtype``          object    ``dtype`` of a collective, ""
``index``          int64     position of the event in the file's ``traceEvents``
=================  ========  ===============================================================

Other attributes: ``path``, ``metadata`` (non-event top-level keys), ``base_ns`` (absolute
instant of ``ts_ns == 0``, ns since the epoch; includes ``baseTimeNanoseconds`` when the trace
has it, as newer Kineto writes ``ts`` relative to that base), ``str_ids``, ``alias_version``,
``warnings``.

Helpers: ``table.end_ns`` (``ts_ns + dur_ns``), ``len(table)``, ``table.where(mask)`` (a new
table of the selected rows, same columns), ``table.is_cat(*cats)`` (boolean mask),
``table.busy_mask()`` (complete ``X`` events with a duration: instants are never busy time;
the whole-window ``Trace`` span is ``trace_span``), ``table.gpu_mask()`` (kernel, memcpy,
memset), ``table.event(i)`` (the raw dict of row ``i``; read-only by convention).

Dialects (facts from ``../shared/traces/SOURCES.md`` and the sample files): Kineto traces
from 2020-12 to 2021-06 write ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``,
flows ``async`` and ``external id``; newer ones write ``cpu_op``, ``user_annotation``,
``gpu_user_annotation``, ``cuda_runtime``, ``cuda_driver``, ``kernel``, ``gpu_memcpy``,
``gpu_memset``, flows ``ac2g`` (HTA's ``trace_diff`` uses ``async_cpu_to_gpu``) and
``External id``. Numeric args may be written as strings. ROCm traces use the same categories
with ``hip*`` API names.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from stepsim.calibration.event_aliases import ALIAS_VERSION, ARG_ALIASES, CATEGORY_ALIASES
from stepsim.calibration.event_rows import (BAD_BYTES, GPU_CATS, MAX_COPY_BYTES, Columns,
                                            row_columns, to_int)
from stepsim.calibration.fast_columns import fast_columns
from stepsim.calibration.trace_io import RawTrace
from stepsim.simcore.errors import InputError

__all__ = ["EventTable", "build_table", "name_mask", "ALIAS_VERSION", "CATEGORY_ALIASES",
           "ARG_ALIASES", "GPU_CATS", "HOST_API_CATS"]


SLIM_KEEPS = ("nccl:", "[memory]")
"""Names of the events whose raw ``args`` a fit reads (a collective annotation's ``Input
Dims``, a memory event's fields): :meth:`EventTable.slim` keeps these."""
HOST_API_CATS = ("cuda_runtime", "cuda_driver")
_I64 = 2**63 - 1


BAD_DUR = "whose dur cannot be right"
"""What the warning of the events dropped for their ``dur`` says (:func:`dropped_note`)."""


def _bad_durs(path: Path, bad: list[tuple[int, str]], timed: int) -> str:
    """The warning for the events dropped for a ``dur`` that cannot be right; InputError
    naming the first when they are all the timed events there are (nothing left)."""
    i, problem = bad[0]
    if len(bad) >= timed:
        raise InputError(path, problem, f"event {i}")
    return (f"{path.name}: dropped {len(bad)} of {timed} event(s) {BAD_DUR} "
            f"(first: {problem} at event {i})")


BAD_FIELDS = "whose args, pid or tid cannot be right"
"""What the warning of the events dropped for an ``args`` that is not an object or a ``pid`` or
``tid`` that is an object or an array says."""


def _bad_fields(path: Path, bad: list[tuple[int, str]], n: int) -> str:
    """The warning for the events dropped for their ``args``, ``pid`` or ``tid``; InputError
    naming the first when they are all the events there are."""
    i, problem = bad[0]
    if len(bad) >= n:
        raise InputError(path, f"no event left: all {n} are events {BAD_FIELDS} (first: "
                               f"{problem})", f"event {i}")
    return (f"{path.name}: dropped {len(bad)} of {n} event(s) {BAD_FIELDS} "
            f"(first: {problem} at event {i})")


def _bad_bytes(path: Path, nbytes: np.ndarray) -> list[str]:
    """The warning for the GPU events whose ``bytes`` cannot be right (:data:`calibration.
    event_rows.BAD_BYTES`), which are then taken as not given (−1, in place): the event is
    kept, its time is what the device did; before, a memcpy's ``bytes`` of -5, "lots" or 1e30
    went without a word."""
    bad = np.flatnonzero(nbytes == BAD_BYTES)
    if not len(bad):
        return []
    given = int((nbytes != -1).sum())
    nbytes[bad] = -1
    return [f"{path.name}: ignored the bytes of {len(bad)} of {given} GPU event(s) that give "
            f"bytes (copies, memsets) whose bytes cannot be right (negative, not a number, or past "
            f"{MAX_COPY_BYTES:,} = 16 TiB; first at event {int(bad[0])}): taken as not recorded"]


_DROPPED = (BAD_DUR, BAD_FIELDS, "whose ts cannot be right", "whose ts lies more than")
"""What the warnings of events dropped as records that cannot be right say (their ``dur``
here, their ``ts`` in :mod:`calibration.trace_ts`)."""


def dropped_note(table: "EventTable") -> str:
    """``"; <the warnings>"`` when events were dropped as records that cannot be right (their
    ``dur`` or ``ts``): a refusal of what is left (no complete step) names them as a possible
    cause; else ``""``."""
    hit = [w.split(": ", 1)[-1] for w in table.warnings if any(d in w for d in _DROPPED)]
    return "".join(f"; {h}" for h in hit)


def name_mask(names: np.ndarray, rx) -> np.ndarray:
    """Boolean per name (an object array of str): does ``rx.search`` find it. Each distinct
    name is searched once (a trace has a few thousand names over its events)."""
    vals = names.tolist()
    hit = {n: rx.search(n) is not None for n in set(vals)}
    return np.fromiter(map(hit.__getitem__, vals), bool, len(vals))


def name_test(names: np.ndarray, test) -> np.ndarray:
    """Boolean per name (an object array of str): ``test(name)``, called once per distinct
    name (:func:`name_mask`'s way)."""
    vals = names.tolist()
    hit = {n: bool(test(n)) for n in set(vals)}
    return np.fromiter(map(hit.__getitem__, vals), bool, len(vals))


@dataclass
class EventTable:
    """The normalised table; see the module docstring for the columns and units."""

    names: np.ndarray
    cat: np.ndarray
    raw_cat: np.ndarray
    ph: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    flow_id: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    bytes: np.ndarray
    gbps: np.ndarray
    coll_name: np.ndarray
    in_nelems: np.ndarray
    out_nelems: np.ndarray
    group_size: np.ndarray
    dtype: np.ndarray
    index: np.ndarray
    path: Path | None = None
    metadata: dict = field(default_factory=dict)
    base_ns: int = 0
    str_ids: dict[int, str] = field(default_factory=dict)
    alias_version: int = ALIAS_VERSION
    warnings: list[str] = field(default_factory=list)
    step_range: tuple[int | None, int | None] | None = None
    """``(A, B)``: only the steps numbered ``A ≤ N < B`` are the trace's steps
    (:func:`calibration.steps.find_steps`; ``calibrate --steps A:B``, None on a side: open);
    None: every step."""
    _raw: RawTrace | None = field(default=None, repr=False)
    _end: np.ndarray | None = field(default=None, repr=False)
    _cat_codes: tuple | None = field(default=None, repr=False, compare=False)
    _complete: tuple | None = field(default=None, repr=False, compare=False)

    _COLUMNS = ("names", "cat", "raw_cat", "ph", "pid", "tid", "ts_ns", "dur_ns", "correlation",
                "external_id", "flow_id", "stream", "device", "bytes", "gbps", "coll_name",
                "in_nelems", "out_nelems", "group_size", "dtype", "index")

    def __len__(self) -> int:
        return int(self.ts_ns.shape[0])

    @property
    def end_ns(self) -> np.ndarray:
        """shape (n,), int64: ``ts_ns + dur_ns`` (computed once; do not modify)."""
        if self._end is None or len(self._end) != len(self.ts_ns):
            self._end = self.ts_ns + self.dur_ns
        return self._end

    def where(self, mask) -> "EventTable":
        """A new table with the rows selected by ``mask`` (boolean array or index array);
        ``index`` keeps pointing into the original file's events."""
        cols = {c: getattr(self, c)[mask] for c in self._COLUMNS}
        return EventTable(**cols, path=self.path, metadata=self.metadata, base_ns=self.base_ns,
                          str_ids=self.str_ids, alias_version=self.alias_version,
                          warnings=self.warnings, step_range=self.step_range, _raw=self._raw)

    def is_cat(self, *cats: str) -> np.ndarray:
        """Boolean mask of rows whose normalised ``cat`` is one of ``cats``: a lookup in a
        table of the distinct categories, by a small int code per row made once per ``cat``
        column (a fit asks about 20 times; ``np.isin`` over the objects took 4 ms a time on
        216,000 events)."""
        if self._cat_codes is None or self._cat_codes[0] is not self.cat:
            vals = self.cat.tolist()
            code = {c: k for k, c in enumerate(dict.fromkeys(vals))}
            kind = np.int8 if len(code) < 127 else np.int32   # (a few normalised names)
            self._cat_codes = (self.cat, code,
                               np.fromiter(map(code.__getitem__, vals), kind, len(vals)))
        _, code, codes = self._cat_codes
        hit = np.zeros(len(code) + 1, bool)
        hit[[code[c] for c in cats if c in code]] = True
        return hit[codes]

    def _x(self) -> np.ndarray:
        """``ph == "X"`` (complete events), made once per ``ph`` column (do not modify)."""
        if self._complete is None or self._complete[0] is not self.ph:
            self._complete = (self.ph, self.ph == "X")
        return self._complete[1]

    def busy_mask(self) -> np.ndarray:
        """Complete (``X``) events that are not the whole-window ``Trace`` span."""
        return self._x() & ~self.is_cat("trace_span")

    def gpu_mask(self) -> np.ndarray:
        """GPU activity: kernels, memcpys and memsets (complete events)."""
        return self.is_cat(*GPU_CATS) & self._x()

    def slim(self) -> "EventTable":
        """This table without its raw event dicts but for the few whose ``args`` a fit reads
        (events named ``SLIM_KEEPS``): what a folder's tables keep, and what crosses between
        processes. ``event(i)`` of another row raises LookupError."""
        if self._raw is None or isinstance(self._raw.events, dict):
            return self
        keep = name_test(self.names, lambda n: n.startswith(SLIM_KEEPS))
        ev, rows = self._raw.events, self.index[keep].tolist()
        # a block-read trace keeps those events' texts, parsed when read (most never are)
        texts = getattr(ev, "texts", None)
        raw = replace(self._raw, events=texts(rows) if texts else {i: ev[i] for i in rows},
                      ts_ns=np.zeros(0, np.int64))
        return replace(self, _raw=raw)

    def event(self, i: int) -> dict:
        """The raw event dict of row ``i`` (do not modify it)."""
        if self._raw is None:
            raise LookupError("this table was built without its raw trace")
        return self._raw.events[int(self.index[i])]

    def args(self, i: int) -> dict:
        """``args`` of row ``i``'s raw event; ``{}`` when absent or not an object."""
        a = self.event(i).get("args")
        return a if isinstance(a, dict) else {}

    def arg(self, i: int, key: str, default=None):
        """``args[key]`` of row ``i``'s raw event."""
        return self.args(i).get(key, default)

    def tid_label(self, v: int) -> str:
        """The original text of a pid/tid value (negative codes map back to strings)."""
        return self.str_ids.get(int(v), str(int(v)))


def build_table(raw: RawTrace) -> EventTable:
    """Normalise the events of ``raw`` into one :class:`EventTable`.

    Args:
        raw: a trace from :func:`calibration.trace_io.load_trace`.

    Returns:
        the table, rows in file order (not sorted by time).

    Raises:
        InputError: every event with a ``dur`` has one (µs) that is not a number, is not
            finite, is negative or is longer than 30 days
            (:data:`calibration.trace_io.MAX_SPAN_US`), with the first event's index; when only
            some have, those are dropped (``index`` still names each row's event) and one
            warning counts them; the same for events whose ``args`` is not an object or whose
            ``pid`` or ``tid`` is an object or an array, when they are all the events. Other odd
            fields never raise: unknown categories become ``other``, unparsable or
            out-of-int64 numbers −1/NaN.
    """
    cols = raw.columns if isinstance(raw.columns, Columns) else \
        (fast_columns(raw.columns, raw.events) if raw.columns is not None else None) \
        or row_columns(raw.events)
    raw.columns = None                  # read: the per-event lists go
    n = len(raw.events)
    cat, ph, tid, dur, stream = cols.cat, cols.ph, cols.tid, cols.dur, cols.ints["stream"]
    # GPU lanes written as "stream N" tids without an args.stream
    gpu = np.isin(cat, list(GPU_CATS))
    fix = gpu & (stream < 0)
    if fix.any():
        stream[fix] = np.where(tid[fix] >= 0, tid[fix], -1)
    base_rel = int(raw.ts_ns.min())
    ts = raw.ts_ns - base_rel
    base_abs = base_rel + to_int(raw.metadata.get("baseTimeNanoseconds", 0)) if isinstance(
        raw.metadata, dict) else base_rel
    if not base_rel <= base_abs <= _I64:  # a bad baseTimeNanoseconds (−1, huge) is ignored
        base_abs = base_rel
    warnings = list(raw.warnings)
    complete = ph == "X"
    if complete.sum() > 1 and not dur[complete].any():
        warnings.append(f"{raw.path.name}: all {int(complete.sum())} complete events have dur 0: "
                        "the trace's durations are missing or zeroed")
    if cols.bad_args:
        warnings.append(_bad_fields(raw.path, cols.bad_args, n))
    if cols.bad_dur:
        warnings.append(_bad_durs(raw.path, cols.bad_dur, cols.timed))
    if cols.bad_text:
        i, problem = cols.bad_text[0]
        if len(cols.bad_text) >= n:
            raise InputError(raw.path, f"no event left: all {n} are events whose name or ph is "
                                       f"not text (first: {problem})", f"event {i}")
        warnings.append(f"{raw.path.name}: dropped {len(cols.bad_text)} of {n} event(s) whose "
                        f"name or ph is not text (first: {problem} at event {i})")
    warnings += _bad_bytes(raw.path, cols.ints["bytes"])
    table = EventTable(
        names=cols.names, cat=cat, raw_cat=cols.raw_cat, ph=ph, pid=cols.pid, tid=tid,
        ts_ns=ts, dur_ns=dur, flow_id=cols.flow_id, gbps=cols.gbps, coll_name=cols.coll,
        dtype=cols.dtype, **cols.ints, index=np.arange(n, dtype=np.int64), path=raw.path,
        metadata=raw.metadata, base_ns=base_abs, str_ids={v: k for k, v in cols.str_ids.items()},
        warnings=warnings, _raw=raw)
    if cols.bad_dur or cols.bad_args or cols.bad_text:
        keep = np.ones(n, dtype=bool)
        keep[[i for i, _ in cols.bad_dur + cols.bad_args + cols.bad_text]] = False
        table = table.where(keep)
    return table
