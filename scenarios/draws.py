"""The Monte Carlo draws of a prediction interval: what is uncertain in a model, the plan of
draws over it, and each draw's simulated mean step (:mod:`scenarios.predict` says what the
interval covers).

A draw needs only its mean step and that mean's own standard error, so it is simulated
keeping step times alone (``keep="steps"``: no spans, no critical path) and names no
bottleneck; the point estimate is the one summarised in full. Draws travel to the executor in
a few chunks (:func:`draw_means`), each carrying the model once rather than once per draw;
each draw has its own seeds, so the means do not depend on the chunking, ``jobs`` or the
executor.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence

import numpy as np
from pydantic import ValidationError

from stepsim.models.host_speed import draw_factor, noise_runs, spread_factors
from stepsim.models.params import DeviceTask, DurationSpec, StepModel
from stepsim.models.run_share import MIN_SHARE_RUNS, draw_share
from stepsim.models.simulate import simulate
from stepsim.scenarios.bootstrap import bootstrap_measured
from stepsim.scenarios.noop import unread_params
from stepsim.scenarios.parallel import Progress, run_many
from stepsim.scenarios.paths import get_value, replaced
from stepsim.scenarios.stepcount import mean_std_error_us
from stepsim.scenarios.transforms import Operation, SetOp, apply_ops, set_path
from stepsim.simcore.errors import ModelError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.rng import spawn_streams

DEFAULT_RANGES = {"inferred": (0.8, 1.2), "assumed": (0.5, 1.5)}
"""Factor ranges for parameters without an entry in ``meta.ranges``."""
SETTINGS = ("loader.num_workers", "loader.prefetch_factor", "loader.batch_size",
            "loader.batches_per_epoch", "comm.world_size", "comm.grad_accum_steps",
            "comm.bucket_cap_mb", "comm.first_bucket_cap_mb", "device.launch_queue_depth")
"""Configuration the user chooses (or the hardware fixes), never varied as an uncertain
quantity even when a trace could not record it."""
SPLITS = ("parallel_fraction", "block_fraction", "per_step_fraction", "per_batch_fraction")
"""A host op's split (inferred in closed form from measured wall and CPU times) and the parts
of a step and a batch that do not grow with its samples: not varied by a factor, which could
make its parts exceed the whole; the measured times' variation is in the bootstrap."""
ABSOLUTE = {"host.interference": "host.interference_range",
            "host.oversub": "host.oversub_range",
            "host.team_stall": "host.team_stall_range",
            "host.refault_share": "host.refault_share_range",
            "host.same_thread": "host.same_thread_range",
            "host.refault_growth": "host.refault_growth_range"}
"""Paths drawn as values from a range the model holds (not as factors on the value)."""
OWN_STREAM = ("host.same_thread",)
"""Paths drawn from a stream of their own, so that a model without them draws every other
path as before (the same-thread cost came later than the shared stream's order)."""
PER_RUN = ("host.refault_share",)
"""Of them, those each run draws anew (a process's heap layout): an interval of the pooled
mean of ``runs`` runs draws the mean of ``runs`` uniform values, or, where the model holds the
runs the value was measured over (``host.refault_share_runs``), the Student-t predictive of
that mean (:mod:`models.run_share`: it carries the measured mean's own error), from a stream
of its own."""
PER_RUN_MEASURED = {"host.refault_share": "refault_share_runs"}
"""The :data:`HostParams` field holding each ``PER_RUN`` path's measured runs."""
HOST_SPEED = "host.cpu_scale"
"""The path of the host's run-to-run speed (drawn by :func:`models.host_speed.draw_factor`)."""
WINDOW, STEPS = "window", "steps"
"""Source names of the bootstrap of measured samples and of the step-to-step variation."""
CHUNKS_PER_JOB = 4
"""Chunks of draws per process (a few, so the processes finish together and progress moves)."""


