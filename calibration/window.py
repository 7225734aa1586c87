"""A profiled window of training steps and the capture folder it writes (``trace.json.gz`` +
``sidecar.json``), shared by the harness (:mod:`calibration.capture`) and the framework
callbacks (:mod:`calibration.lightning`, :mod:`calibration.hf`).

The caller marks three instants per step; the window does the rest::

    win = Window(out_dir, records, loader, via="harness", active=8)  # records: produce records
    win.start()                # just before the first batch is asked for
    ...  win.batch_ready()     # the step's batch is in hand (end of its next() part)
    ...  win.step_end()        # the step is done: one sidecar row, one profiler step
    win.finish()               # writes the files (also after an early stop, with a warning)

Step ``i`` runs from the end of step ``i-1`` (or :meth:`start`) to its own end, which is the
span of the trace's ``ProfilerStep#i``; its ``next_*`` fields cover the part before
:meth:`batch_ready` (the DataLoader's ``next()`` plus whatever the framework does between
steps). The profiler's schedule is ``skip_first``, ``wait``, ``warmup``, then ``active``
recorded steps; then ``after`` steps are timed with the profiler stopped (its trace already
written): steps as the user pays them, warmed up and unprofiled, which a validation scores
(:mod:`calibration.measure`). :meth:`step_end` returns True once the window is complete.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import time
from pathlib import Path

import torch

from stepsim.calibration.ddp_meter import BackendMeter
from stepsim.calibration.machine_stat import machine_delta, machine_stat
from stepsim.calibration.produce import run_wait_us
from stepsim.calibration.sidecar import SIDECAR_VERSION
from stepsim.simcore.atomic import make_folder, write_atomic


BRACKET_US = 500.0
"""Most wall-clock time (µs) between the two wall reads around :func:`clocks`'s run-queue
read: a reading whose reads lie further apart (the thread was preempted between them) is
taken again, so an interval's run-queue wait lies within its wall to this much at each end."""


def clocks() -> tuple:
    """(monotonic wall, this thread's CPU, this process's CPU), all in µs, this thread's
    voluntary and involuntary context switches so far (0 where the OS does not say), its
    run-queue wait so far (µs, :func:`run_wait_us`; None where the OS does not say), and its
    minor page faults and system CPU time (µs) so far (None where the OS does not say).

    The CPU clocks are read first: reading them is where the kernel checks whether the
    thread has used up its slice (EEVDF's ``update_curr``), so on a loaded machine a thread is
    often preempted as such a read returns (46 % of ``thread_time()`` calls took over 1 ms
    beside 2 spinning processes on 2 cores, none of the run-queue or wall reads did). The
    kernel counts that wait in the next run-queue read, so the wall clock is read after the
    run-queue read, the two within :data:`BRACKET_US`: a wait counted at this reading lies
    before its wall instant, one counted later after it. Read the other way round (the wall
    first), a preemption between them put its wait in the interval ending here and its wall
    in the one starting here: a step's run-queue wait over its wall less its CPU by 5-14 ms."""
    cpu = (time.thread_time() * 1e6, time.process_time() * 1e6)
    try:    # after the CPU clocks: a preemption they brought is counted here, as its wait
        ru = resource.getrusage(resource.RUSAGE_THREAD)
        sw = ru.ru_nvcsw, ru.ru_nivcsw
    except (AttributeError, OSError):
        ru, sw = None, (0, 0)
    sys_s = getattr(ru, "ru_stime", None)
    flt = getattr(ru, "ru_minflt", None), None if sys_s is None else sys_s * 1e6
    for _ in range(4):
        before = time.monotonic()
        wait = run_wait_us()
        wall = time.monotonic()
        if (wall - before) * 1e6 <= BRACKET_US:
            break
    return (wall * 1e6,) + cpu + sw + (wait,) + flt


def _delta(a, b) -> float | None:
    return None if a is None or b is None else max(b - a, 0.0)


