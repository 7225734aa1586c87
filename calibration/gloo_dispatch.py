"""Which directories of per-rank traces are CPU DDP (gloo) jobs, and their capture sidecars.

A directory whose traces have no GPU activity and hold ``gloo:*`` collectives is calibrated by
:func:`calibration.gloo.calibrate_gloo`, with the capture sidecars found beside the traces
(``*sidecar*.json``, matched to ranks by their ``ddp.rank``). The capture harness's layout of
a DDP job, one folder per rank (``rank<N>/trace.json.gz`` + ``rank<N>/sidecar.json``, see
:func:`calibration.capture.rank_dir`), is read the same way. Any other directory is left to
the GPU calibration, unchanged.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.events import build_table
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.trace_io import _trace_candidates, load_rank_traces, load_trace
from stepsim.models.params import StepModel
from stepsim.simcore.errors import InputError

__all__ = ["gloo_dir"]


def gloo_dir(path: Path) -> StepModel | None:
    """The gloo model of directory ``path``, or None when its traces are not a CPU gloo job.

    Raises:
        InputError: an unreadable trace or sidecar (see :func:`calibration.gloo.calibrate_gloo`).
    """
    from stepsim.calibration.gloo import calibrate_gloo, is_gloo

    subs = sorted(d for d in path.glob("rank*") if (d / "trace.json.gz").is_file())
    if subs:
        return _capture_ranks(subs)
    files, _ = _trace_candidates(path)
    first = next((f for f in files if not f.name.lower().endswith("sidecar.json")), None)
    if first is None:
        return None
    try:
        head = build_table(load_trace(first))
    except InputError:
        return None         # left to the GPU calibration's own error
    if head.gpu_mask().any() or not is_gloo(head):
        return None
    tables = [build_table(raw) for raw in load_rank_traces(path)]
    if any(t.gpu_mask().any() for t in tables) or not all(is_gloo(t) for t in tables):
        return None
    sidecars = {}
    for f in sorted(path.glob("*sidecar*.json")):
        side = load_sidecar(f)
        ddp = getattr(side, "ddp", None)
        if ddp is not None:
            sidecars[ddp.rank] = side
    return calibrate_gloo(tables, sidecars)


def _capture_ranks(dirs: list[Path]) -> StepModel | None:
    """A DDP job captured by the harness: one capture folder per rank."""
    from stepsim.calibration.gloo import calibrate_gloo, is_gloo

    tables = [build_table(load_trace(d / "trace.json.gz")) for d in dirs]
    if any(t.gpu_mask().any() for t in tables) or not all(is_gloo(t) for t in tables):
        return None
    sidecars = {}
    for d in dirs:
        if (d / "sidecar.json").is_file():
            side = load_sidecar(d / "sidecar.json")
            if getattr(side, "ddp", None) is not None:
                sidecars[side.ddp.rank] = side
    return calibrate_gloo(tables, sidecars)
