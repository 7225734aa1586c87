"""The diagnosis tree: which of the ways to be slow a run is in, with the evidence, from the
cheapest number up, each leaf naming the fix it implies and the what-if that prices it.

Steps (every one is taken; each gives one :class:`Finding`):

1. **kernel-sum ÷ step-wall** ``r`` (compute kernels; copies and collectives excluded): the
   device computes ``r`` of the step. Amdahl bounds follow: making every kernel free buys at
   most ``1 / (1 − r)``; closing every gap (kernels back to back) at most ``1 / r``.
   ``r ≥ DEVICE_BOUND`` sends the diagnosis to the kernels, below it to the gaps.
2. **gaps of the scarce lane** (the simulated baseline's critical path less device compute,
   :mod:`models.metrics`: the scarce lane's attributed gaps when the device paces, the host
   thread's own work when it does): each cause with at least ``GAP_SHARE`` of the step is a leaf: input
   pipeline, host launch overhead, host compute, host-to-device copies (pageable ones block
   the host), synchronisations, exposed communication, arrival skew, idle the trace does not
   explain; the leaf's fix is the first named fix that relieves it (:data:`FIXES`
   ``relieves``), priced by a what-if, and beside it fewer intra-op threads when the training
   step's team is oversubscribed (:mod:`scenarios.host_threads`) or the ranks on one host ×
   their intra-op threads outnumber its cores with heavy-tailed steps (host compute, CPU
   cores: :mod:`models.rank_threads`), or, where the fix itself
   oversubscribes it (workers beside torch's threads), the fix with ``plan``'s next move
   after it (:func:`scenarios.plan.look_ahead`). The evidence counts syncs,
   pageable copies and device tasks that wait on the previous step's work (a GPU run: a CPU
   run has none of them, and no GPU fix is offered to it), and says when the host cores the
   what-ifs run on were assumed.
3. **roofline** of the kernel time (:mod:`scenarios.roofline`): the verdict per class and
   phase, and the fixes it grounds (mixed precision, fused elementwise chains, CUDA graphs where
   the host paces), each with its arithmetic and its floor.
4. **memory headroom** (:mod:`scenarios.memory`).

What-ifs are :func:`scenarios.predict.predict` with Monte Carlo intervals (P10–P90).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from stepsim.models.metrics import amdahl_ceiling, label
from stepsim.models.params import StepModel
from stepsim.models.rank_threads import model_rank_threads
from stepsim.scenarios.caveats import threads_caveat
from stepsim.scenarios.fixes import FIXES
from stepsim.scenarios.host_threads import oversubscribed
from stepsim.scenarios.memory import MemoryVerdict
from stepsim.scenarios.plan import look_ahead
from stepsim.scenarios.predict import DEFAULT_DRAWS, Prediction, predict
from stepsim.scenarios.roofline import (Grounded, Roofline, fusion_factor,
                                        mixed_precision_factor)
from stepsim.scenarios.op_text import parse_fix
from stepsim.simcore.errors import ModelError

__all__ = ["Finding", "WhatIf", "Diagnosis", "diagnose", "DEVICE_BOUND", "GAP_SHARE",
           "fix_for"]

DEVICE_BOUND = 0.80
"""Kernel-sum ÷ step-wall from which the device is taken as the pacing lane: the gaps then
cost at most 20 % of the step (``1 / 0.8 = 1.25×`` at best)."""
GAP_SHARE = 0.05
"""A gap cause taking at least this share of the step is a leaf of the tree."""
PAIR_GAIN = 0.02
"""A fix's follow-up move (:func:`_pair`) is priced beside it when the pair's step is at least
this much shorter than the fix's alone (``plan``'s default ``min_gain``)."""


@dataclass(frozen=True)
class WhatIf:
    """A fix priced by simulation (µs): ``fix`` as ``--fix`` takes it; ``step_us`` the point,
    ``p10_us``/``p90_us`` its interval (None without draws); ``note`` why it did not apply;
    ``caveats`` what the prediction cannot honour (:func:`scenarios.caveats.threads_caveat`)."""

    fix: str
    step_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    arithmetic: str = ""
    floor_us: float | None = None
    note: str = ""
    caveats: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One step of the tree: ``stage`` (``kernel_ratio``, ``gaps``, ``roofline``, ``memory``),
    ``verdict`` in words, ``evidence`` lines, ``whatifs`` for its leaves, ``key`` the leaf key
    (a bottleneck key, or "" for the stage's own verdict)."""

    stage: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    whatifs: list[WhatIf] = field(default_factory=list)
    key: str = ""