def _count(a, b, i: int) -> int | None:
    """The count at index ``i`` of two :func:`clocks` readings, b's less a's (None unread)."""
    if len(a) <= i or a[i] is None or b[i] is None:
        return None
    return max(int(b[i] - a[i]), 0)


def step_row(t0, t1, t2, profiled: bool, profiler_on: bool | None = None) -> dict:
    """A step's sidecar row from :func:`clocks` at its start, at the end of its ``next()``
    part and at its end; ``vcsw``/``ivcsw``: the main thread's voluntary / involuntary context
    switches after ``next()`` (it blocked / it was preempted while runnable), ``next_vcsw`` /
    ``next_ivcsw`` in it (a woken worker taking its core there is one involuntary switch);
    ``run_wait_us`` /
    ``next_run_wait_us``: the main thread's run-queue wait after / in ``next()`` (µs; None
    unmeasured); ``minflt`` / ``next_minflt``: its minor page faults after / in ``next()``,
    ``sys_cpu_us``: its system CPU time after ``next()`` (µs; None unmeasured:
    :mod:`calibration.page_faults`); ``profiled``: a
    recorded (active) step; ``profiler_on``: the profiler ran (warm-up or active; default:
    ``profiled``)."""
    return {"t_start_us": t0[0], "wall_us": t2[0] - t0[0], "cpu_us": t2[1] - t0[1],
            "proc_cpu_us": t2[2] - t0[2], "next_wall_us": t1[0] - t0[0],
            "next_cpu_us": t1[1] - t0[1], "next_proc_cpu_us": t1[2] - t0[2],
            "vcsw": t2[3] - t1[3], "ivcsw": t2[4] - t1[4], "run_wait_us": _delta(t1[5], t2[5]),
            "next_run_wait_us": _delta(t0[5], t1[5]),
            "next_vcsw": t1[3] - t0[3], "next_ivcsw": t1[4] - t0[4],
            "minflt": _count(t1, t2, 6), "next_minflt": _count(t0, t1, 6),
            "sys_cpu_us": _delta(*(t[7] if len(t) > 7 else None for t in (t1, t2))),
            "profiled": profiled,
            "profiler_on": profiled if profiler_on is None else profiler_on}


def host_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``), else ``os.cpu_count()``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_schedule(**counts) -> None:
    """Raise ValueError unless each count is a whole number (an ``int``, not a bool), ``active``
    at least 1 and the others at least 0 (``active=2.5`` and ``active="2"`` were a TypeError
    from deep in the loop, ``active=True`` a 1-step capture)."""
    bad = {k: v for k, v in counts.items() if isinstance(v, bool) or not isinstance(v, int)
           or v < (1 if k == "active" else 0)}
    if bad:
        raise ValueError("active must be a whole number >= 1 and "
                         f"{', '.join(k for k in counts if k != 'active')} whole numbers >= 0 "
                         f"(got {', '.join(f'{k}={v!r}' for k, v in counts.items())})")