def _perturbed(value: Any, f: float) -> Any:
    """``value`` times ``f`` (see :mod:`scenarios.predict`); raises TypeError when it cannot
    be."""
    if isinstance(value, bool) or value is None:
        raise TypeError(type(value).__name__)
    if isinstance(value, int):
        return max(1 if value >= 1 else 0, int(round(value * f)))
    if isinstance(value, float):
        return value * f
    if isinstance(value, DurationSpec):
        return value.scaled(f)
    if isinstance(value, DeviceTask):
        return value.model_copy(update={
            "dur_us": value.dur_us * f,
            "breakdown_us": {k: v * f for k, v in value.breakdown_us.items()}})
    if isinstance(value, list):
        return [_perturbed(v, f) for v in value]
    if isinstance(value, dict):
        return {k: _perturbed(v, f) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def uncertain_params(model: StepModel, ops: Sequence[Operation] | None = None,
                     after: StepModel | None = None
                     ) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """``(varied, skipped)``: path → factor range for every inferred/assumed quantity (not
    the ``SETTINGS``) and every ``meta.ranges`` entry that can be varied; path → reason for
    the rest. With ``ops`` (``()``: none), a quantity that nothing in the model after them
    reads (:func:`scenarios.noop.unread_params`: ``loader.pin_gbps`` without pinned memory)
    is skipped too, saying why, and so is one an op sets (``--set``: the user's value, held
    in every draw; :func:`set_paths`); None: every quantity, read or not. ``after``: the
    model after ``ops`` where the caller has it (not applied again)."""
    wanted = {p: DEFAULT_RANGES[s] for p, s in sorted(model.meta.sources.items())
              if s in DEFAULT_RANGES and p not in SETTINGS and p not in ABSOLUTE
              and not p.endswith(SPLITS)}
    wanted.update(model.meta.ranges)
    varied, skipped = {}, {}
    unread = {} if ops is None else unread_params(after if after is not None
                                                  else _after(model, ops))
    given = set_paths(ops or ())
    for path, rng in wanted.items():
        why = _held_why(path, given, unread)
        if why:
            skipped[path] = why
            continue
        try:
            value = get_value(model, path)
            if value is None or isinstance(value, (bool, str)):
                continue        # a setting, not a quantity (or absent): nothing to vary
            _perturbed(value, 1.0)
        except ModelError as e:
            skipped[path] = str(e)
        except TypeError as e:
            skipped[path] = f"a {e} value cannot be varied"
        else:
            if _is_zero(value):
                skipped[path] = ("0: a factor range varies nothing (give it an absolute "
                                 "value to vary, or measure it)")
            elif rng[0] != rng[1] or rng[0] != 1.0:
                varied[path] = (float(rng[0]), float(rng[1]))
    for path, holder in ABSOLUTE.items():
        rng = get_value(model, holder)
        if path == "host.refault_growth" and ops is not None and not any(
                getattr(op, "path", None) == "loader.batch_size" for op in ops):
            continue                # read only by a batch-size what-if
        if rng is None or rng[0] == rng[1]:
            continue
        why = _held_why(path, given, unread)
        if why:
            skipped[path] = why
        else:
            varied[path] = (float(rng[0]), float(rng[1]))
    return varied, skipped


def _held_why(path: str, given: set[str], unread: dict[str, str]) -> str | None:
    """Why ``path`` is not drawn though it has a range: an op sets it (``given``,
    :func:`set_paths`) or nothing after the ops reads it (``unread``); None: draw it."""
    if _is_set(path, given):
        return SET_WHY
    if path in unread:
        return f"not read here: {unread[path]}"
    return None


SET_WHY = "set by the user (--set): that value, held in every draw"
"""Why a path an op sets is not drawn (fresh10: ``--set host.refault_share=0`` moved the point
while the interval's listing still drew the share over 0–1)."""


def set_paths(ops: Sequence[Operation]) -> set[str]:
    """The parameter paths ``ops`` set to a value (``--set``): the user's, not drawn."""
    return {op.path for op in ops if isinstance(op, SetOp)}


def _is_set(path: str, given: set[str]) -> bool:
    """Whether ``--set`` gave ``path``, a value inside it (``loader.produce.mean_us`` of a
    drawn ``loader.produce``) or the whole that holds it."""
    return any(g == path or g.startswith((path + ".", path + "["))
               or path.startswith((g + ".", g + "[")) for g in given)


def _after(model: StepModel, ops: Sequence[Operation]) -> StepModel:
    """``model`` after ``ops`` (itself when they do not apply: their own error is raised
    where they are applied)."""
    try:
        return apply_ops(model, ops) if ops else model
    except ModelError:
        return model


def _is_zero(value: Any) -> bool:
    if isinstance(value, DurationSpec):
        return value.mean_us == 0
    return isinstance(value, (int, float)) and value == 0


def perturb(model: StepModel, factors: dict[str, float]) -> StepModel:
    """A copy of ``model`` with the value at each path multiplied by its factor (pure); a
    path of ``ABSOLUTE`` is set to the value given as a what-if's ``set`` sets it
    (:func:`scenarios.transforms.set_path`: ``host.team_stall`` with the step's work
    re-inverted at it).

    Raises:
        ModelError: a path that does not resolve or whose value cannot be varied.
    """
    for path, f in factors.items():
        if path in ABSOLUTE:
            model = set_path(model, path, f)
            continue
        try:
            new = _perturbed(get_value(model, path), f)
        except TypeError as e:
            raise ModelError(f"{path}: a {e} value cannot be varied") from None
        model = replaced(model, path, new)
    return model


def draw_plan(model: StepModel, n: int, seed: int, runs: int = 1,
              ops: Sequence[Operation] | None = None) -> list[tuple[dict[str, float], int]]:
    """The ``n`` Monte Carlo draws for ``model``: (path → factor, simulation seed) each; the
    simulation seed also seeds the draw's bootstrap. ``host.cpu_scale`` is the pooled speed of
    ``runs`` runs, its ``n`` factors its distribution's quantiles at ``k / (n + 1)`` in random
    order (:func:`models.host_speed.spread_factors`). Depends only on ``seed``, ``runs`` and
    the model's uncertain paths: every
    one is drawn, and those nothing reads after ``ops`` (:func:`uncertain_params`) are then
    left out, so what-ifs of one model share the other paths' factors."""
    varied, _ = uncertain_params(model)
    read = varied if ops is None else uncertain_params(model, ops)[0]
    streams = spawn_streams(seed, ["intervals", "host_speed", "own_stream", "run_shares"])
    rng, own = streams["intervals"], streams["own_stream"]
    measured = {p: getattr(model.host, f) for p, f in PER_RUN_MEASURED.items()
                if p in varied and len(getattr(model.host, f)) >= MIN_SHARE_RUNS}
    noise = noise_runs(model.host, varied[HOST_SPEED]) if HOST_SPEED in varied else []
    host = (spread_factors(noise, varied[HOST_SPEED], runs, n,
                           streams["host_speed"], model.host.cpu_scale_error_log)
            if HOST_SPEED in varied else None)
    plan = []
    for i in range(n):
        # the host path still takes its numbers from the shared stream, so every other path
        # draws what it drew before the host factors were spread (spread_factors)
        factors = {p: draw_factor(noise, (lo, hi), runs, rng,
                                  model.host.cpu_scale_error_log) if p == HOST_SPEED
                   else float(rng.uniform(lo, hi, max(runs, 1)).mean()) if p in PER_RUN
                   else float(rng.uniform(lo, hi)) for p, (lo, hi) in varied.items()
                   if p not in OWN_STREAM}
        factors.update({p: float(own.uniform(*varied[p])) for p in OWN_STREAM if p in varied})
        # (the shared stream's uniform draws are still taken above, so the other paths draw
        # what they drew before the runs were kept)
        factors.update({p: draw_share(x, max(runs, 1), streams["run_shares"])
                        for p, x in measured.items()})
        if host is not None:
            factors[HOST_SPEED] = host[i]
        plan.append(({p: f for p, f in factors.items() if p in read},
                     int(rng.integers(0, 2**31 - 1))))
    return plan


def _draw_chunk(item) -> list[tuple[float, float]]:
    """``(mean step µs, its standard error µs)`` of each draw of a chunk (step times only)."""
    model, ops, draws, steps, warmup = item
    return [_draw(model, ops, factors, seed, boot_seed, steps, warmup)
            for factors, seed, boot_seed in draws]


@gc_paused
def _draw(model: StepModel, ops: tuple, factors: dict[str, float], seed: int,
          boot_seed: int | None, steps: int, warmup: int) -> tuple[float, float]:
    """One draw, the collector paused from its perturbation through its simulation."""
    try:
        boot = perturb(model, factors)
        if boot_seed is not None:
            boot = bootstrap_measured(boot, np.random.default_rng(boot_seed), window=False)
    except ValidationError as e:   # a duration drawn past the most a model holds
        err = e.errors()[0]
        raise ModelError(f"an interval draw leaves an invalid model ({err['msg']}, "
                         f"{err['input']!r}): the model's values are too near their bounds "
                         "to vary (use --draws 0)") from None
    job = simulate(apply_ops(boot, ops), steps=steps, warmup=warmup, seed=seed,
                   keep="steps").job_step_us
    return float(job.mean()), mean_std_error_us(job)


def _chunks(items: list, jobs: int) -> list[list]:
    """``items`` in order, cut into one chunk (``jobs`` ≤ 1) or about ``CHUNKS_PER_JOB`` per
    process, of sizes that differ by at most one."""
    k = 1 if jobs <= 1 else min(len(items), jobs * CHUNKS_PER_JOB)
    cuts = np.linspace(0, len(items), k + 1).round().astype(int)
    return [items[a:b] for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def draw_means(model: StepModel, ops: Sequence[Operation], plan, steps: int, warmup: int,
               seed: int, jobs: int = 1, progress: Progress | None = None,
               sources: Collection[str] | None = None, measured_steps: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Simulate the draws of ``plan`` (:func:`draw_plan`): each draw's mean step (µs, with the
    measured window's error when ``measured_steps`` is given) and own standard error.
    ``sources`` None: every source; else only those (see :mod:`scenarios.predict`; the others
    at the point's values, ``seed`` the point's simulation seed). ``progress`` is called with
    the draws done (chunk by chunk)."""
    chunks = draw_chunks(model, ops, plan, steps, warmup, seed, jobs, sources)
    done = np.cumsum([len(c[2]) for c in chunks])
    hook = None if progress is None else (
        lambda k, total: progress(int(done[-1]) if k == total else int(done[k - 1]),
                                  int(done[-1])))
    return draw_results(run_many(_draw_chunk, chunks, jobs=jobs, progress=hook), plan, steps,
                        sources, measured_steps)


def draw_chunks(model: StepModel, ops: Sequence[Operation], plan, steps: int, warmup: int,
                seed: int, jobs: int = 1, sources: Collection[str] | None = None) -> list:
    """:func:`draw_means`'s work items: the draws of ``plan`` cut into chunks
    (:func:`_chunks`), each ``(model, ops, draws, steps, warmup)`` for :func:`_draw_chunk`."""
    def on(name: str) -> bool:
        return sources is None or name in sources

    draws = [({p: f for p, f in factors.items() if on(p)}, sd if on(STEPS) else seed,
              sd if on(WINDOW) else None) for factors, sd in plan]
    return [(model, tuple(ops), c, steps, warmup) for c in _chunks(draws, jobs)]


def draw_results(parts: list, plan, steps: int,
                 sources: Collection[str] | None = None, measured_steps: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`draw_means`'s answer from :func:`_draw_chunk`'s results ``parts`` (in order)."""
    results = [r for part in parts for r in part]
    means = np.array([m for m, _ in results], dtype=float)
    errors = np.array([e for _, e in results], dtype=float)
    if measured_steps and (sources is None or STEPS in sources) and measured_steps < steps:
        z = np.array([np.random.default_rng([sd, 1]).standard_normal() for _, sd in plan])
        means = means + z * errors * np.sqrt(steps / measured_steps - 1)
    return means, errors


def quantiles(means: np.ndarray) -> tuple[float, float, float]:
    """P10, P50, P90 of the draws' means at rank p (n + 1): [P10, P90] then holds a new draw
    with probability 0.8 whatever n is (the default interpolation between ranks would give
    about 0.7 at n = 16)."""
    p10, p50, p90 = (float(v) for v in np.percentile(means, [10, 50, 90], method="weibull"))
    return p10, p50, p90