@dataclass(frozen=True)
class Diagnosis:
    """The tree's findings in order, the baseline prediction, and the roofline and memory
    verdicts when the trace allowed them; ``caveats`` the baseline's own (a model captured
    with oversubscribed intra-op threads)."""

    name: str
    baseline: Prediction
    kernel_ratio: float
    kernel_ratio_source: str
    findings: list[Finding]
    roofline: Roofline | None = None
    memory: MemoryVerdict | None = None
    caveats: tuple[str, ...] = ()


def fix_for(key: str, model: StepModel) -> tuple[str | None, str]:
    """(``--fix`` text, "") of the first named systems fix that relieves ``key`` and applies
    to ``model`` with its default (or first candidate) arguments; when none applies, (the
    first one's text, why it does not apply); (None, "") when no fix relieves ``key``."""
    first: tuple[str | None, str] = (None, "")
    for fix in FIXES.values():
        if key not in fix.relieves or fix.kind != "systems":
            continue
        args = (fix.candidates(model) or [{}])[0]
        text = ",".join(f"{k}={v}" for k, v in args.items())
        text = f"{fix.name}:{text}" if text else fix.name
        try:
            fix.apply(model, args)
        except (ModelError, ValidationError) as e:   # a fix that leaves an invalid model
            first = first if first[0] else (text, str(e).splitlines()[0])
            continue
        return text, ""
    return first


def _price(model, text: str, kw: dict, arithmetic: str = "", floor_us=None) -> WhatIf:
    """``text``: one fix as ``--fix`` takes it, or several joined by `` --fix ``."""
    try:
        ops = [parse_fix(t) for t in text.split(" --fix ")]
        p = predict(model, ops, **kw)
    except (ModelError, ValidationError) as e:
        return WhatIf(text, arithmetic=arithmetic, floor_us=floor_us,
                      note=str(e).splitlines()[0])
    return WhatIf(text, p.mean_step_us, p.p10_step_us, p.p90_step_us, arithmetic, floor_us,
                  caveats=tuple(threads_caveat(model, ops)))


def _fix_text(op) -> str:
    """A FixOp as ``--fix`` takes it."""
    args = ",".join(f"{k}={v}" for k, v in op.args.items())
    return f"{op.name}:{args}" if args else op.name


def _pair(model, key: str, kw: dict, arithmetic: str) -> WhatIf | None:
    """``plan``'s look-ahead for gap ``key`` (:func:`scenarios.plan.look_ahead`: a fix of it,
    then the allowed fix of the bottleneck that leaves, e.g. DataLoader workers, then
    ``intra_op_threads`` for the team they stall), priced, where its first move leaves the
    training step's intra-op team oversubscribed and the pair beats that move alone by
    ``PAIR_GAIN``; else None."""
    if model.team_threads() <= 1:
        return None        # no intra-op team for a fix to stall
    sim = (kw["steps"], kw["warmup"], kw["seed"])
    best = look_ahead(model, [], model, key, sim=sim, jobs=kw["jobs"])
    if best is None or not oversubscribed(best[1].model) or \
            best[3].mean_step_us > best[1].mean_step_us * (1 - PAIR_GAIN):
        return None
    return _price(model, f"{_fix_text(best[0])} --fix {_fix_text(best[2])}", kw, arithmetic)


ALSO_MOVES = {"pin_memory": ("wait:h2d", "it also frees the host thread from waiting on each "
                                         "pageable copy ({} per step), so the next batch's "
                                         "work overlaps the device")}
"""What a fix changes besides the gap it is offered for: (the host split key it removes, the
words), said when the fix's price beats the step without that whole gap."""


def _beyond_gap(w: WhatIf, step_us: float, gap_us: float, summary) -> WhatIf:
    """``w`` with a caveat when its price is faster than removing the whole gap (``gap_us`` of
    ``step_us``) could make the step: the fix moves more than that gap, and says what."""
    if w.step_us is None or w.step_us >= step_us - gap_us:
        return w
    key, words = ALSO_MOVES.get(w.fix.split(":")[0], ("", "it changes more than this gap"))
    what = words.format(_ms(summary.host_split_us.get(key, 0.0)))
    return replace(w, caveats=(*w.caveats, f"priced beyond removing this whole gap ("
                                           f"{_ms(step_us - gap_us)} per step if it all went): "
                                           f"{what}"))


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f} ms"


