"""The versioned key map of Kineto's dialects (:mod:`calibration.events` reads events through
it): raw categories → normalised ones, the ``args`` spellings of each column, and the legacy
autograd profiler's GPU pid. Facts from ``../shared/traces/SOURCES.md`` and the sample files
(see :mod:`calibration.events` for the dialects)."""
from __future__ import annotations

__all__ = ["ALIAS_VERSION", "CATEGORY_ALIASES", "ARG_ALIASES", "LEGACY_GPU_PID", "arg_value"]

ALIAS_VERSION = 1
"""Version of the alias tables below; bump it when a mapping changes meaning."""

CATEGORY_ALIASES: dict[str, str] = {
    # current Kineto names map to themselves
    "cpu_op": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "cuda_runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "ac2g": "ac2g",
    "fwdbwd": "fwdbwd",
    "python_function": "python_function",
    "cpu_instant_event": "instant",
    "trace": "trace_span",
    # 2020-12 .. 2021-06 Kineto (PyTorch 1.8 / 1.9)
    "operator": "cpu_op",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "async": "ac2g",
    # HTA trace_diff files
    "async_cpu_to_gpu": "ac2g",
    # the autograd profiler's export_chrome_trace (PyTorch ≤ 1.7): flows only
    "cpu_to_cuda": "ac2g",
}
"""Raw ``cat`` (lower-cased) → normalised category. Phases override it by meaning: ``i``/``I``
events are ``instant`` and ``M`` events ``metadata`` whatever their ``cat``."""

ARG_ALIASES: dict[str, tuple[str, ...]] = {
    "correlation": ("correlation",),
    "external_id": ("External id", "external id"),
    "stream": ("stream",),
    "device": ("device", "Device"),
    "bytes": ("bytes",),
    "gbps": ("memory bandwidth (GB/s)",),
    "coll_name": ("Collective name",),
    "in_nelems": ("In msg nelems",),
    "out_nelems": ("Out msg nelems",),
    "group_size": ("Group size",),
    "dtype": ("dtype",),
}
"""Column → ``args`` keys that may hold it, first found wins."""


def arg_value(args: dict, column: str):
    """The value of ``column`` in an event's ``args``: the first of its spellings in
    ``ARG_ALIASES`` that is present, else None."""
    for key in ARG_ALIASES[column]:
        v = args.get(key)
        if v is not None:
            return v
    return None


LEGACY_GPU_PID = "CUDA functions"
"""The pid of GPU kernels in the pre-Kineto autograd profiler's ``export_chrome_trace``: a
bare array of complete events without ``cat``, float ``ts``, pids ``"CPU functions"`` and
``"CUDA functions"``. Its cat-less complete events are read as ``cpu_op``, or ``kernel`` on
that pid."""
