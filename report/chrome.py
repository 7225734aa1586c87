"""The simulated timeline as a Kineto-style Chrome trace (JSON Object Format), which Perfetto
and chrome://tracing open beside the real trace, and which stepsim can calibrate again.

Processes and threads are named as the PyTorch profiler names them, so the real and the
simulated run look alike side by side:

* the host process of rank ``r`` (``pid`` = ``HOST_PID + r``): ``process_name`` ``python``,
  ``process_labels`` ``CPU``; its main thread ``thread {tid} (python)`` carries one
  ``ProfilerStep#N`` (``user_annotation``) per simulated step, the CPU work as ``cpu_op``
  events, every launch as a ``cuda_runtime`` call (``cudaLaunchKernel``,
  ``cudaMemcpyAsync``, ``cudaMemsetAsync``) and every blocking wait on the device as
  ``cudaStreamSynchronize``/``cudaDeviceSynchronize``;
* the GPU of rank ``r`` (``pid`` = ``r``): ``process_labels`` ``GPU r``; one thread per stream,
  ``stream N `` (Kineto's trailing space), with ``kernel``/``gpu_memcpy``/``gpu_memset`` events
  carrying ``stream``, ``device``, ``correlation`` and ``External id`` args, each joined to its
  launch by an ``ac2g`` flow;
* DataLoader workers and the pin-memory thread (separate processes in a real run, absent from
  Kineto traces) as their own processes ``pt_data_worker_{w}`` / threads, and the loader's
  queue depths as counter tracks (``ph: "C"``).

Instants are µs (Kineto's unit) from the simulation's start.
"""
from __future__ import annotations

from pathlib import Path

import orjson

from stepsim.models.simulate import SimResult
from stepsim.simcore.atomic import write_atomic

__all__ = ["chrome_trace", "write_chrome_trace", "HOST_PID"]

HOST_PID = 100_000
"""The host process of rank r is ``HOST_PID + r`` (a real trace uses the OS pid; GPUs use
their device index, so the two never collide)."""
LOADER_PID = 200_000
_LAUNCH_API = {"kernel": "cudaLaunchKernel", "collective": "cudaLaunchKernel",
               "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}
_GPU_CAT = {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}
_COPY_NAME = {"h2d": "Memcpy HtoD ({} -> Device)", "d2h": "Memcpy DtoH (Device -> {})",
              "d2d": "Memcpy DtoD (Device -> Device)", "": "Memcpy HtoD ({} -> Device)"}


def _meta(what: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "ts": 0, "args": args}


def _rank_of(lane: str) -> int:
    head = lane.split(".", 1)[0]
    return int(head[4:]) if head.startswith("rank") and head[4:].isdigit() else 0


def _task_name(t) -> str:
    if t.kind == "memcpy" and not t.name.startswith("Memcpy"):
        return _COPY_NAME[t.copy_kind].format("Pinned" if t.pinned else "Pageable")
    if t.kind == "memset" and not t.name.startswith("Memset"):
        return "Memset (Device)"
    return t.name or t.id


def _stream_tids(streams: set[str]) -> dict[str, int]:
    """Stream name → thread id: its CUDA stream number (``7``, ``0:7``), else 1000 + its
    place among the named streams (a hand-written model's ``compute``, ``comm`` ...)."""
    named = sorted(s for s in streams if not s.rsplit(":", 1)[-1].isdigit())
    return {s: int(s.rsplit(":", 1)[-1]) if s.rsplit(":", 1)[-1].isdigit()
            else 1000 + named.index(s) for s in streams}


def chrome_trace(result: SimResult) -> dict:
    """The trace as a dict (``traceEvents``, ``displayTimeUnit``, ``schemaVersion``; with one
    rank also ``distributedInfo``)."""
    model = result.model
    tasks = model.task_map() if model is not None else {}
    ev: list[dict] = []
    for r in result.ranks:
        hp = HOST_PID + r
        ev += [_meta("process_name", hp, 0, name="python"),
               _meta("process_labels", hp, 0, labels="CPU"),
               _meta("process_sort_index", hp, 0, sort_index=r),
               _meta("thread_name", hp, hp, name=f"thread {hp} (python)"),
               _meta("process_name", r, 0, name="python"),
               _meta("process_labels", r, 0, labels=f"GPU {r}"),
               _meta("process_sort_index", r, 0, sort_index=16_777_216 + r)]
        for s, (a, b) in enumerate(zip(result.step_starts_us[result.ranks.index(r)][:-1],
                                       result.step_starts_us[result.ranks.index(r)][1:])):
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                       "pid": hp, "tid": hp, "ts": a, "dur": b - a, "args": {}})
    # launches: the host's launch span ends when the device task is launched (TaskRun.launch_us)
    corr: dict[tuple[int, float], list] = {}
    for i, run in enumerate(result.runs):
        if run.launch_us is not None:
            corr.setdefault((run.rank, run.launch_us), []).append(i + 1)
    streams: set[tuple[int, str]] = set()
    stream_tid = _stream_tids({run.stream for run in result.runs})
    for i, run in enumerate(result.runs):
        t = tasks.get(run.task)
        if t is None:
            continue
        streams.add((run.rank, run.stream))
        tid = stream_tid[run.stream]
        args = {"device": run.rank, "stream": tid, "correlation": i + 1, "External id": i + 1,
                "step": run.step}
        if t.bytes is not None:
            args["bytes"] = t.bytes
        ev.append({"ph": "X", "cat": _GPU_CAT.get(t.kind, "kernel"), "name": _task_name(t),
                   "pid": run.rank, "tid": tid, "ts": run.start_us,
                   "dur": run.end_us - run.start_us, "args": args})
        ev.append({"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": i + 1,
                   "pid": run.rank, "tid": tid, "ts": run.start_us})
        if run.launch_us is None:   # issued with the step (a hand-written model's task that
            # no host op launches): a zero-cost launch call where its step starts
            hp = HOST_PID + run.rank
            starts = result.step_starts_us[result.ranks.index(run.rank)]
            at = starts[min(max(run.step, 0), len(starts) - 1)]
            ev += [{"ph": "X", "cat": "cuda_runtime", "name": _LAUNCH_API.get(t.kind),
                    "pid": hp, "tid": hp, "ts": at, "dur": 0,
                    "args": {"correlation": i + 1, "External id": i + 1}},
                   {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i + 1, "pid": hp,
                    "tid": hp, "ts": at}]
    for rank, stream in sorted(streams):
        tid = stream_tid[stream]
        named = "" if stream.rsplit(":", 1)[-1].isdigit() else f"({stream}) "
        ev += [_meta("thread_name", rank, tid, name=f"stream {tid} {named}"),
               _meta("thread_sort_index", rank, tid, sort_index=tid)]
    workers: dict[str, tuple[int, int]] = {}
    for sp in result.spans:
        rank = _rank_of(sp.lane)
        lane = sp.lane.split(".", 1)[-1]
        if lane == "host":
            hp = HOST_PID + rank
            ev += _host_event(sp, hp, corr, tasks, result)
        elif not lane.startswith("stream") and sp.kind == "busy":
            if sp.lane not in workers:
                pid = LOADER_PID + 100 * rank + len(workers)
                workers[sp.lane] = (pid, pid)
                ev += [_meta("process_name", pid, 0, name=f"pt_data_worker_{lane[6:]}"
                             if lane.startswith("worker") else "pt_pin_memory"),
                       _meta("thread_name", pid, pid, name=f"{lane} (rank {rank}, simulated)")]
            pid, tid = workers[sp.lane]
            ev.append({"ph": "X", "cat": "python_function", "name": sp.name, "pid": pid,
                       "tid": tid, "ts": sp.start_us, "dur": sp.dur_us,
                       "args": {"step": sp.step, "category": sp.category}})
    for series, pts in result.samples.items():
        rank_s, _, name = series.partition(".")
        pid = HOST_PID + (int(rank_s[4:]) if rank_s[4:].isdigit() else 0)
        ev += [{"ph": "C", "pid": pid, "ts": t, "name": name, "args": {"batches": v}}
               for t, v in pts]
    doc = {"schemaVersion": 1, "traceEvents": ev, "displayTimeUnit": "ms",
           "otherData": {"producer": "stepsim (simulated)", "warmup_steps": result.warmup}}
    if len(result.ranks) == 1:
        doc["distributedInfo"] = {"rank": result.ranks[0], "world_size":
                                  model.comm.world_size if model is not None else 1}
    return doc