def _ratio_finding(r: float, source: str) -> Finding:
    free = amdahl_ceiling(min(r, 1.0))
    closing = 1 / r if r > 0 else float("inf")
    ev = [f"kernel-sum / step-wall = {r:.2f} ({source})"]
    ev += [f"every kernel free: at most {free:.2f}x (Amdahl, 1 / (1 - {r:.2f}))",
           f"every gap closed (kernels back to back): at most {closing:.2f}x (1 / {r:.2f})"] \
        if r > 0 else ["no device kernels: the step is host work only"]
    if r >= DEVICE_BOUND:
        v = f"device-bound: kernels fill {100 * r:.0f} % of the step, so the kernels are where " \
            "the time goes (see the roofline)"
    elif r > 0:
        v = f"the device idles {100 * (1 - r):.0f} % of the step: the gaps set the pace (see " \
            "where they are)"
    else:
        v = "no device kernels: the step is paced by the host and the input pipeline"
    return Finding("kernel_ratio", v, ev)


def _gap_findings(model: StepModel, base: Prediction, kw: dict) -> list[Finding]:
    s = base.summary
    step = s.mean_step_us
    lane = "device compute (the union of compute kernels)" if s.scarce_lane == "compute" \
        else f"the host thread ({s.scarce_lane})"
    # the critical path less device compute: the scarce lane's gaps when the device paces,
    # the host thread's own work and waits when the host does
    gaps = sorted(((k, v) for k, v in s.critical_path_us.items()
                   if v > 0 and not k.startswith("compute:")), key=lambda kv: -kv[1])
    idle = sum(v for _, v in gaps)
    tasks = model.task_map().values()
    gpu = model.on_device()
    syncs = [op for op in model.host.ops if op.kind == "sync"]
    pageable = [t for t in tasks if t.copy_kind == "h2d" and t.pinned is False]
    prev = [t for t in tasks if t.prev_waits]
    # a CPU run has no device: its host thread's critical path is the step, not a gap of one
    where = "not in device compute" if gpu else "on its critical path (a CPU run: no device)"
    ev = [f"scarce lane: {lane}; {_ms(idle)} of {_ms(step)} per step {where}",
          *(f"{label(k)}: {_ms(v)} ({100 * v / step:.1f} %)" for k, v in gaps[:6])]
    if gpu:   # a CPU run has no syncs, copies or device tasks to count
        ev += [f"host syncs per step: {len(syncs)}, host waiting on them "
               f"{_ms(sum(v for k, v in s.host_split_us.items() if k.startswith('wait:sync')))}",
               f"pageable host-to-device copies per step: {len(pageable)} "
               f"({_ms(sum(t.dur_us for t in pageable))} on the copy engine)",
               f"device tasks waiting on the previous step's work: {len(prev)}"]
    if any(t.kind == "collective" for t in tasks):
        ev.append(f"exposed communication {_ms(s.exposed_comm_us)} and arrival skew "
                  f"{_ms(s.arrival_skew_us)} per step")
    leaves = [(k, v) for k, v in gaps if v >= GAP_SHARE * step]
    cores = model.loader.host_cores
    if model.meta.sources.get("loader.host_cores") == "assumed" and (
            not gpu or any(k in ("input", "cpu_cores") for k, _ in leaves)):
        ev.append(f"host cores: {cores}, assumed (not measured: no capture sidecar); the "
                  "what-ifs that add threads are priced on them")
    head = Finding("gaps", (f"{len(leaves)} gap cause(s) of at least {100 * GAP_SHARE:.0f} % "
                            f"of the step on {lane}") if leaves else
                   f"no gap cause reaches {100 * GAP_SHARE:.0f} % of the step", ev)
    out = [head]
    threads_priced = False      # fewer intra-op threads: priced under the first leaf it relieves
    for k, v in leaves:
        fix, why = fix_for(k, model)
        if why and not gpu:   # a GPU fix (CUDA graphs, pinned copies) cannot apply to a CPU run
            fix = None
        # the subtraction `stepsim ceiling` shows beside its simulated ceiling, named so:
        # "ceiling" there is the simulated step with the component free
        arith = (f"removes up to {_ms(v)}/step of {label(k)}; at most "
                 f"{amdahl_ceiling(min(v / step, 1.0)):.2f}x if it all went (subtracted, "
                 f"1 / (1 - {v / step:.2f}); `stepsim ceiling` simulates it)")
        what = [] if not fix else [WhatIf(fix, arithmetic=arith, note=why)] if why else \
            [_beyond_gap(_price(model, fix, kw, arith), step, v, s)]
        if (fix or "").split(":")[0] == "intra_op_threads":
            threads_priced = True
        elif k in FIXES["intra_op_threads"].relieves and oversubscribed(model) \
                and not threads_priced:
            # the step's spinning intra-op threads take the cores this gap waits for
            fix, threads_priced = fix or "intra_op_threads", True
            what.append(_beyond_gap(_price(model, "intra_op_threads", kw, arith), step, v, s))
        elif k in ("host_compute", "cpu_cores") and not threads_priced and \
                model_rank_threads(model)[0]:
            # ranks × intra-op threads over the host's cores spin (models.rank_threads)
            n = model_rank_threads(model)[1]
            fix, threads_priced = fix or f"intra_op_threads:threads={n}", True
            # (where it does not apply, its note says why, and the fix: host_threads.no_team_why)
            what.append(_price(model, f"intra_op_threads:threads={n}", kw, arith))
        elif fix and not why and not threads_priced:
            # the fix (DataLoader workers) stalls the team it adds threads beside: price
            # plan's next move with it (torch.set_num_threads(1) beside the workers)
            pair = _pair(model, k, kw, arith)
            if pair is not None:
                threads_priced = True
                what.append(_beyond_gap(pair, step, v, s))
        verdict = f"{label(k)}: {_ms(v)} per step ({100 * v / step:.0f} %)" + (
            "" if fix else " (no named fix relieves it")
        if not fix:
            verdict += ": " + ("the trace cannot say what the device waited on" if
                               k == "device_idle" else "a CPU run: the training step's own CPU "
                               "work, which no GPU fix reaches" if k == "host_compute" and not gpu
                               else "more host cores or fewer threads")
            verdict += ")"
        out.append(Finding("gaps", verdict, [], what, k))
    return out


