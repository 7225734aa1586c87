"""A StepModel's run as SimPy processes, which can be stopped where a step count's times are
known and continued to a larger count (:mod:`models.extend`).

Process start order (fixed; SimPy's FIFO tie-break then makes runs repeatable byte for byte):
for each rank in ``model.ranks`` order: its DataLoader workers (0..n-1), its pin-memory thread,
its device streams (in ``device.streams`` order), then its host thread. Each process loops
over the steps of one :class:`models.step_bound.StepBound`.
"""
from __future__ import annotations

from collections.abc import Callable

import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.device import Barrier, LaunchQueue, StepEvents, stream_process
from stepsim.models.engine import Runs, Setup, last_step, released_tasks
from stepsim.models.host import host_process
from stepsim.models.loader import DataLoaderSim
from stepsim.models.plans import stream_plans
from stepsim.models.ranks import rank_host_plan
from stepsim.models.step_bound import StepBound
from stepsim.simcore.errors import SimulationError

__all__ = ["Processes", "simulated"]


class Processes:
    """One run of ``su``'s model as SimPy processes, to ``su.n_total`` steps or, raised
    (:meth:`extend`), more.

    Attributes:
        starts: per rank, the host's step-start instants (µs) so far.
        loaders: per rank, its DataLoader.
    """

    def __init__(self, su: Setup, runs: Runs, waits: list):
        model, hook = su.model, su.hook
        self.su, self.runs = su, runs
        self.env = env = simpy.Environment()
        self.bound = bound = StepBound(su.n_total)
        barrier = Barrier(env, len(model.ranks)) if len(model.ranks) > 1 else None
        self.events = events = StepEvents(env)
        self.hosts, self.starts, self.loaders = [], [], []
        pools: dict[str, CpuPool] = {}
        released = released_tasks(model)
        for i, rp in enumerate(model.ranks):
            cpu = su.pool(env, rp.host, pools)
            loader = DataLoaderSim(env, su.lp, cpu, su.rngs[f"rank{rp.rank}.loader"], hook,
                                   rp.rank)
            self.loaders.append(loader)
            engines = {"h2d": simpy.Resource(env, capacity=1),
                       "d2h": simpy.Resource(env, capacity=1)}
            lq = LaunchQueue(env, model.device.launch_queue_depth)
            for w in released:
                events.done(rp.rank, -1, w).succeed()
            for s, plans in stream_plans(model, i, su.replay).items():
                on_cores = s == model.comm.comm_stream and bool(su.comm_cpu)
                env.process(stream_process(env, rp.rank, s, plans, events, barrier, engines,
                                           hook, bound, lq, runs, su.sync_step,
                                           su.backlog.get(s, 0.0), cpu if on_cores else None,
                                           su.comm_cpu, su.comm_wake))
            st: list[float] = []
            self.starts.append(st)
            self.hosts.append(env.process(host_process(
                env, rp.rank, rank_host_plan(model, i, su.ops), rp.delay_us, cpu,
                model.host.uses_core, loader, events, hook, bound, st, lq, waits,
                su.sync_step, su.rngs[f"rank{rp.rank}.host"])))

    def _device_done(self, step: int) -> list[simpy.Event]:
        """Every rank's every task's end of ``step``."""
        return [self.events.done(rp.rank, step, tid) for rp in self.su.model.ranks
                for tid in self.su.model.task_map()]

    def _run(self, evs: list[simpy.Event], why: Callable[[float], str]) -> None:
        """Run until every event of ``evs`` is processed (the run's own events keep their
        order: the condition only stops it); where the run ends first, a SimulationError
        whose message is ``why(t)`` (``t`` the instant it ended, µs)."""
        pending = [ev for ev in evs if not ev.processed]
        if not pending:
            return
        try:
            self.env.run(until=simpy.AllOf(self.env, pending))
        except RuntimeError as e:
            if "until" not in str(e) and "No scheduled events" not in str(e):
                raise
            raise SimulationError(why(self.env.now)) from None

    def reach(self, k: int) -> None:
        """Run until the step marks up to entry ``k`` are final (every host started step
        ``k`` and the device finished step ``k - 1``: :func:`models.simulate.step_marks`),
        ``k`` at most the bound's count minus one.

        Raises:
            SimulationError: the run ends first (a deadlock).
        """
        env, bound = self.env, self.bound
        evs = [bound.watch(env, rp.rank, k) for rp, st in zip(self.su.model.ranks, self.starts)
               if len(st) <= k]
        self._run(evs + self._device_done(k - 1),
                  lambda t: f"the simulation stopped before step {k} (t={t:.1f} us): a deadlock")

    def extend(self, n_total: int) -> bool:
        """Run ``n_total`` steps instead; False where a process already ended at the current
        count (the run is then only that count's)."""
        return self.bound.raise_to(n_total)

    def finish(self):
        """Run to the end, as a run of the bound's count: every host thread through its steps,
        then the device through the last measured one; ``(step_starts, loaders)``.

        Raises:
            SimulationError: a deadlock."""
        n_total = self.bound.n

        def deadlock(t: float) -> str:   # the stuck ranks are known only once it stopped
            stuck = [self.su.model.ranks[i].rank for i, st in enumerate(self.starts)
                     if len(st) <= n_total]
            return (f"the simulation deadlocked on rank(s) {stuck} at t={t:.1f} us: a sync or "
                    "wait on a task that can never finish (launched later in the step, or on "
                    "another rank's collective that is never entered)")
        self._run(self.hosts, deadlock)
        # let the device finish the measured window too (it may lag behind the host)
        last = last_step(n_total, self.su.replay)
        self._run(self._device_done(last), lambda t: f"the device never finished step {last} "
                  f"(t={t:.1f} us): a task waits for something that never happens")
        return self.starts, self.loaders


def simulated(su: Setup, runs: Runs, waits: list):
    """The run as SimPy processes, to ``su.n_total`` steps: ``(step_starts, loaders)``."""
    return Processes(su, runs, waits).finish()
