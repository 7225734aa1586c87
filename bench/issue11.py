"""Issue 11's table, one subcommand per row, each a ratio against a reference measured in the
same run.

Rows (``python bench/issue11.py ROW [--quick]``; ``all`` runs every row):

* ``sim-resnet``, ``sim-largest``, ``sim-dlrm``: simulate N steps of a calibrated, coarsened
  shared trace (ResNet-50 on a V100; the largest single-rank trace; the 8-rank DLRM job),
  keeping every span (``keep="all"``) and only step times (``keep="steps"``). Reference: the
  trace's measured median step (hardware ÷ simulator per step, goal ≥ 100×), and, where SimPy
  events ran, a bare ``heapq`` event loop doing as many (the Python floor). ``sim-largest``
  also reports the traced peak memory at two step counts (flat in steps is the goal).
* ``simulate``: ``stepsim simulate --steps N`` of the calibrated ResNet-50 trace end to end
  (seconds, and the hardware's time for as many steps ÷ it), next to its parts in one process:
  the simulation keeping every span and the summary of it (``models.metrics.summarize``).
* ``whatif``, ``plan``: the CLI verbs with their draws (seconds; goal < 2 s / < 10 s), next to
  the same verb without draws.
* ``sweep``: 32 points × 200 steps, as a ratio to one ``calibrate`` of its trace, both with
  their bytecode compiled once, as an installed copy has it (``bench/installed.py``).
* ``calibrate-54mb``, ``calibrate-500mb``, ``calibrate-2gb``: ``stepsim calibrate`` end to end
  as a ratio to a bare ``orjson.loads`` of the same (decompressed) bytes, with peak memory as a
  ratio to the file; the large ones are synthetic (``bench/load_bench.synthetic_trace``),
  written to /tmp on demand and deleted after. ``calibrate-2gb`` streams steps 10 to 19
  (``--steps 10:20``); its ``orjson.loads`` reference runs only at ``--quick`` sizes (a whole
  load of 2 GB of JSON takes ~16 GB).
* ``calibrate-ranks``: 128 and 256 rank files (the DLRM job's eight files, copied to N ranks
  with their ``distributedInfo`` rewritten), written to /tmp; seconds, peak memory, CPU
  seconds ÷ wall seconds (cores used).
* ``sim-ranks``: 1,024 ranks, 30 steps, step times only, and 256 keeping every span (goal:
  1,024 ranks in < 60 s).

``--quick`` shrinks every row so the whole table runs in about a minute on this machine.
Timings are only meaningful under ``flock /tmp/cpu-timing.lock``; each row prints ``uptime``.
"""
from __future__ import annotations

import argparse
import heapq
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from installed import installed_env  # noqa: E402
from issue11_calibrate import row_calibrate, row_ranks, synthetic_row  # noqa: E402
from issue11_env import CACHE, DLRM, LARGEST, PY, RESNET, TRACES, uptime  # noqa: E402


def model_of(trace: Path, coarse: bool = True):
    """The calibrated (coarsened) model of ``trace``, cached in /tmp (as JSON) between runs."""
    from stepsim.fit import calibrate_gpu
    from stepsim.models.coarsen import coarsen

    from stepsim.models.params import StepModel

    CACHE.mkdir(exist_ok=True)
    key = CACHE / (trace.name.replace(".", "_") + f"{'' if coarse else '.fine'}.json")
    if key.exists():   # JSON, not a pickle: fields added to the model since get their defaults
        return StepModel.model_validate_json(key.read_text())
    m = calibrate_gpu(trace, coarse=False)
    m = coarsen(m) if coarse else m
    key.write_text(m.model_dump_json())
    return m


def model_json(trace: Path) -> Path:
    """``stepsim calibrate`` of ``trace`` (cached JSON)."""
    CACHE.mkdir(exist_ok=True)
    out = CACHE / (trace.name.replace(".", "_") + ".model.json")
    if not out.exists():
        subprocess.run([PY, "-m", "stepsim", "calibrate", str(trace), "-o", str(out)],
                       check=True, capture_output=True)
    return out


def heapq_floor_s(n_events: int, concurrent: int = 8) -> float:
    """Seconds for a bare heapq event loop to process ``n_events`` events, ``concurrent``
    processes each scheduling its next event from a callback (the Python floor)."""
    heap, push, pop = [], heapq.heappush, heapq.heappop
    eid = 0

    def cb(t):
        nonlocal eid
        eid += 1
        push(heap, (t + 1.5, eid, cb))

    for i in range(concurrent):
        push(heap, (float(i), i, cb))
    eid = concurrent
    t0 = time.perf_counter()
    for _ in range(n_events):
        t, _, f = pop(heap)
        f(t)
    return time.perf_counter() - t0