def _class_findings(model, roof: Roofline, kernels, kw: dict) -> list[Finding]:
    m = roof.machine
    cov = roof.covered_us / roof.time_us if roof.time_us else 0.0
    ev = [f"machine: {m.name} ({m.source}): FP32 {m.peaks.get('fp32', 0) / 1e12:.1f} TFLOP/s, "
          f"{m.bw_bytes_s / 1e9:.0f} GB/s; ridge {m.peaks.get('fp32', 0) / m.bw_bytes_s:.1f} "
          "FLOP/byte (FP32)",
          f"kernel time with op shapes: {100 * cov:.0f} % of {_ms(roof.time_us)} per step"]
    for c in roof.classes[:8]:
        if c.verdict == "no shapes":
            ev.append(f"{c.klass}/{c.phase}: {_ms(c.time_us)}, no shapes")
            continue
        ev.append(f"{c.klass}/{c.phase}: {_ms(c.time_us)}, {c.dtype}, AI {c.intensity:.1f} "
                  f"FLOP/B, {c.achieved_flops_s / 1e12:.2f} TFLOP/s of {c.peak_flops_s / 1e12:.1f}"
                  f" ({c.peak_key}), {c.achieved_bytes_s / 1e9:.0f} of {c.bw_bytes_s / 1e9:.0f} "
                  f"GB/s: {c.verdict} ({100 * c.attained:.0f} % of its roof)"
                  + (f"; {c.note}" if c.note else ""))
    top = max((c for c in roof.classes if c.verdict != "no shapes"), key=lambda c: c.time_us,
              default=None)
    verdict = (f"largest class {top.klass}/{top.phase} ({_ms(top.time_us)}) is {top.verdict}"
               if top else "no kernel has op shapes (record with record_shapes=True)")
    out = [Finding("roofline", verdict, ev)]
    for g in (mixed_precision_factor(roof), fusion_factor(kernels, roof, roof.steps)):
        if g is None:
            continue
        out.append(_grounded(model, g, kw))
    return out


