"""A what-if on a training step's intra-op threads keeps its parallel part's work, not its
wall (models.plans.threads_ratio), held against the closed form and a real capture at torch's
default threads."""
from __future__ import annotations

import pytest

from stepsim.calibration.cpu import efficiency_range, parallel_efficiency
from stepsim.models.params import StepModel
from stepsim.scenarios.draws import uncertain_params
from stepsim.scenarios.transforms import apply_ops
from stepsim.scenarios.op_text import parse_set
from tests.test_host_physics import host_model, mean_ms


def _captured(efficiency: float, cores: int = 2) -> StepModel:
    """A 40 ms step, 90 % of it parallel on 2 threads, loading 5 ms on the main thread."""
    m = host_model(0, cores, 5.0, 40.0, threads=2, parallel=0.9)
    ops = [op.model_copy(update={"capture_threads": 2, "parallel_efficiency": efficiency})
           if op.kind == "cpu" else op for op in m.host.ops]
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


@pytest.mark.parametrize("efficiency,threads,step_ms", [
    (0.5, 1, 5 + 40.0),              # one thread did all the work: 1 thread takes the wall
    (1.0, 1, 5 + 4 + 36 * 2),        # no spinning: 1 thread takes the CPU time, 76 ms
    (0.75, 1, 5 + 4 + 36 * 1.5),     # the assumed middle
    (0.75, 4, 5 + 4 + 36 * 2 / 4),   # the work on 4 threads at the same efficiency
    (0.75, 2, 5 + 40.0),             # unchanged
])
def test_threads_keep_the_parallel_work(efficiency, threads, step_ms):
    """Serial 4 ms, parallel 36 ms wall on T₀ = 2 threads with efficiency e: work e·2·36 ms,
    on T threads e·2·36 / (T·e_T) ms (e_1 = 1), a core for each thread."""
    m = apply_ops(_captured(efficiency, cores=4), [parse_set(f"host.ops.1.threads={threads}")])
    assert mean_ms(m, 20) == pytest.approx(step_ms)


def test_a_model_without_capture_threads_keeps_the_wall():
    """An older model (no capture_threads): a threads what-if keeps the parallel part's wall."""
    m = host_model(0, 2, 5.0, 40.0, threads=2, parallel=0.9)
    assert mean_ms(apply_ops(m, [parse_set("host.ops.1.threads=1")]), 20) == pytest.approx(45.0)


def test_efficiency_is_an_assumed_range_the_draws_vary():
    for t in (2, 4, 16):
        lo, hi = efficiency_range(t)
        e = parallel_efficiency(t)
        assert lo * e == pytest.approx(1 / t) and hi * e <= 1 and hi * e == pytest.approx(1)
    m = _captured(parallel_efficiency(2))
    m = m.model_copy(update={"meta": m.meta.model_copy(update={
        "ranges": {"host.ops[1].parallel_efficiency": efficiency_range(2)}})})
    varied, _ = uncertain_params(m)
    assert varied["host.ops[1].parallel_efficiency"] == efficiency_range(2)


def test_capture_at_default_threads_records_them(tmp_path):
    """A real capture at torch's default threads (> 1 on this machine) calibrates the step's
    capture_threads and an assumed efficiency with its range."""
    import torch

    from stepsim.fit import calibrate
    from tests.conftest import record_cpu_run

    if torch.get_num_threads() < 2:
        pytest.skip("torch runs one intra-op thread here: nothing to capture at more")
    m = calibrate(record_cpu_run(tmp_path / "run", 0, threads=None))
    op = m.host.ops[1]
    assert op.capture_threads == op.threads == torch.get_num_threads()
    assert op.parallel_efficiency == parallel_efficiency(op.threads)
    assert m.meta.sources["host.ops[1].parallel_efficiency"] == "assumed"
    assert "host.ops[1].parallel_efficiency" in m.meta.ranges


def test_stalled_team_wall_inverts_the_stall():
    """A team of T threads whose work takes W with a core each, run at share s of a core per
    thread, takes W / s^T of wall and T·s·W / s^T of CPU (spinning included): the inversion
    gives W back, and a share above 1 (CPU beyond T × wall) is taken as 1."""
    import numpy as np

    from stepsim.calibration.cpu import stalled_team_wall

    for t, s in ((2, 0.5), (2, 2 / 3), (4, 0.5)):
        wall = np.array([35_000.0 / s ** t])
        got, share = stalled_team_wall(wall, t * s * wall, t)
        assert got[0] == pytest.approx(35_000.0) and share == pytest.approx(s)
    got, share = stalled_team_wall(np.array([10_000.0]), np.array([30_000.0]), 2)
    assert share == 1.0 and got[0] == pytest.approx(10_000.0)
