"""Where the cores' idle time goes past the cores, from the kernel's own scheduler events.

A demo workload capture past the cores (2, 4, 8 DataLoader workers on 2 cores) leaves a few
per cent of the cores' time idle beside runnable threads (issue 10; zero21's sidecar figure,
4.7–6.5 %, also holds other processes' CPU and CPU the sidecar does not time: this script
splits the three). It reads a tracefs text trace of ``sched:sched_switch``,
``sched:sched_waking``, ``sched:sched_wakeup_new`` and ``sched:sched_migrate_task`` (trace
clock ``mono``, the clock of ``time.perf_counter`` and so of the sidecar) recorded while the
capture ran, and over the steps ``validate`` scores (the sidecar's steps after the profiled
window, :func:`calibration.measure.measured_steps`) prints, in ms a step:

* each CPU's idle time, split by what was runnable meanwhile: a thread queued on *another*
  CPU's run queue (the idle CPU did not pull it), a thread woken onto this idle CPU and not
  yet running (the wake-up's latency), or nothing runnable;
* each idle interval by the thread whose sleep began it (the main process's, a worker
  process's, another process's) and how it ended (a wake-up onto that CPU, or a queued thread
  migrated to it);
* the CPU each class of thread ran (the main process, the workers, every other task) beside
  the CPU the sidecar times (:func:`calibration.outside_load.busy_spans`): ``2 × wall`` is
  their sum plus the idle.

To record (root; a tracefs instance of one's own, under the timing lock)::

    mount -t tracefs nodev /mnt/tr 2>/dev/null; T=/mnt/tr/instances/idle; mkdir -p $T
    echo mono > $T/trace_clock; echo 16384 > $T/buffer_size_kb
    for e in sched_switch sched_waking sched_wakeup_new sched_migrate_task; do
        echo 1 > $T/events/sched/$e/enable; done
    echo > $T/trace; echo 1 > $T/tracing_on
    python -m stepsim.demo.workload --num-workers 4 --out cap-nw4 --seed 0
    echo 0 > $T/tracing_on; cat $T/trace > trace-nw4.txt; rmdir $T

``python bench/sched_idle.py TRACE CAPTURE_DIR``. Prints shares of the window only.
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stepsim.calibration.measure import measured_steps
from stepsim.calibration.outside_load import BATCH, GAP, NEXT, STEP, busy_spans, cut_to_span
from stepsim.calibration.sidecar import load_sidecar

_LINE = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")
_KV = re.compile(r"(\w+)=(\S+)")
QUEUED_ELSEWHERE, WOKEN_HERE, NOTHING = "queued elsewhere", "woken here", "nothing runnable"


@dataclass(frozen=True)
class Event:
    """One trace line: ``t_us`` (trace clock, µs), the ``cpu`` it ran on, the event's
    ``name``, the ``pid`` (thread id) that ran it and its fields."""

    t_us: float
    cpu: int
    name: str
    pid: int
    fields: dict


@dataclass(frozen=True)
class Idle:
    """One idle interval of a CPU: ``dur_us``, the thread whose sleep began it (``began``,
    0 where the CPU was idle from the window's start), ``queued`` whether a thread was queued
    on another CPU when it began, and ``pulled`` whether it ended by migrating a queued thread
    to this CPU (else by a wake-up onto it)."""

    start_us: float
    dur_us: float
    cpu: int
    began: int
    queued: bool
    pulled: bool


def read_trace(path) -> tuple[list[Event], int]:
    """The trace's scheduler events in order and its CPU count (the header's ``#P:``)."""
    events, cpus = [], 0
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                m = re.search(r"#P:(\d+)", line)
                cpus = int(m[1]) if m else cpus
                continue
            m = _LINE.match(line)
            if m:
                _comm, pid, cpu, ts, name, rest = m.groups()
                events.append(Event(float(ts) * 1e6, int(cpu), name, int(pid),
                                    dict(_KV.findall(rest))))
    return events, cpus or 1 + max(e.cpu for e in events)


def replay(events: list[Event], cpus: int, lo_us: float, hi_us: float):
    """Replay the events: per thread, the µs it ran inside ``[lo_us, hi_us)``; per class
    (:data:`QUEUED_ELSEWHERE`, :data:`WOKEN_HERE`, :data:`NOTHING`), the µs a CPU idled
    meanwhile; and the :class:`Idle` intervals that began inside the window."""
    state, where, how = {}, {}, {}
    running = {c: 0 for c in range(cpus)}
    ran, split, idles, idle_from = defaultdict(float), defaultdict(float), [], {}
    last = None
    for e in events:
        if last is not None:
            a, b = max(last, lo_us), min(e.t_us, hi_us)
            if b > a:
                queued = [x for x, s in state.items() if s == "rq"]
                for c, tid in running.items():
                    if tid:
                        ran[tid] += b - a
                    elif any(where.get(x) == c for x in queued):
                        split[WOKEN_HERE] += b - a
                    else:
                        split[QUEUED_ELSEWHERE if queued else NOTHING] += b - a
        last = e.t_us
        k = e.fields
        if e.name == "sched_switch":
            prev, nxt = int(k["prev_pid"]), int(k["next_pid"])
            if prev:
                slept = not k["prev_state"].startswith("R")
                state[prev], where[prev] = ("sleep" if slept else "rq"), e.cpu
                how[prev] = None if slept else "preempted"
            if nxt == 0:
                q = any(s == "rq" and where.get(x) != e.cpu for x, s in state.items())
                idle_from[e.cpu] = (e.t_us, prev, q)
            elif e.cpu in idle_from:
                t0, who, q = idle_from.pop(e.cpu)
                if lo_us <= t0 and e.t_us <= hi_us:
                    idles.append(Idle(t0, e.t_us - t0, e.cpu, who, q, how.get(nxt) == "migrated"))
            if nxt:
                state[nxt], where[nxt], how[nxt] = "run", e.cpu, None
            running[e.cpu] = nxt
        elif e.name == "sched_waking":
            tid = int(k["pid"])
            if state.get(tid) != "run":
                state[tid] = "rq"
            where[tid], how[tid] = int(k["target_cpu"]), "woken"
        elif e.name == "sched_migrate_task":
            tid = int(k["pid"])
            where[tid] = int(k["dest_cpu"])
            if state.get(tid) == "rq" and how.get(tid) != "woken":
                how[tid] = "migrated"
    return ran, split, idles


def owners(events: list[Event], worker_pids: list[int]):
    """A function naming each thread's process: ``"main"`` (the process that started the
    workers), ``"worker"`` (a worker process or a thread it started) or ``"other"``, from the
    ``sched_wakeup_new`` events' creator → child links."""
    parent = {int(e.fields["pid"]): e.pid for e in events if e.name == "sched_wakeup_new"}
    main = parent.get(worker_pids[0]) if worker_pids else None

    def owner(tid: int) -> str:
        for _ in range(64):
            if tid in worker_pids:
                return "worker"
            if tid == main:
                return "main"
            if tid not in parent:
                return "other"
            tid = parent[tid]
        return "other"
    return owner


def report(trace, capture) -> None:
    capture = Path(capture)
    side = load_sidecar(capture / "sidecar.json")
    n = len(measured_steps(capture / "trace.json.gz").step_us)
    steps = side.steps[-n:]
    lo, hi = steps[0].t_start_us, steps[-1].t_start_us + steps[-1].wall_us
    events, cpus = read_trace(trace)
    owner = owners(events, sorted({p.pid for p in side.produce if p.worker >= 0}))
    ran, split, idles = replay(events, cpus, lo, hi)
    by = defaultdict(float)
    for tid, us in ran.items():
        by[owner(tid)] += us
    nw = side.loader.num_workers
    spans = cut_to_span(busy_spans(side, nw, 1, 1), lo, hi)
    timed = spans[np.isin(spans[:, 4], [BATCH, GAP, STEP] + ([NEXT] if nw else [])), 3].sum()
    ms = lambda us: us / n / 1e3    # noqa: E731
    idle = sum(split.values())
    print(f"{capture.name}: {nw} workers, {n} scored steps, {ms(hi - lo):.1f} ms a step; "
          f"{cpus} CPUs idle {ms(idle):.2f} ms a step ({100 * idle / (cpus * (hi - lo)):.1f} %)")
    print("  idle while " + ", ".join(f"{k}: {ms(v):.2f}" for k, v in
                                       sorted(split.items(), key=lambda kv: -kv[1])))
    print(f"  ran: main {ms(by['main']):.2f}, workers {ms(by['worker']):.2f}, other tasks "
          f"{ms(by['other']):.2f}; the sidecar times {ms(timed):.2f} "
          f"({100 * (1 - timed / (cpus * (hi - lo))):.1f} % of the cores untimed)")
    groups = defaultdict(list)
    for i in idles:
        groups[(owner(i.began) if i.began else "-", i.queued, i.pulled)].append(i.dur_us)
    for (who, q, pulled), v in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        print(f"  began by a {who} thread's sleep, {'a thread queued elsewhere' if q else 'none queued elsewhere'}"
              f", ended by {'a pull' if pulled else 'a wake-up'}: {len(v) / n:.2f} a step, "
              f"{ms(sum(v)):.2f} ms a step, median {np.median(v):.0f} µs, "
              f"P90 {np.percentile(v, 90):.0f} µs")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[-2])
    report(sys.argv[1], sys.argv[2])
