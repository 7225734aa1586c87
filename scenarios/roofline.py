"""The roofline verdict per kernel class and phase, and the kernel-side fixes it grounds.

Given each class's FLOPs ``F``, compulsory bytes ``B`` and measured kernel time ``t`` (per
step) on a :class:`scenarios.gpus.Machine` with peak ``P`` (FLOP/s, for the class's element
type) and bandwidth ``W`` (bytes/s):

* arithmetic intensity ``I = F / B`` (FLOP/byte); ridge point ``P / W``;
* roofline time ``t_roof = max(F / P, B / W)`` (the faster a kernel cannot be), bound by
  compute when ``F / P ≥ B / W``, else by bandwidth; attained fraction ``u = t_roof / t``;
* verdict: **compute bound** / **bandwidth bound** when ``u ≥ BOUND_FRACTION``; otherwise
  **neither**: latency or launch when its kernels average under ``LATENCY_US``, else occupancy
  (the kernels neither keep the ALUs nor the memory busy).

FP32 work that attains more than the FP32 peak ran on TF32 tensor cores where the machine has
them (cuDNN's default for convolutions on Ampere and later): its ceiling is then the TF32 one.
A class above every ceiling counts more FLOPs than its kernels execute (Winograd or FFT
convolutions): the verdict says so.

Grounded fixes (:func:`mixed_precision_factor`, :func:`fusion_factor`) keep each class's
attained fraction ``u`` and move its ceiling: the predicted time is ``t · t_roof' / t_roof``,
and ``t_roof'`` is the floor it cannot pass.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stepsim.scenarios.gpus import Machine

__all__ = ["ClassRoof", "Roofline", "classify", "roofline", "mixed_precision_factor",
           "fusion_factor", "Grounded", "BOUND_FRACTION", "LATENCY_US"]

BOUND_FRACTION = 0.5
"""A class attaining at least this fraction of its roofline is bound by that roof (Nsight
Compute calls under 60 % of speed-of-light under-utilised; half is the midpoint of "busy")."""
LATENCY_US = 10.0
"""Kernels shorter than this on average are dominated by launch and ramp-up latency (a few
µs per launch on current GPUs), not by either roof."""
_LOW_PRECISION = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ClassRoof:
    """One class × phase, per step.

    Attributes:
        klass / phase: kernel class and phase. kernels: kernels per step.
        time_us / covered_us: kernel time, and the part with op shapes (the rest has no FLOPs).
        flops / bytes: of the covered part. dtype: dominant element type.
        intensity: FLOP/byte. achieved_flops_s / achieved_bytes_s: over ``covered_us``.
        peak_flops_s / peak_key: the compute roof used. bw_bytes_s: the bandwidth roof.
        roof_us: roofline time of the covered work. attained: ``roof_us / covered_us``.
        bound: ``compute`` or ``bandwidth`` (which roof applies); verdict: ``compute bound``,
            ``bandwidth bound``, ``neither (latency/launch)``, ``neither (occupancy)`` or
            ``no shapes``. note: a caveat in words ("" when none).
    """

    klass: str
    phase: str
    kernels: float
    time_us: float
    covered_us: float
    flops: float
    bytes: float
    dtype: str
    intensity: float
    achieved_flops_s: float
    achieved_bytes_s: float
    peak_flops_s: float
    peak_key: str
    bw_bytes_s: float
    roof_us: float
    attained: float
    bound: str
    verdict: str
    note: str = ""


@dataclass(frozen=True)
class Roofline:
    """Every class of a trace on one machine; ``classes`` largest time first."""

    machine: Machine
    classes: list[ClassRoof]
    steps: int

    @property
    def time_us(self) -> float:
        return sum(c.time_us for c in self.classes)

    @property
    def covered_us(self) -> float:
        return sum(c.covered_us for c in self.classes)


def classify(flops: float, bytes_: float, covered_us: float, dtype: str, machine: Machine,
             mean_kernel_us: float) -> tuple:
    """(peak FLOP/s, peak key, roof µs, attained, bound, verdict, note) of work of ``flops``
    FLOPs and ``bytes_`` bytes that took ``covered_us`` µs (see the module docstring)."""
    if covered_us <= 0 or (flops <= 0 and bytes_ <= 0):
        return 0.0, "", 0.0, 0.0, "", "no shapes", "no op shapes recorded for these kernels"
    peak, key = machine.peak(dtype)
    note = ""
    achieved = flops / (covered_us * 1e-6)
    if achieved > peak and key == "fp32" and "tf32" in machine.peaks:
        peak, key = machine.peaks["tf32"], "tf32"
        note = "attains more than the FP32 peak: ran on TF32 tensor cores"
    t_c, t_m = flops / peak * 1e6, bytes_ / machine.bw_bytes_s * 1e6
    roof = max(t_c, t_m)
    bound = "compute" if t_c >= t_m else "bandwidth"
    attained = roof / covered_us
    if attained > 1.0:
        note = (f"attains {attained:.1f}x its {key} roof: the FLOPs are the direct count, and "
                "its kernels do fewer (Winograd or FFT convolution)") if bound == "compute" \
            else f"attains {attained:.1f}x the bandwidth roof: data served from cache"
    if attained >= BOUND_FRACTION:
        verdict = f"{bound} bound"
    elif mean_kernel_us < LATENCY_US:
        verdict = "neither (latency/launch)"
    else:
        verdict = "neither (occupancy)"
    return peak, key, roof, attained, bound, verdict, note


def roofline(kernels, machine: Machine, steps: int) -> Roofline:
    """Aggregate :class:`calibration.roofline_inputs.KernelWork` rows into classes × phases,
    per step, and classify each (``steps``: how many steps the rows cover)."""
    acc: dict[tuple[str, str], dict] = defaultdict(lambda: {
        "n": 0, "t": 0.0, "cov": 0.0, "f": 0.0, "b": 0.0, "dt": defaultdict(float)})
    for k in kernels:
        a = acc[(k.klass or k.category, k.phase)]
        a["n"] += 1
        a["t"] += k.dur_us
        if k.cost is not None:
            a["cov"] += k.dur_us
            a["f"] += k.flops
            a["b"] += k.bytes
            a["dt"][k.dtype] += k.dur_us
    n = max(1, steps)
    out = []
    for (klass, phase), a in acc.items():
        dtype = max(a["dt"], key=a["dt"].get) if a["dt"] else ""
        f, b, cov = a["f"] / n, a["b"] / n, a["cov"] / n
        peak, key, roof, att, bound, verdict, note = classify(
            f, b, cov, dtype, machine, a["t"] / a["n"])
        out.append(ClassRoof(klass, phase, a["n"] / n, a["t"] / n, cov, f, b, dtype,
                             f / b if b else 0.0, f / (cov * 1e-6) if cov else 0.0,
                             b / (cov * 1e-6) if cov else 0.0, peak, key,
                             machine.bw_bytes_s, roof, att, bound, verdict, note))
    out.sort(key=lambda c: -c.time_us)
    return Roofline(machine, out, steps)


@dataclass(frozen=True)
class Grounded:
    """A kernel fix's factor from the roofline: ``factor`` = new / old time of the
    ``categories`` it scales (per step: ``old_us`` → ``new_us``); ``floor_us`` the least the
    changed work can take (its new roofline time, plus the untouched time); ``arithmetic``
    says how."""

    fix: str
    categories: tuple[str, ...]
    factor: float
    old_us: float
    new_us: float
    floor_us: float
    arithmetic: str


def mixed_precision_factor(roof: Roofline, categories=("gemm", "conv", "attention")
                           ) -> Grounded | None:
    """Mixed precision for FP32 classes of ``categories`` that are bound by a roof: compute-
    bound work moves to the 16-bit tensor-core peak, and its bytes halve; bandwidth-bound work
    moves half the bytes. Classes bound by neither roof, or already in 16/8-bit, keep their
    time. None when nothing in ``categories`` runs in FP32 or the machine has no 16-bit peak."""
    m = roof.machine
    low = next((k for k in ("bf16", "fp16") if k in m.peaks), None)
    cs = [c for c in roof.classes if c.klass in categories]
    if low is None or not any(c.dtype == "fp32" for c in cs):
        return None
    old = sum(c.time_us for c in cs)
    new = floor = 0.0
    moved = 0.0
    for c in cs:
        if c.dtype != "fp32" or not c.verdict.endswith("bound") or c.covered_us <= 0:
            new += c.time_us
            floor += c.time_us
            continue
        roof2 = max(c.flops / m.peaks[low], c.bytes / 2 / m.bw_bytes_s) * 1e6
        scale = min(1.0, roof2 / c.roof_us) if c.roof_us > 0 else 1.0
        new += c.covered_us * scale + (c.time_us - c.covered_us)
        floor += roof2 + (c.time_us - c.covered_us)
        moved += c.covered_us
    if old <= 0 or moved <= 0:
        return None
    return Grounded(
        "mixed_precision", tuple(sorted({c.klass for c in cs})), new / old, old, new, floor,
        f"{moved / 1e3:.2f} ms/step of roof-bound FP32 work: its roof moves from the "
        f"FP32 peak {m.peaks['fp32'] / 1e12:.1f} TFLOP/s to the {low.upper()} tensor-core peak "
        f"{m.peaks[low] / 1e12:.0f} TFLOP/s with half the bytes "
        f"({m.bw_bytes_s / 1e9:.0f} GB/s), at the attained fraction of each class's roof; "
        f"classes bound by neither roof keep their time")


def fusion_factor(kernels, roof: Roofline, steps: int) -> Grounded | None:
    """Fusing chains of elementwise ops (consecutive elementwise-class kernels of different
    ops in one step with nothing else between): every intermediate an op writes and the next
    reads is no longer moved (2 × the smaller output saved per link; *assumed*: each op
    consumes the previous one's output, as the trace records no data flow); the chain's time
    scales with its bytes at the attained fraction of the bandwidth roof. None without
    bandwidth-bound elementwise work or chains."""
    if not any(c.klass == "elementwise" and c.verdict == "bandwidth bound" for c in roof.classes):
        return None
    total = sum(c.time_us for c in roof.classes if c.klass == "elementwise") * max(1, steps)
    bytes_all = saved = 0.0
    links = 0
    prev = None
    for k in kernels:
        if k.klass != "elementwise" or k.cost is None or (prev is not None and
                                                          prev.step != k.step):
            prev = None
        if k.klass != "elementwise" or k.cost is None:
            continue
        bytes_all += k.bytes
        if prev is not None and prev.cost is not k.cost and k.cost.family == "elementwise" \
                and prev.cost.family == "elementwise":
            saved += 2 * min(prev.cost.out_bytes, k.cost.out_bytes)
            links += 1
        prev = k
    if not links or bytes_all <= 0 or total <= 0:
        return None
    covered = sum(k.dur_us for k in kernels if k.klass == "elementwise" and k.cost is not None)
    f_bytes = max(0.0, 1 - saved / bytes_all)
    new = covered * f_bytes + (total - covered)
    n = max(1, steps)
    floor = (bytes_all - saved) / roof.machine.bw_bytes_s * 1e6 + (total - covered)
    return Grounded(
        "fused_elementwise", ("elementwise",), new / total, total / n, new / n, floor / n,
        f"{links / n:.0f} links per step between consecutive elementwise ops: "
        f"{saved / n / 1e6:.1f} of {bytes_all / n / 1e6:.1f} MB/step no longer written and "
        f"re-read; time scales with the bytes at the attained bandwidth")
