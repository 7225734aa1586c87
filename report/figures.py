"""What every plot shares: matplotlib on the Agg backend (no display needed), atomic saving in
the format the file name asks for, and one colour per category so every picture agrees."""
from __future__ import annotations

import io
from pathlib import Path

from stepsim.simcore.atomic import write_atomic

__all__ = ["pyplot", "save", "figure_bytes", "COLOURS", "CATEGORY_LABELS", "colour"]

COLOURS: dict[str, str] = {
    # device work (Kineto's kernel classes as calibration names them)
    "gemm": "#1f77b4", "conv": "#17becf", "attention": "#9467bd", "elementwise": "#2ca02c",
    "reduction": "#bcbd22", "normalization": "#8c564b", "optimizer": "#e377c2",
    "memcpy": "#ff7f0e", "memset": "#ffbb78", "communication": "#d62728", "other": "#7f7f7f",
    # host thread, DataLoader workers, pin-memory thread
    "cpu": "#aec7e8", "train": "#6baed6", "launch": "#393b79", "sync": "#c7c7c7",
    "data": "#637939", "produce": "#98df8a", "pin": "#c5b0d5",
}
"""Category → colour (matplotlib's tab palettes; colour-blind safe enough to tell apart side
by side, and every category also appears in the legend by name)."""

CATEGORY_LABELS: dict[str, str] = {
    "cpu": "host CPU work", "train": "training step (CPU)", "launch": "kernel launch",
    "sync": "sync call", "data": "DataLoader next() (main thread)",
    "produce": "batch produce (worker)",
    "pin": "pin memory", "memcpy": "memcpy (H2D/D2H/D2D)", "communication": "communication",
    "other": "other kernels",
}


def colour(category: str) -> str:
    """The colour of ``category`` (grey for an unknown one)."""
    return COLOURS.get(category, COLOURS["other"])


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(fig, fmt: str = "png", dpi: int = 120) -> bytes:
    """The figure rendered as ``fmt`` (png, svg, pdf, jpg)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def save(fig, path: str | Path) -> None:
    """Write ``fig`` to ``path`` atomically, in the format its suffix names (default png),
    and close it."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    data = figure_bytes(fig, "jpeg" if fmt == "jpg" else fmt)
    pyplot().close(fig)
    write_atomic(Path(path), data)
