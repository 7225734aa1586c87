"""``--set loader.batch_size=N``: a batch of ``N`` samples instead of the captured ``B``,
modelled from what the capture measured, each term's source named.

With ``r = N / B``:

* the DataLoader's produce time per batch (``loader.produce``, ``produce_by_worker``) ×
  ``g + (1 − g)·r``, ``g`` its part per batch (``loader.produce_per_batch_fraction``):
  *measured* by a probe at a second batch size (:mod:`calibration.batch_probe`), else 0, so
  × r: *inferred*, the measured time per batch ÷ B is the time per sample (a batch's produce
  is B sample fetches and one collate that copies B samples; a per-batch constant, which one
  batch size cannot show, is taken as none);
* the batch's bytes (``loader.batch_bytes``, what the pin-memory thread copies) × r:
  *inferred*, the measured bytes ÷ B per sample (collated tensors stack their samples);
* an epoch's batches (``loader.batches_per_epoch``) ⌈× B / N⌉;
* the training step's per-sample work × r^p, ``p`` the op's ``sample_exponent`` (1 unless a
  batch-size probe measured a growth faster than linear): else *assumed* linear in samples (a layer's FLOPs are;
  one batch size cannot show how the work grows): on a model with a device, its forward and
  backward kernels and its host-to-device copies (the batch); on a CPU model, the host
  thread's forward and backward work, a CPU calibration's ``train`` op less its
  ``per_step_fraction`` (the optimizer's ``step`` and ``zero_grad``, *measured* from the
  trace's ``Optimizer.*`` spans; with a batch-size probe, all of the step's part that did not
  grow from B to the probe's batch, *measured*), which is kept; and that op's page faults'
  CPU at the most (``refault_us``, :mod:`calibration.page_faults`) × r^q (:func:`faults_at`);
* kept per batch or per step: the main thread's receipt of a worker's batch
  (``unpickle_us``: torch moves a batch's tensors through shared memory, a cost per tensor, not
  per byte), launches and the host's other CPU work, the optimizer, collectives (gradients do
  not grow with the batch), rank skew.

The step's page faults: what a step faults in again is what glibc's malloc gave back to the
kernel (``munmap`` of an allocation over its mmap threshold, the heap's free top trimmed past
twice that), set by each process's heap, so a run pays a share of the capture's most
(``host.refault_share``, drawn per run). How much there is to give back grows with the
samples, at a rate the measurements do not agree on: on a 3-conv CNN (bench/fault_growth.py,
docs/measurements.md "Page faults against the batch size") the most a step of two fresh
processes went 1,984 → 9,152 → 36,800 pages at batch 32 → 64 → 128 (×4.6, ×4.0), the demo
workload and users' CNNs ×3.3 (×2.9–3.4) from 32 to 64, while some processes re-faulted none
and the same CNN captured at 32 and run at 64 and 128 re-faulted ×1.0 and ×3.0 its capture's
most (q ≈ 0 and 0.8). Which allocations are given back needs their sizes and the heap's
history, which the capture does not record, so the capture's most re-faulted CPU ``F``
becomes ``F·r^q`` at ``r`` times the samples (the share of it a run pays as before), ``q`` the
model's ``host.refault_growth``: without a batch-size probe a prior
(:data:`calibration.page_faults.FAULT_GROWTH_EXPONENT`, 0–2.5, *assumed*, drawn over it by
the interval; its point :data:`~calibration.page_faults.FAULT_GROWTH_POINT`, 1, linear as
before the prior); 1 with a probe (which measured the step's growth, faults and all: its
``sample_exponent``) or in a model written before the prior; 1 below the captured batch.

A model that lacks what this needs is refused (:class:`simcore.errors.NotApplicable`, one line
that says what to capture): without the captured ``batch_size`` (a trace without the capture
sidecar), without a measured produce time, or without a training step to scale.
"""
from __future__ import annotations

import math

