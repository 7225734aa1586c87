"""Why the DDP demo's last 7 MiB all-reduce (DDP's defaults: a 1 MiB first bucket, then 7 MiB)
takes longer than the single 8 MiB all-reduce of ``bucket_cap_mb=25`` (issue 12; the guess:
the two buckets' all-reduces overlap on gloo's two worker threads).

Runs the demo's job (:mod:`demo.ddp_job`, 2 gloo ranks) profiled at the defaults and at
``bucket_cap_mb=25``, alternated ``--rounds`` times (so slow drift of the host hits both
alike), and reads every profiled step of every rank's trace: per setting, the last
``gloo:all_reduce``'s duration (µs; it includes the wait for the peer), its start after the
later rank's last autograd event (the all-reduce cannot start before both ranks' buckets are
ready), its duration from that later start (the transfer without the skew), and for the
defaults the share of steps where the first bucket's all-reduce still ran when the last
started (the overlap the guess needs) and the share where the two ran on different gloo
threads. Prints medians with the P10-P90 over steps, and the ratio of the transfers per
element. Then what fills each rank's backward after the later rank's last autograd event:
that tail's length, and the training thread's own events in it by name (their
time clipped to the tail, per rank-step, mean; nested events counted under each name, so
the names' times overlap), per setting and the difference: where the defaults' tail is
longer than cap25's (ddp17: 8.00 against 7.33 ms in the kept demos' timed runs).

``--timed``: the same two settings unprofiled, as the demo's re-measured runs, in ABBA order
(each setting first in half the pairs, so a run's place after the other cannot pass for the
setting's own cost): per rank-step the backward's wall and training-thread CPU and its tail
(``demo.ddp_job`` instants), medians by setting and by place in the pair.

Run alone under the lock, from the repository root (about 40 s):
``flock /tmp/cpu-timing.lock python bench/ddp_bucket_pair.py --rounds 3``.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

GRAD = "autograd::engine::evaluate_function"


def steps_of(trace: Path) -> list[dict]:
    """Per profiled step of one rank's trace: its all-reduces (start, end µs, tid, elements)
    in start order and its last autograd event's end (µs, the rank's clock)."""
    data = json.loads(trace.read_text())
    ev = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    ars = sorted((e for e in ev if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    grads = [e for e in ev if e["name"].startswith(GRAD)]
    bwd = sorted((e for e in ev if e["name"] == "backward"), key=lambda e: e["ts"])
    out = []
    for s in sorted((e for e in ev if e["name"].startswith("ProfilerStep#")),
                    key=lambda e: e["ts"]):
        a, b = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ars if a <= e["ts"] < b]
        g = [e["ts"] + e["dur"] for e in grads if a <= e["ts"] < b]
        b_ev = [e for e in bwd if a <= e["ts"] < b]
        if inside and g and b_ev:
            e_b = b_ev[-1]
            main = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e["tid"] == e_b["tid"] and e is not e_b
                    and e_b["ts"] <= e["ts"] < e_b["ts"] + e_b["dur"]]
            out.append({"ars": [(e["ts"], e["ts"] + e["dur"], e["tid"],
                                 int(np.prod(e["args"]["Input Dims"][0]))) for e in inside],
                        "grad_end": max(g), "bwd_end": e_b["ts"] + e_b["dur"], "main": main})
    return out


def read_run(folder: Path) -> dict[str, list[float]]:
    """The readings of one profiled run (both ranks' traces, one clock: one host's
    ``perf_counter``-based profiler timestamps)."""
    ranks = [steps_of(folder / f"rank{r}.json") for r in (0, 1)]
    n = min(len(x) for x in ranks)
    got = {"last_us": [], "after_later_grad_us": [], "start_lag_us": [], "overlap": [],
           "two_threads": [], "elements": [], "tail_us": [], "tail_ops": []}
    for k in range(n):
        later = max(r[k]["grad_end"] for r in ranks)
        for r in ranks:
            ars = r[k]["ars"]
            t0, t1, tid, numel = ars[-1]
            got["last_us"].append(t1 - t0)
            got["after_later_grad_us"].append(t1 - max(t0, later))
            got["start_lag_us"].append(t0 - later)
            got["elements"].append(numel)
            got["tail_us"].append(r[k]["bwd_end"] - later)
            ops: dict[str, float] = {}
            for name, e0, e1 in r[k]["main"]:
                if e1 > later:
                    ops[name] = ops.get(name, 0.0) + e1 - max(e0, later)
            got["tail_ops"].append(ops)
            if len(ars) > 1:
                got["overlap"].append(float(ars[-2][1] > t0))
                got["two_threads"].append(float(ars[-2][2] != tid))
    return got


def main() -> None:
    from stepsim.demo.ddp_job import Run, run_plan

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timed", action="store_true")
    args = ap.parse_args()
    if args.timed:
        return timed(args.rounds, args.steps)
    tmp = Path(tempfile.mkdtemp(prefix="bucket_pair_"))
    plan = []
    for k in range(args.rounds):
        plan += [Run(f"defaults#{k}", steps=args.steps, profile_dir=str(tmp / f"d{k}")),
                 Run(f"cap25#{k}", bucket_cap_mb=25, steps=args.steps,
                     profile_dir=str(tmp / f"c{k}"))]
    run_plan(plan, timeout_s=600)
    pooled: dict[str, dict[str, list[float]]] = {"defaults": {}, "cap25": {}}
    for k in range(args.rounds):
        for name, d in (("defaults", f"d{k}"), ("cap25", f"c{k}")):
            for key, v in read_run(tmp / d).items():
                pooled[name].setdefault(key, []).extend(v)

    def med(v):
        return (f"{np.median(v):8.0f} ({np.percentile(v, 10):.0f}-{np.percentile(v, 90):.0f})"
                if v else "       -")

    for name, g in pooled.items():
        print(f"{name:9s} last all-reduce of {int(np.median(g['elements']))} elements over "
              f"{len(g['last_us'])} rank-steps: duration {med(g['last_us'])} µs; from the later "
              f"rank's last gradient {med(g['after_later_grad_us'])} µs; its start after that "
              f"{med(g['start_lag_us'])} µs"
              + (f"; the bucket before still running at its start in "
                 f"{100 * np.mean(g['overlap']):.0f} % of steps, on the other gloo thread in "
                 f"{100 * np.mean(g['two_threads']):.0f} %" if g["overlap"] else ""))
    d, c = pooled["defaults"], pooled["cap25"]
    per = ((np.median(d["after_later_grad_us"]) / np.median(d["elements"]))
           / (np.median(c["after_later_grad_us"]) / np.median(c["elements"])))
    print(f"per element, the defaults' last transfer over cap25's: x{per:.3f}; "
          f"whole: x{np.median(d['after_later_grad_us']) / np.median(c['after_later_grad_us']):.3f}"
          f"; traces in {tmp}")
    print_tails(pooled)


KEYS = ("bwd", "bwd_cpu", "grad", "grad_cpu", "tail")
"""--timed's readings per rank-step (µs): backward's wall and training-thread CPU, the same to
its last gradient hook, and from the later rank's last hook to the backward's end."""


def timed(rounds: int, steps: int) -> None:
    """The two settings unprofiled in ABBA order: backward wall, CPU and tail (µs) medians by
    setting and by place."""
    from stepsim.demo.ddp_job import Run, run_plan

    plan, place = [], {}
    for k in range(rounds):
        pair = [Run(f"defaults#{k}", steps=steps), Run(f"cap25#{k}", bucket_cap_mb=25,
                                                        steps=steps)]
        for j, r in enumerate(pair if k % 2 == 0 else pair[::-1]):
            plan.append(r)
            place[r.label] = j
    runs = run_plan(plan, timeout_s=600)
    got: dict[tuple, dict[str, list[float]]] = {}
    for label, ranks in runs.items():
        key = (label.split("#")[0], place[label])
        g = got.setdefault(key, {k: [] for k in KEYS})
        for i in range(min(len(r["phases"]) for r in ranks)):
            later = max(r["phases"][i][2] for r in ranks)
            for r in ranks:
                ph = r["phases"][i]
                g["bwd"].append(ph[3] - ph[1])
                g["bwd_cpu"].append(ph[9] - ph[7])
                g["grad"].append(ph[2] - ph[1])        # backward's compute: to its last hook
                g["grad_cpu"].append(ph[8] - ph[7])
                g["tail"].append(ph[3] - later)
    for name in ("defaults", "cap25"):
        for j in (0, 1, None):
            rows = [g for (n, p), g in got.items() if n == name and (j is None or p == j)]
            v = {k: [x for g in rows for x in g[k]] for k in KEYS}
            where = "both places" if j is None else ("first" if j == 0 else "second")
            print(f"{name:9s} {where:11s} {len(v['bwd'])} rank-steps: backward "
                  f"{np.median(v['bwd']):6.0f} µs wall, {np.median(v['bwd_cpu']):6.0f} µs CPU "
                  f"(to its last hook {np.median(v['grad']):6.0f} wall, "
                  f"{np.median(v['grad_cpu']):6.0f} CPU); "
                  f"tail after the later rank's last gradient {np.median(v['tail']):6.0f} µs")


def print_tails(pooled: dict) -> None:
    """Each rank's backward after the later rank's last autograd event: its length and the
    training thread's events in it by name (mean µs per rank-step), per setting."""
    means = {}
    for name, g in pooled.items():
        n = len(g["tail_ops"])
        names = {k for ops in g["tail_ops"] for k in ops}
        means[name] = {k: sum(ops.get(k, 0.0) for ops in g["tail_ops"]) / n for k in names}
        print(f"{name:9s} tail (later rank's last gradient to the rank's backward end) over "
              f"{n} rank-steps: mean {np.mean(g['tail_us']):.0f} µs, median "
              f"{np.median(g['tail_us']):.0f}")
    d, c = means["defaults"], means["cap25"]
    keys = sorted(set(d) | set(c), key=lambda k: -abs(d.get(k, 0.0) - c.get(k, 0.0)))
    print("training thread's events in the tail, mean µs per rank-step: defaults / cap25 / diff")
    for k in keys[:14]:
        a, b = d.get(k, 0.0), c.get(k, 0.0)
        print(f"  {a:8.0f} {b:8.0f} {a - b:+8.0f}  {k}")


if __name__ == "__main__":
    main()
