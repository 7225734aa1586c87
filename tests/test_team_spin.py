"""A team's threads spinning at libgomp's barrier between and after its regions
(:func:`models.cpu_spin.spin`, ``host.team_spin_us``), in closed form: a spinner is a
runnable thread that advances nothing, so it takes core time from a DataLoader worker
while it lasts, and nothing on a pool that cannot be contended (0 workers unchanged)."""
from __future__ import annotations

import pytest
import simpy

from stepsim.models.cpu import DEFAULT_QUANTUM_US, CpuPool
from stepsim.models.cpu_spin import spin


def _beside(spinners: int, spin_us: float, work_us: float, threads: int = 1,
            named: bool = True, contended: bool = True, stop_at: float | None = None) -> dict:
    """``spinners`` team threads spinning ``spin_us`` (or till ``stop_at``) from 0 beside
    ``threads`` threads of ``work_us`` of work each (named: placed when they wake), 2 cores."""
    env = simpy.Environment()
    pool = CpuPool(env, 2, contended=contended)
    out = {"ends": [], "spin_end": None}
    stop = env.event() if stop_at is not None else None

    def spinning():
        yield from spin(pool, spinners, spin_us, stop)
        out["spin_end"] = env.now

    def worker(i):
        yield from pool.work(work_us, thread=("w", i) if named else None)
        out["ends"].append(env.now)

    def stopper():
        yield env.timeout(stop_at)
        stop.succeed()

    env.process(spinning())
    for i in range(threads):
        env.process(worker(i))
    if stop is not None:
        env.process(stopper())
    env.run()
    return out


@pytest.mark.parametrize("work_us,spin_us", [(8_000.0, 10_000.0), (30_000.0, 10_000.0),
                                              (4_000.0, 10_000.0)])
def test_a_worker_that_woke_shares_a_spinners_core(work_us, spin_us):
    """Two spinners (a team of 3's other threads) hold both cores; a worker that wakes joins
    one core's queue and holds half of it while they spin: it ends at 2W if W ≤ S/2, else at
    S + (W − S/2) (without the spin: W), within a quantum (the share is taken per quantum)."""
    out = _beside(2, spin_us, work_us)
    want = 2 * work_us if work_us <= spin_us / 2 else spin_us + (work_us - spin_us / 2)
    assert out["ends"][0] == pytest.approx(want, abs=DEFAULT_QUANTUM_US)
    assert out["spin_end"] == pytest.approx(spin_us)


def test_spinners_share_the_fair_pool_with_balanced_threads():
    """One spinner beside two threads without an identity (the fair pool's round robin): three
    runnable threads on two cores, 2/3 of a core each while the spinner lasts: W of work with
    S ≥ 1.5 W ends at 1.5 W; the pool's FIFO round robin hands the quanta out in its own
    order at ties, so they end between 1.25 W and 1.5 W (without the spinner: W)."""
    out = _beside(1, 60_000.0, 20_000.0, threads=2, named=False)
    for end in out["ends"]:
        assert 25_000.0 - 1e-6 <= end <= 30_000.0 + DEFAULT_QUANTUM_US


def test_the_next_region_stops_the_spin():
    out = _beside(2, 1e18, 30_000.0, stop_at=6_000.0)
    assert out["spin_end"] == pytest.approx(6_000.0)
    assert out["ends"][0] == pytest.approx(6_000.0 + (30_000.0 - 3_000.0), abs=DEFAULT_QUANTUM_US)


def test_nothing_changes_where_the_cores_cannot_be_contended():
    """0 workers: the pool is not contended, a spinner takes no core anyone needs."""
    out = _beside(1, 10_000.0, 8_000.0, contended=False)
    assert out["ends"][0] == pytest.approx(8_000.0)
    assert out["spin_end"] == pytest.approx(0.0)


def _with_spin(m, spin_us: float):
    return m.model_copy(update={"host": m.host.model_copy(update={"team_spin_us": spin_us})})


@pytest.mark.parametrize("threads,workers", [(2, 0), (1, 1), (1, 0)])
def test_a_step_without_co_runners_or_team_is_unchanged(threads, workers):
    """0 workers beside a 2-thread team (no co-runner: the pool cannot be contended) and any
    one-thread step (no team: the demo's) simulate the same with the spin as without."""
    from tests.test_host_physics import host_model, mean_ms
    m = host_model(workers, 2, 15.0, 16.0, threads=threads, parallel=0.83 if threads > 1 else 0)
    assert mean_ms(_with_spin(m, 7_400.0), 40) == mean_ms(m, 40)


def test_the_spin_slows_a_worker_bound_step_by_at_most_its_length():
    """Beside one worker the spin takes core time from it: the step is longer, by less than
    the spin a step (it cannot cost more than the spinner's own time on a core)."""
    from tests.test_host_physics import host_model, mean_ms
    m = host_model(1, 2, 15.0, 16.0, threads=2, parallel=0.83)
    base, spun = mean_ms(m, 60), mean_ms(_with_spin(m, 7_400.0), 60)
    assert base < spun <= base + 7.4


def _side(workers: int, steps: list[tuple[float, float, float]], threads: int = 2):
    from types import SimpleNamespace as NS
    return NS(torch_num_threads=threads, loader=NS(num_workers=workers),
              steps=[NS(profiled=False, next_proc_cpu_us=p, next_cpu_us=c, next_wall_us=w)
                     for p, c, w in steps])


def test_the_spin_is_measured_from_a_0_worker_next():
    """The process's CPU beyond the main thread's in a 0-worker next(), per other thread, the
    median over the steps: measured; through the whole next() a floor, said; with workers, or
    one thread, not measured."""
    from stepsim.calibration.team_stall import team_spin_from_sidecar
    host, src, warn = team_spin_from_sidecar(_side(0, [(23.0e3, 15.5e3, 16e3),
                                                       (24.0e3, 16.0e3, 16e3),
                                                       (22.0e3, 15.0e3, 16e3)]))
    assert host == {"team_spin_us": pytest.approx(7.5e3)}
    assert src == {"host.team_spin_us": "measured"} and not warn
    host, _, warn = team_spin_from_sidecar(_side(0, [(8.0e3, 4.0e3, 4.1e3)], threads=3))
    assert host["team_spin_us"] == pytest.approx(2.0e3) and not warn
    _, _, warn = team_spin_from_sidecar(_side(0, [(8.0e3, 4.0e3, 4.1e3)]))
    assert warn and "floor" in warn[0]
    host, src, warn = team_spin_from_sidecar(_side(1, [(8.0e3, 4.0e3, 4.1e3)]))
    assert host == {} and src == {"host.team_spin_us": "assumed"} and warn
    assert team_spin_from_sidecar(_side(0, [(8.0e3, 4.0e3, 4.1e3)], threads=1)) == ({}, {}, [])