def counted_simulate(model, steps: int, warmup: int = 3, keep: str = "all"):
    """Simulate and return (result, wall seconds, CPU seconds, SimPy events scheduled: 0 when
    the model was solved without events)."""
    import simpy

    import stepsim.models.engine as eng
    from stepsim.models.simulate import simulate

    envs = []

    class Env(simpy.Environment):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            envs.append(self)

    orig = eng.simpy.Environment
    eng.simpy.Environment = Env
    try:
        t, c = time.perf_counter(), time.process_time()
        r = simulate(model, steps=steps, warmup=warmup, keep=keep)
        dt, dc = time.perf_counter() - t, time.process_time() - c
    finally:
        eng.simpy.Environment = orig
    return r, dt, dc, sum(next(e._eid) for e in envs)


def row_sim(label: str, trace: Path, steps: int, memory: bool = False) -> None:
    """Both ways a simulation keeps its output: ``keep="all"`` (every span, for summaries and
    timelines: what ``stepsim simulate`` runs) and ``keep="steps"`` (step times only: draws,
    sweeps)."""
    from stepsim.models.simulate import simulate

    m = model_of(trace)
    hw_us = m.meta.notes["measured_median_step_us"]
    for keep in ("all", "steps"):
        r, dt, dc, n_ev = counted_simulate(m, steps, keep=keep)
        per_us, cpu_us = dt * 1e6 / (steps + 3), dc * 1e6 / (steps + 3)
        if n_ev:
            c0 = time.process_time()
            heapq_floor_s(n_ev)
            floor_cpu = time.process_time() - c0
            events = (f"{n_ev} events = {n_ev / (steps + 3):.0f} per step, {dc / floor_cpu:.1f}x "
                      f"a bare heapq loop of as many events ({floor_cpu:.2f} s CPU)")
        else:
            events = ("solved without events (models/solo.py, models/solo_ranks.py), repeated "
                      "steps replayed (models/memo.py, models/memo_ranks.py)")
        print(f"{label} keep={keep}: {len(m.ranks)} rank(s), {steps}+3 steps in {dt:.2f} s wall, "
              f"{dc:.2f} s CPU = {cpu_us / 1e3:.3f} ms CPU per step; hardware step "
              f"{hw_us / 1e3:.1f} ms -> {hw_us / cpu_us:.1f}x faster than the hardware per CPU "
              f"second ({hw_us / per_us:.1f}x per wall second; goal >= 100x); {events}")
    if memory:
        for keep in ("all", "steps"):
            peaks = []
            for n in (max(5, steps // 10), max(10, steps // 5)):
                tracemalloc.start()
                simulate(m, steps=n, warmup=3, keep=keep)
                peaks.append((n, tracemalloc.get_traced_memory()[1]))
                tracemalloc.stop()
            (n1, p1), (n2, p2) = peaks
            print(f"  keep={keep}: traced peak {p1 / 1e6:.1f} MB at {n1} steps, {p2 / 1e6:.1f} MB "
                  f"at {n2} steps: {(p2 - p1) / (n2 - n1) / 1e3:.1f} kB per step (goal: flat)")


def row_simulate(trace: Path, steps: int) -> None:
    """``stepsim simulate`` end to end, and its simulation and summary apart."""
    from stepsim.models.metrics import summarize
    from stepsim.models.params import StepModel

    mj = model_json(trace)
    m = StepModel.model_validate_json(mj.read_text())
    hw_us = m.meta.notes["measured_median_step_us"]
    r, dt, dc, _ = counted_simulate(m, steps, warmup=20)
    c0 = time.process_time()
    summarize(r)
    ds = time.process_time() - c0
    t1, e1 = timed([PY, "-m", "stepsim", "simulate", str(mj), "--steps", str(steps), "--json"])
    print(f"simulate ({trace.name}, {steps}+20 steps): {t1:.2f} s end to end {e1}= "
          f"{hw_us * (steps + 20) / 1e6 / t1:.1f}x faster than the hardware; in one process "
          f"simulate {dc:.2f} s CPU, summarize {ds:.2f} s CPU ({ds / max(dc, 1e-9):.1f}x the "
          f"simulation)")


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    """Run ``cmd`` (in ``env``): (wall seconds, a note with its CPU seconds, or why it failed)."""
    import resource

    t = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        return dt, "FAILED: " + (p.stderr.strip().splitlines() or ["?"])[-1] + " "
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return dt, f"[{cpu:.1f} s CPU] "


def row_verb(verb: str, trace: Path, draws: int, steps: int, extra: list[str]) -> None:
    mj = model_json(trace)
    base = [PY, "-m", "stepsim", verb, str(mj), *extra, "--steps", str(steps)]
    t0, e0 = timed(base + ["--draws", "0"])
    t1, e1 = timed(base + ["--draws", str(draws)])
    goal = {"whatif": 2, "plan": 10}[verb]
    print(f"{verb} ({trace.name}): {t1:.1f} s with {draws} draws {e1}(goal < {goal} s), "
          f"{t0:.1f} s without {e0}; ratio {t1 / max(t0, 1e-9):.1f}x")


def row_sweep(trace: Path, points: int, steps: int) -> None:
    mj = CACHE / "sweep-model.json"
    CACHE.mkdir(exist_ok=True)
    env = installed_env(CACHE)   # both as installed: bytecode compiled once, not each run
    tc, ec = timed([PY, "-m", "stepsim", "calibrate", str(trace), "-o", str(mj)], env)
    vals = ",".join(f"{0.5 + 1.5 * k / max(1, points - 1):.3f}" for k in range(points))
    ts, es = timed([PY, "-m", "stepsim", "sweep", str(mj), f"device.gap_scale={vals}",
                    "--steps", str(steps), "--warmup", "3"], env)
    print(f"sweep {points} points x {steps} steps: {ts:.1f} s {es}= {ts / tc:.2f}x one "
          f"calibrate of its trace ({tc:.1f} s {ec}) (goal < 1x)")


def row_sim_ranks(n: int, steps: int) -> None:
    """``n`` ranks keeping only the step times (``keep="steps"``: what draws and sweeps
    keep), then ``n // 4`` keeping every span, each against the DLRM job's hardware step;
    CPU seconds without tracemalloc, then the traced peak in a second run."""
    m = model_of(DLRM)
    hw_us = m.meta.notes["measured_median_step_us"]
    for k, keep in ((n, "steps"), (max(8, n // 4), "all")):
        ranks = [m.ranks[j % len(m.ranks)].model_copy(update={"rank": j}) for j in range(k)]
        big = m.model_copy(update={"ranks": ranks,
                                   "comm": m.comm.model_copy(update={"world_size": k})})
        r, dt, dc, n_ev = counted_simulate(big, steps, keep=keep)
        tracemalloc.start()
        counted_simulate(big, steps, keep=keep)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        how = f"{n_ev} SimPy events" if n_ev else "solved without events"
        print(f"simulate {k} ranks (DLRM ranks repeated) keep={keep}, {steps}+3 steps: "
              f"{dt:.1f} s wall, {dc:.1f} s CPU = {dc * 1e3 / (steps + 3):.0f} ms CPU per job "
              f"step ({hw_us * (steps + 3) / 1e6 / dc:.2f}x the hardware), traced peak "
              f"{peak / 1e6:.0f} MB; {how} (goal: 1,024 ranks, 30 steps in < 60 s)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row", choices=["all", "sim-resnet", "sim-largest", "sim-dlrm", "simulate",
                                    "whatif",
                                    "plan", "sweep", "calibrate-54mb", "calibrate-500mb",
                                    "calibrate-2gb", "calibrate-ranks", "sim-ranks"])
    ap.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    ap.add_argument("--steps", type=int, default=None,
                    help="simulated steps of the sim-* rows (default 1000; --quick: 10-20)")
    a = ap.parse_args(argv)
    if not TRACES.is_dir():
        print(f"shared traces not found at {TRACES}")
        return 1
    q = a.quick
    print(uptime(), flush=True)
    rows = {
        "sim-resnet": lambda: row_sim("sim-resnet", RESNET, a.steps or (20 if q else 1000)),
        "sim-largest": lambda: row_sim("sim-largest", LARGEST, a.steps or (10 if q else 1000),
                                       memory=True),
        "sim-dlrm": lambda: row_sim("sim-dlrm", DLRM, a.steps or (10 if q else 1000)),
        "simulate": lambda: row_simulate(RESNET, a.steps or (50 if q else 1000)),
        "whatif": lambda: row_verb("whatif", RESNET, 4 if q else 100, 10 if q else 30,
                                   ["--set", "loader.num_workers=4"] + (["--warmup", "3"] if q else [])),
        "plan": lambda: row_verb("plan", RESNET, 2 if q else 16, 5 if q else 30,
                                 ["--warmup", "3", "--max-moves", "1"] if q else []),
        "sweep": lambda: row_sweep(RESNET, 4 if q else 32, 10 if q else 200),
        "calibrate-54mb": lambda: row_calibrate("calibrate-54mb", LARGEST, 600),
        "calibrate-500mb": lambda: synthetic_row("calibrate-500mb", 20 if q else 500),
        "calibrate-2gb": lambda: synthetic_row("calibrate-2gb", 40 if q else 2000, 600,
                                                "10:20"),
        "calibrate-ranks": lambda: row_ranks([8, 16] if q else [128, 256], 600),
        "sim-ranks": lambda: row_sim_ranks(16 if q else 1024, 5 if q else 30),
    }
    for name, fn in rows.items():
        if a.row in ("all", name):
            fn()
            sys.stdout.flush()
    if a.row == "all":
        print(uptime())
    return 0


if __name__ == "__main__":
    sys.exit(main())