from stepsim.models.param_base import MAX_DURATION_US
from stepsim.models.params import StepModel
from stepsim.scenarios.paths import validated
from stepsim.scenarios.primitives import _scale_host_op, _scale_task, _scaled_spec
from stepsim.scenarios.select import copy_direction
from stepsim.simcore.errors import ModelError, NotApplicable

CAPTURE_HINT = ("capture with stepsim's Capture (calibration.capture: its sidecar records the "
                "batch_size, each batch's produce time and bytes)")


def _refuse(n: int, why: str) -> NotApplicable:
    return NotApplicable(f"set loader.batch_size={n} cannot be predicted: {why}")


def check_value(value) -> int:
    """The batch size ``value`` as an int ≥ 1. Raises ModelError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"set loader.batch_size={value!r}: expected a whole number of "
                         "samples >= 1")
    return value


def grown_by(kept: float, r: float, p: float = 1.0) -> float:
    """The factor on a cost whose share ``kept`` stays (per step or per batch) and whose rest
    grows with the samples as ``samples^p``, for ``r`` times the samples:
    ``kept + (1 − kept)·r^p``."""
    return kept + (1 - kept) * r ** p


def faults_at(r: float, q: float) -> float:
    """The factor on the capture's re-faulted CPU (``refault_us``) at ``r`` times the samples
    for a growth exponent ``q`` (the module docstring): ``r^q`` above the captured batch, ``r``
    below it."""
    return r ** q if r > 1 else r


def refault_at(op, r: float, q: float) -> float:
    """The most CPU µs ``op`` re-faults a step at ``r`` times the samples for the growth
    exponent ``q``: ``refault_us × faults_at(r, q)``, at most the pages the step touches then,
    ``touched_us × r`` (its memory grows with the samples at most linearly: activations and
    their gradients per sample, the parameters' not at all), where ``touched_us`` is measured.
    A step cannot fault in again more pages than it touches, so ``q`` only holds while the
    share of its pages given back rises (a demo capture of 2026-12-06: 18,956 pages touched
    against 14,340 at most re-faulted, so up to 1.32× the linear growth)."""
    grown = op.refault_us * faults_at(r, q)
    return min(grown, op.touched_us * r) if op.touched_us > 0 else grown


def _in_range(model: StepModel, host: list[int], n: int, r: float) -> None:
    """Refuse (one line: the what-if and the batch sizes the model can price) a batch of
    ``n`` = ``r`` × the captured samples whose re-faulted CPU, at the top of the growth
    exponent's range, passes the model's bound on a duration, on an op without the pages its
    step touches (a model calibrated before they were recorded) to bound it."""
    h = model.host
    q = max(h.refault_growth, h.refault_growth_range[1] if h.refault_growth_range else 0.0)
    worst = max((h.ops[i].refault_us for i in host if h.ops[i].touched_us <= 0), default=0.0)
    if r <= 1 or worst <= 0 or worst * r ** q <= MAX_DURATION_US:
        return
    top = int(model.loader.batch_size * (MAX_DURATION_US / worst) ** (1 / q))
    raise _refuse(n, f"outside the model's range: its step's re-faulted CPU "
                     f"{worst / 1e3:.1f} ms x (N/B)^q with q up to {q:g} passes "
                     f"{MAX_DURATION_US:.0e} us past batch {top} (1-{top} are in range); "
                     "the pages the step touches, which bound it, are not in this model: "
                     "recalibrate it from its capture")


def _growth_words(model: StepModel, data: dict, host: list[int], r: float, q: float) -> str:
    """The factor the batch-size what-if put on the re-faulted CPU of the ``host`` ops (the
    model's before, ``data``'s after, :func:`refault_at`), in words: ``(N/B)^q`` where that
    holds, else bounded by the pages the steps touch (``x`` a factor)."""
    before = sum(model.host.ops[i].refault_us for i in host)
    after = sum(data["host"]["ops"][i]["refault_us"] for i in host)
    top = faults_at(r, q)
    got = after / before if before > 0 else top
    if got >= top * (1 - 1e-9):
        return f"x{top:.3g} = (N/B)^q"
    return (f"x{got:.3g}: (N/B)^q = x{top:.3g}, bounded by the pages the step touches x{r:.3g}, "
            f"{after / 1e3:.1f} ms")


def _per_sample_host(model: StepModel) -> list[int]:
    """Indices of the host's ``cpu`` ops that are the training step's per-sample work on a
    model without a device: forward and backward, or a CPU calibration's whole ``train``
    op."""
    return [i for i, op in enumerate(model.host.ops) if op.kind == "cpu" and (
        op.phase in ("forward", "backward") or op.category == "train")]


def _per_sample_device(model: StepModel) -> set[str]:
    """Ids of the device tasks that scale with the batch: forward and backward kernels and the
    host-to-device copies."""
    return {t.id for t in model.task_map().values()
            if (t.kind == "kernel" and t.phase in ("forward", "backward"))
            or copy_direction(t) == "h2d"}


def set_batch_size(model: StepModel, value) -> StepModel:
    """``model`` with batches of ``value`` samples (see the module docstring); pure.

    Raises:
        ModelError: a value that is not a whole number ≥ 1; NotApplicable: a model that lacks
            what the change needs (the message says what to capture).
    """
    n = check_value(value)
    b = model.loader.batch_size
    if b is None:
        raise _refuse(n, f"the model does not know the batch size it was captured at (a trace "
                         f"without the capture sidecar); {CAPTURE_HINT}, and calibrate that")
    if model.meta.sources.get("loader.produce") != "measured":
        raise _refuse(n, f"the DataLoader's produce time per batch is not measured; "
                         f"{CAPTURE_HINT}")
    host, device = ((), _per_sample_device(model)) if model.task_map() else \
        (_per_sample_host(model), set())
    if not host and not device:
        raise _refuse(n, "no forward or backward work in the training step to scale (the "
                         "trace marks no phases); capture at batch_size="
                         f"{n} and calibrate that")
    if n == b:
        return model
    r = n / b
    data = model.model_dump()
    ld = data["loader"]
    ld["batch_size"] = n
    g = ld["produce_per_batch_fraction"]
    rp = grown_by(g, r)
    ld["produce"] = _scaled_spec(ld["produce"], rp)
    ld["produce_per_batch_fraction"] = g / rp
    if ld["produce_by_worker"] is not None:
        ld["produce_by_worker"] = [_scaled_spec(d, rp) for d in ld["produce_by_worker"]]
    ld["batch_bytes"] = int(round(ld["batch_bytes"] * r))
    if ld["batches_per_epoch"] is not None:
        ld["batches_per_epoch"] = max(1, math.ceil(ld["batches_per_epoch"] * b / n))
    q = model.host.refault_growth     # absent from the dump at its default (1)
    _in_range(model, host, n, r)
    for i in host:
        op = data["host"]["ops"][i]
        f = op["per_step_fraction"]
        grown = grown_by(f, r, op["sample_exponent"])
        _scale_host_op(op, grown)
        op["per_step_fraction"] = f / grown
        op["refault_us"] = refault_at(model.host.ops[i], r, q)
        op["touched_us"] *= r
    rng = model.host.refault_growth_range
    if r > 1 and (q != 1 or rng is not None and rng[1] > rng[0]) \
            and any(data["host"]["ops"][i]["refault_us"] > 0 for i in host):
        drawn = f", drawn {rng[0]:g}-{rng[1]:g}" if rng is not None and rng[1] > rng[0] else ""
        data["meta"]["notes"]["refault_growth"] = (
            f"at batch {n} may spend faulting memory in again (the capture's most "
            f"{_growth_words(model, data, host, r, q)}, q {q:.3g}{drawn}, host.refault_growth)")
    for ts in data["device"]["streams"].values():
        for t in ts:
            if t["id"] in device:
                _scale_task(t, None, r, False)
    return validated(data, f"set loader.batch_size={n}")


def batch_size_note(model: StepModel, value) -> str | None:
    """What ``set loader.batch_size=value`` changes on ``model`` and each term's source, in
    words (None when it does not apply: the op's own error says why)."""
    try:
        n = check_value(value)
        set_batch_size(model, n)
    except ModelError:
        return None
    lp, b = model.loader, model.loader.batch_size
    r = n / b
    g = lp.produce_per_batch_fraction
    probe = model.meta.notes.get("batch_probe")
    probed_produce = model.meta.sources.get("loader.produce_per_batch_fraction") == "measured"
    produce = (f"produce {lp.produce.mean_us / 1e3:.1f} -> "
               f"{lp.produce.mean_us * grown_by(g, r) / 1e3:.1f} ms per batch ("
               + (f"{100 * g:.1f} % of it per batch, measured by the batch-size probe, kept; "
                  if probed_produce else "")
               + f"inferred: {lp.produce.mean_us * (1 - g) / b / 1e3:.2f} ms per sample, the "
               f"measured time per batch{' less that part' if probed_produce else ''} / {b})")
    linear = ("assumed linear in samples: a capture at one batch size cannot tell how the "
              "step's work grows with the batch; capture with "
              f"probe_batch_size={n} to measure it)")
    if model.task_map():
        step = f"its forward and backward kernels and host-to-device copies x{r:.3g} ({linear}"
    else:
        ops = [model.host.ops[i] for i in _per_sample_host(model)]
        f = max((op.per_step_fraction for op in ops), default=0.0)
        p = max((op.sample_exponent for op in ops), default=1.0)
        grown = f"the host's training-step work x{grown_by(f, r, p):.3g}"
        step = (f"{grown} (measured by the batch-size probe: it grew faster than linearly, "
                f"modelled as samples^{p:.2f} through the two measured batch sizes; a size "
                "other than the probe's is extrapolated)" if probe and p > 1 else
                f"{grown} ({100 * f:.1f} % of it per step, measured by the batch-size probe, "
                f"kept; the rest x{r:.3g})" if probe else
                f"{grown} (its optimizer step and zero_grad, {100 * f:.1f} % of it, measured "
                f"from the trace's Optimizer spans, kept per step; the rest x{r:.3g}, {linear}"
                if f > 0 else
                f"{grown} (no Optimizer spans in the trace to keep per step, so its optimizer "
                f"is scaled too, which overstates it; {linear}")
    faults = sum(model.host.ops[i].refault_us for i in _per_sample_host(model))
    q, rng = model.host.refault_growth, model.host.refault_growth_range
    spans = rng is not None and rng[1] > rng[0]
    if faults > 0 and (r <= 1 or q == 1 and not spans):
        step += (f", its page faults' CPU {faults / 1e3:.1f} -> {faults * r / 1e3:.1f} ms at "
                 f"the most (x{r:.3g}: the tensors it frees grow with the samples)")
    elif faults > 0:
        how = (f"drawn {rng[0]:g}-{rng[1]:g}, assumed without a batch-size probe: how fast "
               "what glibc gives back a step grows with the samples one batch size cannot "
               f"show (measured q 0-2.4); capture with probe_batch_size={n} to measure it"
               if spans else "as set")
        step += (f", its page faults' CPU {faults / 1e3:.1f} -> {faults * r ** q / 1e3:.1f} ms "
                 f"at the most (x{r ** q:.3g} = r^q, q {q:.3g}, {how})")
        touched = sum(model.host.ops[i].touched_us for i in _per_sample_host(model))
        if touched > 0 and faults * r ** max(q, rng[1] if spans else q) > touched * r:
            step += (f", and never past the pages the step touches x{r:.3g}, "
                     f"{touched * r / 1e3:.1f} ms (measured: its first step's faults)")
    return (f"loader.batch_size={n} (captured at {b}): every step time is per batch of {n} "
            f"samples, not {b}; {produce}, batch bytes {lp.batch_bytes} -> "
            f"{round(lp.batch_bytes * r)} (inferred: the measured bytes / {b} per sample), "
            f"{step}")
