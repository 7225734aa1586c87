"""The host's cores as a FIFO resource: ``simpy.Resource``'s events, fewer Python calls.

:class:`models.cpu.CpuPool` takes a core for every quantum of contended CPU work, about 90
request/release pairs a simulated step of a 2-rank gloo job (each gloo wake-up is one), and
``simpy.Resource``'s generic put/get queues cost more Python calls per pair than the events
themselves. :class:`Cores` schedules the very same events at the very same points (so every
event keeps its place in the queue, ties included, and a run is the same to the bit):

* a request is an event, triggered at once (scheduled now) when fewer than ``capacity`` hold
  a core; else it joins the queue. Either way the head of the queue is then tried once, as
  ``BaseResource._trigger_put`` does on a new put;
* a release takes the core from its holder at once and schedules a release event now; when
  that event is processed the head of the queue is tried once (a core freed meanwhile goes to
  the oldest waiter then, not earlier);
* leaving a request's ``with`` before it was granted takes it off the queue, and still
  releases (a no-op release event, as ``simpy.Resource`` schedules one).

``count`` (holders) and ``queue`` (waiters, oldest first) read as ``simpy.Resource``'s.
"""
from __future__ import annotations

import simpy
from simpy.events import PENDING

__all__ = ["CoreRequest", "Cores"]


class CoreRequest(simpy.Event):
    """A request for one core (a context manager, as ``simpy.Resource.request()``'s)."""

    def __init__(self, cores: Cores):
        env = cores.env
        self.env, self.callbacks, self._value = env, [], PENDING
        self.cores = cores
        queue = cores.queue
        queue.append(self)
        head = queue[0]               # tried once, as a new put tries the queue's head
        if len(cores.users) < cores.capacity:
            queue.pop(0)
            cores.users.append(head)
            head._ok, head._value = True, None
            env.schedule(head)

    def __enter__(self) -> CoreRequest:
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        if self._value is PENDING:    # not granted: off the queue
            self.cores.queue.remove(self)
        if exc_type is not GeneratorExit:
            self.cores.release(self)
        return None


class Cores:
    """``capacity`` cores shared first come, first served (see the module docstring)."""

    def __init__(self, env: simpy.Environment, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.env, self.capacity = env, capacity
        self.users: list[CoreRequest] = []
        self.queue: list[CoreRequest] = []

    @property
    def count(self) -> int:
        """Requests holding a core now."""
        return len(self.users)

    def request(self) -> CoreRequest:
        return CoreRequest(self)

    def release(self, req: CoreRequest) -> simpy.Event:
        """Free ``req``'s core now; the queue's head is tried when the returned event (already
        triggered) is processed."""
        try:
            self.users.remove(req)
        except ValueError:
            pass
        ev = simpy.Event(self.env)
        ev._ok, ev._value = True, None
        ev.callbacks.append(self._grant)
        self.env.schedule(ev)
        return ev

    def _grant(self, _ev) -> None:
        queue = self.queue
        if queue and len(self.users) < self.capacity:
            req = queue.pop(0)
            self.users.append(req)
            req._ok, req._value = True, None
            self.env.schedule(req)
