"""Issue 11's DDP row: ``plan``, ``whatif`` and ``diagnose`` on a 2-rank gloo DDP model, and
its simulated step (CPU ms, SimPy events), for this checkout against a reference copy of
stepsim measured in the same run, interleaved (``ratio`` = reference ÷ this).

    git archive main | tar -x -C /tmp/ref/stepsim      # the reference: any stepsim copy
    flock /tmp/cpu-timing.lock python bench/ddp_verbs.py --ref /tmp/ref [--repeats 2]

``--ref`` is a folder holding a ``stepsim`` package (put first on ``PYTHONPATH`` for its
runs); without it only this checkout is timed. Each verb runs in one process (``--jobs 1``)
so the figures are one core's, and ``plan`` and the 1 MB-bucket ``whatif`` also at the
default ``--jobs``. The model is
``tests/data/ddp_demo_model.json`` unless ``--model`` names another; ``--step-cap 1`` also
times its simulated step at 1 MB buckets (the ``whatif``'s scenario). Goals (issue 11):
``plan`` < 10 s, ``whatif`` < 2 s.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from issue11 import timed  # noqa: E402
from issue11_env import PY, ROOT, uptime  # noqa: E402

VERBS = {
    "plan --jobs 1": ["plan", "--jobs", "1"],
    "plan": ["plan"],
    "whatif bucket_cap_mb=1": ["whatif", "--jobs", "1", "--set", "comm.bucket_cap_mb=1"],
    "whatif bucket_cap_mb=1 (default jobs)": ["whatif", "--set", "comm.bucket_cap_mb=1"],
    "whatif straggler 40 ms": ["whatif", "--jobs", "1", "--fix",
                               "straggler:rank=1,phase=forward,ms=40"],
    "diagnose": ["diagnose"],
}

SIM = """
import sys, time
from pathlib import Path
import simpy
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
m = StepModel.model_validate_json(Path(sys.argv[1]).read_text())
if {cap!r} is not None:
    from stepsim.scenarios.op_text import parse_set
    from stepsim.scenarios.transforms import apply_ops
    m = apply_ops(m, [parse_set("comm.bucket_cap_mb={cap}")])
n = {n}
simulate(m, steps=20, warmup=3, seed=0, keep="steps")
t = time.process_time()
r = simulate(m, steps=n, warmup=20, seed=0, keep="steps")
dt = time.process_time() - t
count = [0]
step = simpy.Environment.step
def counted(self):
    count[0] += 1
    return step(self)
simpy.Environment.step = counted
simulate(m, steps=n, warmup=20, seed=0, keep="steps")
print(f"{{dt * 1e3 / (n + 21):.3f}} {{count[0] / (n + 21):.1f}} {{sum(r.job_step_us):.6f}}")
"""


def env_for(pkg: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pkg)
    return env


def sim_step(pkg: Path, model: Path, n: int, cap: float | None = None
             ) -> tuple[float, float, str]:
    """(CPU ms per simulated step, SimPy events per step, the steps' sum in µs as text), the
    model's DDP buckets rebuilt at ``cap`` MB where given."""
    p = subprocess.run([PY, "-c", SIM.format(n=n, cap=cap), str(model)], capture_output=True,
                       text=True, env=env_for(pkg), check=True)
    ms, ev, total = p.stdout.split()
    return float(ms), float(ev), total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", type=Path, help="folder holding the reference stepsim package")
    ap.add_argument("--model", type=Path, default=ROOT / "tests/data/ddp_demo_model.json")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300, help="simulated steps of the step row")
    ap.add_argument("--verbs", default=",".join(VERBS),
                    help="comma-separated subset ('' for none)")
    ap.add_argument("--step-cap", type=float, action="append", default=[],
                    help="also time the simulated step at this comm.bucket_cap_mb (repeatable; "
                         "1 is the bucket_cap_mb=1 whatif's scenario)")
    a = ap.parse_args(argv)
    here = ROOT.parent if (ROOT.parent / "stepsim").exists() else None
    if here is None:   # this checkout as a package: a folder with a stepsim link to it
        here = Path("/tmp") / f"ddp-verbs-{os.getpid()}"
        here.mkdir(exist_ok=True)
        (here / "stepsim").symlink_to(ROOT)
    copies = [("this", here)] + ([("ref", a.ref)] if a.ref else [])
    print(uptime(), flush=True)
    for _ in range(a.repeats):
        for cap in [None, *a.step_cap]:
            got = {name: sim_step(pkg, a.model, a.steps, cap) for name, pkg in copies}
            line = ", ".join(f"{k} {ms:.3f} ms CPU / {ev:.0f} events a step (sum {tot})"
                             for k, (ms, ev, tot) in got.items())
            ratio = (f"; ratio {got['ref'][0] / got['this'][0]:.2f}x" if a.ref else "")
            at = "" if cap is None else f", bucket_cap_mb={cap:g}"
            print(f"simulated step ({a.model.name}{at}, {a.steps}+20 steps): {line}{ratio}",
                  flush=True)
    for label in filter(None, a.verbs.split(",")):
        args = VERBS[label]
        for _ in range(a.repeats):
            res = {}
            for name, pkg in copies:
                res[name] = timed([PY, "-m", "stepsim", args[0], str(a.model), *args[1:]],
                                  env_for(pkg))
            line = ", ".join(f"{k} {t:.1f} s {note}" for k, (t, note) in res.items())
            ratio = f"; ratio {res['ref'][0] / res['this'][0]:.2f}x" if a.ref else ""
            goal = {"plan": " (goal < 10 s)", "whatif": " (goal < 2 s)"}.get(args[0], "")
            print(f"{label}{goal}: {line.strip()}{ratio}", flush=True)
    print(uptime())
    return 0


if __name__ == "__main__":
    sys.exit(main())
