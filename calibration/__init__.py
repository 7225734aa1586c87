"""Calibration: from profiler traces (and a capture sidecar) to a :class:`models.params.StepModel`.

Interfaces shared inside the package (stable; see each module's docstring for details):

* ``from stepsim.calibration.trace_io import load_trace`` → :class:`~calibration.trace_io.RawTrace` with
  ``.path`` (Path), ``.events`` (the ``traceEvents`` as a sequence of dicts, each parsed when asked for;
  never modified),
  ``.metadata`` (dict of the other top-level keys) and ``.ts_ns`` (int64 ns per event, parsed
  exactly from the ``ts`` text). ``load_rank_traces(dir)`` reads a directory of per-rank files.
  Bad input raises ``simcore.errors.InputError`` (file + byte offset / event index).
* ``from stepsim.calibration.events import EventTable, build_table`` → ``build_table(raw)`` gives one
  columnar table (numpy arrays): ``names``, ``cat`` (normalised: ``cpu_op``,
  ``user_annotation``, ``gpu_user_annotation``, ``cuda_runtime``, ``cuda_driver``, ``kernel``,
  ``gpu_memcpy``, ``gpu_memset``, ``ac2g``, ``fwdbwd``, ``python_function``, ``instant``,
  ``metadata``, ``trace_span``, ``other``), ``ph``, ``pid``, ``tid``, ``ts_ns`` / ``dur_ns``
  (int64 ns, relative to the trace's earliest ``ts``), ``correlation``, ``external_id``,
  ``stream``, ``device``, ``bytes``, … Helpers: ``where(mask)``, ``is_cat(*cats)``,
  ``busy_mask()``, ``gpu_mask()``, ``end_ns``, ``event(i)``.
* ``from stepsim.calibration.steps import find_steps`` → ``find_steps(table, step_regex=None)`` gives a
  ``StepList`` (a list of ``Step`` with ``number``, ``start_ns``, ``end_ns`` (start to next
  start), ``cpu_end_ns``, ``pid``, ``tid``, ``name``, ``last``) with ``.warnings`` and
  ``.method``.
* ``from stepsim.calibration.gpu import calibrate_gpu_pending`` →
  ``calibrate_gpu_pending(paths, step_regex=None)`` fits a StepModel from a GPU trace file or a
  directory of per-rank files, as a :class:`~calibration.pending.Pending`: the steps that
  simulate it (the ranks' lateness cap, coarsening) are left to :mod:`stepsim.fit`, since
  calibration uses models' parameter types, never the simulator.
"""
from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.steps import Step, StepList, find_steps
from stepsim.calibration.trace_io import RawTrace, load_rank_traces, load_trace

__all__ = [
    "RawTrace", "load_trace", "load_rank_traces",
    "EventTable", "build_table",
    "Step", "StepList", "find_steps",
]