def _host_event(sp, hp: int, corr: dict, tasks: dict, result: SimResult) -> list[dict]:
    """The Kineto events of one host-thread span: a launch call joined to its device task, a
    blocking wait as a synchronize call, CPU work as a ``cpu_op``."""
    base = {"ph": "X", "pid": hp, "tid": hp, "ts": sp.start_us, "dur": sp.dur_us}
    ids = corr.get((sp.rank, sp.end_us)) if sp.kind == "busy" and sp.category == "launch" else None
    if ids:
        out = []
        for i in ids:
            t = tasks.get(result.runs[i - 1].task)
            out += [{**base, "cat": "cuda_runtime", "args": {"correlation": i, "External id": i},
                     "name": _LAUNCH_API.get(t.kind if t is not None else "kernel")},
                    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": hp, "tid": hp,
                     "ts": sp.start_us}]
        return out
    if sp.kind == "busy" and sp.category == "launch":
        # a launch whose kernel coarsening merged into a later one: its host cost only
        return [{**base, "cat": "cpu_op", "name": f"{sp.name} (kernel merged into a later "
                 "task)", "args": {"category": "launch", "step": sp.step}}]
    if sp.kind == "wait" and sp.cause in ("sync", "d2h", "h2d"):
        api = "cudaDeviceSynchronize" if "all" in sp.name.lower() else "cudaStreamSynchronize"
        return [{**base, "cat": "cuda_runtime", "name": api, "args": {"cause": sp.cause}}]
    if sp.kind == "busy":
        return [{**base, "cat": "cpu_op", "name": sp.name or sp.category,
                 "args": {"category": sp.category, "step": sp.step}}]
    return []


def write_chrome_trace(result: SimResult, path: str | Path) -> None:
    """Write :func:`chrome_trace` of ``result`` to ``path`` as JSON (gzip for a ``.gz``
    name), atomically."""
    data = orjson.dumps(chrome_trace(result))
    if str(path).endswith(".gz"):
        import gzip

        data = gzip.compress(data, mtime=0)
    write_atomic(Path(path), data)
