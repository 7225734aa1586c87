"""Same seed, same output: every shared trace simulates to the step times recorded from the
simulator before its speed-ups (``tests/golden_steps.json``), within 0.1 %.

Each target (a trace file, or a folder of rank files) is calibrated, coarsened and simulated
for ``STEPS`` steps after ``WARMUP`` (seed 0); its job step times and, where the model keeps
a captured window, the window replay's step times are compared. Regenerate the golden file
only from a simulator known to be right: ``python tests/test_determinism.py --write``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).with_name("golden_steps.json")
STEPS, WARMUP, SEED = 10, 3, 0
RTOL = 1e-3


def targets(root: Path) -> list[Path]:
    """Every trace file, plus every folder holding several (as one multi-rank model)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and (
        p.name.endswith(".json") or p.name.endswith(".json.gz")))
    dirs = sorted({p.parent for p in files if sum(q.parent == p.parent for q in files) > 1})
    return files + dirs


def outputs(path: Path) -> dict | None:
    """The simulated step times (µs) of one target; None when it does not calibrate."""
    from stepsim.fit import calibrate_gpu
    from stepsim.models.coarsen import coarsen
    from stepsim.models.simulate import simulate, window_replay
    from stepsim.simcore.errors import StepsimError

    try:
        m = calibrate_gpu(path, coarse=False)
    except StepsimError:
        return None
    c = coarsen(m)
    r = simulate(c, steps=STEPS, warmup=WARMUP, seed=SEED)
    out = {"steady_us": [float(v) for v in r.job_step_us]}
    if c.replay is not None:
        out["window_us"] = [float(v) for v in window_replay(c).replayed_us]
    return out


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


def _ids() -> list[str]:
    return sorted(_golden()) if GOLDEN.exists() else []


TWO_RUNS = ("kineto/be239c04_rec2021-06-08/resnet50_num_workers_0", "param")
"""Folders of traces from different runs (two recordings 8 minutes apart; unrelated models),
which calibrated as one multi-rank job before the GPU path checked its rank files were one run
(``calibration.same_run``): refused now, so out of the golden file."""


@pytest.mark.parametrize("rel", TWO_RUNS)
def test_a_folder_of_two_runs_is_refused(rel):
    from stepsim.fit import calibrate_gpu
    from stepsim.simcore.errors import InputError
    from tests.conftest import shared_traces

    with pytest.raises(InputError, match="not of the same run"):
        calibrate_gpu(shared_traces() / rel, coarse=False)


@pytest.mark.parametrize("rel", _ids())
def test_same_seed_same_steps(rel):
    from tests.conftest import shared_traces

    root = shared_traces()
    want = _golden()[rel]
    got = outputs(root / rel)
    assert got is not None, f"{rel} no longer calibrates"
    for key, ref in want.items():
        assert key in got, f"{rel}: {key} missing"
        np.testing.assert_allclose(got[key], ref, rtol=RTOL, err_msg=f"{rel}: {key}")


if __name__ == "__main__" and "--write" in sys.argv:
    root = Path(__file__).resolve().parents[2] / "shared" / "traces"
    res = {}
    for p in targets(root):
        rel = str(p.relative_to(root))
        o = outputs(p)
        print(rel, "-" if o is None else np.median(o["steady_us"]), flush=True)
        if o is not None:
            res[rel] = o
    GOLDEN.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