class Window:
    """One profiled window of ``skip_first + wait + warmup + active`` steps, then ``after``
    unprofiled ones.

    Args:
        out_dir: the capture folder (created if needed).
        records: the folder the producers write their per-batch records into (removed by
            :meth:`finish`).
        loader: the loader's settings (``loader`` in the sidecar schema), or None when no
            ``torch.utils.data.DataLoader`` was found: then no sidecar is written.
        via: what made the capture (``harness``, ``lightning``, ``transformers``).
        ddp: the ``ddp`` section of the sidecar, or None for a single-process run.
        ddp_model: the job's DDP module (with ``ddp``): its backend threads' CPU over the
            profiled steps, in all and per bucket, goes into ``ddp`` as ``threads`` and
            ``bucket_cpu`` (:class:`calibration.ddp_meter.BackendMeter`).

    Raises:
        ValueError: for a non-positive ``active`` or negative schedule counts.
    """

    def __init__(self, out_dir, records: str, loader: dict | None, *, via: str,
                 active: int = 8, wait: int = 1, warmup: int = 2, skip_first: int = 3,
                 after: int = 0, ddp: dict | None = None, warnings: list[str] | None = None,
                 ddp_model=None):
        check_schedule(active=active, wait=wait, warmup=warmup, skip_first=skip_first,
                       after=after)
        self.out_dir = Path(out_dir)
        make_folder(self.out_dir)
        self.records, self.loader, self.via, self.ddp = records, loader, via, ddp
        self.schedule = dict(skip_first=skip_first, wait=wait, warmup=warmup, active=active)
        self.profiled_total = skip_first + wait + warmup + active
        """Steps up to the profiler's last (the trace's window)."""
        self.total = self.profiled_total + after
        self.after = after
        self.warnings: list[str] = list(warnings or [])
        self.rows: list[dict] = []
        self._prof = None
        self._started = False
        self._t_prev = self._t_ready = None
        self._exported = False
        self.finished = False
        self.hold = False   # True: a complete window stops profiling but waits for finish()
        self.probe: dict | None = None   # the probe's settings and step rows, if any
        self.iter_start_us: float | None = None   # just before iter(loader), if known
        self._m0 = None     # calibration.machine_stat.machine_stat at the first profiled step
        self.machine: dict = {}     # the machine's busy CPU over the profiled steps
        self._backend = BackendMeter(ddp_model) if ddp is not None and ddp_model is not None \
            else None
        # export_chrome_trace gzips only when the name ends in .gz
        self._trace_tmp = self.out_dir / ".partial.trace.json.gz"

    @property
    def running(self) -> bool:
        """Started, not finished, and steps still to take (a held window whose steps are all
        taken is not running while it waits for :meth:`finish`)."""
        return self._started and not self.finished and len(self.rows) < self.total

    def start(self) -> None:
        """Start the profiler; the first step starts now."""
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # a DDP job's buckets are costed from the all-reduces' Input Dims (calibration.gloo)
        self._prof = profile(activities=activities, schedule=schedule(repeat=1, **self.schedule),
                             on_trace_ready=self._on_ready, record_shapes=self.ddp is not None)
        self._prof.__enter__()
        self._started = True
        if self.profiled_total == self.schedule["active"]:
            self._m0 = machine_stat()
            if self._backend is not None:
                self._backend.start()
        self._t_prev = clocks()

    def _on_ready(self, prof) -> None:
        prof.export_chrome_trace(str(self._trace_tmp))
        self._exported = True

    def batch_ready(self) -> None:
        """The current step's batch is in hand."""
        self._t_ready = clocks()

    def step_end(self) -> bool:
        """The current step is done; returns True when the window has all its steps."""
        if not self.running:
            return self.finished
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0, t2 = self._t_prev, clocks()
        t1 = self._t_ready or t0
        i, sch, end = len(self.rows), self.schedule, self.profiled_total
        profiled = end - sch["active"] <= i < end
        self.rows.append(step_row(t0, t1, t2, profiled,
                                  sch["skip_first"] + sch["wait"] <= i < end))
        if profiled and self._backend is not None:
            self._backend.end_step()
        if len(self.rows) == end - sch["active"]:     # the profiled steps start next
            self._m0 = machine_stat()
            if self._backend is not None:
                self._backend.start()
        elif len(self.rows) == end:                   # and end here (before the export)
            self.machine = machine_delta(self._m0, machine_stat())
            if self._backend is not None:
                self._backend.finish(self.ddp)
                self._backend = None
        if self._prof is not None:
            self._prof.step()     # the last active step's writes the trace (not in a step)
            if len(self.rows) >= end and self.after:
                self._stop()      # the after steps run unprofiled
        self._t_prev, self._t_ready = clocks(), None
        if len(self.rows) >= self.total:
            if self.hold:
                self._stop()
                return True
            self.finish()
        return self.finished

    def _stop(self) -> None:
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self._prof = None

    def finish(self, reason: str | None = None) -> None:
        """Stop the profiler and write the capture folder; ``reason`` says why the window
        stopped early (else a generic warning is given when steps are missing). Idempotent."""
        if self.finished:
            return
        self.finished = True
        self._stop()
        if len(self.rows) < self.total:
            self.warnings.append(reason or f"the training loop stopped after {len(self.rows)} "
                                           f"of {self.total} steps")
        active = self.schedule["active"]
        if self._exported and self.profiled_steps:
            os.replace(self._trace_tmp, self.out_dir / "trace.json.gz")
        else:
            # the profiler's exit exports what it recorded, also a window cut before its first
            # active step ended: a stub ProfilerStep of the step in progress (a user's 6 of 14
            # steps gave one of 1.04 ms, calibrated as the step; the real ones took ~800 ms)
            self._trace_tmp.unlink(missing_ok=True)
            self.warnings.append("the profiler never completed its active steps: no trace was "
                                 f"written (run at least {self.profiled_total} steps)")
        if 0 < self.profiled_steps < active:
            self.warnings.append(f"the profiled window holds {self.profiled_steps} of its "
                                 f"{active} active steps (run at least {self.profiled_total} "
                                 "steps)")
        self._write_sidecar()

    @property
    def profiled_steps(self) -> int:
        """The active (profiled) steps that ended: ``active`` once the window is complete."""
        return sum(1 for r in self.rows if r["profiled"])

    def summary(self, steps_setting: str) -> str:
        """One line on what the window captured into its folder, and, when training ended
        before all ``skip_first + wait + warmup + active + after`` steps ran, the
        ``steps_setting`` (the framework's, e.g. ``TrainingArguments.max_steps``) that covers
        them."""
        sch, n = self.schedule, len(self.rows)
        plan = (f"{sch['skip_first']}+{sch['wait']}+{sch['warmup']}+{sch['active']}"
                f"+{self.after} (skip_first+wait+warmup+active+after)")
        got = (f"{n} steps, {self.profiled_steps} of {sch['active']} profiled, "
               f"{max(n - self.profiled_total, 0)} of {self.after} after")
        if n >= self.total:
            return f"stepsim capture {self.out_dir}: {got}; next: stepsim calibrate {self.out_dir}"
        what = ("no trace written, nothing to calibrate" if not self.profiled_steps else
                "fewer profiled steps than asked" if self.profiled_steps < sch["active"] else
                "fewer after steps than asked (a validation scores those)")
        return (f"stepsim capture {self.out_dir}: training ended after {n} steps, short of "
                f"the schedule's {self.total} = {plan}: {got}, {what}; set {steps_setting} "
                f">= {self.total}")

    def _write_sidecar(self) -> None:
        produce, rec = [], Path(self.records)
        for f in sorted(rec.glob("produce-*.jsonl")):
            produce += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        for f in sorted(rec.glob("untimed-*.txt")):
            self.warnings.append(f"a DataLoader worker could not time its batches ({f.read_text()})")
        shutil.rmtree(rec, ignore_errors=True)
        if self.loader is None:
            return
        probed = [r for r in produce if r.get("phase") == "probe"]
        produce = [r for r in produce if r.get("phase") != "probe"]
        side = {
            "stepsim_sidecar": SIDECAR_VERSION,
            "capture": self.via,
            "torch_version": torch.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "host_cores": host_cores(),
            "cpu_count": os.cpu_count(),
            "torch_num_threads": torch.get_num_threads(),
            "loader": self.loader,
            "produce": produce,
            "steps": self.rows,
            "schedule": dict(self.schedule, **({"after": self.after} if self.after else {})),
            "trace": "trace.json.gz",
            "warnings": self.warnings,
            "host_name": socket.gethostname(),
        }
        if self.iter_start_us is not None:
            side["iter_start_us"] = self.iter_start_us
        if self.probe is not None:
            for r in probed:
                del r["phase"]
            side["probe"] = dict(self.probe, produce=probed)
        if self.ddp is not None:
            side["ddp"] = self.ddp
        if self.machine:
            side["machine"] = self.machine
        write_atomic(self.out_dir / "sidecar.json", json.dumps(side, indent=1).encode())
