"""Which produce records calibrate ``loader.produce`` (calibration.sidecar_fit): only a worker
process's first batch carries start-up; the main thread's batches at num_workers=0 and a
worker's later batches are kept, and a record left out is counted in a warning."""
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import loader_from_sidecar, steady_records

# the user's in-window produce times at num_workers=0 (ms), issue: the 2536 one was dropped
MS = [2536, 437, 103, 322, 538, 284, 150, 574]


def _sidecar(num_workers, produce):
    steps = [{"t_start_us": 1000.0 * i, "wall_us": 1000.0, "cpu_us": 900.0, "next_wall_us": 10.0,
              "next_cpu_us": 10.0, "profiled": True} for i in range(8)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "host_cores": 8, "produce": produce,
                                   "loader": {"num_workers": num_workers, "batch_size": 4},
                                   "steps": steps})


def _rec(worker, seq, ms, t_end_us):
    return {"worker": worker, "pid": 100 + worker, "seq": seq, "wall_us": ms * 1e3,
            "cpu_us": ms * 1e3, "t_end_us": t_end_us}


def test_main_thread_keeps_every_in_window_batch():
    side = _sidecar(0, [_rec(-1, 6 + i, ms, 1000.0 * i + 500) for i, ms in enumerate(MS)])
    recs = steady_records(side, 0)
    assert sorted(r.wall_us / 1e3 for r in recs) == sorted(MS)
    lp, _, warnings, _ = loader_from_sidecar(side)
    assert abs(lp["produce"].mean_us / 1e3 - sum(MS) / len(MS)) < 1e-6
    assert not any("left out" in w for w in warnings)


def test_worker_later_batches_kept_first_batch_dropped_and_counted():
    produce = [_rec(w, seq, 30 + seq, 1000.0 * (2 * seq + w) + 500)
               for w in (0, 1) for seq in range(4)]
    side = _sidecar(2, produce)
    recs = steady_records(side, 2)
    assert sorted((r.worker, r.seq) for r in recs) == [(w, s) for w in (0, 1) for s in (1, 2, 3)]
    warnings = loader_from_sidecar(side)[2]
    assert any(w.startswith("2 produce record(s) left out") for w in warnings), warnings
    # a window that starts after the workers' first batches drops nothing
    late = _sidecar(2, [r for r in produce if r["seq"] > 0])
    assert len(steady_records(late, 2)) == 6
    assert not any("left out" in w for w in loader_from_sidecar(late)[2])