def _roof_findings(model, roof: Roofline | None, kernels, base: Prediction, kw: dict,
                   why_not: str, priced: list[Finding]) -> list[Finding]:
    """The roofline's verdicts and grounded fixes; ``priced``: the gap findings, whose
    what-ifs are reused rather than simulated twice."""
    out = [Finding("roofline", f"no roofline: {why_not}")] if roof is None else \
        _class_findings(model, roof, kernels, kw)
    s = base.summary
    cp = s.critical_path_us
    # a CPU run's launches are gloo's collectives: no device to graph (StepModel.on_device)
    launches = sum(1 for op in model.host.ops if op.kind == "launch") if model.on_device() else 0
    if launches and s.scarce_lane != "compute" and cp.get("launch", 0) + cp.get(
            "host_compute", 0) >= GAP_SHARE * s.mean_step_us:
        cost = sum(op.dur_us for op in model.host.ops if op.kind == "launch")
        arith = (f"{launches} launches/step costing {_ms(cost)} on the host become one graph "
                 f"launch per run between syncs; the step cannot pass the device's busy time")
        done = next((w for f in priced for w in f.whatifs if w.fix == "cuda_graphs"), None)
        w = replace(done, arithmetic=arith, floor_us=s.device_busy_us) if done else \
            _price(model, "cuda_graphs", kw, arith, s.device_busy_us)
        out.append(Finding("roofline", "the host paces the device (launch overhead): CUDA "
                           "graphs", [f"floor: the device's busy time {_ms(s.device_busy_us)} "
                                      "per step"], [w], "launch"))
    return out


def _grounded(model, g: Grounded, kw: dict) -> Finding:
    # a list as --fix takes it: a|b, or [a] for one
    cats = "|".join(g.categories) if len(g.categories) > 1 else f"[{g.categories[0]}]"
    text = f"{g.fix}:factor={g.factor:.4g}" + (f",categories={cats}" if g.fix ==
                                                "mixed_precision" else "")
    arith = (f"{g.arithmetic}: {_ms(g.old_us)} -> {_ms(g.new_us)} per step "
             f"(factor {g.factor:.4g}); it cannot pass {_ms(g.floor_us)}")
    what = [_price(model, text, kw, arith, g.floor_us)]
    return Finding("roofline", f"{g.fix} grounded in the roofline: factor {g.factor:.4g} on "
                   f"{'/'.join(g.categories)}", [], what, g.fix)


def diagnose(model: StepModel, *, name: str = "", kernel_ratio: float | None = None,
             ratio_source: str = "", roof: Roofline | None = None, kernels=(),
             roof_why_not: str = "", memory: MemoryVerdict | None = None,
             memory_why_not: str = "", steps: int | None = None, warmup: int = 20, seed: int = 0,
             draws: int = DEFAULT_DRAWS, jobs: int = 1) -> Diagnosis:
    """Walk the tree for ``model`` (see the module docstring).

    Args:
        model: the calibrated StepModel (what-ifs run on it).
        kernel_ratio / ratio_source: kernel-sum ÷ step-wall measured from the trace, and where
            it came from; None: the simulated baseline's.
        roof / kernels: the roofline and its kernel rows (None / () without them, and
            ``roof_why_not`` says why).
        memory / memory_why_not: the memory verdict, or why there is none.
        steps / warmup / seed / draws / jobs: for the simulations.

    Raises:
        ModelError: the model cannot be simulated.
    """
    kw = {"steps": steps, "warmup": warmup, "seed": seed, "intervals": draws, "jobs": jobs}
    base = predict(model, [], **kw)
    if kernel_ratio is None:
        kernel_ratio = base.summary.kernel_ratio
        ratio_source = (f"the model's simulated baseline, step "
                        f"{_ms(base.summary.mean_step_us)}")
    findings = [_ratio_finding(kernel_ratio, ratio_source)]
    gaps = _gap_findings(model, base, kw)
    findings += gaps + _roof_findings(model, roof, kernels, base, kw, roof_why_not, gaps)
    if memory is None:
        findings.append(Finding("memory", f"no memory verdict: {memory_why_not}"))
    else:
        findings.append(Finding("memory", memory.verdict, memory.evidence))
    return Diagnosis(name or model.meta.name, base, kernel_ratio, ratio_source, findings, roof,
                     memory, tuple(threads_caveat(model)))
