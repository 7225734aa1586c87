"""bench/sweep_parts.py: its driver marks a sweep's phases in the order they run, reads every
point's CPU in the worker that ran it, and leaves the sweep's output as a plain ``stepsim
sweep`` prints it (order and counts only: no timing is asserted)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepsim.scenarios.parallel import default_jobs

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "tests" / "data" / "ddp_demo_model.json"

_spec = importlib.util.spec_from_file_location("sweep_parts", REPO / "bench" / "sweep_parts.py")
sweep_parts = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(REPO / "bench"))
_spec.loader.exec_module(sweep_parts)


@pytest.mark.skipif(default_jobs() < 2, reason="the sweep's points run in worker processes only "
                    "where this process may use 2 CPUs or more")
def test_marks_in_order_every_point_read_output_unchanged():
    args = ["sweep", str(MODEL), "comm.bucket_cap_mb=1,2,5,10", "--steps", "3", "--warmup", "1",
            "--jobs", "2"]
    env = dict(os.environ)
    r = sweep_parts.one_sweep(env, args)
    order = [r[k] for k in ("cli", "pool0", "first", "last", "pool1", "exit", "wall")]
    assert order == sorted(order) and order[0] > 0
    assert sum(r["per_worker"]) == 4 and len(r["per_worker"]) <= 2
    assert len(r["first_ms"]) == len(r["per_worker"])
    plain = subprocess.run([sys.executable, "-m", "stepsim", *args], capture_output=True,
                           text=True, env=env, check=True)
    assert r["stdout"] == plain.stdout and plain.stdout


def test_the_parts_add_up_to_the_wall():
    r = {"wall": 1.0, "cli": 0.2, "pool0": 0.25, "first": 0.26, "last": 0.9, "pool1": 0.91,
         "exit": 0.95, "main_cpu_at_pool": 0.3, "point_ms": 28.0, "first_ms": [40.0, 41.0],
         "per_worker": [16, 16]}
    text = sweep_parts.show("t", r, 0.8)
    assert "= 1.25x one calibrate" in text
    ms = [float(p.split(" ms")[0].rsplit(" ", 1)[1]) for p in text.split("; ")[1].split(", ")]
    assert sum(ms) == 1000.0
