"""Machine peaks for the roofline: peak FLOP/s per element type and HBM bandwidth of known GPUs.

:func:`machine_for` matches a trace's ``deviceProperties`` entry (its ``name``, and
``totalGlobalMem`` where a name covers two memory sizes) against :data:`KNOWN_GPUS`; a user's
own figures (``--peak fp32=15.7e12,bw=900e9``) override or replace them (:func:`parse_peaks`).

Every figure is the vendor's datasheet number, dense (no structured sparsity), at boost clock:
a ceiling no kernel passes, not a typical rate. ``fp32`` is the CUDA-core/vector rate;
``tf32``/``bf16``/``fp16``/``fp8`` the tensor-core (matrix-core) rates. Units: FLOP/s and
bytes/s (``bw``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from stepsim.simcore.errors import ModelError

__all__ = ["Machine", "KNOWN_GPUS", "machine_for", "parse_peaks", "PEAK_KEYS"]

T, G = 1e12, 1e9
PEAK_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "bw")


@dataclass(frozen=True)
class Machine:
    """A GPU's ceilings. ``peaks`` maps an element type to FLOP/s; ``bw_bytes_s`` is HBM
    bandwidth (bytes/s); ``source`` cites the figures; ``mem_bytes`` is device memory."""

    name: str
    peaks: dict[str, float]
    bw_bytes_s: float
    source: str
    mem_bytes: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def peak(self, dtype: str) -> tuple[float, str]:
        """(FLOP/s, the peak's key) for work in ``dtype``: its own tensor-core rate for
        16/8-bit types, the FP32 rate for ``fp32`` and anything unknown."""
        for key in (dtype, "fp32"):
            if key in self.peaks:
                return self.peaks[key], key
        return max(self.peaks.values()), max(self.peaks, key=self.peaks.get)


# (match in the device name, minimum memory GiB or 0, Machine)
KNOWN_GPUS: tuple[tuple[str, float, Machine], ...] = (
    # NVIDIA Tesla V100 GPU Accelerator datasheet (2020), SXM2 column: 7.8 / 15.7 / 125 TFLOPS,
    # 900 GB/s HBM2. DGX Station's V100-DGXS runs the same SXM2 part.
    ("V100-SXM2", 0, Machine("V100 SXM2", {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
                             900 * G, "NVIDIA Tesla V100 datasheet, SXM2")),
    ("V100-DGXS", 0, Machine("V100 DGXS", {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
                             900 * G, "NVIDIA Tesla V100 datasheet, SXM2 (DGX Station part)")),
    # same datasheet, PCIe column: 7 / 14 / 112 TFLOPS, 900 GB/s.
    ("V100", 0, Machine("V100 PCIe", {"fp64": 7 * T, "fp32": 14 * T, "fp16": 112 * T},
                        900 * G, "NVIDIA Tesla V100 datasheet, PCIe")),
    # NVIDIA A100 Tensor Core GPU datasheet (2021): FP64 9.7, FP32 19.5, TF32 156, BF16/FP16 312
    # TFLOPS dense; HBM2e 2,039 GB/s (80GB SXM), 1,555 GB/s (40GB).
    ("A100", 60, Machine("A100 80GB SXM", {"fp64": 9.7 * T, "fp32": 19.5 * T, "tf32": 156 * T,
                                           "bf16": 312 * T, "fp16": 312 * T},
                         2039 * G, "NVIDIA A100 datasheet, 80GB SXM")),
    ("A100", 0, Machine("A100 40GB", {"fp64": 9.7 * T, "fp32": 19.5 * T, "tf32": 156 * T,
                                      "bf16": 312 * T, "fp16": 312 * T},
                        1555 * G, "NVIDIA A100 datasheet, 40GB")),
    # NVIDIA H200 Tensor Core GPU datasheet (2024), SXM: FP32 67, TF32 494.5, BF16/FP16 989.5,
    # FP8 1,979 TFLOPS dense (the datasheet's sparse figures halved); HBM3e 4.8 TB/s.
    ("H200", 0, Machine("H200 SXM", {"fp64": 34 * T, "fp32": 67 * T, "tf32": 494.5 * T,
                                     "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
                        4800 * G, "NVIDIA H200 datasheet, SXM")),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM: same compute as H200 SXM, HBM3
    # 3.35 TB/s; H100 PCIe: FP32 51, TF32 378, BF16/FP16 756, FP8 1,513 TFLOPS, 2 TB/s.
    ("H100 PCIe", 0, Machine("H100 PCIe", {"fp64": 26 * T, "fp32": 51 * T, "tf32": 378 * T,
                                           "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T},
                             2000 * G, "NVIDIA H100 datasheet, PCIe")),
    ("H100", 0, Machine("H100 SXM", {"fp64": 34 * T, "fp32": 67 * T, "tf32": 494.5 * T,
                                     "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
                        3350 * G, "NVIDIA H100 datasheet, SXM")),
    # NVIDIA Turing GPU Architecture whitepaper, Appendix A (GeForce RTX 2080 Ti Founders
    # Edition): 14.2 TFLOPS FP32, 56.9 TFLOPS FP16 tensor with FP32 accumulate, 616 GB/s.
    ("2080 Ti", 0, Machine("GeForce RTX 2080 Ti", {"fp32": 14.2 * T, "fp16": 56.9 * T},
                           616 * G, "NVIDIA Turing architecture whitepaper, Appendix A")),
    # AMD Instinct MI300X datasheet: FP64 81.7, FP32 163.4 (matrix), BF16/FP16 1,307.4,
    # FP8 2,614.9 TFLOPS dense; 5.3 TB/s HBM3. FP32 vector is 163.4 as well.
    ("MI300X", 0, Machine("MI300X", {"fp64": 81.7 * T, "fp32": 163.4 * T, "tf32": 653.7 * T,
                                     "bf16": 1307.4 * T, "fp16": 1307.4 * T, "fp8": 2614.9 * T},
                          5300 * G, "AMD Instinct MI300X datasheet")),
    # AMD Instinct MI250X / MI250 datasheets: FP32 vector 47.9 / 45.3, FP16/BF16 383 / 362.1
    # TFLOPS; 3.2 TB/s HBM2e (both).
    ("MI250X", 0, Machine("MI250X", {"fp64": 47.9 * T, "fp32": 47.9 * T, "bf16": 383 * T,
                                     "fp16": 383 * T}, 3200 * G, "AMD Instinct MI250X datasheet")),
    ("MI250", 0, Machine("MI250", {"fp64": 45.3 * T, "fp32": 45.3 * T, "bf16": 362.1 * T,
                                   "fp16": 362.1 * T}, 3200 * G, "AMD Instinct MI250 datasheet")),
)
"""Known GPUs, first match wins (more specific names first)."""


def machine_for(device: dict, override: dict[str, float] | None = None) -> Machine | None:
    """The ceilings of the GPU a trace's ``deviceProperties`` entry describes, with ``override``
    (keys of :data:`PEAK_KEYS`) applied; None when the GPU is unknown and ``override`` does not
    give both ``bw`` and one FLOP/s peak."""
    name = str(device.get("name", "") or "")
    mem = float(device.get("totalGlobalMem") or 0)
    base = next((m for key, gib, m in KNOWN_GPUS
                 if key.lower() in name.lower() and mem / 2**30 >= gib), None)
    if not override:
        return base if base is None else Machine(base.name, base.peaks, base.bw_bytes_s,
                                                 base.source, mem, base.notes)
    peaks = dict(base.peaks) if base else {}
    peaks.update({k: v for k, v in override.items() if k != "bw"})
    bw = override.get("bw", base.bw_bytes_s if base else 0.0)
    if not peaks or not bw:
        return None
    told = ", ".join(f"{k}={v:g}" for k, v in override.items())
    src = f"{base.source}; user override {told}" if base else f"user figures {told}"
    return Machine(base.name if base else (name or "user GPU"), peaks, bw, src, mem)


def parse_peaks(text: str) -> dict[str, float]:
    """``fp32=15.7e12,bw=900e9`` → {"fp32": 1.57e13, "bw": 9e11} (FLOP/s, bytes/s).

    Raises:
        ModelError: an unknown key, a key given twice, or a value that is not a positive
            number.
    """
    out: dict[str, float] = {}
    for part in text.split(","):
        key, eq, val = part.partition("=")
        key = key.strip()
        if not eq or key not in PEAK_KEYS:
            raise ModelError(f"--peak {text!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(PEAK_KEYS)}")
        try:
            v = float(val)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and v > 0):
            raise ModelError(f"--peak {text!r}: {key} must be a positive number (FLOP/s or "
                             "bytes/s)")
        if key in out:   # the last one won silently
            raise ModelError(f"--peak {text!r}: {key} is given twice")
        out[key] = v
    return out
